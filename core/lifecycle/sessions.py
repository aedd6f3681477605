"""Session start and end (seed 2 四): preload related LTM into STM; finalise into LTM.

* :func:`preload`: when a session starts, the cards most related to its first query
  (plus the user's last session summary) are written into the new session's STM as
  ``ltm_preload`` items with a short TTL.  The policy never promotes them back.
* :func:`finalise`: when a session ends (explicitly, or idle for ``session_idle_s``,
  found by :func:`idle_sessions`), its items get a last promotion pass, a session
  summary card is written to LTM (only items fit to leave STM: no next steps, guesses,
  tool output or wording of the moment, per seed 1 十四), and the session's STM is
  cleaned: its index and the items that belonged to it alone.  User-level items
  (preferences, items seen in other sessions) stay until their own TTL.
* Episodes: each statement a participant made about their life (extractor subtype
  ``conversation_fact``, policy route ``episode``) becomes one LTM card when its session
  ends, with the messages around it (read back from L0) as indexed context, so "yes, in
  May" is found by what it answered.  One card per statement, keyed by its canonical
  key: finalising twice, or the same statement in two sessions, updates one card.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import or_, select

from core.adapters.pg import pg_errors
from core.compress.cache import SessionActivity
from core.errors import NotFound
from core.keys import parse_user_scope, user_scope
from core.lifecycle.audit import Action, AuditEvent, record
from core.lifecycle.generality import assess
from core.lifecycle.runtime import Lifecycle
from core.lifecycle.scan import scan_user
from core.ltm.card import CardDraft, CardStatus, LtmCard
from core.ltm.tables import cards
from core.models.identity import EPISODE, card_key
from core.models.memory import MemoryItem, MemorySource, MemoryType
from core.models.transcript import Role, TranscriptRecord

SESSION_SUMMARY = "session_summary"
_TERMS = re.compile(r"[\w\-]{2,}|[\u4e00-\u9fff]{2,}")
_STOP = frozenset(
    (
        "the", "a", "an", "and", "or", "of", "to", "in", "on", "at", "for", "with", "from", "by",
        "is", "are", "was", "were", "be", "it", "this", "that", "these", "those", "what", "why",
        "how", "when", "where", "which", "who", "can", "could", "should", "would", "do", "does",
        "did", "not", "no", "my", "your", "our", "we", "you", "i", "me", "please", "about", "into",
        "just",
    )
)  # fmt: skip


class CardFinder(Protocol):
    def related(self, *, tenant_id: str, user_id: str, query: str, limit: int) -> list[LtmCard]:
        """Active cards of one user most related to ``query``, best first."""
        ...


class LedgerFinder:
    """Term overlap on the ledger's ``bm25_text``: needs no index, so preload works while
    Milvus is down (any other :class:`CardFinder` can be passed to :func:`preload`)."""

    def __init__(self, lc: Lifecycle) -> None:
        self.lc = lc

    def related(self, *, tenant_id: str, user_id: str, query: str, limit: int) -> list[LtmCard]:
        words = (t.casefold() for t in _TERMS.findall(query))
        terms = list(dict.fromkeys(t for t in words if t not in _STOP))[:8]
        if not terms or limit <= 0:
            return []
        stmt = (
            select(cards.c.memory_id, cards.c.bm25_text)
            .where(cards.c.tenant_id == tenant_id, cards.c.user_id == user_id,
                   cards.c.status == CardStatus.ACTIVE.value,
                   cards.c.memory_type != SESSION_SUMMARY,
                   or_(*[cards.c.bm25_text.ilike(f"%{t}%") for t in terms]))
            .order_by(cards.c.importance.desc(), cards.c.updated_at.desc())
            .limit(limit * 4)
        )  # fmt: skip
        with pg_errors("find related cards"), self.lc.engine.connect() as conn:
            rows = conn.execute(stmt).all()
            ranked = sorted(rows, key=lambda r: -sum(t in r.bm25_text.casefold() for t in terms))
            ids = [r.memory_id for r in ranked[:limit]]
            found = self.lc.ledger.cards(ids, conn=conn)
        return [found[i] for i in ids if i in found]


def last_session_summary(lc: Lifecycle, *, tenant_id: str, user_id: str) -> LtmCard | None:
    stmt = (
        select(cards.c.memory_id)
        .where(cards.c.tenant_id == tenant_id, cards.c.user_id == user_id,
               cards.c.status == CardStatus.ACTIVE.value,
               cards.c.memory_type == SESSION_SUMMARY)
        .order_by(cards.c.updated_at.desc())
        .limit(1)
    )  # fmt: skip
    with pg_errors("last session summary"), lc.engine.connect() as conn:
        mid = conn.execute(stmt).scalar_one_or_none()
        return lc.ledger.cards([mid], conn=conn).get(mid) if mid else None


def _preload_item(
    lc: Lifecycle, card: LtmCard, *, user_id: str, tenant_id: str | None, session_id: str,
    now: float,
) -> MemoryItem:  # fmt: skip
    scope = user_scope(user_id, tenant_id)
    mid = "m_" + hashlib.sha1(f"{scope}|ltm:{card.memory_id}".encode()).hexdigest()[:20]
    fp = hashlib.sha1(f"{card.memory_id}|{card.version}".encode()).hexdigest()[:16]
    summary = card.summary[: lc.stm.max_summary_chars]
    return MemoryItem(
        id=mid, user_id=user_id, tenant_id=tenant_id, session_id=session_id,
        memory_type=MemoryType.FACT, subtype="ltm_preload", summary=summary,
        detail={"card_id": card.memory_id, "title": card.title[:200],
                "card_type": card.memory_type},
        entities=card.entities[:16], tags=["ltm_preload"],
        source=MemorySource(kind="ltm"), confidence=card.confidence,
        importance=card.importance, created_at=now, updated_at=now, last_access_at=now,
        expires_at=now + lc.settings.preload_ttl_s, fingerprint=fp,
        canonical_fact_key=f"ltm:{card.memory_id}", seen_sessions=[session_id],
    )  # fmt: skip


def preload(
    lc: Lifecycle, *, user_id: str, session_id: str, query: str, now: float,
    tenant_id: str | None = None, finder: CardFinder | None = None,
) -> list[str]:  # fmt: skip
    """Warm a new session's STM with related cards; returns the card ids preloaded."""
    tenant = lc.tenant(tenant_id)
    found = (finder or LedgerFinder(lc)).related(
        tenant_id=tenant, user_id=user_id, query=query, limit=lc.settings.preload_limit
    )
    last = last_session_summary(lc, tenant_id=tenant, user_id=user_id)
    chosen = list({c.memory_id: c for c in ([last] if last else []) + found}.values())
    if not chosen:
        return []
    items = [_preload_item(lc, c, user_id=user_id, tenant_id=tenant_id, session_id=session_id,
                           now=now) for c in chosen]  # fmt: skip
    lc.stm.upsert_many(items)
    ids = tuple(c.memory_id for c in chosen)
    lc.audit.write([AuditEvent(Action.PRELOAD, tenant, user_id, f"session:{session_id}",
                               f"{len(ids)} related cards preloaded", now, ids,
                               {"query": query[:400]})])  # fmt: skip
    return list(ids)


def _summary_worthy(item: MemoryItem, never: frozenset[str], never_types: frozenset[str]) -> bool:
    if item.subtype in never or item.memory_type.value in never_types:
        return False
    return not assess(item.summary).is_local


def _clip_joined(parts: Sequence[str], limit: int) -> str:
    """``"; "``-joined parts, whole parts only while they fit (at least the first, cut)."""
    out: list[str] = []
    used = 0
    for p in parts:
        extra = len(p) + (2 if out else 0)
        if out and used + extra > limit:
            break
        out.append(p)
        used += extra
    return "; ".join(out)[:limit]


@dataclass(frozen=True)
class Finalised:
    session_id: str
    card_id: str | None
    items: int
    deleted: int
    episodes: tuple[str, ...] = ()


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
        tenant_id=tenant, user_id=item.user_id,
        canonical_key=card_key(EPISODE, item.canonical_fact_key), memory_type=EPISODE,
        fingerprint=item.fingerprint,
        title=item.summary[:80], summary=item.summary[:2000],
        content="\n".join(t for t in (before, after) if t),
        entities=[e[:128] for e in item.entities[:64]],
        tags=[EPISODE, f"session:{session_id}"[:64]], source_type="session_episode",
        source_message_ids=[m[:128] for m in mids[:64]],
        importance=item.importance, confidence=item.confidence,
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
    lc: Lifecycle, items: Sequence[MemoryItem], *, user_id: str, session_id: str,
    tenant_id: str | None, now: float,
) -> list[str]:  # fmt: skip
    """Episode cards for the session's episodic statements, with their audit rows."""
    chosen = [i for i in items if i.subtype in lc.settings.promotion.episode_subtypes]
    if not chosen:
        return []
    tenant = lc.tenant(tenant_id)
    context = _session_context(lc, user_id, session_id, tenant_id)
    drafts = [episode_draft(i, tenant=tenant, session_id=session_id, context=context)
              for i in chosen]  # fmt: skip
    with pg_errors("episode cards"), lc.engine.begin() as conn:
        results = [lc.ledger.write(d, now=now, conn=conn) for d in drafts]
        record(conn, [AuditEvent(Action.PROMOTE_CARD, tenant, user_id, r.memory_id,
                                 "episode: statement kept when its session ended", now, (i.id,),
                                 {"session_id": session_id, "op": r.op})
                      for r, i in zip(results, chosen, strict=True)])  # fmt: skip
    ids = [r.memory_id for r in results if r.op != "unchanged"]
    if ids:
        lc.on_cards(ids)
    return [r.memory_id for r in results]


def finalise(
    lc: Lifecycle, *, user_id: str, session_id: str, now: float, tenant_id: str | None = None,
    reason: str = "ended",
) -> Finalised:  # fmt: skip
    """End a session: last promotion pass, summary card, STM cleaned (idempotent)."""
    scan_user(lc, user_id, tenant_id=tenant_id, now=now)
    ids = lc.stm.session_members(user_id, session_id, tenant_id=tenant_id)
    last_at = _activity(lc).last_activity(user_id, session_id, tenant_id=tenant_id)
    items = [i for i in lc.stm.get_many(user_id, ids, now=now, tenant_id=tenant_id)]
    pol = lc.settings.promotion
    worthy = [i for i in items if _summary_worthy(i, pol.never_subtypes, pol.never_types)]
    worthy = sorted(worthy, key=lambda i: -i.importance)[: lc.settings.session_summary_items]
    tenant = lc.tenant(tenant_id)
    episodes = write_episodes(lc, items, user_id=user_id, session_id=session_id,
                              tenant_id=tenant_id, now=now)  # fmt: skip
    card_id = None
    if worthy:
        draft = CardDraft(
            tenant_id=tenant, user_id=user_id, canonical_key=f"session:{session_id}",
            memory_type=SESSION_SUMMARY, title=f"Session {session_id}"[:256],
            summary=_clip_joined([i.summary for i in worthy], lc.settings.session_summary_chars),
            content="\n".join(f"- [{i.memory_type.value}/{i.subtype}] {i.summary} "
                              f"(stm {i.id}; messages {', '.join(i.source.message_ids[:8])})"
                              for i in worthy)[: lc.ledger.max_content_chars],
            entities=list(dict.fromkeys(e[:128] for i in worthy for e in i.entities))[:64],
            tags=["session", f"session:{session_id}"[:64]], source_type="session_summary",
            importance=0.8,  # seed 2: finalizeSession persists the summary at 0.8
        )  # fmt: skip
        with pg_errors("finalise session"), lc.engine.begin() as conn:
            res = lc.ledger.write(draft, now=now, conn=conn)
            record(conn, [AuditEvent(Action.FINALISE, tenant, user_id, res.memory_id, reason,
                                     now, tuple(i.id for i in worthy),
                                     {"session_id": session_id, "items": len(items)})])  # fmt: skip
        card_id = res.memory_id
        lc.on_cards([card_id])
    local = [i.id for i in items
             if not i.canonical_fact_key.startswith("user:")
             and set(i.seen_sessions) <= {session_id}]  # fmt: skip
    expired_or_gone = sorted(set(ids) - {i.id for i in items})
    deleted = lc.stm.delete(user_id, local + expired_or_gone, tenant_id=tenant_id)
    lc.stm.drop_session(user_id, session_id, tenant_id=tenant_id)
    activity_at = str(last_at or now)
    lc.store.mark_finalised(user_id, session_id, tenant_id=tenant_id, activity_at=activity_at)
    return Finalised(session_id, card_id, len(items), deleted, tuple(episodes))


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
    """Finalise idle sessions, at most ``limit`` and for about ``max_s`` seconds."""
    t0 = time.monotonic()
    out = []
    for user_id, tenant_id, sid in idle_sessions(lc, now=now, idle_s=lc.settings.session_idle_s,
                                                 limit=limit):  # fmt: skip
        out.append(finalise(lc, user_id=user_id, session_id=sid, now=now, tenant_id=tenant_id,
                            reason="idle"))  # fmt: skip
        if time.monotonic() - t0 >= max_s:
            break
    return out
