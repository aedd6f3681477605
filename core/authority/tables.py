"""SQLModel table models of the authority layer (PostgreSQL), on their own metadata.

Every row carries ``tenant_id`` and every reference is a composite foreign key that
includes it, so the database itself refuses a role, workspace or fact that links rows of
two tenants.  Deleting a user cascades to everything the user owns.  Wire models (create,
update, public) live in :mod:`core.authority.schemas`; these classes are storage only.

``stable_memory_facts`` is the ledger of every authoritative value: one *current* row per
(tenant, user, canonical key) guaranteed by the partial unique index
``uq_stable_memory_facts_current``, and superseded rows kept as history.  The typed
tables ``user_profiles``, ``user_preferences`` and ``user_project_roles`` are projections
of well-known keys, written in the same transaction as the fact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKeyConstraint,
    Index,
    MetaData,
    Sequence,
    Table,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from memstrata.core.authority.domain import FactDomain, FactOrigin, PermissionScope

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
authority_metadata = MetaData(naming_convention=NAMING)

VERSION_SEQUENCE = Sequence("authority_version_seq", metadata=authority_metadata)
"""Global and monotonic, so a user deleted and created again never reuses a cache version."""

_ID = 128
_TS: Any = DateTime(timezone=True)


def _stamp() -> Any:
    """A NOT NULL timestamp the database fills in (``now()``, the transaction start)."""
    return Field(
        default=None, nullable=False, sa_type=_TS, sa_column_kwargs={"server_default": func.now()}
    )


def _in(values: type[Any]) -> str:
    return "IN (" + ", ".join(f"'{v.value}'" for v in values) + ")"


class AuthorityBase(SQLModel, registry=registry(metadata=authority_metadata)):
    """Abstract base: binds the tables to the authority metadata, not SQLModel's global one."""


class Tenant(AuthorityBase, table=True):
    __tablename__ = "tenants"

    id: str = Field(primary_key=True, max_length=_ID)
    name: str = Field(max_length=256)
    created_at: datetime | None = _stamp()


class User(AuthorityBase, table=True):
    __tablename__ = "users"
    __table_args__ = (ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),)

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    id: str = Field(primary_key=True, max_length=_ID)
    display_name: str | None = Field(default=None, max_length=256)
    authority_version: int = Field(
        sa_type=BigInteger,
        sa_column_kwargs={"server_default": VERSION_SEQUENCE.next_value()},
    )
    created_at: datetime | None = _stamp()


def _user_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["tenant_id", "user_id"], ["users.tenant_id", "users.id"], ondelete="CASCADE"
    )


def _project_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
    )


class UserProfile(AuthorityBase, table=True):
    """Projection of ``profile.*`` facts: one row per user."""

    __tablename__ = "user_profiles"
    __table_args__ = (_user_fk(),)

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    user_id: str = Field(primary_key=True, max_length=_ID)
    language: str | None = Field(default=None, max_length=128)
    answer_style: str | None = Field(default=None, max_length=128)
    timezone: str | None = Field(default=None, max_length=128)
    display_name: str | None = Field(default=None, max_length=128)
    updated_at: datetime | None = _stamp()


class UserPreference(AuthorityBase, table=True):
    """Projection of ``preference.<name>`` facts."""

    __tablename__ = "user_preferences"
    __table_args__ = (_user_fk(),)

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    user_id: str = Field(primary_key=True, max_length=_ID)
    name: str = Field(primary_key=True, max_length=256)
    value: Any = Field(sa_type=JSONB)
    updated_at: datetime | None = _stamp()


class Project(AuthorityBase, table=True):
    __tablename__ = "projects"
    __table_args__ = (ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),)

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    id: str = Field(primary_key=True, max_length=_ID)
    name: str = Field(max_length=256)
    default_env: str | None = Field(default=None, max_length=128)
    env_tags: list[str] = Field(
        default_factory=list, sa_type=JSONB, sa_column_kwargs={"server_default": text("'[]'")}
    )
    attributes: dict[str, Any] = Field(
        default_factory=dict, sa_type=JSONB, sa_column_kwargs={"server_default": text("'{}'")}
    )
    created_at: datetime | None = _stamp()


class Workspace(AuthorityBase, table=True):
    __tablename__ = "workspaces"
    __table_args__ = (_project_fk(), Index(None, "tenant_id", "project_id"))

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    id: str = Field(primary_key=True, max_length=_ID)
    project_id: str = Field(max_length=_ID)
    name: str = Field(max_length=256)
    language: str | None = Field(default=None, max_length=128)
    env_tags: list[str] = Field(
        default_factory=list, sa_type=JSONB, sa_column_kwargs={"server_default": text("'[]'")}
    )
    created_at: datetime | None = _stamp()


class UserProjectRole(AuthorityBase, table=True):
    """Projection of ``permission.project.<project_id>`` facts."""

    __tablename__ = "user_project_roles"
    __table_args__ = (
        _user_fk(),
        _project_fk(),
        CheckConstraint(f"permission_scope {_in(PermissionScope)}", name="scope"),
    )

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    user_id: str = Field(primary_key=True, max_length=_ID)
    project_id: str = Field(primary_key=True, max_length=_ID)
    role: str = Field(max_length=64)
    permission_scope: str = Field(max_length=32)
    updated_at: datetime | None = _stamp()


class AgentSetting(AuthorityBase, table=True):
    """Tenant-wide agent configuration; a user's ``config.*`` fact overrides it."""

    __tablename__ = "agent_settings"
    __table_args__ = (ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),)

    tenant_id: str = Field(primary_key=True, max_length=_ID)
    agent_id: str = Field(primary_key=True, max_length=_ID)
    name: str = Field(primary_key=True, max_length=256)
    value: Any = Field(sa_type=JSONB)
    updated_at: datetime | None = _stamp()


class StableMemoryFact(AuthorityBase, table=True):
    """One version of one authoritative value; ``superseded_at IS NULL`` marks the current one."""

    __tablename__ = "stable_memory_facts"
    __table_args__ = (
        _user_fk(),
        CheckConstraint(f"domain {_in(FactDomain)}", name="domain"),
        CheckConstraint(f"origin {_in(FactOrigin)}", name="origin"),
        CheckConstraint("superseded_at IS NULL OR superseded_at >= valid_from", name="interval"),
        CheckConstraint("split_part(canonical_fact_key, '.', 1) = domain", name="key_in_domain"),
        Index(
            "uq_stable_memory_facts_current",
            "tenant_id",
            "user_id",
            "canonical_fact_key",
            unique=True,
            postgresql_where=text("superseded_at IS NULL"),
        ),
        Index(
            "ix_stable_memory_facts_history",
            "tenant_id",
            "user_id",
            "canonical_fact_key",
            "valid_from",
        ),
        ForeignKeyConstraint(
            ["superseded_by"],
            ["stable_memory_facts.id"],
            ondelete="SET NULL",
            deferrable=True,
            initially="DEFERRED",
        ),  # deferred: the old row names its successor before it is inserted
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BigInteger)
    tenant_id: str = Field(max_length=_ID)
    user_id: str = Field(max_length=_ID)
    canonical_fact_key: str = Field(max_length=256)
    domain: str = Field(max_length=32)
    value: Any = Field(sa_type=JSONB)
    value_hash: str = Field(max_length=64)
    origin: str = Field(max_length=16)
    source_memory_ids: list[str] = Field(default_factory=list, sa_type=JSONB)
    source_message_ids: list[str] = Field(default_factory=list, sa_type=JSONB)
    promotion: dict[str, Any] | None = Field(default=None, sa_type=JSONB)
    valid_from: datetime | None = _stamp()
    superseded_at: datetime | None = Field(default=None, sa_type=_TS)
    superseded_by: int | None = Field(default=None, sa_type=BigInteger)


def _table(model: type[AuthorityBase]) -> Table:
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, Table)
    return table


TENANTS = _table(Tenant)
USERS = _table(User)
PROFILES = _table(UserProfile)
PREFERENCES = _table(UserPreference)
PROJECTS = _table(Project)
WORKSPACES = _table(Workspace)
ROLES = _table(UserProjectRole)
AGENT_SETTINGS = _table(AgentSetting)
FACTS = _table(StableMemoryFact)

__all__ = [
    "AGENT_SETTINGS",
    "FACTS",
    "PREFERENCES",
    "PROFILES",
    "PROJECTS",
    "ROLES",
    "TENANTS",
    "USERS",
    "VERSION_SEQUENCE",
    "WORKSPACES",
    "AgentSetting",
    "AuthorityBase",
    "Project",
    "StableMemoryFact",
    "Tenant",
    "User",
    "UserPreference",
    "UserProfile",
    "UserProjectRole",
    "Workspace",
    "authority_metadata",
]
