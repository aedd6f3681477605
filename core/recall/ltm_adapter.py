"""The LTM port of recall, implemented on core.ltm: search, then card details from the ledger.

Search returns ranked card ids with similarity; the pool also needs each card's canonical
key, type, entities and provenance, which live in the ledger (PostgreSQL), so one batched
ledger read follows the search.  The tenant/user/project filter is built from the
authority layer's :class:`RetrievalFilters`, never from the query text.
"""

from __future__ import annotations

import time

from memstrata.core.authority.filters import RetrievalFilters
from memstrata.core.ltm.card import CONSOLIDATED, focus
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.history import HISTORY_TYPE, HistoryIndex
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.policy import SearchMode
from memstrata.core.ltm.search import LtmSearch
from memstrata.core.models.identity import memory_key, text_fingerprint
from memstrata.core.recall.pool import PoolCandidate, SourceType
from memstrata.core.recall.route import LtmMode

_MODES = {LtmMode.LEXICAL: SearchMode.LEXICAL, LtmMode.VECTOR: SearchMode.VECTOR,
          LtmMode.HYBRID: SearchMode.HYBRID}  # fmt: skip


RANK_SCALE = 10.0
UNJUDGED_IMPORTANCE = 0.3
"""A raw message was never judged: it gets the prior of a fact of unknown value (the write
policy's type prior), not zero, which would rank every raw message below every card."""


def rank_similarity(rank: int) -> float:
    """The pool's similarity of a layer's ``rank``-th result (0-based): 1, 0.91, 0.83 … 0.5 at 10.

    Each layer ranks by its own scale (fused reciprocal ranks, term coverage), and fused
    reciprocal ranks are nearly flat (the top ten within a few percent of each other), so
    the pool would rank by importance and recency instead of by relevance.  The layer's
    order is its judgement of relevance: the pool keeps it and blends the rest on top.
    """
    return 1.0 / (1.0 + rank / RANK_SCALE)


def card_filter(filters: RetrievalFilters) -> CardFilter:
    """The user's own cards in their tenant, within the current project when there is one."""
    return CardFilter(
        tenant_id=filters.tenant_id, user_id=filters.user_id, project_id=filters.project_id
    )


class LedgerBackedSearcher:
    """``LtmSearcher`` for recall: ``LtmSearch`` ranks, the ``Ledger`` supplies the details."""

    def __init__(self, search: LtmSearch, ledger: Ledger) -> None:
        self.search_service = search
        self.ledger = ledger

    def search(
        self, *, query: str, mode: LtmMode, filters: RetrievalFilters, k: int
    ) -> list[PoolCandidate]:
        base = self.search_service.policy
        policy = base.model_copy(
            update={"top_k": max(base.top_k, k), "candidates": max(base.candidates, k)}
        )
        ranked = self.search_service.search(
            query, card_filter(filters), mode=_MODES[mode], policy=policy, now=time.time()
        )[:k]
        # relevance order: the pool blends importance and recency itself, once
        ranked = sorted(ranked, key=lambda r: (-r.similarity, r.memory_id))
        cards = self.ledger.cards([r.memory_id for r in ranked])
        out = []
        for rank, r in enumerate(ranked):
            card = cards.get(r.memory_id)
            if card is None:  # deleted since it was indexed: the ledger is the truth
                continue
            text = card.summary or card.title
            message_ids = tuple(card.source_message_ids)
            if card.memory_type == CONSOLIDATED:  # a merged card: the members asked for
                focused = focus(card.content, query)
                if focused is not None:
                    text, message_ids = focused
            out.append(
                PoolCandidate(
                    memory_id=card.memory_id,
                    source_type=SourceType.LTM,
                    summary=text,
                    # one memory, one identity: a promoted card carries its item's key and
                    # fingerprint, so the pool knows it for the item's copy (DESIGN §5)
                    canonical_fact_key=memory_key(card.canonical_key),
                    fingerprint=card.fingerprint or text_fingerprint(card.user_id, text),
                    memory_type=card.memory_type,
                    similarity=rank_similarity(rank),
                    layer_rank=rank,
                    importance=card.importance,
                    updated_at=card.updated_at,
                    entities=tuple(card.entities),
                    message_ids=message_ids,
                    tenant_id=card.tenant_id,
                    project_id=card.project_id,
                )
            )
        return out


class HistoryBackedSearcher:
    """``HistorySearcher`` for recall over the raw-history index: one candidate per message."""

    def __init__(self, index: HistoryIndex) -> None:
        self.index = index

    def search(
        self, *, query: str, tenant_id: str, user_id: str, k: int, now: float
    ) -> list[PoolCandidate]:
        hits = self.index.search(query, tenant_id=tenant_id, user_id=user_id, k=k, now=now)
        return [
            PoolCandidate(
                memory_id=h.record_id,
                source_type=SourceType.RAW_HISTORY,
                summary=h.text,
                canonical_fact_key=f"raw:{h.message_id}",
                fingerprint=text_fingerprint(user_id, h.text),
                memory_type=HISTORY_TYPE,
                similarity=rank_similarity(rank),
                layer_rank=rank,
                importance=UNJUDGED_IMPORTANCE,
                updated_at=h.at,
                message_ids=(h.message_id,),
                tenant_id=tenant_id,
            )
            for rank, h in enumerate(hits)
        ]
