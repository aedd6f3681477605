"""Helpers for periodic jobs: a Redis lock so a job is safe to run twice at once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
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
