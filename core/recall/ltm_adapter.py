"""The LTM port of recall, implemented on core.ltm: search, then card details from the ledger.

Search returns ranked card ids with similarity; the pool also needs each card's canonical
key, type, entities and provenance, which live in the ledger (PostgreSQL), so one batched
ledger read follows the search.  The tenant/user/project filter is built from the
authority layer's :class:`RetrievalFilters`, never from the query text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from memstrata.core.authority.filters import RetrievalFilters
from memstrata.core.errors import TransientError
from memstrata.core.extract.lexicon import default_lexicon
from memstrata.core.extract.rules import says_nothing_of_its_own
from memstrata.core.ltm.asof import version_at
from memstrata.core.ltm.card import CONSOLIDATED, CardStatus, LtmCard, focus
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.history import HISTORY_TYPE, HistoryIndex
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.policy import SearchMode
from memstrata.core.ltm.search import LtmSearch
from memstrata.core.ltm.views import focused, view_sources
from memstrata.core.models.identity import memory_key, text_fingerprint
from memstrata.core.recall.pool import PoolCandidate, SourceType
from memstrata.core.recall.route import LtmMode
from memstrata.core.recall.text import query_terms, snippet
from memstrata.core.redact import redact

log = logging.getLogger(__name__)

_MODES = {LtmMode.LEXICAL: SearchMode.LEXICAL, LtmMode.VECTOR: SearchMode.VECTOR,
          LtmMode.HYBRID: SearchMode.HYBRID}  # fmt: skip


Curated = Callable[[str, str, Sequence[str]], set[str]]
"""(tenant, user, message ids) → the ids an active curated card holds."""

HISTORY_SNIPPET_CHARS = 300
"""What recall injects of one raw message at most: the sentences around the one the query
matched best (``core.recall.text.snippet``), about 75 tokens; the message id still points
to the whole message in L0."""

RANK_SCALE = 10.0
UNJUDGED_IMPORTANCE = 0.3
"""A raw message was never judged: it gets the prior of a fact of unknown value (the write
policy's type prior), not zero, which would rank every raw message below every card."""


@lru_cache(maxsize=4096)
def _says_nothing(text: str) -> bool:
    """:func:`~core.extract.rules.says_nothing_of_its_own` with the default lexicon;
    cached, as a user's recalls meet the same raw messages again (~25 µs a message)."""
    return says_nothing_of_its_own(text, default_lexicon())


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


MergedSources = Callable[[str, str, Sequence[str]], Mapping[str, Sequence[str]]]
"""(tenant, user, merged card ids) → each merged card's source card ids (a retracted
source left out): what a consolidation hid behind each (``core.lifecycle.consolidate``)."""


def _rewritten_merge(card: LtmCard, at: float) -> bool:
    return card.memory_type == CONSOLIDATED and card.updated_at > at


class LedgerBackedSearcher:
    """``LtmSearcher`` for recall: ``LtmSearch`` ranks, the ``Ledger`` supplies the details."""

    def __init__(
        self, search: LtmSearch, ledger: Ledger, *, merged_sources: MergedSources | None = None
    ) -> None:
        self.search_service = search
        self.ledger = ledger
        self.merged_sources = merged_sources

    def search(
        self, *, query: str, mode: LtmMode, filters: RetrievalFilters, k: int,
        as_of: float | None = None,
    ) -> list[PoolCandidate]:  # fmt: skip
        """Up to ``k`` cards, best first; with ``as_of``, as they read at that moment."""
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
        # a card deleted since it was indexed is absent, or a tombstone a late index row
        # still finds until the purge (core/ltm/rows.py): the ledger is the truth
        found = [(n, cards[r.memory_id]) for n, r in enumerate(ranked) if r.memory_id in cards]
        if as_of is not None:
            found = self._as_of(found, filters, as_of)
        else:
            found = [(n, c) for n, c in found if c.status is CardStatus.ACTIVE]
        # a view (an entity card) is a way to its cards: the ones the query is about take
        # its rank, each as the memory it is (found again later, it is not repeated)
        views = [card for _, card in found if card.source_card_ids]
        sources = self.ledger.cards(view_sources(views)) if views else {}
        out: list[PoolCandidate] = []
        seen: set[str] = set()
        for rank, card in found:
            for member in focused(card, sources, query) if card.source_card_ids else [card]:
                if member.memory_id not in seen:
                    seen.add(member.memory_id)
                    out.append(self._candidate(rank, member, query))
        return out

    def _as_of(
        self, found: list[tuple[int, LtmCard]], filters: RetrievalFilters, at: float
    ) -> list[tuple[int, LtmCard]]:
        """The cards found, as they read at ``at`` (``core.ltm.asof``).  A merged card
        rewritten since then stands for its sources, each as it read then, at its rank;
        without a ``merged_sources`` reader it is left out (what it held then is unknown)."""
        tenant, user = filters.tenant_id, filters.user_id
        # a view names cards as they are now: left out, its cards answer as of then
        found = [(n, c) for n, c in found if not c.source_card_ids]
        newer = {c.memory_id for _, c in found if _rewritten_merge(c, at)}
        held: dict[str, Sequence[str]] = {}
        if newer and self.merged_sources is not None:
            held = dict(self.merged_sources(tenant, user, sorted(newer)))
        sources = self.ledger.cards([s for m in newer for s in held.get(m, ())])
        expanded: list[tuple[int, LtmCard]] = []
        for rank, card in found:
            if card.memory_id not in newer:
                expanded.append((rank, card))
                continue
            for s in held.get(card.memory_id, ()):
                src = sources.get(s)
                if src is not None and (src.tenant_id, src.user_id) == (tenant, user):
                    expanded.append((rank, src))
        replaced = self.ledger.replaced_versions(tenant, user, [c.memory_id for _, c in expanded])
        out: list[tuple[int, LtmCard]] = []
        seen: set[str] = set()
        for rank, card in expanded:
            then = version_at(card, replaced.get(card.memory_id, ()), at)
            if then is not None and then.memory_id not in seen:
                seen.add(then.memory_id)
                out.append((rank, then))
        return out

    @staticmethod
    def _candidate(rank: int, card: LtmCard, query: str) -> PoolCandidate:
        text = card.summary or card.title
        message_ids = tuple(card.source_message_ids)
        said_at = card.occurred_at
        if card.memory_type == CONSOLIDATED:  # a merged card: the members asked for
            focused = focus(card.content, query)
            if focused is not None:
                text, message_ids = focused
        return PoolCandidate(
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
            said_at=said_at,
        )


class HistoryBackedSearcher:
    """``HistorySearcher`` for recall over the raw-history index: one candidate per message.

    ``curated`` (the ledger's :meth:`~core.ltm.ledger.Ledger.curated`) says which hits a
    curated card holds; the others are marked ``uncurated`` for the pool's fusion.
    """

    def __init__(
        self,
        index: HistoryIndex,
        *,
        curated: Curated | None = None,
        snippet_chars: int = HISTORY_SNIPPET_CHARS,
    ) -> None:
        self.index = index
        self.curated = curated
        self.snippet_chars = snippet_chars

    def search(
        self, *, query: str, tenant_id: str, user_id: str, k: int, now: float,
        as_of: float | None = None,
    ) -> list[PoolCandidate]:  # fmt: skip
        hits = self.index.search(
            query, tenant_id=tenant_id, user_id=user_id, k=k, now=now, as_of=as_of
        )
        held = self._held(tenant_id, user_id, [h.message_id for h in hits])
        asked = query_terms(query)
        return [
            PoolCandidate(
                memory_id=h.record_id,
                source_type=SourceType.RAW_HISTORY,
                summary=snippet(h.text, asked, self.snippet_chars),
                canonical_fact_key=f"raw:{h.message_id}",
                fingerprint=text_fingerprint(user_id, h.text),
                memory_type=HISTORY_TYPE,
                similarity=rank_similarity(rank),
                layer_rank=rank,
                importance=UNJUDGED_IMPORTANCE,
                updated_at=h.at,
                message_ids=(h.message_id,),
                tenant_id=tenant_id,
                said_at=h.at,
                # a message the write path judged empty (reactions, questions about the
                # listener) lacks no card: it gets no stand-in vote for the curated layer
                uncurated=held is not None
                and h.message_id not in held
                and not _says_nothing(h.text),
            )
            for rank, h in enumerate(hits)
        ]

    def _held(self, tenant_id: str, user_id: str, message_ids: list[str]) -> set[str] | None:
        """The curated ones of ``message_ids``; None when unknown: the ledger lives in
        PostgreSQL, and the raw-history floor must answer while PostgreSQL is down (its
        hits are then ranked as curated ones, without a stand-in vote)."""
        if self.curated is None or not message_ids:
            return None
        try:
            return self.curated(tenant_id, user_id, message_ids)
        except TransientError as exc:
            why = redact(str(exc))
            log.warning("raw-history hits not checked against the card ledger: %s", why)
            return None
