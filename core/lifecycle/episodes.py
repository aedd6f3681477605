"""Episode cards (seed 2 四): what a participant said about their life, kept at session end.

Each statement a participant made about their life (extractor subtype
``conversation_fact``, policy route ``episode``) becomes one LTM card when its session
ends, with the messages around it (read back from L0) as indexed context, so "yes, in
May" is found by what it answered.  One card per statement, keyed by its canonical key:
finalising twice, or the same statement in two sessions, updates one card.  A newer
statement of the same canonical fact (the key masks digits: "I have 2 cats" → "… 3 cats")
replaces the card's text; the older text is kept as a superseded history card, audited
(``Action.SUPERSEDE``), so recall returns the current statement and the past stays.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.errors import NotFound
from memstrata.core.lifecycle.audit import Action, AuditEvent, record
from memstrata.core.lifecycle.consolidate import absorbed_in
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import CardDraft, CardStatus, LtmCard, card_id
from memstrata.core.models.identity import EPISODE, card_key
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import Role, TranscriptRecord

CONTEXT_CHARS = 300


CONTEXT_WINDOW_S = 600.0


def _exchange(a: TranscriptRecord, b: TranscriptRecord) -> bool:
    """Two adjacent messages are one exchange when another party answers within minutes:
    a user and the assistant, or two named people.  Consecutive entries by one author
    (a diary, an archive, a user's second message) are separate statements: gluing
    them together would index one memory under another's words (measured on
    MADial-Bench archives: Recall@5 0.58 → 0.32 with such context)."""
    other = a.role is not b.role or (a.name or "") != (b.name or "")
    return other and abs(b.at - a.at) <= CONTEXT_WINDOW_S


def message_context(records: Sequence[TranscriptRecord]) -> dict[str, tuple[str, str]]:
    """message id → (the message it answers, the message answering it) in one session's
    L0: the other party's adjacent messages, "" when there is none."""
    said = [r for r in records if r.role in (Role.USER, Role.ASSISTANT) and r.content.strip()]
    out: dict[str, tuple[str, str]] = {}
    for n, rec in enumerate(said):
        prev = said[n - 1] if n else None
        nxt = said[n + 1] if n + 1 < len(said) else None
        before = prev.content if prev is not None and _exchange(prev, rec) else ""
        after = nxt.content if nxt is not None and _exchange(rec, nxt) else ""
        out[rec.message_id] = (before[:CONTEXT_CHARS], after[:CONTEXT_CHARS])
    return out


def episode_draft(
    item: MemoryItem, *, tenant: str, session_id: str, context: dict[str, tuple[str, str]]
) -> CardDraft:
    """One statement → its episode card; the neighbours are indexed, never rendered.

    The title is the statement's head, not the speaker: a constant word on every card of
    one author (an archive's "archive") pulls all their vectors together (MADial-Bench
    Recall@5 0.50 → 0.54; LoCoMo unchanged, the speaker is in the summary and entities)."""
    mids = list(item.source.message_ids)
    before = next((context[m][0] for m in mids if m in context), "")
    after = next((context[m][1] for m in reversed(mids) if m in context), "")
    return CardDraft(
        tenant_id=tenant,
        user_id=item.user_id,
        canonical_key=card_key(EPISODE, item.canonical_fact_key),
        memory_type=EPISODE,
        fingerprint=item.fingerprint,
        title=item.summary[:80],
        summary=item.summary[:2000],
        content="\n".join(t for t in (before, after) if t),
        entities=[e[:128] for e in item.entities[:64]],
        tags=[EPISODE, f"session:{session_id}"[:64]],
        source_type="session_episode",
        source_message_ids=[m[:128] for m in mids[:64]],
        importance=item.importance,
        confidence=item.confidence,
    )


def superseded_by(old: LtmCard, new: CardDraft, *, merged: bool = False) -> bool:
    """The live card's statement is replaced by a different one of the same fact (a card
    a merge hid is live too: the merged card holds it)."""
    live = old.status is CardStatus.ACTIVE or (merged and old.status is CardStatus.SUPERSEDED)
    return live and old.summary != new.summary


def history_draft(old: LtmCard) -> CardDraft:
    """The replaced statement, kept as a superseded card (never indexed, never recalled)."""
    return CardDraft(
        tenant_id=old.tenant_id, user_id=old.user_id, project_id=old.project_id,
        canonical_key=f"history:{old.memory_id}:v{old.version}",
        memory_type=old.memory_type, title=old.title, summary=old.summary[:2000],
        content=old.content, entities=old.entities[:64], tags=old.tags[:32],
        source_type="superseded_statement", source_message_ids=old.source_message_ids[:512],
        fingerprint=old.fingerprint, importance=old.importance, confidence=old.confidence,
        status=CardStatus.SUPERSEDED,
    )  # fmt: skip


def _session_context(
    lc: Lifecycle, user_id: str, session_id: str, tenant_id: str | None
) -> dict[str, tuple[str, str]]:
    if lc.transcript is None:
        return {}
    try:
        records = list(
            lc.transcript.read_session(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        )
    except NotFound:
        return {}
    return message_context(records)


def write_episodes(
    lc: Lifecycle,
    items: Sequence[MemoryItem],
    *,
    user_id: str,
    session_id: str,
    tenant_id: str | None,
    now: float,
) -> list[str]:
    """Episode cards for the session's episodic statements, with their audit rows."""
    chosen = [i for i in items if i.subtype in lc.settings.promotion.episode_subtypes]
    if not chosen:
        return []
    tenant = lc.tenant(tenant_id)
    context = _session_context(lc, user_id, session_id, tenant_id)
    drafts = [
        episode_draft(i, tenant=tenant, session_id=session_id, context=context) for i in chosen
    ]
    with pg_errors("episode cards"), lc.engine.begin() as conn:
        ids = [card_id(d.tenant_id, d.user_id, d.canonical_key) for d in drafts]
        before = lc.ledger.cards(ids, conn=conn)
        # a statement a merged card holds stays hidden behind it (the next consolidation
        # run rewrites the merged card from it), or recall would show it twice
        held = absorbed_in(conn, tenant, user_id)
        drafts = [
            d.model_copy(update={"status": CardStatus.SUPERSEDED})
            if mid in held and mid in before and before[mid].status is CardStatus.SUPERSEDED
            else d
            for mid, d in zip(ids, drafts, strict=True)
        ]
        history = [
            (mid, history_draft(before[mid]))
            for mid, d in zip(ids, drafts, strict=True)
            if mid in before and superseded_by(before[mid], d, merged=mid in held)
        ]
        for _mid, h in history:
            lc.ledger.write(h, now=now, conn=conn)
        results = [lc.ledger.write(d, now=now, conn=conn) for d in drafts]
        record(conn, [
            AuditEvent(Action.SUPERSEDE, tenant, user_id, mid,
                       "a newer statement of the same fact replaced this card's text", now,
                       (), {"previous": card_id(h.tenant_id, h.user_id, h.canonical_key),
                            "session_id": session_id})
            for mid, h in history
        ])  # fmt: skip
        events = [
            AuditEvent(
                action=Action.PROMOTE_CARD,
                tenant_id=tenant,
                user_id=user_id,
                target=r.memory_id,
                reason="episode: statement kept when its session ended",
                at=now,
                memory_ids=(i.id,),
                inputs={"session_id": session_id, "op": r.op},
            )
            for r, i in zip(results, chosen, strict=True)
        ]
        record(conn, events)
    ids = [r.memory_id for r in results if r.op != "unchanged"]
    if ids:
        lc.on_cards(ids)
    return [r.memory_id for r in results]
