"""Engine factory, the Session-or-Connection argument, and vendor error translation.

Repository functions take ``db=`` as either a SQLAlchemy/SQLModel ``Session`` or a Core
``Connection`` and run Core statements on its connection, inside the caller's
transaction (MEASURED.md: Core upserts are 3.7x faster than ORM ones).  psycopg and
SQLAlchemy errors are translated at this boundary by :data:`translated`, the one PostgreSQL
error map with the authority's leaves (:mod:`core.authority.errors`).
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import set_json_loads
from pydantic_core import from_json
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session

from memstrata.core.adapters.pg import ConstraintRule, PgErrorMap
from memstrata.core.authority.errors import (
    AuthorityUnavailable,
    ConcurrentFactWrite,
    UnknownProject,
    UnknownTenant,
    UnknownUser,
)

Db = Session | Connection

_REFUSED = "{name} refused the row"
_RACED = "another writer made this key current"

CONSTRAINTS: tuple[ConstraintRule, ...] = (
    ConstraintRule("uq_stable_memory_facts_current", ConcurrentFactWrite, _RACED),
    ConstraintRule("fk_users_tenant_id_tenants", UnknownTenant, _REFUSED),
    ConstraintRule("fk_projects_tenant_id_tenants", UnknownTenant, _REFUSED),
    ConstraintRule("fk_agent_settings_tenant_id_tenants", UnknownTenant, _REFUSED),
    ConstraintRule("fk_workspaces_tenant_id_project_id_projects", UnknownProject, _REFUSED),
    ConstraintRule("fk_user_project_roles_tenant_id_project_id_projects", UnknownProject, _REFUSED),
    ConstraintRule("*user_id_users*", UnknownUser, "no such user"),
)
"""Authority constraints with a meaning of their own; any other one raises ``Conflict``."""


def connection_of(db: Db) -> Connection:
    """The Core connection of ``db`` (a Session joins, or begins, its transaction)."""
    return db.connection() if isinstance(db, Session) else db


def make_engine(url: str, *, connect_timeout_s: float = 5.0, pool_size: int = 5) -> Engine:
    """An engine for one process (build it after fork); every statement has a timeout.

    ``statement_timeout`` (ms) bounds a query stuck behind a lock; ``connect_timeout``
    (s) bounds an unreachable server.  Both surface as :class:`AuthorityUnavailable`.
    """
    timeout_ms = int(connect_timeout_s * 1000)
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": max(1, int(connect_timeout_s)),
            "options": f"-c statement_timeout={timeout_ms}",
        },
    )
    event.listen(engine, "connect", _parse_json_in_rust)
    return engine


def _parse_json_in_rust(dbapi_connection: Any, _record: Any) -> None:
    """JSON and JSONB columns parsed by pydantic-core's parser instead of ``json.loads``.

    A card carries four JSONB lists (entities, tags, message and card ids): read for every
    recall, the standard parser was a sixth of the ledger read's CPU (docs/PERFORMANCE.md,
    2026-12-07 third sitting).  Same values for every JSON document; pydantic-core is a
    dependency already.
    """
    set_json_loads(from_json, dbapi_connection)


def autocommit_reader(engine: Engine) -> Engine:
    """The same pool without BEGIN / ROLLBACK around each read.

    A snapshot is read by one statement, which is its own consistent snapshot, so a
    transaction adds two round trips and nothing else.  Use it for reads only.
    """
    return engine.execution_options(isolation_level="AUTOCOMMIT")


translated = PgErrorMap(
    unavailable=AuthorityUnavailable, concurrent=ConcurrentFactWrite, constraints=CONSTRAINTS
)
"""The PostgreSQL error map (:mod:`core.adapters.pg`) with the authority's own leaves:
``with translated("create user u1"): ...``."""
