"""Audit trail of every movement between layers, in PostgreSQL (``lifecycle_audit``).

Why PostgreSQL and not a Redis stream: the trail must outlive STM (items expire within
days, promotions last for months), must answer "where did this fact or card come
from?" by target, and is what a retraction is checked against; a capped stream would
forget exactly the old promotions one wants to undo.  Rows are append-only; one row per
promotion, enqueue, merge, decay, drop, retraction, summary, forgetting and session
finalisation, with the inputs and the score breakdown that decided it.

The schema is the Alembic revision ``core/migrations/versions/lifecycle_*`` (branch
``lifecycle``); this module mirrors it for queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    insert,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from memstrata.core.adapters.pg import pg_errors

lifecycle_metadata = MetaData()

audit_table = Table(
    "lifecycle_audit",
    lifecycle_metadata,
    Column("id", BigInteger, autoincrement=True, nullable=False),
    Column("at", Float(precision=53), nullable=False),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(256), nullable=False),
    Column("memory_ids", JSONB, nullable=False),
    Column("inputs", JSONB, nullable=False),
    Column("breakdown", JSONB, nullable=False),
    Column("reason", Text, nullable=False),
    PrimaryKeyConstraint("id", name="pk_lifecycle_audit"),
    Index("ix_lifecycle_audit_owner", "tenant_id", "user_id", "at"),
    Index("ix_lifecycle_audit_target", "target"),
)

erasures_table = Table(
    "owner_erasures",
    lifecycle_metadata,
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("started_at", Float(precision=53), nullable=False),
    Column("finished_at", Float(precision=53), nullable=True),
    Column("runs", Integer, nullable=False, server_default="1"),
    Column("steps", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    PrimaryKeyConstraint("tenant_id", "user_id", name="pk_owner_erasures"),
)
"""The scoped erase's durable marker (``core.erase``): one row per owner ever erased.

``finished_at IS NULL`` is an erase in progress: a rerun completes it.  ``steps`` are
the steps the current erase has finished; ``runs`` counts the calls it took.  No content."""


class Action(StrEnum):
    PROMOTE_PG = "promote_pg"
    PROMOTE_CARD = "promote_card"
    ENQUEUE = "enqueue"
    MERGE = "merge"
    DECAY = "decay"
    DROP = "drop"
    RETRACT = "retract"
    SUMMARISE = "summarise"
    FORGET = "forget"
    FINALISE = "finalise"
    PRELOAD = "preload"
    REBUILD = "rebuild"
    CONSOLIDATE = "consolidate"  # cards merged into one (core.lifecycle.consolidate)
    GATHER = "gather"  # an entity card gathered statements (core.lifecycle.entity_cards)
    SUPERSEDE = "supersede"  # a newer statement of the same fact replaced a card's text
    ERASE = "erase"  # an owner's data removed from every layer (core.erase); no content


@dataclass(frozen=True)
class AuditEvent:
    action: Action
    tenant_id: str
    user_id: str
    target: str
    reason: str
    at: float
    memory_ids: tuple[str, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)
    breakdown: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "action": self.action.value,
            "target": self.target[:256],
            "memory_ids": list(self.memory_ids),
            "inputs": self.inputs,
            "breakdown": self.breakdown,
            "reason": self.reason,
        }


def latest_sources(
    conn: Connection, tenant_id: str, user_id: str, action: Action
) -> dict[str, list[str]]:
    """Target → ``inputs.sources`` of its latest ``action`` row, for one owner (what each
    merged card holds, what each entity card gathers)."""
    stmt = (
        select(audit_table.c.target, audit_table.c.inputs)
        .where(audit_table.c.tenant_id == tenant_id, audit_table.c.user_id == user_id,
               audit_table.c.action == action.value)
        .order_by(audit_table.c.id.desc())
    )  # fmt: skip
    out: dict[str, list[str]] = {}
    for target, inputs in conn.execute(stmt):
        out.setdefault(str(target), [str(s) for s in (inputs or {}).get("sources", [])])
    return out


def record(conn: Connection, events: Sequence[AuditEvent]) -> None:
    """Append events in the caller's transaction (so the audit row and the move commit together)."""
    if events:
        conn.execute(insert(audit_table), [e.row() for e in events])


class AuditLog:
    """The audit functions, each in its own short transaction on ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write(self, events: Sequence[AuditEvent]) -> None:
        if not events:
            return
        with pg_errors("write audit"), self.engine.begin() as conn:
            record(conn, events)

    def find(
        self,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        target: str | None = None,
        action: Action | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """Rows newest first, filtered by owner, target or action."""
        stmt = select(audit_table).order_by(audit_table.c.id.desc()).limit(limit)
        if tenant_id is not None:
            stmt = stmt.where(audit_table.c.tenant_id == tenant_id)
        if user_id is not None:
            stmt = stmt.where(audit_table.c.user_id == user_id)
        if target is not None:
            stmt = stmt.where(audit_table.c.target == target)
        if action is not None:
            stmt = stmt.where(audit_table.c.action == action.value)
        with pg_errors("read audit"), self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]
