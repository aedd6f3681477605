"""Hand-built authority snapshots for the pure (no database) authority tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memstrata.core.authority.domain import FactDomain, FactOrigin, PermissionScope
from memstrata.core.authority.schemas import FactPublic, ProjectAccess, WorkspacePublic
from memstrata.core.authority.snapshot import AuthoritySnapshot

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def fact(key: str, value: Any, fact_id: int = 1) -> FactPublic:
    return FactPublic(
        id=fact_id,
        canonical_fact_key=key,
        domain=FactDomain(key.split(".")[0]),
        value=value,
        origin=FactOrigin.ADMIN,
        valid_from=T0,
    )


def snapshot(**facts: Any) -> AuthoritySnapshot:
    """alice of tenant acme: read-only developer on shop (default env prod-cn), one workspace.

    Keyword names are canonical keys with ``__`` for ``.``: ``profile__language="zh-CN"``.
    """
    built = {}
    for n, (name, value) in enumerate(facts.items(), start=1):
        key = name.replace("__", ".")
        built[key] = fact(key, value, n)
    return AuthoritySnapshot(
        tenant_id="acme",
        user_id="alice",
        version=7,
        facts=built,
        projects=(
            ProjectAccess(
                project_id="shop",
                name="Shop",
                role="developer",
                scope=PermissionScope.READ_ONLY,
                default_env="prod-cn",
                env_tags=("k8s",),
                attributes={"owner_team": "payments"},
            ),
            ProjectAccess(
                project_id="docs", name="Docs", role="writer", scope=PermissionScope.READ_WRITE
            ),
        ),
        workspaces=(
            WorkspacePublic(
                id="ws1", project_id="shop", name="Ops", language="en", env_tags=("oncall",)
            ),
        ),
        agent_settings={"default": {"max_tokens": 800, "default_env": "staging"}},
    )
