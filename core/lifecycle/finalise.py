"""Session end (seed 2 四): finalise a session into LTM; find the idle ones.

When a session ends (explicitly, or idle for ``session_idle_s``, found by
:func:`idle_sessions`), its items get a last promotion pass, a session summary card is
written to LTM (only items fit to leave STM: no next steps, guesses, tool output or
wording of the moment, per seed 1 十四), its episodic statements become episode cards
(:mod:`core.lifecycle.episodes`), and the session's STM is cleaned: its index and the
items that belonged to it alone.  User-level items (preferences, items seen in other
sessions) stay until their own TTL.

A finalise holds the owner's lock (:mod:`core.lifecycle.owner_lock`) from its promotion
pass to the session's mark, so a consolidation or a retraction of the same owner never
runs between the cards it reads and the cards it writes.  Ending a session explicitly
waits for the lock (``owner_lock_wait_s``, then :class:`OwnerBusy`); the idle-session Beat
job skips a busy owner's session, which stays idle and is taken by a later run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.compress.cache import SessionActivity
from memstrata.core.keys import parse_user_scope
from memstrata.core.lifecycle.audit import Action, AuditEvent, record
from memstrata.core.lifecycle.episodes import (
    SESSION_SUMMARY,
    SUMMARY_JOIN,
    session_tag,
    write_episodes,
)
from memstrata.core.lifecycle.generality import assess
from memstrata.core.lifecycle.owner_lock import OwnerBusy, owner_lock
from memstrata.core.lifecycle.policy import PromotionPolicy
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.scan import scan_user
from memstrata.core.ltm.card import CardDraft
from memstrata.core.metrics import count_promotions
from memstrata.core.models.memory import MemoryItem


@dataclass(frozen=True)
class Finalised:
    session_id: str
    card_id: str | None
    items: int
    deleted: int
    episodes: tuple[str, ...] = ()
    skipped: bool = False  # the owner was busy (idle job only): the session is still open


def finalise(
    lc: Lifecycle,
    *,
    user_id: str,
    session_id: str,
    now: float,
    tenant_id: str | None = None,
    reason: str = "ended",
    wait_s: float | None = None,
) -> Finalised:
    """End a session (idempotent): a last promotion pass, its episode cards, a summary card,
    then its STM cleaned and the session marked finalised as of its last activity; all
    under the owner's lock, waited for ``wait_s`` (default ``owner_lock_wait_s``; 0: tried
    once), then :class:`OwnerBusy`."""
    wait = lc.settings.owner_lock_wait_s if wait_s is None else wait_s
    with owner_lock(lc.engine, lc.tenant(tenant_id), user_id, wait_s=wait):
        return _finalise(lc, user_id, session_id, now, tenant_id, reason)


def _finalise(
    lc: Lifecycle, user_id: str, session_id: str, now: float, tenant_id: str | None, reason: str
) -> Finalised:
    scan_user(lc, user_id, tenant_id=tenant_id, now=now)
    ids = lc.stm.session_members(user_id, session_id, tenant_id=tenant_id)
    last_at = _activity(lc).last_activity(user_id, session_id, tenant_id=tenant_id)
    items = lc.stm.get_many(user_id, ids, now=now, tenant_id=tenant_id)
    episodes = write_episodes(
        lc, items, user_id=user_id, session_id=session_id, tenant_id=tenant_id, now=now
    )
    card_id = _write_summary(
        lc,
        items,
        user_id=user_id,
        session_id=session_id,
        tenant_id=tenant_id,
        reason=reason,
        now=now,
    )
    deleted = _clean_stm(
        lc, ids, items, user_id=user_id, session_id=session_id, tenant_id=tenant_id
    )
    count_promotions("session_summary", int(card_id is not None))
    activity_at = str(last_at or now)
    lc.store.mark_finalised(user_id, session_id, tenant_id=tenant_id, activity_at=activity_at)
    return Finalised(session_id, card_id, len(items), deleted, tuple(episodes))


def summary_items(
    items: Sequence[MemoryItem], *, promotion: PromotionPolicy, limit: int
) -> list[MemoryItem]:
    """The items fit to leave STM in a summary (no task-local kinds or wording), most
    important first, at most ``limit``."""
    worthy = [i for i in items if _summary_worthy(i, promotion)]
    return sorted(worthy, key=lambda i: -i.importance)[:limit]


def _summary_worthy(item: MemoryItem, promotion: PromotionPolicy) -> bool:
    if item.subtype in promotion.never_subtypes:
        return False
    if item.memory_type.value in promotion.never_types:
        return False
    return not assess(item.summary).is_local


def summary_draft(
    worthy: Sequence[MemoryItem],
    *,
    tenant: str,
    user_id: str,
    session_id: str,
    summary_chars: int,
) -> CardDraft:
    """The session summary card: ``summary``, what recall injects (whole item summaries
    while they fit ``summary_chars``), and nothing else.  Which items and messages it
    summarises is the FINALISE audit row's (:func:`summary_provenance`): a copy of every
    statement in ``content`` held a third of the curated tokens on LoCoMo; without it
    Recall@10 is unchanged, Recall@5 within ±0.013 (docs/QUALITY.md, "Fourth wave")."""
    return CardDraft(
        tenant_id=tenant,
        user_id=user_id,
        canonical_key=f"session:{session_id}",
        memory_type=SESSION_SUMMARY,
        title=f"Session {session_id}"[:256],
        summary=_clip_joined([i.summary for i in worthy], summary_chars),
        content="",
        entities=list(dict.fromkeys(e[:128] for i in worthy for e in i.entities))[:64],
        tags=["session", session_tag(session_id)],
        source_type="session_summary",
        # dated by its session's earliest statement: a summary is about that session's time
        occurred_at=min((i.updated_at for i in worthy), default=None),
        importance=0.8,  # seed 2: finalizeSession persists the summary at 0.8
    )


def summary_provenance(worthy: Sequence[MemoryItem]) -> dict[str, list[str]]:
    """The summarised items' message ids and kinds, for the FINALISE audit row."""
    return {
        "messages": list(dict.fromkeys(m for i in worthy for m in i.source.message_ids))[:512],
        "kinds": [f"{i.memory_type.value}/{i.subtype}" for i in worthy],
    }


def _clip_joined(parts: Sequence[str], limit: int) -> str:
    """:data:`SUMMARY_JOIN`-joined parts, whole parts only while they fit (at least the
    first, cut)."""
    out: list[str] = []
    used = 0
    for p in parts:
        extra = len(p) + (len(SUMMARY_JOIN) if out else 0)
        if out and used + extra > limit:
            break
        out.append(p)
        used += extra
    return SUMMARY_JOIN.join(out)[:limit]


def _write_summary(
    lc: Lifecycle,
    items: Sequence[MemoryItem],
    *,
    user_id: str,
    session_id: str,
    tenant_id: str | None,
    reason: str,
    now: float,
) -> str | None:
    """The summary card and its audit row in one transaction; None when no item is fit."""
    worthy = summary_items(
        items, promotion=lc.settings.promotion, limit=lc.settings.session_summary_items
    )
    if not worthy:
        return None
    tenant = lc.tenant(tenant_id)
    draft = summary_draft(
        worthy,
        tenant=tenant,
        user_id=user_id,
        session_id=session_id,
        summary_chars=lc.settings.session_summary_chars,
    )
    with pg_errors("finalise session"), lc.engine.begin() as conn:
        card_id = lc.ledger.write(draft, now=now, conn=conn).memory_id
        event = AuditEvent(
            action=Action.FINALISE,
            tenant_id=tenant,
            user_id=user_id,
            target=card_id,
            reason=reason,
            at=now,
            memory_ids=tuple(i.id for i in worthy),
            inputs={"session_id": session_id, "items": len(items)} | summary_provenance(worthy),
        )
        record(conn, [event])
    lc.on_cards([card_id])
    return card_id


def session_local(items: Sequence[MemoryItem], session_id: str) -> list[str]:
    """Ids of the items that belonged to this session alone: not user-level (``user:``
    keys) and seen in no other session."""
    return [
        i.id
        for i in items
        if not i.canonical_fact_key.startswith("user:") and set(i.seen_sessions) <= {session_id}
    ]


def _clean_stm(
    lc: Lifecycle,
    ids: Sequence[str],
    items: Sequence[MemoryItem],
    *,
    user_id: str,
    session_id: str,
    tenant_id: str | None,
) -> int:
    """Delete the session's own items and its index; returns the items deleted.

    ``ids`` are the session index's members, ``items`` those still readable: the rest
    (expired, or gone) leave the index too."""
    expired_or_gone = sorted(set(ids) - {i.id for i in items})
    doomed = session_local(items, session_id) + expired_or_gone
    deleted = lc.stm.delete(user_id, doomed, tenant_id=tenant_id)
    lc.stm.drop_session(user_id, session_id, tenant_id=tenant_id)
    return deleted


def _activity(lc: Lifecycle) -> SessionActivity:
    """The compression layer's session activity (when each session was last active)."""
    return SessionActivity(lc.redis, namespace=lc.stm.namespace)


def idle_sessions(
    lc: Lifecycle, *, now: float, idle_s: float, limit: int
) -> list[tuple[str, str | None, str]]:
    """(user, tenant, session) quiet for ``idle_s`` seconds and not finalised since."""
    members = _activity(lc).quiet_since(now - idle_s, limit=limit * 4)
    done = lc.store.finalised([m for m, _ in members])
    out: list[tuple[str, str | None, str]] = []
    for (member, at), fin in zip(members, done, strict=True):
        if fin is not None and float(fin) >= float(at):
            continue
        scope, _, session_id = member.rpartition("|")
        user_id, tenant_id = parse_user_scope(scope)
        out.append((user_id, tenant_id, session_id))
        if len(out) >= limit:
            break
    return out


def finalise_idle(lc: Lifecycle, *, now: float, limit: int, max_s: float) -> list[Finalised]:
    """Finalise idle sessions, at most ``limit`` and for about ``max_s`` seconds; a
    session whose owner another lifecycle job holds is skipped (``skipped``), not waited
    for: it is not marked finalised, so the next run finds it idle again."""
    t0 = time.monotonic()
    out = []
    idle = idle_sessions(lc, now=now, idle_s=lc.settings.session_idle_s, limit=limit)
    for user_id, tenant_id, sid in idle:
        try:
            out.append(finalise(lc, user_id=user_id, session_id=sid, now=now,
                                tenant_id=tenant_id, reason="idle", wait_s=0))  # fmt: skip
        except OwnerBusy:
            out.append(Finalised(sid, None, 0, 0, skipped=True))
        if time.monotonic() - t0 >= max_s:
            break
    return out
