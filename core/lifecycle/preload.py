"""Session start (seed 2 四): preload related LTM into the new session's STM.

When a session starts, the cards most related to its first query (plus the user's last
session summary) are written into the new session's STM as ``ltm_preload`` items with a
short TTL.  The promotion policy never promotes them back.  The related cards are found
by a :class:`CardFinder`; the default, :class:`LedgerFinder`, needs no index.
"""

from __future__ import annotations

import hashlib
import re
from typing import Protocol

from sqlalchemy import or_, select

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.keys import user_scope
from memstrata.core.lifecycle.audit import Action, AuditEvent
from memstrata.core.lifecycle.episodes import SESSION_SUMMARY
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import CardStatus, LtmCard
from memstrata.core.ltm.tables import cards
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType

_TERMS = re.compile(r"[\w\-]{2,}|[\u4e00-\u9fff]{2,}")
# English function words: never a reason to call two texts related
_STOP_WORDS = (
    "the a an and or of to in on at for with from by is are was were be it this that these "
    "those what why how when where which who can could should would do does did not no my "
    "your our we you i me please about into just"
)
_STOP = frozenset(_STOP_WORDS.split())


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
            .where(
                cards.c.tenant_id == tenant_id,
                cards.c.user_id == user_id,
                cards.c.status == CardStatus.ACTIVE.value,
                cards.c.memory_type != SESSION_SUMMARY,
                or_(*[cards.c.bm25_text.ilike(f"%{t}%") for t in terms]),
            )
            .order_by(cards.c.importance.desc(), cards.c.updated_at.desc())
            .limit(limit * 4)
        )
        with pg_errors("find related cards"), self.lc.engine.connect() as conn:
            rows = conn.execute(stmt).all()
            ranked = sorted(rows, key=lambda r: -sum(t in r.bm25_text.casefold() for t in terms))
            ids = [r.memory_id for r in ranked[:limit]]
            found = self.lc.ledger.cards(ids, conn=conn)
        return [found[i] for i in ids if i in found]


def last_session_summary(lc: Lifecycle, *, tenant_id: str, user_id: str) -> LtmCard | None:
    stmt = (
        select(cards.c.memory_id)
        .where(
            cards.c.tenant_id == tenant_id,
            cards.c.user_id == user_id,
            cards.c.status == CardStatus.ACTIVE.value,
            cards.c.memory_type == SESSION_SUMMARY,
        )
        # the session finalised last: a summary a later statement rewrote is not newer
        .order_by(cards.c.created_at.desc())
        .limit(1)
    )
    with pg_errors("last session summary"), lc.engine.connect() as conn:
        mid = conn.execute(stmt).scalar_one_or_none()
        return lc.ledger.cards([mid], conn=conn).get(mid) if mid else None


def _preload_item(
    lc: Lifecycle,
    card: LtmCard,
    *,
    user_id: str,
    tenant_id: str | None,
    session_id: str,
    now: float,
) -> MemoryItem:
    scope = user_scope(user_id, tenant_id)
    mid = "m_" + hashlib.sha1(f"{scope}|ltm:{card.memory_id}".encode()).hexdigest()[:20]
    fp = hashlib.sha1(f"{card.memory_id}|{card.version}".encode()).hexdigest()[:16]
    summary = card.summary[: lc.stm.max_summary_chars]
    return MemoryItem(
        id=mid,
        user_id=user_id,
        tenant_id=tenant_id,
        session_id=session_id,
        memory_type=MemoryType.FACT,
        subtype="ltm_preload",
        summary=summary,
        detail={
            "card_id": card.memory_id,
            "title": card.title[:200],
            "card_type": card.memory_type,
        },
        entities=card.entities[:16],
        tags=["ltm_preload"],
        source=MemorySource(kind="ltm"),
        confidence=card.confidence,
        importance=card.importance,
        created_at=now,
        updated_at=now,
        last_access_at=now,
        expires_at=now + lc.settings.preload_ttl_s,
        fingerprint=fp,
        canonical_fact_key=f"ltm:{card.memory_id}",
        seen_sessions=[session_id],
    )


def preload(
    lc: Lifecycle,
    *,
    user_id: str,
    session_id: str,
    query: str,
    now: float,
    tenant_id: str | None = None,
    finder: CardFinder | None = None,
) -> list[str]:
    """Warm a new session's STM with related cards; returns the card ids preloaded."""
    tenant = lc.tenant(tenant_id)
    found = (finder or LedgerFinder(lc)).related(
        tenant_id=tenant, user_id=user_id, query=query, limit=lc.settings.preload_limit
    )
    last = last_session_summary(lc, tenant_id=tenant, user_id=user_id)
    chosen = list({c.memory_id: c for c in ([last] if last else []) + found}.values())
    if not chosen:
        return []
    items = [
        _preload_item(lc, c, user_id=user_id, tenant_id=tenant_id, session_id=session_id, now=now)
        for c in chosen
    ]
    lc.stm.upsert_many(items)
    ids = tuple(c.memory_id for c in chosen)
    event = AuditEvent(
        action=Action.PRELOAD,
        tenant_id=tenant,
        user_id=user_id,
        target=f"session:{session_id}",
        reason=f"{len(ids)} related cards preloaded",
        at=now,
        memory_ids=ids,
        inputs={"query": query[:400]},
    )
    lc.audit.write([event])
    return list(ids)
