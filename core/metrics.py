"""memstrata's own Prometheus metrics: the counters and histograms bumped at the point of work.

State (backlogs, lag, dead letters, STM items, ledger states) is not counted here: it is
read at scrape time by :mod:`core.exposition`.  This module holds only metric objects and
the helpers that bound their labels, so it imports no storage client.

**Multiprocess.**  ``prometheus_client`` chooses where values live (in memory, or in mmap
files under ``PROMETHEUS_MULTIPROC_DIR`` so a prefork worker's children add up) when it is
first *imported*.  So it is imported here only on first use, and the long-running roles
call :func:`configure_multiprocess` before anything counts (``ops.cli`` does it for
``worker``, ``beat``, ``metrics`` and ``up``; an API server calls it at start-up).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

    from memstrata.core.models.candidate import WriteDecision
    from memstrata.core.settings import Settings

log = logging.getLogger(__name__)

ENV = "PROMETHEUS_MULTIPROC_DIR"

# seconds; recall's budget is ~2 s (LTM timeout), an embedding batch 1 ms .. seconds
RECALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
EMBED_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
TASK_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def metrics_dir(settings: Settings) -> Path:
    """The namespace's folder of multiprocess metric files: ``MEMSTRATA_METRICS_DIR``, else
    ``var/<namespace>/prometheus`` (two deployments on one machine never share one)."""
    folder = settings.metrics_dir or Path("var") / settings.key_namespace / "prometheus"
    return folder.resolve()


def configure_multiprocess(settings: Settings) -> Path | None:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at the namespace's folder (kept if already set).

    Call before the first metric is touched, and before forking.  Returns the folder, or
    None when ``prometheus_client`` was imported earlier in single-process mode (then this
    process keeps counting in memory, and says so on stderr).
    """
    if os.environ.get(ENV):
        folder = Path(os.environ[ENV])
    else:
        if "prometheus_client.values" in sys.modules:
            log.warning("metrics already started in memory: %s not applied", ENV)
            return None
        folder = metrics_dir(settings)
        os.environ[ENV] = str(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(ENV))


@dataclass(frozen=True)
class Metrics:
    """Every work metric of memstrata (one set per process, see :func:`metrics`)."""

    turns_recorded: Counter
    write_decisions: Counter
    promotions: Counter
    recall_seconds: Histogram
    layer_errors: Counter
    embed_seconds: Histogram
    task_runs: Counter
    task_seconds: Histogram


_lock = threading.Lock()
_metrics: Metrics | None = None


def metrics() -> Metrics:
    """This process's metric objects, created (and ``prometheus_client`` imported) once."""
    global _metrics
    if _metrics is None:
        with _lock:
            if _metrics is None:
                _metrics = _build()
    return _metrics


def _build() -> Metrics:
    from prometheus_client import Counter, Histogram

    return Metrics(
        turns_recorded=Counter(
            "memstrata_turns_recorded", "Turns appended to L0 and queued by record_turn"
        ),
        write_decisions=Counter(
            "memstrata_write_decisions",
            "Write-policy decisions on extracted candidates",
            ["verdict", "reason"],
        ),
        promotions=Counter(
            "memstrata_promotions",
            "STM items moved up: path_a (PostgreSQL fact), path_b (LTM card), batch "
            "(queued for merging), merged (batch card), session_summary (finalised session)",
            ["path"],
        ),
        recall_seconds=Histogram(
            "memstrata_recall_seconds", "Recall latency by route (layers asked)", ["route"],
            buckets=RECALL_BUCKETS,
        ),
        layer_errors=Counter(
            "memstrata_layer_errors",
            "Recalls that answered without a layer (down, timed out, breaker open)",
            ["layer"],
        ),
        embed_seconds=Histogram(
            "memstrata_embed_seconds", "Embedding calls (one batch each) by kind",
            ["kind"], buckets=EMBED_BUCKETS,
        ),
        task_runs=Counter(
            "memstrata_task_runs", "Celery task outcomes", ["task", "outcome"]
        ),
        task_seconds=Histogram(
            "memstrata_task_seconds", "Celery task run time", ["task"], buckets=TASK_BUCKETS
        ),
    )


# ------------------------------------------------------------------ bounded labels

# a decision's free-text reason → one of a fixed set of label values (first match wins)
_REASONS: tuple[tuple[str, str], ...] = (
    ("raw unstructured", "raw_blob"),
    ("chit-chat", "chit_chat"),
    ("unverified", "unverified"),
    ("duplicate", "duplicate"),
    ("transient", "transient"),
    ("below threshold", "below_threshold"),
    ("restated in the same message", "restated"),
    ("restated fact", "merged"),
    ("changed fact", "new_version"),
    ("older than the stored", "stale"),
    ("extraction budget", "budget"),
    ("threshold", "above_threshold"),
)


def reason_label(reason: str) -> str:
    """A bounded label for a decision's reason (the text itself would explode the series)."""
    for needle, label in _REASONS:
        if needle in reason:
            return label
    return "other"


def route_label(*, pg: bool, stm: bool, ltm: bool) -> str:
    """``pg+stm+ltm`` style: which layers a recall's route asked (at most 8 values)."""
    parts = [name for name, on in (("pg", pg), ("stm", stm), ("ltm", ltm)) if on]
    return "+".join(parts) or "none"


def count_decisions(decisions: Iterable[WriteDecision]) -> None:
    counter = metrics().write_decisions
    for d in decisions:
        counter.labels(verdict=d.verdict.value, reason=reason_label(d.reason)).inc()


def count_promotions(path: str, n: int) -> None:
    if n > 0:
        metrics().promotions.labels(path=path).inc(n)
