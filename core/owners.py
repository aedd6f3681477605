"""Tenants and users as the public surfaces see them, and the unknown-owner policy.

``record_turn`` on an owner PostgreSQL does not know follows ``MEMSTRATA_UNKNOWN_OWNER``:
``provision`` (the default) creates the tenant and the user with defaults, so the turn
recorded is recalled at once (``recall`` needs both rows); ``refuse`` raises
:class:`UnknownTenant` / :class:`UnknownUser` before anything is written.  Owners known to
exist are remembered per process (a bounded set), so the check costs one PostgreSQL round
trip per owner and process, not one per turn.

User ids here are key parts (:func:`core.ids.user_key`); the public models carry the
external id beside them.
"""

from __future__ import annotations

import threading
from typing import Literal

from sqlalchemy import Engine, and_, func, select
from sqlalchemy.dialects.postgresql import insert

from memstrata.core.authority.db import translated
from memstrata.core.authority.errors import UnknownTenant, UnknownUser
from memstrata.core.authority.tables import TENANTS, USERS
from memstrata.core.errors import InvalidInput
from memstrata.core.ids import external_user_id, owner_tenant, validate_id
from memstrata.core.models.owners import TenantInfo, UserInfo

UnknownOwnerPolicy = Literal["provision", "refuse"]
_KNOWN_CAP = 100_000
__all__ = ["Owners", "TenantInfo", "UnknownOwnerPolicy", "UserInfo"]


def _name(name: str | None, default: str) -> str:
    name = default if name is None else name
    if not 1 <= len(name) <= 256:
        raise InvalidInput("name: expected 1-256 characters")
    return name


class Owners:
    """Tenant and user rows on the process's one engine, plus the policy's cache."""

    def __init__(self, engine: Engine, *, policy: UnknownOwnerPolicy = "provision") -> None:
        self.engine = engine
        self.policy = policy
        self._known: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ tenants

    def create_tenant(self, tenant_id: str, *, name: str | None = None) -> TenantInfo:
        """Create a tenant; :class:`core.errors.Conflict` if it exists."""
        validate_id(tenant_id, kind="tenant_id")
        with translated(f"create tenant {tenant_id}"), self.engine.begin() as conn:
            row = conn.execute(
                TENANTS.insert()
                .values(id=tenant_id, name=_name(name, tenant_id))
                .returning(TENANTS.c.id, TENANTS.c.name, TENANTS.c.created_at)
            ).one()
        return TenantInfo(tenant_id=row[0], name=row[1], created_at=row[2])

    def list_tenants(self, *, limit: int = 1000) -> list[TenantInfo]:
        """Every tenant (up to ``limit``), with its user count, by id."""
        counts = (
            select(USERS.c.tenant_id, func.count().label("n"))
            .group_by(USERS.c.tenant_id)
            .subquery()
        )
        stmt = (
            select(TENANTS.c.id, TENANTS.c.name, TENANTS.c.created_at, counts.c.n)
            .outerjoin(counts, counts.c.tenant_id == TENANTS.c.id)
            .order_by(TENANTS.c.id)
            .limit(limit)
        )
        with translated("list tenants"), self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [
            TenantInfo(tenant_id=r[0], name=r[1], created_at=r[2], users=int(r[3] or 0))
            for r in rows
        ]

    def get_tenant(self, tenant_id: str) -> TenantInfo:
        """One tenant with its user count; :class:`UnknownTenant` if there is none."""
        validate_id(tenant_id, kind="tenant_id")
        users = select(func.count()).where(USERS.c.tenant_id == tenant_id).scalar_subquery()
        stmt = select(TENANTS.c.id, TENANTS.c.name, TENANTS.c.created_at, users).where(
            TENANTS.c.id == tenant_id
        )
        with translated(f"read tenant {tenant_id}"), self.engine.connect() as conn:
            r = conn.execute(stmt).first()
        if r is None:
            raise UnknownTenant(f"no tenant {tenant_id!r}")
        return TenantInfo(tenant_id=r[0], name=r[1], created_at=r[2], users=int(r[3] or 0))

    # -------------------------------------------------------------------- users

    def create_user(
        self, tenant_id: str | None, key: str, *, display_name: str | None = None
    ) -> UserInfo:
        """Create a user (``key``: a key part) in an existing tenant."""
        tenant = owner_tenant(tenant_id)
        validate_id(key, kind="user_id")
        if display_name is not None:
            _name(display_name, "")
        with translated(f"create user {key}"), self.engine.begin() as conn:
            if conn.execute(select(TENANTS.c.id).where(TENANTS.c.id == tenant)).first() is None:
                raise UnknownTenant(f"no tenant {tenant!r}")
            conn.execute(USERS.insert().values(tenant_id=tenant, id=key, display_name=display_name))
        return self.get_user(tenant, key)

    def get_user(self, tenant_id: str | None, key: str) -> UserInfo:
        tenant = owner_tenant(tenant_id)
        validate_id(key, kind="user_id")
        stmt = select(USERS).where(and_(USERS.c.tenant_id == tenant, USERS.c.id == key))
        with translated(f"read user {key}"), self.engine.connect() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            raise UnknownUser(f"no user {external_user_id(key)!r} in tenant {tenant!r}")
        return _user(row)

    def list_users(self, tenant_id: str | None, *, limit: int = 1000) -> list[UserInfo]:
        tenant = owner_tenant(tenant_id)
        stmt = select(USERS).where(USERS.c.tenant_id == tenant).order_by(USERS.c.id).limit(limit)
        with translated(f"list users of {tenant}"), self.engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [_user(r) for r in rows]

    def forget(self, tenant_id: str | None, key: str) -> None:
        """Drop an owner from the known set (after an erase)."""
        with self._lock:
            self._known.discard((owner_tenant(tenant_id), key))

    # ------------------------------------------------------------------- policy

    def ensure(self, tenant_id: str | None, key: str) -> None:
        """Apply the unknown-owner policy to ``(tenant, key)`` (see the module docstring)."""
        owner = (owner_tenant(tenant_id), validate_id(key, kind="user_id"))
        if owner in self._known:
            return
        tenant, user = owner
        with translated(f"check owner {tenant}/{user}"), self.engine.begin() as conn:
            if self.policy == "provision":
                conn.execute(
                    insert(TENANTS).values(id=tenant, name=tenant).on_conflict_do_nothing()
                )
                conn.execute(
                    insert(USERS).values(tenant_id=tenant, id=user).on_conflict_do_nothing()
                )
            else:
                found = conn.execute(
                    select(TENANTS.c.id, USERS.c.id)
                    .select_from(TENANTS)
                    .outerjoin(USERS, and_(USERS.c.tenant_id == TENANTS.c.id, USERS.c.id == user))
                    .where(TENANTS.c.id == tenant)
                ).first()
                if found is None:
                    raise UnknownTenant(f"no tenant {tenant!r} (MEMSTRATA_UNKNOWN_OWNER=refuse)")
                if found[1] is None:
                    raise UnknownUser(
                        f"no user {external_user_id(user)!r} in tenant {tenant!r} "
                        "(MEMSTRATA_UNKNOWN_OWNER=refuse)"
                    )
        with self._lock:
            if len(self._known) >= _KNOWN_CAP:
                self._known.clear()
            self._known.add(owner)


def _user(row: object) -> UserInfo:
    m = dict(row)  # type: ignore[call-overload]
    return UserInfo(
        tenant_id=m["tenant_id"],
        user_id=external_user_id(m["id"]),
        key=m["id"],
        display_name=m["display_name"],
        authority_version=int(m["authority_version"]),
        created_at=m["created_at"],
    )
