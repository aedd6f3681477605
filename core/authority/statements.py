"""Core statements of the fact write path, built once with bind parameters.

Building a SELECT with labelled columns or an INSERT ... CTE per call costs about a
millisecond of Python; prebuilt statements hit SQLAlchemy's compiled cache and psycopg's
prepared statements (MEASURED.md: Core, not the ORM, on hot paths).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Select, and_, bindparam, func, select, text
from sqlalchemy.dialects.postgresql import insert

from memstrata.core.authority.domain import PERMISSION_PROJECT_PREFIX, PROFILE_FIELDS
from memstrata.core.authority.tables import FACTS, PREFERENCES, PROFILES, ROLES, USERS

NEXT_VERSION = text("nextval('authority_version_seq')")
_NEXT_FACT_ID = func.nextval(func.pg_get_serial_sequence("stable_memory_facts", "id"))

_current_on = and_(
    FACTS.c.tenant_id == USERS.c.tenant_id,
    FACTS.c.user_id == USERS.c.id,
    FACTS.c.canonical_fact_key == bindparam("key"),
    FACTS.c.superseded_at.is_(None),
)

READ_CURRENT: Select[Any] = (
    select(
        USERS.c.authority_version,
        *[c.label(f"f_{c.name}") for c in FACTS.c],
        FACTS.c.id.label("fact_id"),
    )
    .select_from(USERS.outerjoin(FACTS, _current_on))
    .where(USERS.c.tenant_id == bindparam("tenant_id"), USERS.c.id == bindparam("user_id"))
)
"""Params ``tenant_id, user_id, key``: the user's version and the key's current fact."""

READ_CURRENT_FOR_WRITE: Select[Any] = READ_CURRENT.add_columns(
    func.clock_timestamp().label("now"), _NEXT_FACT_ID.label("new_id")
)
""":data:`READ_CURRENT` plus the wall-clock time and a fresh fact id."""

_FACT_COLUMNS = (
    "id", "tenant_id", "user_id", "canonical_fact_key", "domain", "value", "value_hash",
    "origin", "source_memory_ids", "source_message_ids", "promotion", "valid_from",
)  # fmt: skip
_INSERT_FACT = insert(FACTS).values({name: bindparam(name) for name in _FACT_COLUMNS})


def projection_kind(key: str) -> str | None:
    """Which typed table (and column) a canonical key is written through to, if any."""
    name = key.split(".", 1)[1]
    if key.startswith("profile.") and name in PROFILE_FIELDS:
        return f"profile.{name}"
    if key.startswith("preference."):
        return "preference"
    if key.startswith(PERMISSION_PROJECT_PREFIX):
        return "role"
    return None


@cache
def insert_fact(kind: str | None) -> Select[Any]:
    """Params: every fact column, plus ``p_*`` for the projection of ``kind``.

    The fact insert and the projection upsert are two data-modifying CTEs on different
    tables, so one round trip does both and their order does not matter.
    """
    fact = _INSERT_FACT.returning(*FACTS.c).cte("new_fact")
    stmt: Select[Any] = select(fact)
    ids: dict[str, Any] = {"tenant_id": bindparam("tenant_id"), "user_id": bindparam("user_id")}
    if kind is None:
        return stmt
    if kind.startswith("profile."):
        column = kind.removeprefix("profile.")
        up = insert(PROFILES).values(**ids, **{column: bindparam("p_text")})
        proj = up.on_conflict_do_update(
            index_elements=["tenant_id", "user_id"],
            set_={column: up.excluded[column], "updated_at": func.now()},
        )
    elif kind == "preference":
        up = insert(PREFERENCES).values(
            **ids,
            name=bindparam("p_name"),
            value=bindparam("p_value", type_=PREFERENCES.c.value.type),
        )
        proj = up.on_conflict_do_update(
            index_elements=["tenant_id", "user_id", "name"],
            set_={"value": up.excluded.value, "updated_at": func.now()},
        )
    else:
        up = insert(ROLES).values(
            **ids,
            project_id=bindparam("p_project_id"),
            role=bindparam("p_role"),
            permission_scope=bindparam("p_scope"),
        )
        proj = up.on_conflict_do_update(
            index_elements=["tenant_id", "user_id", "project_id"],
            set_={
                "role": up.excluded.role,
                "permission_scope": up.excluded.permission_scope,
                "updated_at": func.now(),
            },
        )
    return stmt.add_cte(proj.cte("projection"))


def projection_params(kind: str | None, key: str, value: Any) -> dict[str, Any]:
    if kind is None:
        return {}
    if kind.startswith("profile."):
        return {"p_text": value}
    if kind == "preference":
        return {"p_name": key.split(".", 1)[1], "p_value": value}
    return {
        "p_project_id": key.removeprefix(PERMISSION_PROJECT_PREFIX),
        "p_role": value["role"],
        "p_scope": value["scope"],
    }
