"""Every task's outcome, seen once: a metric, one structured log line, and for Beat jobs
the record of their last run (``<ns>:job:<job>``, read by ``memstrata status``).

Connected to Celery's task signals by ``tasks/app.py``; runs in the worker's pool process
after each task.  Nothing here may fail a task: errors are logged and dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from memstrata.core.errors import MemstrataError
from memstrata.core.maintenance import record_run
from memstrata.core.metrics import metrics
from memstrata.core.redact import redact
from memstrata.core.runtime import get_runtime

log = logging.getLogger("memstrata.tasks")

OWNER_FIELDS = ("tenant_id", "user_id", "session_id", "task_id", "shard")
_started: dict[str, float] = {}
_lock = threading.Lock()
_jobs: dict[str, str] | None = None


def beat_jobs() -> dict[str, str]:
    """Task name → its Beat entry's name, from this process's settings."""
    global _jobs
    if _jobs is None:
        from memstrata.beat_schedule import build_schedule

        schedule = build_schedule(get_runtime().settings)
        _jobs = {entry["task"]: job for job, entry in schedule.items()}
    return _jobs


def task_started(task_id: str) -> None:
    with _lock:
        _started[task_id] = time.perf_counter()


def owner_of(
    args: Any, kwargs: Mapping[str, Any] | None, arg_names: tuple[str, ...]
) -> dict[str, Any]:
    """The owner fields a task was called with (positional ones by the task's parameter names)."""
    named = dict(zip(arg_names, args or (), strict=False))
    named.update(kwargs or {})
    return {k: named[k] for k in OWNER_FIELDS if isinstance(named.get(k), str | int)}


def task_finished(
    *, name: str, task_id: str, outcome: str, owner: Mapping[str, Any], error: str = "",
    result: Any = None,
) -> None:  # fmt: skip
    """Count, log and (for Beat jobs) record one outcome: ok | failed | retry | skipped."""
    with _lock:
        started = _started.pop(task_id, None)
    elapsed = time.perf_counter() - started if started is not None else 0.0
    if outcome == "ok" and isinstance(result, Mapping) and result.get("skipped"):
        outcome = "skipped"
    short = name.rsplit(".", 1)[-1]
    try:
        m = metrics()
        m.task_runs.labels(task=short, outcome=outcome).inc()
        m.task_seconds.labels(task=short).observe(elapsed)
    except Exception:  # pragma: no cover - a metric must never fail a task
        log.exception("task metric not recorded")
    error = redact(error)[:500]
    fields = " ".join(f"{k}={v}" for k, v in owner.items())
    level = logging.INFO if outcome in {"ok", "skipped"} else logging.WARNING
    log.log(
        level, "task %s %s id=%s ms=%.1f%s%s", short, outcome, task_id, elapsed * 1000,
        f" {fields}" if fields else "", f" error={error}" if error else "",
        extra={"event": "task", "task": name, "celery_task_id": task_id, "outcome": outcome,
               "duration_ms": round(elapsed * 1000, 1), **owner,
               **({"error": error} if error else {}),
               **({"result": dict(result)} if isinstance(result, Mapping) else {})},
    )  # fmt: skip
    job = beat_jobs().get(name)
    if job is None or outcome == "retry":
        return
    try:
        rt = get_runtime()
        now = time.time()
        record_run(rt.redis, rt.settings.key_namespace, job, started=now - elapsed,
                   finished=now, outcome=outcome, error=error)  # fmt: skip
    except MemstrataError as exc:  # Redis down: the next run records itself
        log.warning("job %s: last run not recorded: %s", job, exc)
