"""Pre-computed embeddings of the LTM benchmark's synthetic cards, cached on disk.

Why: at 100k cards the model time of the bulk load (~100k USE calls, tens of minutes on
this 2-core machine) would dominate a run whose point is the index at that size.  The
cards are a pure function of their index (:func:`load_draft`), so their vectors are
computed once (``python -m memstrata.ops.bench.ltm_vectors 100000``, under ``nice``) into
``var/bench-cache/ltm-<model>.npz`` (outside the repository) and served by
:class:`PrecomputedEmbedder` during the load.  Only the load uses them: the single-card
writes and every query embed live, so the latencies the targets judge include the model.
Rows are looked up by the SHA-1 of the embedded text, so a changed card text is simply a
miss (embedded live and counted), never a wrong vector.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memstrata.core.ltm.card import CardDraft
from memstrata.core.ltm.embedding import Embedder, Vectors, make_embedder
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.env import REPO
from memstrata.ops.bench.ltm_data import synthetic_draft

CACHE_DIR = REPO / "var" / "bench-cache"
TENANT = "bench"
USERS = 100
MAX_EMBED_CHARS = 2000  # LtmSettings.max_embed_chars' default: what the projector embeds
CHUNK = 64


def load_draft(i: int) -> CardDraft:
    """Card ``i`` of the bulk load: the same text in every run (its own seeded rng)."""
    return synthetic_draft(i, random.Random(i), tenant=TENANT, users=USERS)


def embedding_text(draft: CardDraft, max_chars: int = MAX_EMBED_CHARS) -> str:
    """What :meth:`LtmCard.embedding_text` makes of this draft."""
    return f"{draft.title}\n{draft.summary}\n{draft.content}".strip()[:max_chars]


def digest(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8")).digest()


def cache_file(model: str, cache_dir: Path = CACHE_DIR) -> Path:
    safe = "".join(c if c.isalnum() else "-" for c in model)
    return cache_dir / f"ltm-{safe}.npz"


class VectorTable:
    """Text digest → vector, read from (and saved to) one ``.npz`` file."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path = path
        self.dim = dim
        self.keys: list[bytes] = []
        self.rows: list[Vectors] = []
        self.index: dict[bytes, int] = {}
        if path.exists():
            with np.load(path) as data:
                vectors = data["vectors"].astype(np.float32, copy=False)
                keys = [bytes(k) for k in data["keys"]]
            if vectors.shape[1:] == (dim,):
                self.keys, self.rows = keys, [vectors]
                self.index = {k: i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self.keys)

    def matrix(self) -> Vectors:
        if not self.rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(self.rows) > 1:
            self.rows = [np.concatenate(self.rows)]
        return self.rows[0]

    def add(self, texts: Sequence[str], vectors: Vectors) -> None:
        for text in texts:
            key = digest(text)
            self.index.setdefault(key, len(self.keys))
            self.keys.append(key)
        self.rows.append(np.asarray(vectors, dtype=np.float32))

    def get(self, text: str) -> Vectors | None:
        i = self.index.get(digest(text))
        return None if i is None else self.matrix()[i]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.stem + ".tmp.npz")
        keys = np.array(self.keys, dtype="S20")
        np.savez(tmp, keys=keys, vectors=self.matrix())
        tmp.replace(self.path)


class PrecomputedEmbedder:
    """The provider's vectors for the texts the table holds, the model for the rest."""

    def __init__(self, inner: Embedder, table: VectorTable) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.table = table
        self.live = 0  # document texts the table did not hold (embedded by the model)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        found = [self.table.get(t) for t in texts]
        missing = [i for i, v in enumerate(found) if v is None]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if missing:
            self.live += len(missing)
            out[missing] = self.inner.embed_documents([texts[i] for i in missing])
        for i, v in enumerate(found):
            if v is not None:
                out[i] = v
        return out

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_queries(texts)


def model() -> Embedder:
    """The LTM provider of the settings, with the worker's thread count."""
    ltm = load_settings().ltm
    return make_embedder(ltm.embedding_provider, **ltm.embedder_options())


def precompute(count: int, inner: Embedder, *, log: bool = False) -> VectorTable:
    """Make sure the table of ``inner``'s model holds cards ``0 .. count-1``; saves every
    10k rows, so an interrupted run resumes where it stopped."""
    table = VectorTable(cache_file(inner.name), inner.dim)
    todo = [t for t in (embedding_text(load_draft(i)) for i in range(count))
            if digest(t) not in table.index]  # fmt: skip
    t0 = time.perf_counter()
    for n, start in enumerate(range(0, len(todo), CHUNK), 1):
        chunk = todo[start : start + CHUNK]
        table.add(chunk, inner.embed_documents(chunk))
        if n % (10_000 // CHUNK) == 0:
            table.save()
            if log:
                rate = (start + len(chunk)) / (time.perf_counter() - t0)
                print(f"{start + len(chunk)}/{len(todo)} embedded, {rate:.0f}/s", file=sys.stderr)
    if todo:
        table.save()
    return table


if __name__ == "__main__":  # pragma: no cover - manual step, run under nice
    wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    built = precompute(wanted, model(), log=True)
    print(f"{built.path}: {len(built)} vectors")
