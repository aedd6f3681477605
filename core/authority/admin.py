"""Structure of the authority layer: tenants, users, projects, workspaces, agent settings.

Keyword-only, caller-owned transaction, inputs validated by the create/update models
before any statement.  A change that alters other users' snapshots (a project's default
environment, a tenant's agent setting) bumps those users' versions and returns them, so
the caller invalidates exactly those cache entries after commit.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, JsonValue, ValidationError
from sqlalchemy import Connection, and_, delete, select, text, update
from sqlalchemy.dialects.postgresql import insert

from memstrata.core.authority.db import Db, connection_of, translated
from memstrata.core.authority.domain import DEFAULT_LIMITS, AuthorityLimits, encode_value
from memstrata.core.authority.errors import UnknownProject, UnknownTenant, UnknownUser
from memstrata.core.authority.schemas import (
    ProjectCreate,
    ProjectPublic,
    ProjectUpdate,
    TenantCreate,
    UserCreate,
    UserVersion,
    WorkspaceCreate,
    WriteResult,
)
from memstrata.core.authority.tables import (
    AGENT_SETTINGS,
    PROJECTS,
    ROLES,
    TENANTS,
    USERS,
    WORKSPACES,
)
from memstrata.core.errors import InvalidInput
from memstrata.core.ids import validate_id

_NEXT_VERSION = text("nextval('authority_version_seq')")


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], data: M | dict[str, Any]) -> M:
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"invalid {model.__name__}: {exc}") from exc


def create_tenant(*, db: Db, tenant: TenantCreate | dict[str, Any]) -> None:
    t = _parse(TenantCreate, tenant)
    with translated(f"create tenant {t.id}"):
        connection_of(db).execute(TENANTS.insert().values(id=t.id, name=t.name))


def create_user(*, db: Db, user: UserCreate | dict[str, Any]) -> UserVersion:
    """Add a user to an existing tenant; returns the user's first version."""
    u = _parse(UserCreate, user)
    with translated(f"create user {u.id}"):
        version = (
            connection_of(db)
            .execute(
                USERS.insert()
                .values(tenant_id=u.tenant_id, id=u.id, display_name=u.display_name)
                .returning(USERS.c.authority_version)
            )
            .scalar_one()
        )
    return UserVersion(tenant_id=u.tenant_id, user_id=u.id, version=int(version))


def create_project(*, db: Db, project: ProjectCreate | dict[str, Any]) -> ProjectPublic:
    p = _parse(ProjectCreate, project)
    encode_value(p.attributes, limits=DEFAULT_LIMITS)  # size check
    with translated(f"create project {p.id}"):
        row = (
            connection_of(db)
            .execute(
                PROJECTS.insert()
                .values(
                    tenant_id=p.tenant_id,
                    id=p.id,
                    name=p.name,
                    default_env=p.default_env,
                    env_tags=list(p.env_tags),
                    attributes=p.attributes,
                )
                .returning(*PROJECTS.c)
            )
            .one()
        )
    return ProjectPublic.model_validate(row._mapping)


def update_project(
    *, db: Db, tenant_id: str, project_id: str, changes: ProjectUpdate | dict[str, Any]
) -> WriteResult:
    """Change a project's metadata; bumps every user who holds a role on it."""
    validate_id(tenant_id, kind="tenant_id")
    validate_id(project_id, kind="project_id")
    c = _parse(ProjectUpdate, changes)
    values: dict[str, Any] = c.model_dump(exclude_none=True)
    if "env_tags" in values:
        values["env_tags"] = list(values["env_tags"])
    if "attributes" in values:
        encode_value(values["attributes"], limits=DEFAULT_LIMITS)
    conn = connection_of(db)
    with translated(f"update project {project_id}"):
        where = (PROJECTS.c.tenant_id == tenant_id, PROJECTS.c.id == project_id)
        if values:
            found = conn.execute(
                update(PROJECTS).where(*where).values(**values).returning(PROJECTS.c.id)
            ).first()
        else:
            found = conn.execute(select(PROJECTS.c.id).where(*where)).first()
        if found is None:
            raise UnknownProject(f"no project {project_id!r} in tenant {tenant_id!r}")
        return WriteResult(bumped=_bump_project_users(conn, tenant_id, project_id))


def create_workspace(*, db: Db, workspace: WorkspaceCreate | dict[str, Any]) -> WriteResult:
    """Add a workspace to a project; its users' snapshots list it, so they are bumped."""
    w = _parse(WorkspaceCreate, workspace)
    conn = connection_of(db)
    with translated(f"create workspace {w.id}"):
        conn.execute(
            WORKSPACES.insert().values(
                tenant_id=w.tenant_id,
                id=w.id,
                project_id=w.project_id,
                name=w.name,
                language=w.language,
                env_tags=list(w.env_tags),
            )
        )
        return WriteResult(bumped=_bump_project_users(conn, w.tenant_id, w.project_id))


def set_agent_setting(
    *,
    db: Db,
    tenant_id: str,
    agent_id: str,
    name: str,
    value: JsonValue,
    limits: AuthorityLimits = DEFAULT_LIMITS,
) -> WriteResult:
    """Tenant-wide default for ``config.<name>``; bumps every user of the tenant."""
    validate_id(tenant_id, kind="tenant_id")
    validate_id(agent_id, kind="agent_id")
    validate_id(name, kind="setting name")
    enc = encode_value(value, limits=limits)
    conn = connection_of(db)
    with translated(f"set agent setting {name}"):
        stmt = insert(AGENT_SETTINGS).values(
            tenant_id=tenant_id, agent_id=agent_id, name=name, value=enc.value
        )
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["tenant_id", "agent_id", "name"],
                set_={"value": stmt.excluded.value, "updated_at": text("now()")},
            )
        )
        rows = conn.execute(
            update(USERS)
            .where(USERS.c.tenant_id == tenant_id)
            .values(authority_version=_NEXT_VERSION)
            .returning(USERS.c.id, USERS.c.authority_version)
        ).all()
    return WriteResult(bumped=_versions(tenant_id, rows))


def delete_user(*, db: Db, tenant_id: str, user_id: str) -> UserVersion:
    """Delete one user of one tenant and everything they own (cascade); never another tenant's.

    Returns a version newer than any the user had, so the cache refuses old snapshots.
    """
    validate_id(tenant_id, kind="tenant_id")
    validate_id(user_id, kind="user_id")
    conn = connection_of(db)
    with translated(f"delete user {user_id}"):
        gone = conn.execute(
            delete(USERS)
            .where(and_(USERS.c.tenant_id == tenant_id, USERS.c.id == user_id))
            .returning(USERS.c.id)
        ).first()
        if gone is None:
            exists = conn.execute(select(TENANTS.c.id).where(TENANTS.c.id == tenant_id)).first()
            if exists is None:
                raise UnknownTenant(f"no tenant {tenant_id!r}")
            raise UnknownUser(f"no user {user_id!r} in tenant {tenant_id!r}")
        version = conn.execute(select(_NEXT_VERSION)).scalar_one()
    return UserVersion(tenant_id=tenant_id, user_id=user_id, version=int(version))


def _bump_project_users(
    conn: Connection, tenant_id: str, project_id: str
) -> tuple[UserVersion, ...]:
    holders = select(ROLES.c.user_id).where(
        ROLES.c.tenant_id == tenant_id, ROLES.c.project_id == project_id
    )
    rows = conn.execute(
        update(USERS)
        .where(USERS.c.tenant_id == tenant_id, USERS.c.id.in_(holders))
        .values(authority_version=_NEXT_VERSION)
        .returning(USERS.c.id, USERS.c.authority_version)
    ).all()
    return _versions(tenant_id, rows)


def _versions(tenant_id: str, rows: Any) -> tuple[UserVersion, ...]:
    return tuple(UserVersion(tenant_id=tenant_id, user_id=r[0], version=int(r[1])) for r in rows)
