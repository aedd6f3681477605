"""A user's authority snapshot: everything PG knows about them, read in one round trip.

The snapshot is what the cache stores and what blocks, filters and the domain authority
rule read.  ``value(key)`` answers "what is authoritative for this canonical key?" with
the most specific scope winning: the user's current fact, then the tenant-level row
(project metadata, agent settings), then nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from memstrata.core.authority.domain import (
    PERMISSION_PROJECT_PREFIX,
    PROFILE_FIELDS,
    PermissionScope,
)
from memstrata.core.authority.schemas import FactPublic, ProjectAccess, WorkspacePublic

DEFAULT_AGENT = "default"


class AuthoritySnapshot(BaseModel):
    """Current authoritative state of one user; ``version`` stamps it for the cache."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    user_id: str
    version: int
    display_name: str | None = None
    facts: dict[str, FactPublic] = Field(default_factory=dict)
    projects: tuple[ProjectAccess, ...] = ()
    workspaces: tuple[WorkspacePublic, ...] = ()
    agent_settings: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)

    def fact(self, key: str) -> FactPublic | None:
        return self.facts.get(key)

    def project(self, project_id: str) -> ProjectAccess | None:
        return next((p for p in self.projects if p.project_id == project_id), None)

    def workspace(self, workspace_id: str) -> WorkspacePublic | None:
        return next((w for w in self.workspaces if w.id == workspace_id), None)

    def profile_value(self, name: str) -> str | None:
        if name not in PROFILE_FIELDS:
            raise KeyError(name)
        fact = self.facts.get(f"profile.{name}")
        if fact is not None and isinstance(fact.value, str):
            return fact.value
        return self.display_name if name == "display_name" else None

    def scope_on(self, project_id: str) -> PermissionScope | None:
        project = self.project(project_id)
        return project.scope if project else None

    def value(self, key: str, *, agent_id: str = DEFAULT_AGENT) -> JsonValue | None:
        """The authoritative value for ``key``, or None when PG does not know it."""
        fact = self.facts.get(key)
        if fact is not None:
            return fact.value
        if key.startswith(PERMISSION_PROJECT_PREFIX):
            project = self.project(key.removeprefix(PERMISSION_PROJECT_PREFIX))
            return {"role": project.role, "scope": project.scope.value} if project else None
        if key.startswith("project_metadata."):
            return self._project_metadata(key.removeprefix("project_metadata."))
        if key.startswith("config."):
            return self.agent_settings.get(agent_id, {}).get(key.removeprefix("config."))
        return None

    def _project_metadata(self, rest: str) -> JsonValue | None:
        project_id, _, attr = rest.rpartition(".")
        project = self.project(project_id) if project_id else None
        if project is None:
            return None
        if attr == "default_env":
            return project.default_env
        if attr == "env_tags":
            return list(project.env_tags)
        return project.attributes.get(attr)


def owner_only(tenant_id: str, user_id: str) -> AuthoritySnapshot:
    """What is known of a user whose snapshot cannot be read (PostgreSQL down): the owner.

    No project, role, fact or setting (version 0; recall never caches it).  Filters built
    from it admit the owner's own records outside any project and nothing else: narrower
    than any real snapshot's, never wider.
    """
    return AuthoritySnapshot(tenant_id=tenant_id, user_id=user_id, version=0)
