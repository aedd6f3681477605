"""Benchmarks, one module each, reachable as ``memstrata bench <name> [--quick] [--json]``.

Every module exposes ``run(quick: bool) -> dict`` returning the figures (the keys the
issue names) and ``markdown(figures: dict) -> str`` for ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

BENCHES: dict[str, str] = {
    "stm": "ops.bench.stm",
    "ingest": "ops.bench.ingest",
    "extract": "ops.bench.extract",  # extraction cost per input byte on the worst inputs
    "compress": "ops.bench.compress",
    "authority": "ops.bench.authority",
    "ltm": "ops.bench.ltm",
    "quality": "ops.bench.quality.suite",  # every figure of docs/QUALITY.md
    "recall": "ops.bench.recall",
    "sweep": "ops.bench.sweep",
    "faults": "ops.bench.faults",  # worker kills and Redis restarts under load
}
