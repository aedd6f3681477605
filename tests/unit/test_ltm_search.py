"""Fusion and rerank are pure functions of (hits, policy, now); a search and its prepared
query embedding agree on the text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.embedding import CachedEmbedder, Vectors
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.ports import Hit, LexicalIndex, VectorIndex
from memstrata.core.ltm.search import (
    Fusion,
    LtmSearch,
    SearchMode,
    SearchPolicy,
    fuse,
    recency,
    rerank,
    weights_for,
)

NOW = 1_000_000.0


def hit(memory_id: str, score: float, importance: float = 0.5, age_s: float = 0.0) -> Hit:
    return Hit(memory_id, score, importance, NOW - age_s)


def test_rrf_rewards_cards_found_by_both_indexes() -> None:
    lists = {
        "lexical": [hit("a", 9.0), hit("b", 5.0)],
        "vector": [hit("c", 0.9), hit("b", 0.8)],
    }
    fused = fuse(lists, SearchPolicy(recency_weight=0.0, importance_weight=0.0))
    ranked = rerank(fused, SearchPolicy(recency_weight=0.0, importance_weight=0.0), now=NOW)
    assert ranked[0].memory_id == "b"
    assert ranked[0].sources == ("lexical", "vector")
    assert ranked[0].similarity == pytest.approx(1.0)


def test_weighted_fusion_follows_the_weights() -> None:
    lists = {"lexical": [hit("a", 10.0)], "vector": [hit("b", 0.9)]}
    policy = SearchPolicy(
        fusion=Fusion.WEIGHTED, lexical_weight=0.2, vector_weight=0.8, importance_weight=0.0
    )
    ranked = rerank(fuse(lists, policy), policy, now=NOW)
    assert [r.memory_id for r in ranked] == ["b", "a"]


def test_rerank_blends_similarity_and_importance_sixty_forty_by_default() -> None:
    policy = SearchPolicy(recency_weight=0.0)
    lists = {
        "vector": [hit("similar", 0.9, importance=0.1), hit("important", 0.85, importance=1.0)]
    }
    ranked = rerank(fuse(lists, policy), policy, now=NOW)
    assert ranked[0].memory_id == "important"
    top = ranked[0]
    assert top.score == pytest.approx(0.6 * top.similarity + 0.4 * 1.0)


def test_rerank_keeps_top_k_of_the_candidates() -> None:
    policy = SearchPolicy()
    lists = {"vector": [hit(f"m{i}", 1.0 - i / 100) for i in range(20)]}
    assert len(rerank(fuse(lists, policy), policy, now=NOW)) == 5


def test_recency_halves_after_one_half_life() -> None:
    assert recency(NOW, NOW, 100.0) == pytest.approx(1.0)
    assert recency(NOW - 100.0, NOW, 100.0) == pytest.approx(0.5)
    policy = SearchPolicy(importance_weight=0.0, recency_weight=0.5, recency_half_life_s=100.0)
    lists = {"vector": [hit("old", 0.9, age_s=1000.0), hit("new", 0.88)]}
    assert rerank(fuse(lists, policy), policy, now=NOW)[0].memory_id == "new"


def test_queries_naming_codes_or_identifiers_lean_on_the_lexical_index() -> None:
    policy = SearchPolicy()
    assert weights_for("ERR_CONN_RESET again", policy).lexical_weight == policy.exact_lexical_weight
    assert weights_for("createOrder 超时", policy).lexical_weight == policy.exact_lexical_weight
    # a long, vague query (a whole dialogue) keeps the vector-leaning defaults ...
    dialogue = (
        "I was telling you about that slow thing from last week, the one that kept "
        "coming back every evening after the deploy, do you remember what we found"
    )
    assert weights_for(dialogue, policy) is policy
    # ... a short question names what it wants: its words weigh more
    short = weights_for("When did Melanie paint a sunrise?", policy)
    assert short.lexical_weight == policy.short_lexical_weight > policy.lexical_weight
    assert short.rrf_k == policy.short_rrf_k


class _CountingModel:
    """An embedder that records the texts it was asked for (a fixed vector each)."""

    name = "counting"
    dim = 4

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.texts.extend(texts)
        return np.full((len(texts), self.dim), 0.5, dtype=np.float32)

    embed_queries = embed_documents


class _NoHits:
    """An index port that answers every search with no hit (what is asked is recorded)."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def search(self, query: Any, flt: CardFilter, limit: int) -> list[Hit]:
        self.asked.append(query)
        return []


@pytest.mark.parametrize("mode", [SearchMode.VECTOR, SearchMode.HYBRID])
def test_a_prepared_query_is_the_vector_its_search_uses(mode: SearchMode) -> None:
    """``prepare`` cuts a long query as the search does, so the search embeds nothing."""
    model = _CountingModel()
    lexical = _NoHits()
    search = LtmSearch(
        lexical=cast(LexicalIndex, lexical), vector=cast(VectorIndex, _NoHits()),
        embedder=CachedEmbedder(model), policy=SearchPolicy(max_query_chars=16),
    )  # fmt: skip
    query = "an early question about the createOrder timeout, asked at length"
    try:
        search.prepare(query)
        assert model.texts == [query[-16:]]
        assert search.search(query, CardFilter(tenant_id="t", user_id="u"), mode=mode) == []
        assert model.texts == [query[-16:]]  # the search took the prepared vector
        assert len(lexical.asked) == (1 if mode is SearchMode.HYBRID else 0)
    finally:
        search.close()


def test_nothing_is_prepared_when_the_query_cache_is_off() -> None:
    model = _CountingModel()
    search = LtmSearch(
        lexical=cast(LexicalIndex, _NoHits()), vector=cast(VectorIndex, _NoHits()),
        embedder=CachedEmbedder(model, query_capacity=0),
    )  # fmt: skip
    try:
        search.prepare("what did we decide about retries?")
        assert model.texts == []  # it would be embedded again by the search
        with pytest.raises(InvalidInput):
            search.prepare("   ")  # refused like the search refuses it
    finally:
        search.close()
