"""Seed 2's batch job (Beat, every 5 minutes): read the queue, plan, apply.

Merged groups become one card each (the card and one ``merge`` audit row per group in one
transaction, sources listed in the content); isolated entries lose ``decay_step`` and go
back; entries at or below 0 are dropped.  The merged card's canonical key hashes its
member ids, so re-running a merge after a crash rewrites the same card (``unchanged``).
"""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.lifecycle.audit import Action, AuditEvent, record
from memstrata.core.lifecycle.batch import BatchEntry, BatchPlan, Merge, plan_batch
from memstrata.core.lifecycle.promote import short_hash, topic_tag
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.states import Event, Record, State, next_state
from memstrata.core.ltm.card import CardDraft
from memstrata.core.metrics import count_promotions
from memstrata.core.stm.lifecycle import ItemRef


def _ref(e: BatchEntry) -> ItemRef:
    return (e.user_id, e.tenant_id, e.memory_id)


def read_queue(lc: Lifecycle, *, limit: int) -> list[BatchEntry]:
    """Up to ``limit`` queued entries (HSCAN: bounded, no full read of a huge queue)."""
    return [BatchEntry.model_validate_json(raw) for raw in lc.store.batch_entries(limit=limit)]


def merged_card(m: Merge, tenant: str) -> CardDraft:
    _tenant, user_id, topic = m.group
    ids = [e.memory_id for e in m.entries]
    lines = [
        f"- {e.summary} (stm {e.memory_id}; session {e.session_id}; "
        f"messages {', '.join(e.message_ids[:8])})"
        for e in m.entries
    ]
    entities = list(dict.fromkeys(x for e in m.entries for x in e.entities))[:64]
    return CardDraft(
        tenant_id=tenant,
        user_id=user_id,
        canonical_key=f"merged:{topic[:200]}:{short_hash(ids)}",
        memory_type="experience",
        title=f"{topic} ({len(ids)} notes)"[:256],
        summary=" | ".join(e.summary for e in m.entries)[:2000],
        content="\n".join(lines)[:16_000],
        entities=[x[:128] for x in entities],
        tags=[topic_tag(topic), "merged"],
        source_type="batch_merge",
        importance=m.importance,
    )


def _entry_inputs(entries: Sequence[BatchEntry]) -> dict[str, object]:
    return {"entries": [e.model_dump(mode="json", include={"memory_id", "summary",
            "importance", "session_id", "decays", "enqueued_at"}) for e in entries]}  # fmt: skip


def _state(e: BatchEntry, event: Event, ref: str, now: float) -> tuple[ItemRef, str]:
    state = next_state(State.QUEUED, event)
    return _ref(e), Record(state, e.fingerprint, ref, now).dumps()


def apply_plan(lc: Lifecycle, plan: BatchPlan, *, now: float) -> dict[str, int]:
    pol = lc.settings.batch
    cards: list[str] = []
    states: list[tuple[ItemRef, str]] = []  # item, record
    for m in plan.merges:
        tenant = lc.tenant(m.group[0])
        draft = merged_card(m, tenant)
        with pg_errors("merge batch"), lc.engine.begin() as conn:
            res = lc.ledger.write(draft, now=now, conn=conn)
            record(conn, [AuditEvent(
                action=Action.MERGE, tenant_id=tenant, user_id=m.group[1],
                target=res.memory_id, at=now, memory_ids=tuple(e.memory_id for e in m.entries),
                reason=f"{len(m.entries)} >= {pol.merge_min} items on topic {m.group[2]!r}",
                inputs=_entry_inputs(m.entries),
                breakdown={"items": float(len(m.entries)), "importance": m.importance},
            )])  # fmt: skip
        cards.append(res.memory_id)
        states += [_state(e, Event.MERGE, res.memory_id, now) for e in m.entries]
    events = []
    for e, left in plan.decays:
        events.append(AuditEvent(
            action=Action.DECAY, tenant_id=lc.tenant(e.tenant_id), user_id=e.user_id,
            target="batch", at=now, memory_ids=(e.memory_id,),
            reason=f"isolated on topic {e.topic!r}: {e.importance} - {pol.decay_step}",
            inputs=_entry_inputs([e]), breakdown={"before": e.importance, "after": left},
        ))  # fmt: skip
    for e in plan.drops:
        events.append(AuditEvent(
            action=Action.DROP, tenant_id=lc.tenant(e.tenant_id), user_id=e.user_id,
            target="batch", at=now, memory_ids=(e.memory_id,),
            reason=f"importance {e.importance} - {pol.decay_step} <= 0",
            inputs=_entry_inputs([e]), breakdown={"before": e.importance, "after": 0.0},
        ))  # fmt: skip
        states.append(_state(e, Event.DROP, "", now))
    lc.audit.write(events)
    decayed = []
    for e, left in plan.decays:
        entry = e.model_copy(update={"importance": left, "decays": e.decays + 1})
        decayed.append((_ref(e), entry.model_dump_json()))
    gone = [_ref(e) for m in plan.merges for e in m.entries] + [_ref(e) for e in plan.drops]
    lc.store.batch_apply(remove=gone, put=decayed, records=states)
    if cards:
        lc.on_cards(sorted(set(cards)))
    count_promotions("merged", len(set(cards)))
    return {**plan.summary(), "cards": len(set(cards))}


def run_batch(
    lc: Lifecycle, *, now: float, limit: int, dry_run: bool = False
) -> tuple[BatchPlan, dict[str, int]]:
    """One run of the batch job: the plan, and what was applied (nothing on a dry run)."""
    plan = plan_batch(read_queue(lc, limit=limit), policy=lc.settings.batch, now=now)
    if dry_run:
        return plan, plan.summary()
    return plan, apply_plan(lc, plan, now=now)
