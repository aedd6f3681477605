"""LTM search (seed 七.4): lexical only, vector only, or hybrid fused by card id, then rerank.

Fusion and rerank are pure functions of (hits, policy, now).  Hybrid uses reciprocal
rank fusion by default (robust to the two indexes' incomparable score scales) or a
weighted sum of max-normalised scores.  The rerank (seed 2 §2.2: 20 candidates, top 5)
blends similarity 0.6 and importance 0.4, plus a recency bonus with a half-life; every
weight lives in :class:`SearchPolicy`.  The caller (the read path) chooses the mode.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.policy import Fusion, SearchMode, SearchPolicy
from memstrata.core.ltm.ports import Hit, LexicalIndex, VectorIndex
from memstrata.core.ltm.text import exact_terms, normalise, query_length

__all__ = ["Fusion", "LtmSearch", "Ranked", "SearchMode", "SearchPolicy", "fuse", "rerank"]


@dataclass(frozen=True)
class Ranked:
    """A reranked card: ``score`` is the final blend, ``similarity`` in [0, 1]."""

    memory_id: str
    score: float
    similarity: float
    importance: float
    updated_at: float
    sources: tuple[str, ...]
    title: str = ""
    summary: str = ""


@dataclass
class _Fused:
    similarity: float
    hit: Hit
    sources: list[str] = field(default_factory=list)


def _max_normalised(hits: Sequence[Hit]) -> dict[str, float]:
    top = max((h.score for h in hits), default=0.0)
    if top <= 0:
        return {h.memory_id: 0.0 for h in hits}
    return {h.memory_id: max(h.score, 0.0) / top for h in hits}


def first_per_card(hits: Sequence[Hit]) -> list[Hit]:
    """One hit per card of one ranked list, at its best row's place and score, with the
    fields (text, importance, time) of its newest row: a versioned index holds an updated
    card's old row beside its new one until the reconciler purges it (``core.ltm.rows``),
    and until then the old words may still find the card, but never show."""
    place: dict[str, int] = {}
    out: list[Hit] = []
    for h in hits:
        i = place.get(h.memory_id)
        if i is None:
            place[h.memory_id] = len(out)
            out.append(h)
        elif h.updated_at > out[i].updated_at:
            out[i] = replace(h, score=out[i].score)
    return out


def fuse(lists: Mapping[str, Sequence[Hit]], policy: SearchPolicy) -> dict[str, _Fused]:
    """Fuse ranked hit lists by memory_id; similarity is scaled to [0, 1]."""
    weights = {"lexical": policy.lexical_weight, "vector": policy.vector_weight}
    fused: dict[str, _Fused] = {}
    for source, ranked in lists.items():
        hits = first_per_card(ranked)
        weight = weights.get(source, 1.0)
        if policy.fusion is Fusion.RRF:
            scores = {h.memory_id: weight / (policy.rrf_k + rank) for rank, h in enumerate(hits, 1)}
        else:
            scores = {k: weight * v for k, v in _max_normalised(hits).items()}
        for hit in hits:
            entry = fused.setdefault(hit.memory_id, _Fused(0.0, hit))
            entry.similarity += scores[hit.memory_id]
            entry.sources.append(source)
            if not entry.hit.title and hit.title:
                entry.hit = hit
    best = max((f.similarity for f in fused.values()), default=0.0)
    if best > 0:
        for entry in fused.values():
            entry.similarity /= best
    return fused


def weights_for(query: str, policy: SearchPolicy) -> SearchPolicy:
    """Seed 七.4: a query naming error codes or identifiers leans on the lexical index,
    a vague one on the vector index.  A short question (at most ``short_query_terms``
    normalised tokens) is specific too: its lexical weight is ``short_lexical_weight`` and
    RRF uses ``short_rrf_k``.  The defaults were tuned on the dev halves of MADial-Bench
    (long dialogue queries: lexical 0.2 / vector 0.8, RRF k=10) and LoCoMo (short
    questions: lexical 1.6 / vector 0.8, RRF k=60; docs/QUALITY.md)."""
    if exact_terms(query):
        return policy.model_copy(update={"lexical_weight": policy.exact_lexical_weight})
    if query_length(query) <= policy.short_query_terms:
        return policy.model_copy(
            update={"lexical_weight": policy.short_lexical_weight, "rrf_k": policy.short_rrf_k}
        )
    return policy


def recency(updated_at: float, now: float, half_life_s: float) -> float:
    """1.0 for a card updated now, 0.5 after one half-life, towards 0 after that."""
    age = max(0.0, now - updated_at)
    return math.exp(-math.log(2) * age / half_life_s)


def rerank(fused: dict[str, _Fused], policy: SearchPolicy, *, now: float) -> list[Ranked]:
    """Final order: similarity, importance and recency blended by the policy's weights."""
    out = [
        Ranked(
            memory_id=memory_id,
            score=policy.similarity_weight * f.similarity
            + policy.importance_weight * f.hit.importance
            + policy.recency_weight * recency(f.hit.updated_at, now, policy.recency_half_life_s),
            similarity=f.similarity,
            importance=f.hit.importance,
            updated_at=f.hit.updated_at,
            sources=tuple(f.sources),
            title=f.hit.title,
            summary=f.hit.summary,
        )
        for memory_id, f in fused.items()
    ]
    out.sort(key=lambda r: (-r.score, -r.similarity, r.memory_id))
    return out[: policy.top_k]


class LtmSearch:
    """Runs one search mode over the two indexes and reranks the candidates."""

    def __init__(
        self,
        *,
        lexical: LexicalIndex,
        vector: VectorIndex,
        embedder: CachedEmbedder,
        policy: SearchPolicy | None = None,
    ) -> None:
        self.lexical = lexical
        self.vector = vector
        self.embedder = embedder
        self.policy = policy or SearchPolicy()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ltm-search")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _cut(self, query: str) -> str:
        if not query.strip():
            raise InvalidInput("empty search query")
        if len(query) > self.policy.max_query_chars:
            return query[-self.policy.max_query_chars :]  # the latest words matter most
        return query

    def prepare(self, query: str) -> None:
        """Embed ``query`` as a search will (the same cut) before the search is asked: the
        search then takes the vector from the embedder's query cache, or waits for this
        embedding if it is still running (recall starts it while STM and PG are read).
        Nothing is done when the query cache is off (it would only embed twice)."""
        cut = self._cut(query)
        if self.embedder.query_capacity > 0:
            self.embedder.embed_query(cut)

    def _lexical(
        self, query: str, cut: str, flt: CardFilter, policy: SearchPolicy
    ) -> tuple[list[Hit], SearchPolicy]:
        """The lexical hits and the fusion weights, on a helper thread: both segment the
        query (jieba for Chinese), which came before its embedding on the caller's."""
        hits = self.lexical.search(normalise(cut), flt, policy.candidates)
        return hits, weights_for(query, policy)

    def search(
        self,
        query: str,
        flt: CardFilter,
        *,
        mode: SearchMode = SearchMode.HYBRID,
        policy: SearchPolicy | None = None,
        now: float | None = None,
    ) -> list[Ranked]:
        """The best cards for ``query`` within ``flt``: each index asked for the policy's
        ``candidates`` (the weights of :func:`weights_for` change the fusion, never how
        many), fused and reranked."""
        base = policy or self.policy
        cut = self._cut(query)  # an empty query is refused before any work starts
        lists: dict[str, list[Hit]] = {}
        lexical: Future[tuple[list[Hit], SearchPolicy]] | None = None
        if mode in (SearchMode.LEXICAL, SearchMode.HYBRID):
            # in a helper thread: it waits on the network while this one embeds the query
            lexical = self._pool.submit(self._lexical, query, cut, flt, base)
        if mode in (SearchMode.VECTOR, SearchMode.HYBRID):
            vector = self.embedder.embed_query(cut)
            lists["vector"] = self.vector.search(vector, flt, base.candidates)
        if lexical is not None:
            lists["lexical"], chosen = lexical.result()
        else:
            chosen = weights_for(query, base)
        return rerank(fuse(lists, chosen), chosen, now=time.time() if now is None else now)
