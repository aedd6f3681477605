"""Undo a promotion: a PG fact is ended without successor (its typed projection removed),
a card is superseded in the ledger (both index projections are then removed by the
indexer); a merged card (``core.lifecycle.consolidate``) gives its source cards back.
The STM items it came from are marked ``retracted`` for their fingerprint, so the next
scan does not promote the same thing again.

A retraction is an explicit command: it holds the owner's lock
(:mod:`core.lifecycle.owner_lock`) from its first read to its last STM mark, waiting at
most ``wait_s`` (``owner_lock_wait_s``) for a consolidation or a session's end of the same
owner, then raises :class:`OwnerBusy`.  Under the lock no consolidation can hide the
sources it restores, and no promotion scan of a finalise can promote again what it is
about to mark retracted.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.authority.facts import retract_fact
from memstrata.core.errors import NotFound
from memstrata.core.ids import validate_id
from memstrata.core.lifecycle.audit import Action, AuditEvent, audit_table, record
from memstrata.core.lifecycle.consolidate import restore_sources
from memstrata.core.lifecycle.owner_lock import owner_lock
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.states import Event, Record, State, next_state
from memstrata.core.ltm.card import CONSOLIDATED, CardStatus


@dataclass(frozen=True)
class Retraction:
    target: str
    changed: bool
    memory_ids: tuple[str, ...]


def _sources(lc: Lifecycle, target: str) -> set[str]:
    """The STM memory ids whose promotion produced ``target`` (from the audit)."""
    stmt = select(audit_table.c.memory_ids).where(
        audit_table.c.target == target,
        audit_table.c.action.in_([Action.PROMOTE_PG.value, Action.PROMOTE_CARD.value,
                                  Action.MERGE.value]),
    )  # fmt: skip
    with pg_errors("read audit"), lc.engine.connect() as conn:
        return {str(m) for row in conn.execute(stmt) for m in row.memory_ids}


def _mark_retracted(
    lc: Lifecycle, user_id: str, tenant_id: str | None, ids: set[str], now: float
) -> None:
    order = sorted(ids)
    marks = []
    for mid, value in zip(order, lc.store.records(user_id, tenant_id, order), strict=True):
        if value is None:
            continue
        rec = Record.loads(value)
        if rec.state is State.RETRACTED:
            continue
        state = next_state(rec.state, Event.RETRACT)
        rec = Record(state, rec.fingerprint, rec.ref, now)
        marks.append(((user_id, tenant_id, mid), rec.dumps()))
    lc.store.set_records(marks)


def retract_pg_fact(
    lc: Lifecycle, *, tenant_id: str, user_id: str, fact_key: str, now: float, reason: str,
    wait_s: float | None = None,
) -> Retraction:
    """End the current value of ``fact_key``; the history row stays (who, when, why)."""
    wait = lc.settings.owner_lock_wait_s if wait_s is None else wait_s
    with owner_lock(lc.engine, lc.tenant(tenant_id), user_id, wait_s=wait):
        return _retract_pg_fact(lc, tenant_id, user_id, fact_key, now, reason)


def _retract_pg_fact(
    lc: Lifecycle, tenant_id: str, user_id: str, fact_key: str, now: float, reason: str
) -> Retraction:
    ids = _sources(lc, fact_key)
    with pg_errors("retract fact"), lc.engine.begin() as conn:
        version = retract_fact(db=conn, tenant_id=tenant_id, user_id=user_id,
                               canonical_fact_key=fact_key)  # fmt: skip
        record(conn, [AuditEvent(Action.RETRACT, tenant_id, user_id, fact_key, reason, now,
                                 tuple(sorted(ids)), {"kind": "fact"})])  # fmt: skip
    if version is not None and lc.profile_cache is not None:
        lc.profile_cache.invalidate(version)
    _mark_retracted(lc, user_id, lc.tenant(tenant_id), ids, now)
    return Retraction(fact_key, version is not None, tuple(sorted(ids)))


def retract_card(
    lc: Lifecycle, *, card_id: str, now: float, reason: str, wait_s: float | None = None
) -> Retraction:
    """Supersede a card (its projections are removed by the next index run)."""
    validate_id(card_id, kind="memory_id")
    owner = lc.ledger.cards([card_id]).get(card_id)  # whose lock to take (ids never move)
    if owner is None:
        raise NotFound(f"no LTM card {card_id}")
    wait = lc.settings.owner_lock_wait_s if wait_s is None else wait_s
    with owner_lock(lc.engine, owner.tenant_id, owner.user_id, wait_s=wait):
        return _retract_card(lc, card_id, now, reason)


def _retract_card(lc: Lifecycle, card_id: str, now: float, reason: str) -> Retraction:
    ids = _sources(lc, card_id)
    with pg_errors("retract card"), lc.engine.begin() as conn:
        card = lc.ledger.cards([card_id], conn=conn).get(card_id)
        if card is None:
            raise NotFound(f"no LTM card {card_id}")
        changed = card.status is CardStatus.ACTIVE
        restored: list[str] = []
        if changed:
            lc.ledger.set_status(card_id, CardStatus.SUPERSEDED, now=now, conn=conn)
            if card.memory_type == CONSOLIDATED:
                restored = restore_sources(lc, conn, card_id, now)
        record(conn, [AuditEvent(Action.RETRACT, card.tenant_id, card.user_id, card_id,
                                 reason, now, tuple(sorted(ids)),
                                 {"kind": "card", "restored": restored})])  # fmt: skip
    lc.on_cards([card_id, *restored])
    _mark_retracted(lc, card.user_id, lc.tenant(card.tenant_id), ids, now)
    return Retraction(card_id, changed, tuple(sorted(ids)))
