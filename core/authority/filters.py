"""Retrieval filters derived from the authority snapshot (seed 六.2).

PG rarely talks to the model directly; it scopes every other read.  A
:class:`RetrievalFilters` is built only from a snapshot (never from request text), so a
query can only name a project or workspace the user holds a role on, and every STM /
LTM read that takes it stays inside one tenant and one permission scope.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memstrata.core.authority.domain import PermissionScope
from memstrata.core.authority.errors import ScopeDenied
from memstrata.core.authority.snapshot import AuthoritySnapshot
from memstrata.core.ids import SafeId, validate_id

_SCOPE_RANK = {
    PermissionScope.READ_ONLY: 0,
    PermissionScope.READ_WRITE: 1,
    PermissionScope.ADMIN: 2,
}


class RetrievalFilters(BaseModel):
    """Where a read may look: one tenant, the user's readable projects, one current scope."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: SafeId
    user_id: SafeId
    project_ids: tuple[SafeId, ...] = Field(description="every project the user may read")
    project_id: SafeId | None = None
    workspace_id: SafeId | None = None
    role: str | None = None
    permission_scope: PermissionScope | None = None
    language: str | None = None
    env_tags: tuple[SafeId, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> RetrievalFilters:
        if self.project_id is not None and self.project_id not in self.project_ids:
            raise ValueError("project_id must be one of project_ids")
        if self.workspace_id is not None and self.project_id is None:
            raise ValueError("a workspace filter needs its project")
        if (self.project_id is None) != (self.permission_scope is None):
            raise ValueError("permission_scope goes with the current project")
        return self

    def allows(self, *, tenant_id: str | None, project_id: str | None = None) -> bool:
        """Whether a record of this tenant / project may be returned under these filters."""
        if tenant_id != self.tenant_id:
            return False
        if project_id is None:
            return True
        if self.project_id is not None:
            return project_id == self.project_id
        return project_id in self.project_ids

    def can_write(self) -> bool:
        rank = _SCOPE_RANK.get(self.permission_scope) if self.permission_scope else None
        return rank is not None and rank >= _SCOPE_RANK[PermissionScope.READ_WRITE]

    def milvus_expr(self) -> str:
        """A boolean filter expression for the LTM collections (ids are validated SafeIds)."""
        parts = [f"tenant_id == {json.dumps(self.tenant_id)}"]
        if self.project_id is not None:
            parts.append(f"project_id == {json.dumps(self.project_id)}")
        else:
            allowed = ", ".join(json.dumps(p) for p in self.project_ids)
            parts.append(f'(project_id in [{allowed}] or project_id == "")')
        return " and ".join(parts)


_MEMO_SIZE = 1024
# (id(snapshot), project, workspace) -> (that snapshot, its filters); the entry holds the
# snapshot, so its id cannot be reused while the entry lives
_memo: dict[tuple[int, str | None, str | None], tuple[AuthoritySnapshot, RetrievalFilters]] = {}


def filters_for(
    snapshot: AuthoritySnapshot,
    *,
    project_id: str | None = None,
    workspace_id: str | None = None,
) -> RetrievalFilters:
    """:func:`build_filters`, remembered per snapshot instance: recall asks it every call,
    and the profile cache hands out one snapshot per cache entry (issue 17).  Both are
    frozen; a denied scope raises every time (only answers are remembered)."""
    key = (id(snapshot), project_id, workspace_id)
    hit = _memo.get(key)
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    filters = build_filters(snapshot, project_id=project_id, workspace_id=workspace_id)
    if len(_memo) >= _MEMO_SIZE:
        _memo.clear()  # one C call, safe beside other threads' lookups
    _memo[key] = (snapshot, filters)
    return filters


def build_filters(
    snapshot: AuthoritySnapshot,
    *,
    project_id: str | None = None,
    workspace_id: str | None = None,
) -> RetrievalFilters:
    """Filters for one query; :class:`ScopeDenied` for a project or workspace not granted.

    With neither given, the user's ``config.default_project`` (if they still hold a role
    on it) is the current project.
    Language: the workspace's, else the user's ``profile.language``.  Environment tags:
    the project's tags plus the workspace's, plus the project's default environment.
    """
    project = workspace = None
    if project_id is None and workspace_id is None:
        default = snapshot.value("config.default_project")
        if isinstance(default, str) and snapshot.project(default) is not None:
            project_id = default
    if project_id is not None:
        validate_id(project_id, kind="project_id")
        project = snapshot.project(project_id)
        if project is None:
            raise ScopeDenied(f"user {snapshot.user_id!r} has no role on project {project_id!r}")
    if workspace_id is not None:
        validate_id(workspace_id, kind="workspace_id")
        workspace = snapshot.workspace(workspace_id)
        if workspace is None or (
            project is not None and workspace.project_id != project.project_id
        ):
            raise ScopeDenied(f"workspace {workspace_id!r} is outside the user's projects")
        if project is None:
            project = snapshot.project(workspace.project_id)
    tags: list[str] = []
    if project is not None:
        tags.extend(project.env_tags)
        if project.default_env:
            tags.append(project.default_env)
    if workspace is not None:
        tags.extend(workspace.env_tags)
    language = (workspace.language if workspace else None) or snapshot.profile_value("language")
    return RetrievalFilters(
        tenant_id=snapshot.tenant_id,
        user_id=snapshot.user_id,
        project_ids=tuple(p.project_id for p in snapshot.projects),
        project_id=project.project_id if project else None,
        workspace_id=workspace.id if workspace else None,
        role=project.role if project else None,
        permission_scope=project.scope if project else None,
        language=language,
        env_tags=tuple(dict.fromkeys(tags)),
    )
