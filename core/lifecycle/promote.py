"""Apply promotion decisions: path A through the authority repository, path B through
the card ledger, the rest into seed 2's batch queue.  Each move and its audit row are
committed in one PostgreSQL transaction; the Redis record of the move comes after, so a
crash in between repeats the move next time, which both stores treat as a no-op
(``changed=False`` for a fact, ``unchanged`` for a card).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.authority.facts import promote_fact
from memstrata.core.authority.schemas import PromotionRecord, UserVersion
from memstrata.core.errors import InvalidInput, NotFound
from memstrata.core.lifecycle.audit import Action, AuditEvent, record
from memstrata.core.lifecycle.batch import BatchEntry
from memstrata.core.lifecycle.policy import Decision, ItemView, Route
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.states import Event, Record, State, current, next_state
from memstrata.core.ltm.card import CardDraft
from memstrata.core.metrics import count_promotions
from memstrata.core.models.identity import PROMOTED, card_key
from memstrata.core.tracing import traced

log = logging.getLogger(__name__)

PROFILE_VALUE_CHARS = 128


@dataclass
class Applied:
    facts: list[str] = field(default_factory=list)
    cards: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # memory id, why

    def counts(self) -> dict[str, int]:
        return {"path_a": len(self.facts), "path_b": len(self.cards),
                "queued": len(self.queued), "failed": len(self.skipped)}  # fmt: skip


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def topic_tag(topic: str) -> str:
    return "topic:" + topic[:58]


def card_for(view: ItemView, d: Decision, tenant: str) -> CardDraft:
    """Path B card of one item; keyed by its STM canonical key, so a re-promotion updates it."""
    sources = f"sources: stm {view.memory_id}; messages {', '.join(view.message_ids[:32])}"
    return CardDraft(
        tenant_id=tenant,
        user_id=view.user_id,
        canonical_key=card_key(PROMOTED, view.canonical_fact_key),
        fingerprint=view.fingerprint,
        memory_type="experience",
        title=_clip(view.summary, 256),
        summary=_clip(view.summary, 2000),
        content=sources,
        entities=[e[:128] for e in view.entities[:64]],
        tags=[topic_tag(d.topic), "promoted"],
        source_type="promoted_from_stm",
        importance=view.importance,
    )


def _event(action: Action, view: ItemView, tenant: str, target: str, d: Decision,
           at: float) -> AuditEvent:  # fmt: skip
    return AuditEvent(
        action=action, tenant_id=tenant, user_id=view.user_id, target=target,
        reason=d.reason, at=at, memory_ids=(view.memory_id,),
        inputs={"summary": view.summary[:400], "canonical_fact_key": view.canonical_fact_key,
                "memory_type": view.memory_type, "subtype": view.subtype,
                "session_id": view.session_id, "seen_sessions": list(view.seen_sessions),
                "message_ids": list(view.message_ids[:32]), "triggers": list(d.triggers),
                "route": d.route.value, "fingerprint": view.fingerprint},
        breakdown=d.breakdown,
    )  # fmt: skip


def _set_state(lc: Lifecycle, view: ItemView, event: Event, ref: str, now: float,
               prior: Record | None) -> None:  # fmt: skip
    state = next_state(current(prior, view.fingerprint), event)
    ref_ = (view.user_id, view.tenant_id, view.memory_id)
    lc.store.set_records([(ref_, Record(state, view.fingerprint, ref, now).dumps())])


def promote_to_pg(lc: Lifecycle, view: ItemView, d: Decision, now: float) -> UserVersion | None:
    """Path A: the fact and its audit row in one transaction; None if already current."""
    assert d.authority_key is not None
    tenant = lc.tenant(view.tenant_id)
    key = d.authority_key
    value = view.value if view.value is not None else _clip(view.summary, PROFILE_VALUE_CHARS)
    promo = PromotionRecord(
        rule="seed14:" + "+".join(d.triggers),
        score=d.score,
        mention_count=max(1, view.mention_count),
        session_ids=tuple(sorted(set(view.seen_sessions) | {view.session_id}))[:64],
        note=d.reason[:1000],
    )
    with pg_errors("promote fact"), lc.engine.begin() as conn:
        result = promote_fact(
            db=conn, tenant_id=tenant, user_id=view.user_id, canonical_fact_key=key,
            domain=key.split(".", 1)[0], value=value, source_memory_ids=[view.memory_id],
            source_message_ids=list(view.message_ids[:256]), promotion=promo,
        )  # fmt: skip
        with pg_errors("audit promotion"):
            record(conn, [_event(Action.PROMOTE_PG, view, tenant, key, d, now)])
    return result.version if result.changed else None


def promote_to_card(lc: Lifecycle, view: ItemView, d: Decision, now: float) -> str:
    """Path B: one card and its audit row in one transaction; returns the card id."""
    tenant = lc.tenant(view.tenant_id)
    draft = card_for(view, d, tenant)
    with pg_errors("promote card"), lc.engine.begin() as conn:
        res = lc.ledger.write(draft, now=now, conn=conn)
        record(conn, [_event(Action.PROMOTE_CARD, view, tenant, res.memory_id, d, now)])
    return res.memory_id


def batch_entry(view: ItemView, d: Decision, now: float) -> BatchEntry:
    return BatchEntry(
        user_id=view.user_id, tenant_id=view.tenant_id, memory_id=view.memory_id,
        session_id=view.session_id, topic=d.topic, importance=view.importance,
        summary=view.summary, memory_type=view.memory_type, fingerprint=view.fingerprint,
        entities=view.entities[:16], message_ids=view.message_ids[:32], enqueued_at=now,
        mentions=view.mention_count,
    )  # fmt: skip


def enqueue(lc: Lifecycle, items: Sequence[tuple[ItemView, Decision]], now: float) -> list[str]:
    """Seed 2: 0.3-0.7 goes to the batch queue (HSETNX: a decayed entry keeps its decay)."""
    if not items:
        return []
    entries = [batch_entry(v, d, now) for v, d in items]
    lc.store.batch_add(
        [((e.user_id, e.tenant_id, e.memory_id), e.model_dump_json()) for e in entries]
    )
    lc.audit.write([_event(Action.ENQUEUE, v, lc.tenant(v.tenant_id), "batch", d, now)
                    for v, d in items])  # fmt: skip
    return [v.memory_id for v, _ in items]


@traced("promote")
def apply(
    lc: Lifecycle,
    plans: Sequence[tuple[ItemView, Decision, Record | None]],
    *,
    now: float,
) -> Applied:
    """Carry out the movable decisions (path A, path B, batch); STAY, NEVER and EPISODE
    (written by :func:`core.lifecycle.finalise.finalise`) do nothing here."""
    out = Applied()
    queued: list[tuple[ItemView, Decision]] = []
    changed: list[UserVersion] = []
    for view, d, prior in plans:
        try:
            if d.route is Route.PATH_A:
                version = promote_to_pg(lc, view, d, now)
                if version is not None:
                    changed.append(version)
                _set_state(lc, view, Event.PROMOTE_PG, d.authority_key or "", now, prior)
                out.facts.append(view.memory_id)
            elif d.route is Route.PATH_B:
                cid = promote_to_card(lc, view, d, now)
                _set_state(lc, view, Event.PROMOTE_CARD, cid, now, prior)
                out.cards.append(cid)
            elif d.route is Route.BATCH:
                queued.append((view, d))
        except (NotFound, InvalidInput) as exc:
            # permanent for this item: record why and move on; the scan retries next run
            log.warning("promotion of %s skipped: %s", view.memory_id, exc)
            out.skipped.append((view.memory_id, str(exc)[:200]))
    out.queued = enqueue(lc, queued, now)
    count_promotions("path_a", len(out.facts))
    count_promotions("path_b", len(out.cards))
    count_promotions("batch", len(out.queued))
    for view, _d in queued:
        _set_state(lc, view, Event.ENQUEUE, "batch", now, None)
    if lc.profile_cache is not None:
        lc.profile_cache.invalidate_all(changed)
    if out.cards:
        lc.on_cards(sorted(set(out.cards)))
    return out


def short_hash(parts: Sequence[str]) -> str:
    return hashlib.sha1("|".join(sorted(parts)).encode()).hexdigest()[:12]


def is_open(record_: Record | None, fingerprint: str) -> bool:
    """True when the item still awaits a decision (no settled or terminal state for it)."""
    return current(record_, fingerprint) is State.NEW
