"""The LTM benchmark's vector cache and the peer bench's figures (no services)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memstrata.core.ltm.embedding import Vectors
from memstrata.ops.bench.ltm_vectors import (
    PrecomputedEmbedder,
    VectorTable,
    embedding_text,
    load_draft,
)
from memstrata.ops.bench.peers import _ratio, markdown


class Counting:
    name = "counting"
    dim = 3

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.seen.extend(texts)
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)

    embed_queries = embed_documents


def test_a_load_card_is_the_same_in_every_run_and_differs_from_its_neighbour() -> None:
    assert load_draft(7) == load_draft(7)
    assert embedding_text(load_draft(7)) != embedding_text(load_draft(8))


def test_the_table_serves_saved_rows_and_the_model_only_the_rest(tmp_path: Path) -> None:
    texts = [embedding_text(load_draft(i)) for i in range(3)]
    table = VectorTable(tmp_path / "t.npz", 3)
    table.add(texts[:2], np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
    table.save()
    reread = VectorTable(tmp_path / "t.npz", 3)
    assert len(reread) == 2
    inner = Counting()
    emb = PrecomputedEmbedder(inner, reread)
    out = emb.embed_documents(texts)
    assert out[1].tolist() == [0.0, 1.0, 0.0]
    assert inner.seen == [texts[2]] and emb.live == 1
    assert VectorTable(tmp_path / "t.npz", 4).index == {}  # another model's dimension: unused


def test_peer_ratios_and_their_table() -> None:
    ours = {"p50": 1.0, "p95": 4.0, "n": 3}
    peer = {"p50": 2.0, "p95": 0.0, "n": 3}
    assert _ratio(ours, peer) == {"p50": 0.5, "p95": None}
    figures = {
        "dataset": "d", "turns": 3, "questions": 1, "errors": 0, "loadavg_at_start": [1.0],
        "record_turn_ms": ours, "write_ms": ours, "recall_ms": ours,
        "mem0_add_ms": peer, "mem0_search_ms": peer,
        "record_turn_over_mem0_add": _ratio(ours, peer),
        "write_over_mem0_add": _ratio(ours, peer),
        "recall_over_mem0_search": _ratio(ours, peer),
    }  # fmt: skip
    assert "| `record_turn` ÷ `add` | 1.0 / 4.0 | 2.0 / 0.0 | 0.5 / None |" in markdown(figures)
