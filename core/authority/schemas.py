"""Wire models of the authority layer: create / update inputs and public (read) shapes.

Inputs validate ids (:data:`core.ids.SafeId`) and sizes before anything touches the
database; public models are frozen and are what snapshots, caches and blocks carry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from memstrata.core.authority.domain import FactDomain, FactOrigin, PermissionScope
from memstrata.core.ids import SafeId

Tag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


# ---------------------------------------------------------------------- inputs
class TenantCreate(_In):
    id: SafeId
    name: Name


class UserCreate(_In):
    tenant_id: SafeId
    id: SafeId
    display_name: Name | None = None


class ProjectCreate(_In):
    tenant_id: SafeId
    id: SafeId
    name: Name
    default_env: Tag | None = None
    env_tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    attributes: dict[str, JsonValue] = Field(default_factory=dict, max_length=64)


class ProjectUpdate(_In):
    """Only the fields that are set change; ``None`` means "leave as it is"."""

    name: Name | None = None
    default_env: Tag | None = None
    env_tags: tuple[Tag, ...] | None = Field(default=None, max_length=32)
    attributes: dict[str, JsonValue] | None = Field(default=None, max_length=64)


class WorkspaceCreate(_In):
    tenant_id: SafeId
    id: SafeId
    project_id: SafeId
    name: Name
    language: ShortText | None = None
    env_tags: tuple[Tag, ...] = Field(default=(), max_length=32)


class ProfileUpdate(_In):
    """``profile.*`` values to set; each one becomes a stable fact (with history)."""

    language: ShortText | None = None
    answer_style: ShortText | None = None
    timezone: ShortText | None = None
    display_name: ShortText | None = None


class PromotionRecord(_In):
    """Why an STM item became a stable fact (seed 十四): the rule and the evidence it saw."""

    rule: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    score: float | None = None
    mention_count: int = Field(1, ge=1)
    session_ids: tuple[SafeId, ...] = Field(default=(), max_length=64)
    note: str = Field("", max_length=1000)


class FactWrite(_In):
    """One authoritative value to make current."""

    canonical_fact_key: Annotated[str, StringConstraints(min_length=3, max_length=256)]
    domain: FactDomain
    value: JsonValue
    origin: FactOrigin = FactOrigin.ADMIN
    source_memory_ids: tuple[SafeId, ...] = ()
    source_message_ids: tuple[SafeId, ...] = ()
    promotion: PromotionRecord | None = None


# ---------------------------------------------------------------------- outputs
class FactPublic(_Out):
    id: int
    canonical_fact_key: str
    domain: FactDomain
    value: JsonValue
    origin: FactOrigin
    source_memory_ids: tuple[str, ...] = ()
    source_message_ids: tuple[str, ...] = ()
    promotion: dict[str, Any] | None = None
    valid_from: datetime
    superseded_at: datetime | None = None
    superseded_by: int | None = None


class ProjectAccess(_Out):
    """A project the user holds a role on, with the metadata retrieval scopes need."""

    project_id: str
    name: str
    role: str
    scope: PermissionScope
    default_env: str | None = None
    env_tags: tuple[str, ...] = ()
    attributes: dict[str, JsonValue] = Field(default_factory=dict)


class WorkspacePublic(_Out):
    id: str
    project_id: str
    name: str
    language: str | None = None
    env_tags: tuple[str, ...] = ()


class ProjectPublic(_Out):
    tenant_id: str
    id: str
    name: str
    default_env: str | None = None
    env_tags: tuple[str, ...] = ()
    attributes: dict[str, JsonValue] = Field(default_factory=dict)


class UserVersion(_Out):
    """A user whose authority changed, and the version that change produced (for the cache)."""

    tenant_id: str
    user_id: str
    version: int


class FactWriteResult(_Out):
    """What an upsert did; ``changed`` is False when the value was already current."""

    fact: FactPublic
    changed: bool
    superseded_id: int | None = None
    version: UserVersion


class WriteResult(_Out):
    """Users whose snapshots a non-fact write changed: invalidate their cache after commit."""

    bumped: tuple[UserVersion, ...] = ()
