"""Helpers for periodic jobs: a Redis lock so a job is safe to run twice at once, and the
record of each job's last run (``memstrata status``, ``memstrata_job_last_run_seconds``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import redis

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.keys import GlobalKeys

T = TypeVar("T")


def run_locked(
    client: redis.Redis, namespace: str, name: str, *, ttl_s: int, work: Callable[[], T]
) -> T | None:
    """Run ``work`` only if no other process holds the job's lock; ``None`` if skipped.

    The lock expires after ``ttl_s`` seconds so a crashed holder cannot block the job.
    """
    lock = client.lock(GlobalKeys(namespace).lock(name), timeout=ttl_s, blocking=False)
    with redis_errors():
        if not lock.acquire(blocking=False):
            return None
    try:
        return work()
    finally:
        with contextlib.suppress(redis.exceptions.LockError):
            lock.release()


@dataclass(frozen=True)
class JobRun:
    """A periodic job's last run, as ``record_run`` left it."""

    job: str
    started: float
    finished: float
    outcome: str  # ok | skipped | failed | retry
    duration_s: float
    error: str = ""


def record_run(
    client: redis.Redis, namespace: str, job: str, *, started: float, finished: float,
    outcome: str, error: str = "",
) -> None:  # fmt: skip
    """Overwrite the job's last-run hash (one small HASH per job, no TTL)."""
    keys = GlobalKeys(namespace)
    with redis_errors():
        pipe = client.pipeline(transaction=False)
        pipe.sadd(keys.jobs, job)
        pipe.hset(keys.job_run(job), mapping={
            "started": f"{started:.3f}", "finished": f"{finished:.3f}", "outcome": outcome,
            "duration_s": f"{finished - started:.3f}", "error": error[:500],
        })  # fmt: skip
        pipe.execute()


def known_jobs(client: redis.Redis, namespace: str) -> list[str]:
    """The jobs that recorded a run in this namespace."""
    with redis_errors():
        return sorted(client.smembers(GlobalKeys(namespace).jobs))  # type: ignore[arg-type]


def last_runs(client: redis.Redis, namespace: str, jobs: Iterable[str]) -> dict[str, JobRun | None]:
    """Each job's last run (None: never recorded), in one pipelined round trip."""
    names = list(jobs)
    keys = GlobalKeys(namespace)
    with redis_errors():
        pipe = client.pipeline(transaction=False)
        for job in names:
            pipe.hgetall(keys.job_run(job))
        rows: list[dict[str, str]] = pipe.execute()
    out: dict[str, JobRun | None] = {}
    for job, row in zip(names, rows, strict=True):
        try:
            out[job] = JobRun(job, float(row["started"]), float(row["finished"]),
                              row["outcome"], float(row["duration_s"]), row.get("error", ""))
        except (KeyError, ValueError):  # never run (or a hand-edited hash)
            out[job] = None
    return out
