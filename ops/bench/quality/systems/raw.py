""" "Archive everything" baselines: every raw turn is one memory.

* ``bm25_raw``: Okapi BM25 (``bm25s``, k1 = 1.5, b = 0.75) over :func:`bm25_tokens`.
* ``dense_raw``: cosine over the shared embedder's passage vectors (exact, numpy).
* ``hybrid_raw``: reciprocal rank fusion (k = 60) of the two lists, 100 deep each.
* ``bm25_raw+stem`` (diagnostic): ``bm25_raw`` over memstrata's own lexical analyzer
  (``core.ltm.text.normalise``: identifiers split, English stemmed), to show how much of
  memstrata's lead is the analyzer rather than the memory pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from memstrata.ops.bench.quality.datasets import Question, Space
from memstrata.ops.bench.quality.embed import Embedder, Vector
from memstrata.ops.bench.quality.systems.base import (
    Hit,
    Injection,
    SystemStats,
    bm25_tokens,
    count_tokens,
    pack,
)

RRF_K = 60
BUDGET_DEPTH = 500  # ranked turns offered to the token-budget packer


def ltm_tokens(text: str) -> list[str]:
    """The tokens memstrata's lexical LTM index sees (``core.ltm.text``)."""
    from memstrata.core.ltm.text import normalise

    return normalise(text).split()


FUSION_DEPTH = 100


@dataclass
class _Index:
    turns: list[str]  # turn ids
    texts: list[str]
    bm25: object | None = None
    vectors: Vector | None = None


class RawSystem:
    """One class, three modes, so the three baselines index exactly the same turns."""

    def __init__(self, mode: str, embedder: Embedder | None = None, *, stem: bool = False) -> None:
        if mode not in ("bm25", "dense", "hybrid"):
            raise ValueError(mode)
        if mode != "bm25" and embedder is None:
            raise ValueError(f"{mode}_raw needs an embedder")
        self.mode = mode
        self.name = f"{mode}_raw" + ("+stem" if stem else "")
        self._tokens = ltm_tokens if stem else bm25_tokens
        self.embedder = embedder
        self.stats = SystemStats()
        if stem:
            self.stats.notes.append(
                "memstrata's lexical analyzer on raw turns (core.ltm.text: stemmed)"
            )
        self._spaces: dict[str, _Index] = {}

    def ingest(self, space: Space) -> None:
        import bm25s

        ids = [t.id for t in space.turns]
        texts = [t.text for t in space.turns]
        vectors = None
        if self.mode in ("dense", "hybrid") and self.embedder is not None:
            vectors = self.embedder.passages(texts)  # embedding time is reported apart
        t0 = time.perf_counter()
        idx = _Index(ids, texts, vectors=vectors)
        if self.mode in ("bm25", "hybrid"):
            retriever = bm25s.BM25(k1=1.5, b=0.75)
            retriever.index([self._tokens(t) or ["\u2205"] for t in texts], show_progress=False)
            idx.bm25 = retriever
        self._spaces[space.id] = idx
        elapsed = time.perf_counter() - t0
        n = max(1, len(ids))
        self.stats.add_seconds.extend([elapsed / n] * len(ids))
        self.stats.ingested_turns += len(ids)
        self.stats.stored_items += len(ids)
        self.stats.stored_layers["raw turns"] += count_tokens(texts)

    def _bm25_rank(self, idx: _Index, query: str) -> list[int]:
        q = self._tokens(query)
        if not q or idx.bm25 is None:
            return []
        scores = np.asarray(idx.bm25.get_scores(q))  # type: ignore[attr-defined]
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order if scores[i] > 0]

    def _dense_rank(self, idx: _Index, query: str) -> list[int]:
        if idx.vectors is None or self.embedder is None or not len(idx.turns):
            return []
        sims = idx.vectors @ self.embedder.query(query)
        return [int(i) for i in np.argsort(-sims, kind="stable")]

    def _order(self, idx: _Index, query: str) -> list[int]:
        if self.mode == "bm25":
            return self._bm25_rank(idx, query)
        if self.mode == "dense":
            return self._dense_rank(idx, query)
        lexical = self._bm25_rank(idx, query)[:FUSION_DEPTH]
        return rrf([lexical, self._dense_rank(idx, query)[:FUSION_DEPTH]])

    def search(self, space: Space, question: Question, depth: int) -> list[Hit]:
        idx = self._spaces[space.id]
        if self.mode != "bm25" and self.embedder is not None:
            self.embedder.query(question.text)  # warm the cache: latency excludes embedding
        t0 = time.perf_counter()
        order = self._order(idx, question.text)
        self.stats.search_seconds.append(time.perf_counter() - t0)
        return [Hit(idx.texts[i], (idx.turns[i],)) for i in order[:depth]]

    def inject(self, space: Space, question: Question, budget: int) -> Injection:
        """The top turns, concatenated while they fit the budget."""
        idx = self._spaces[space.id]
        order = self._order(idx, question.text)[:BUDGET_DEPTH]
        return pack((Hit(idx.texts[i], (idx.turns[i],)) for i in order), budget)

    def close(self) -> None:
        self._spaces.clear()


def rrf(rankings: list[list[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion; ties keep the order of first appearance."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking):
            score[doc] = score.get(doc, 0.0) + 1.0 / (k + rank + 1)
    return sorted(score, key=lambda d: -score[d])
