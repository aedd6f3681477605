"""memstrata beside mem0, one run: ``record_turn`` vs mem0 ``add``, ``recall`` vs ``search``.

Why (issue 17.4): a latency only means something next to a peer's, measured in the same
run on the same machine with the same embedder.  Both systems are the quality bench's
(``ops/bench/quality/systems``): memstrata through its real write and read paths (Redis,
PostgreSQL, a milvus-lite server of the run), mem0 2.2.1 with ``infer=False`` on a
local Qdrant.  Every text is embedded before any timing (one disk-cached embedder for
both, ``var/bench-cache``), so neither side's figures contain model time.

What is timed, per turn and per question, on the LoCoMo dev file (``--quick``: its
quick slice):

* ``record_turn``: what the caller of memstrata waits for (L0 append + stream entry);
  ``write`` adds the drain that a worker runs later (extraction, policy, STM upsert),
  run here in-process right after each turn, as the quality bench does;
* mem0 ``add``: the whole of mem0's write (the vector store insert and its history row);
* ``recall``: ``Recaller.recall()`` with PostgreSQL, STM and LTM (explain on, top_k 100);
* mem0 ``search``: vector search over the user's memories (top 25).

The ratios are of medians (p50) and of p95s of this one run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memstrata.ops.bench.common.env import REPO
from memstrata.ops.bench.common.machine import load_average
from memstrata.ops.bench.common.stats import percentile, r3
from memstrata.ops.bench.quality.datasets import Dataset
from memstrata.ops.bench.quality.embed import shared_embedder
from memstrata.ops.bench.quality.runner import DEFAULT_DATASET, load_dataset

MEM0_DEPTH = 25  # the deepest k the quality bench scores


class TimedClient:
    """The memory client with each ``record_turn`` call timed (seconds)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds: list[float] = []

    def record_turn(self, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.record_turn(**kwargs)
        finally:
            self.seconds.append(time.perf_counter() - t0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {"p50": r3(percentile(ms, 50)), "p95": r3(percentile(ms, 95)), "n": len(ms)}


def _ratio(a: dict[str, float], b: dict[str, float]) -> dict[str, float | None]:
    return {k: r3(a[k] / b[k]) if b[k] else None for k in ("p50", "p95")}


def _warm(ds: Dataset) -> int:
    """Embed every turn and question once (disk cache), so no timing holds model time."""
    emb = shared_embedder(REPO / "var" / "bench-cache")
    texts = [t.text for s in ds.spaces for t in s.turns]
    emb.passages(texts)
    for s in ds.spaces:
        for q in s.questions:
            emb.query(q.text)
            emb.query(q.text[:4000])
    emb.save()
    return len(texts)


@contextmanager
def _systems() -> Iterator[tuple[Any, Any]]:
    from memstrata.ops.bench.quality.systems.mem0_peer import Mem0System
    from memstrata.ops.bench.quality.systems.memstrata import MemstrataSystem

    mem0 = Mem0System(shared_embedder(REPO / "var" / "bench-cache"))
    ours = MemstrataSystem()
    try:
        yield ours, mem0
    finally:
        ours.close()
        mem0.close()


def run(quick: bool) -> dict[str, Any]:
    ds = load_dataset(DEFAULT_DATASET, "locomo", quick=quick, distractors=None)
    figures: dict[str, Any] = {
        "quick": quick,
        "dataset": f"{DEFAULT_DATASET.name}{' (quick slice)' if quick else ''}",
        "loadavg_at_start": [round(x, 2) for x in load_average()],
    }
    figures["turns"] = _warm(ds)
    with _systems() as (ours, mem0):
        timed = TimedClient(ours.client)
        ours.client = timed
        questions = 0
        for space in ds.spaces:  # interleaved, so both see the same machine state
            mem0.ingest(space)
            ours.ingest(space)
        for space in ds.spaces:
            for q in space.questions:
                if not q.gold:
                    continue
                questions += 1
                mem0.search(space, q, MEM0_DEPTH)
                ours.search(space, q, MEM0_DEPTH)
        figures["questions"] = questions
        figures["errors"] = ours.stats.error_count + mem0.stats.error_count
        record = _ms(timed.seconds)
        write = _ms(ours.stats.add_seconds)
        recall = _ms(ours.stats.search_seconds)
        add = _ms(mem0.stats.add_seconds)
        search = _ms(mem0.stats.search_seconds)
    figures.update(
        {
            "record_turn_ms": record,
            "write_ms": write,
            "recall_ms": recall,
            "mem0_add_ms": add,
            "mem0_search_ms": search,
            "record_turn_over_mem0_add": _ratio(record, add),
            "write_over_mem0_add": _ratio(write, add),
            "recall_over_mem0_search": _ratio(recall, search),
            "loadavg_at_end": [round(x, 2) for x in load_average()],
        }
    )
    return figures


def markdown(figures: dict[str, Any]) -> str:
    f = figures
    quick = " --quick" if f.get("quick") else ""

    def row(name: str, ours: str, peer: str, ratio: str) -> str:
        a, b, r = f[ours], f[peer], f[ratio]
        return (
            f"| {name} | {a['p50']} / {a['p95']} | {b['p50']} / {b['p95']} "
            f"| {r['p50']} / {r['p95']} |"
        )

    return "\n".join(
        [
            f"### Peer side by side: mem0 (`memstrata bench peers{quick}`)",
            "",
            f"{f['dataset']}: {f['turns']} turns, {f['questions']} questions with gold; "
            "mem0 2.2.1 `infer=False` on local Qdrant, memstrata on Redis + PostgreSQL + "
            "milvus-lite; one embedder, every text embedded before timing; load average "
            f"{f['loadavg_at_start']} at start, {f.get('loadavg_at_end')} at end; "
            f"{f['errors']} errors.",
            "",
            "| memstrata ÷ mem0 | memstrata p50 / p95 ms | mem0 p50 / p95 ms "
            "| ratio p50 / p95 |",
            "|---|---|---|---|",
            row("`record_turn` ÷ `add`", "record_turn_ms", "mem0_add_ms",
                "record_turn_over_mem0_add"),
            row("`record_turn` + drain ÷ `add`", "write_ms", "mem0_add_ms",
                "write_over_mem0_add"),
            row("`recall` ÷ `search`", "recall_ms", "mem0_search_ms",
                "recall_over_mem0_search"),
            "",
            "`--json` keys: `record_turn_ms`, `write_ms` (record_turn + the in-process "
            "drain), `recall_ms`, `mem0_add_ms`, `mem0_search_ms` (each `p50`, `p95`, `n`), "
            "`record_turn_over_mem0_add`, `write_over_mem0_add`, `recall_over_mem0_search` "
            "(each `p50`, `p95`).",
        ]
    ) + "\n"  # fmt: skip


if __name__ == "__main__":  # pragma: no cover - manual run
    import json
    import sys

    result = run("--quick" in sys.argv)
    print(json.dumps(result, indent=2))
    print(markdown(result))
