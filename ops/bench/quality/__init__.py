"""Retrieval quality on public benchmarks: memstrata against baselines and a peer.

``run(quick, dataset, fmt)`` loads a LoCoMo / MemDaily / MADial-Bench / BEAM dataset
(read in place), runs every system on it in the same process with the same embedder,
scores the turn-budget metrics and what each system injects within token budgets,
attributes memstrata's lost gold turns to the stage that lost them, and writes
``results.json``, ``results.md`` and PNG plots to ``out_dir`` (default
``var/bench-quality/<dataset>[-quick]``).  The returned dict holds
``{"systems": {<name>: {"recall@1", "recall@5", "recall@10", "recall@25",
"stored_items", "stored_tokens", "memory_ratio", "budget", "errors", ...}},
"per_category": {...}, "answer_ceiling": {...}, "versus_best_raw": {...}, "errors": {...}}``
(``answer_ceiling``: the answer containment of the gold turns themselves and of the whole
transcript, the most any system that injects what was said can reach;
``versus_best_raw``: memstrata minus the best raw baseline in Recall@1/5/10, paired per
question, with a 95 % bootstrap interval).  A run with errors still writes its results;
:func:`failures` lists them, and the CLI exits non-zero.  See docs/QUALITY.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.quality.datasets import FORMATS, Format
from memstrata.ops.bench.quality.report import markdown as _markdown
from memstrata.ops.bench.quality.runner import (
    DEFAULT_DATASET,
    SYSTEMS,
    evaluate,
    load_dataset,
    save,
)

__all__ = ["FORMATS", "SYSTEMS", "failures", "markdown", "run"]


def run(
    quick: bool,
    dataset: str | None = None,
    fmt: str | None = None,
    *,
    systems: tuple[str, ...] | None = None,
    out_dir: str | None = None,
    distractors: int | None = None,
    keep_questions: bool = False,
) -> dict[str, Any]:
    """Run the quality benchmark; returns the figures (also written to ``out_dir``)."""
    path = Path(dataset) if dataset else DEFAULT_DATASET
    if not path.exists():
        raise FileNotFoundError(f"dataset {path} not found (pass --dataset PATH)")
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    t0 = time.perf_counter()
    ds = load_dataset(path, _format(fmt), quick=quick, distractors=distractors)
    figures = evaluate(ds, systems or SYSTEMS)
    figures["dataset"] = {
        "path": str(path),
        "name": ds.name,
        "format": ds.fmt,
        "spaces": len(ds.spaces),
        "turns": sum(len(s.turns) for s in ds.spaces),
        "questions": sum(1 for s in ds.spaces for q in s.questions if q.gold),
        "headline": sorted(ds.headline),
        "dropped_gold_ids": ds.dropped_ids,
        "notes": ds.notes,
    }
    figures["quick"] = quick
    figures["machine"] = machine()
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    stem = Path(ds.name).stem.replace("/", "-") + ("-quick" if quick else "")
    target = Path(out_dir) if out_dir else Path("var/bench-quality") / stem
    save(figures, target)  # the file keeps the per-question scores and stage losses
    if not keep_questions:
        figures.pop("per_question", None)
        figures.pop("per_question_budget", None)
        losses = [figures.get("stage_loss") or {}]
        losses += list(figures.get("stage_loss_variants", {}).values())
        for sl in losses:
            sl.pop("questions", None)
    return figures


def _format(fmt: str | None) -> Format | None:
    for f in FORMATS:
        if f == fmt:
            return f
    return None


def markdown(figures: dict[str, Any]) -> str:
    return _markdown(figures)


def failures(figures: dict[str, Any]) -> list[str]:
    """One line per recorded error of a run (or of every run of the suite, ``run_errors``);
    empty when everything ran."""
    runs: dict[str, Any] = {"": figures}
    runs.update(figures.get("run_errors") or {})
    lines = []
    for run_key, run in runs.items():
        ran = {**run.get("systems", {}), **run.get("diagnostics", {})}
        for name, records in (run.get("errors") or {}).items():
            where = f"{run_key}: {name}" if run_key else name
            for r in records:
                part = " ".join(x for x in (r.get("space"), r.get("item")) if x)
                lines.append(f"{where}: {r.get('stage')}{' ' + part if part else ''}: "
                             f"{r.get('error')}")  # fmt: skip
            more = ran.get(name, {}).get("error_count", len(records)) - len(records)
            if more > 0:
                lines.append(f"{where}: … and {more} more errors")
    return lines
