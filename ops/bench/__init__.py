"""Benchmarks, one module each, reachable as ``memstrata bench <name> [--quick] [--json]``.

Every module exposes ``run(quick: bool) -> dict`` returning the figures (the keys the
issue names) and ``markdown(figures: dict) -> str`` for ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

BENCHES: dict[str, str] = {
    "stm": "memstrata.ops.bench.stm",
    "ingest": "memstrata.ops.bench.ingest",
    "extract": "memstrata.ops.bench.extract",  # extraction cost per input byte on the worst inputs
    "compress": "memstrata.ops.bench.compress",
    "authority": "memstrata.ops.bench.authority",
    "ltm": "memstrata.ops.bench.ltm",
    "quality": "memstrata.ops.bench.quality.suite",  # every figure of docs/QUALITY.md
    "embedders": "memstrata.ops.bench.quality.embedders",  # QUALITY.md "Embedder selection"
    "recall": "memstrata.ops.bench.recall",
    "sweep": "memstrata.ops.bench.sweep",
    "faults": "memstrata.ops.bench.faults",  # worker kills and Redis restarts under load
    "api": "memstrata.ops.bench.api",  # what the REST service adds to record_turn and recall
    "peers": "memstrata.ops.bench.peers",  # record_turn / recall beside mem0 add / search
}
