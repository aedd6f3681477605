"""Episode cards (seed 2 四): what a participant said about their life, kept at session end.

Each statement a participant made about their life (extractor subtype
``conversation_fact``, policy route ``episode``) becomes one LTM card when its session
ends.  The card holds the statement only; the messages around it are read back from L0
each time the card is projected (:class:`EpisodeContext`, an ``IndexContext``) and
indexed with it, never stored on it, so "yes, in May" is found by what it answered while
the memory stays the statement (the neighbours are L0's text: a card that copied them
held about twice the words of the conversation it came from, LoCoMo memory ratio 0.24).
One card per statement, keyed by its canonical key:
finalising twice, or the same statement in two sessions, updates one card.  A newer
statement of the same canonical fact (the key masks digits: "I have 2 cats" → "… 3 cats")
replaces the card's text; the older text is kept as a superseded history card, audited
(``Action.SUPERSEDE``), so recall returns the current statement and the past stays.  The
session summaries that stated the older text (an earlier session's "I have 2 horses")
lose that statement the same way (:func:`without_statements`; their previous text kept as
history), or a current recall would show both.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Connection

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.errors import CorruptRecord, InvalidId, NotFound
from memstrata.core.lifecycle.audit import Action, AuditEvent, record
from memstrata.core.lifecycle.consolidate import absorbed_in
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.asof import HISTORY_SOURCE, history_prefix
from memstrata.core.ltm.card import CardDraft, CardStatus, LtmCard, card_id
from memstrata.core.ltm.ports import ContextRead
from memstrata.core.models.identity import EPISODE, SESSION_TAG, card_key
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import Role, TranscriptRecord
from memstrata.core.transcript.store import TranscriptStore

log = logging.getLogger(__name__)

CONTEXT_CHARS = 300
EPISODE_SOURCE = "session_episode"
SESSION_SUMMARY = "session_summary"
SUMMARY_JOIN = "; "  # between a session summary's statements (core.lifecycle.finalise)
MAX_TAG = 64


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


def session_tag(session_id: str) -> str:
    """The ``session:`` tag of a card a session wrote (cut to a tag's 64 characters)."""
    return f"{SESSION_TAG}{session_id}"[:MAX_TAG]


def exchange_of(message_ids: Sequence[str], context: Mapping[str, tuple[str, str]]) -> str:
    """The indexed context of a statement: the message its first source message answers
    and the one answering its last, from :func:`message_context` ("" when none)."""
    before = next((context[m][0] for m in message_ids if m in context), "")
    after = next((context[m][1] for m in reversed(message_ids) if m in context), "")
    return "\n".join(t for t in (before, after) if t)


def episode_draft(item: MemoryItem, *, tenant: str, session_id: str) -> CardDraft:
    """One statement → its episode card: the statement alone (the neighbours are added
    at index time by :class:`EpisodeContext`, never stored, never rendered).

    The title is the statement's head, not the speaker: a constant word on every card of
    one author (an archive's "archive") pulls all their vectors together (MADial-Bench
    Recall@5 0.50 → 0.54; LoCoMo unchanged, the speaker is in the summary and entities)."""
    mids = list(item.source.message_ids)
    return CardDraft(
        tenant_id=tenant,
        user_id=item.user_id,
        canonical_key=card_key(EPISODE, item.canonical_fact_key),
        memory_type=EPISODE,
        fingerprint=item.fingerprint,
        title=item.summary[:80],
        summary=item.summary[:2000],
        entities=[e[:128] for e in item.entities[:64]],
        tags=[EPISODE, session_tag(session_id)],
        source_type=EPISODE_SOURCE,
        source_message_ids=[m[:128] for m in mids[:64]],
        # when the statement of this text was (last) said: the line's date; an item's
        # updated_at is its latest mention's turn time (a newer text of the fact: its own)
        occurred_at=item.updated_at,
        importance=item.importance,
        confidence=item.confidence,
    )


def superseded_by(old: LtmCard, new: CardDraft, *, merged: bool = False) -> bool:
    """The live card's statement is replaced by a different one of the same fact (a card
    a merge hid is live too: the merged card holds it)."""
    live = old.status is CardStatus.ACTIVE or (merged and old.status is CardStatus.SUPERSEDED)
    return live and old.summary != new.summary


def without_statements(summary: str, statements: Iterable[str]) -> str:
    """``summary`` (statements joined by :data:`SUMMARY_JOIN`) without each of
    ``statements`` where it stands whole between separators; "" when none is left."""
    text = f"{SUMMARY_JOIN}{summary}{SUMMARY_JOIN}"
    for stated in statements:
        whole = f"{SUMMARY_JOIN}{stated}{SUMMARY_JOIN}"
        while stated and whole in text:
            text = text.replace(whole, SUMMARY_JOIN)
    return text[len(SUMMARY_JOIN) : -len(SUMMARY_JOIN)] if len(text) > 2 * len(SUMMARY_JOIN) else ""


def draft_of(card: LtmCard, **changes: object) -> CardDraft:
    """The draft that writes ``card`` again, with ``changes``."""
    return CardDraft.model_validate(card.model_dump(include=set(CardDraft.model_fields)) | changes)


def history_draft(old: LtmCard) -> CardDraft:
    """The replaced statement, kept as a superseded card: never indexed; recall reads it
    only for a moment before its replacement (``RecallRequest.as_of``, ``core.ltm.asof``)."""
    return draft_of(
        old, canonical_key=f"{history_prefix(old.memory_id)}{old.version}",
        source_type=HISTORY_SOURCE, status=CardStatus.SUPERSEDED, summary=old.summary[:2000],
        entities=old.entities[:64], tags=old.tags[:32],
        source_message_ids=old.source_message_ids[:512],
    )  # fmt: skip


class EpisodeContext:
    """The ``IndexContext`` of episode cards: each statement's exchange (:func:`exchange_of`),
    read from L0 when the card is projected, one session file per session.

    The session is the card's ``session:`` tag.  A tag cut at 64 characters (a session id
    over 56) stands for every owner session that starts with it: their messages are
    looked up together (message ids are unique).  A session file that is gone (the owner
    or session erased), an id that is not valid or a damaged file: no context for those
    cards (their own text is still indexed).  An I/O error, or an L0 root that is not
    there at all (a volume not mounted), makes the session's cards ``unread``: the
    projector leaves them pending and retries them later."""

    def __init__(self, transcript: TranscriptStore) -> None:
        self.transcript = transcript

    def __call__(self, cards: Sequence[LtmCard]) -> ContextRead:
        sessions: dict[tuple[str, str, str], list[LtmCard]] = {}
        for c in cards:
            tag = next((t for t in c.tags if t.startswith(SESSION_TAG)), "")
            if c.source_type == EPISODE_SOURCE and len(tag) > len(SESSION_TAG):
                sessions.setdefault((c.tenant_id, c.user_id, tag), []).append(c)
        texts: dict[str, str] = {}
        unread: dict[str, str] = {}
        if sessions and not self.transcript.root.is_dir():
            why = f"L0 root {self.transcript.root} is not there (a volume not mounted?)"
            return ContextRead({}, {c.memory_id: why for m in sessions.values() for c in m})
        for (tenant, user, tag), members in sessions.items():
            try:
                context = self._read(tenant, user, tag.removeprefix(SESSION_TAG),
                                     cut=len(tag) == MAX_TAG)  # fmt: skip
            except OSError as exc:
                unread |= dict.fromkeys((c.memory_id for c in members), f"L0: {exc}")
                continue
            for c in members:
                if text := exchange_of(c.source_message_ids, context):
                    texts[c.memory_id] = text
        return ContextRead(texts, unread)

    def _read(
        self, tenant: str, user: str, session: str, *, cut: bool
    ) -> dict[str, tuple[str, str]]:
        """message id → its exchange, over the session (every session a cut tag may
        stand for); what cannot be found or parsed adds nothing."""
        names = [session]
        try:
            if cut:  # the tag may hold only the head of the id
                names += [s for s in self.transcript.sessions(user_id=user, tenant_id=tenant)
                          if s.startswith(session) and s != session]  # fmt: skip
        except InvalidId as exc:
            log.info("no episode context for session %r: %s", session[:64], exc)
            return {}
        context: dict[str, tuple[str, str]] = {}
        for name in names:
            try:
                records = list(
                    self.transcript.read_session(user_id=user, session_id=name, tenant_id=tenant)
                )
            except (NotFound, InvalidId, CorruptRecord) as exc:
                log.info("no episode context from session %r: %s", name[:64], exc)
                continue
            context |= message_context(records)
        return context


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
    drafts = [episode_draft(i, tenant=tenant, session_id=session_id) for i in chosen]
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
        summaries = _drop_from_summaries(
            lc, conn, tenant, user_id, [before[mid].summary for mid, _ in history],
            session_id=session_id, now=now,
        )  # fmt: skip
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
    ids = [r.memory_id for r in results if r.op != "unchanged"] + summaries
    if ids:
        lc.on_cards(ids)
    return [r.memory_id for r in results]


def _drop_from_summaries(
    lc: Lifecycle,
    conn: Connection,
    tenant: str,
    user_id: str,
    replaced: Sequence[str],
    *,
    session_id: str,
    now: float,
) -> list[str]:
    """Take the ``replaced`` statements out of the owner's session summaries, in the
    caller's transaction: each summary's previous text kept as its history version
    (``as_of`` reads it), audited; a summary left with nothing is superseded.  Returns
    the ids of the summaries changed."""
    changed: list[str] = []
    events: list[AuditEvent] = []
    for card in lc.ledger.stating(tenant, user_id, replaced, memory_type=SESSION_SUMMARY,
                                  conn=conn):  # fmt: skip
        left = without_statements(card.summary, replaced)
        if left == card.summary:  # the text only occurs inside another statement
            continue
        history = history_draft(card)
        lc.ledger.write(history, now=now, conn=conn)
        if left:
            lc.ledger.write(draft_of(card, summary=left), now=now, conn=conn)
        else:
            lc.ledger.set_status(card.memory_id, CardStatus.SUPERSEDED, now=now, conn=conn)
        changed.append(card.memory_id)
        events.append(AuditEvent(
            Action.SUPERSEDE, tenant, user_id, card.memory_id,
            "a newer statement of the same fact replaced one this summary stated", now, (),
            {"previous": card_id(history.tenant_id, history.user_id, history.canonical_key),
             "session_id": session_id, "emptied": not left},
        ))  # fmt: skip
    record(conn, events)
    return changed
