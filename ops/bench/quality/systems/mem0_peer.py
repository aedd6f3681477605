"""The peer: mem0's open-source library (``mem0ai``) with ``infer=False``.

Configuration: Qdrant in local mode (``qdrant-client``'s in-process store in a temporary
folder), the SQLite history store in the same folder, and the run's shared embedder (the
LTM provider, see ``embed.py``) put in place of mem0's embedder after construction: mem0
builds its embedder from a provider name, and none of its providers can load memstrata's
offline model.  The adapter maps mem0's ``memory_action`` (``add`` / ``search``) to
document / query embeddings, so mem0 sees exactly the vectors of ``dense_raw``.
``infer=False`` stores every message as it is, so no LLM is ever called; the LLM client
is still built at start-up and gets a placeholder key (it never sends a request).
Telemetry is off (``MEM0_TELEMETRY=False``).

What mem0 2.2.1 does not do here, measured: its BM25 keyword search needs ``fastembed``
(which downloads a model at run time: not reachable offline), so mem0 runs vector-only;
its spaCy lemmatiser is absent (optional ``mem0ai[nlp]``), which mem0 logs and skips.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import warnings
from typing import Any

from memstrata.ops.bench.quality.datasets import Question, Space
from memstrata.ops.bench.quality.embed import Embedder
from memstrata.ops.bench.quality.systems.base import Hit, Injection, SystemStats, count_tokens, pack

BUDGET_DEPTH = 200  # ranked memories offered to the token-budget packer


def _quiet_mem0() -> None:
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    for name in ("mem0", "mem0.memory.main", "mem0.utils", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


class Mem0System:
    name = "mem0"

    def __init__(self, embedder: Embedder) -> None:
        _quiet_mem0()
        with warnings.catch_warnings():
            # mem0 and its dependencies import with deprecation noise we cannot fix
            warnings.simplefilter("ignore", DeprecationWarning)
            from mem0 import Memory
            from mem0.embeddings.base import EmbeddingBase

        class _SharedEmbedder(EmbeddingBase):  # type: ignore[misc]
            def __init__(self, inner: Embedder) -> None:
                super().__init__(None)
                self.inner = inner

            def embed(self, text: str, memory_action: str | None = None) -> list[float]:
                if memory_action == "search":
                    return [float(x) for x in self.inner.query(text)]
                return [float(x) for x in self.inner.passages([text])[0]]

        self.stats = SystemStats()
        self.embedder = embedder
        self._dir = tempfile.mkdtemp(prefix="qb-mem0-")
        config: dict[str, Any] = {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": os.path.join(self._dir, "qdrant"),
                    "on_disk": False,
                    "embedding_model_dims": embedder.dim,
                    "collection_name": "bench",
                },
            },
            "llm": {"provider": "openai", "config": {"api_key": "unused-infer-false"}},
            "embedder": {
                "provider": "openai",
                "config": {"api_key": "unused", "embedding_dims": embedder.dim},
            },
            "history_db_path": os.path.join(self._dir, "history.db"),
        }
        self.memory = Memory.from_config(config)
        self.memory.embedding_model = _SharedEmbedder(embedder)
        self.stats.notes.append(
            "vector store: qdrant local (in-process); keyword search off (needs fastembed); "
            "add/search latency exclude embedding (shared cached embedder)"
        )

    @staticmethod
    def _user(space: Space) -> str:
        return "u-" + space.id

    def ingest(self, space: Space) -> None:
        user = self._user(space)
        for t in space.turns:
            # the embedding is computed first so the measured time is mem0's own
            self.embedder.passages([t.text])
            t0 = time.perf_counter()
            try:
                self.memory.add(
                    [{"role": t.role, "content": t.text}],
                    user_id=user,
                    metadata={"turn_id": t.id, "session": t.session},
                    infer=False,
                )
            except Exception as exc:  # one refused turn must not lose the rest of the space
                self.stats.error("ingest", space.id, t.id, exc)
                continue
            self.stats.add_seconds.append(time.perf_counter() - t0)
        self.stats.ingested_turns += len(space.turns)
        got = self.memory.get_all(filters={"user_id": user}, top_k=100_000)
        stored = [str(r.get("memory", "")) for r in got.get("results", [])]
        self.stats.stored_items += len(stored)
        self.stats.stored_layers["qdrant memories"] += count_tokens(stored)

    def _search(self, space: Space, question: Question, depth: int) -> dict[str, Any]:
        res: dict[str, Any] = self.memory.search(
            question.text, filters={"user_id": self._user(space)}, top_k=depth, threshold=0.0
        )
        return res

    @staticmethod
    def _hits(res: dict[str, Any]) -> list[Hit]:
        hits = []
        for r in res.get("results", []):
            turn = (r.get("metadata") or {}).get("turn_id")
            hits.append(Hit(str(r.get("memory", "")), (str(turn),) if turn else ()))
        return hits

    def search(self, space: Space, question: Question, depth: int) -> list[Hit]:
        self.embedder.query(question.text)
        t0 = time.perf_counter()
        res = self._search(space, question, depth)
        self.stats.search_seconds.append(time.perf_counter() - t0)
        return self._hits(res)

    def inject(self, space: Space, question: Question, budget: int) -> Injection:
        """mem0's top memories, concatenated while they fit the budget."""
        return pack(self._hits(self._search(space, question, BUDGET_DEPTH)), budget)

    def close(self) -> None:
        client = getattr(self.memory.vector_store, "client", None)
        if client is not None:
            client.close()
        db = getattr(self.memory, "db", None)
        if db is not None and hasattr(db, "close"):
            db.close()
        shutil.rmtree(self._dir, ignore_errors=True)
