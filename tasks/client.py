"""Producer side: a ``MemoryClient`` wired to Celery, for agent processes.

from memstrata.tasks.client import connect
memory = connect()
memory.record_turn(user_id="u_42", session_id="s_123", task_id="bug456", messages=[...])
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading

from memstrata.core.api import MemoryClient
from memstrata.core.runtime import Runtime, get_runtime
from memstrata.tasks._options import DRAIN
from memstrata.tasks.app import app

log = logging.getLogger(__name__)


def drain_owner(tenant_id: str | None, user_id: str) -> dict[str, str]:
    """The drain's display kwargs: whose turn kicked it (ids only, never content), so a
    failure in Flower and the task's log line name an owner, not just a shard."""
    return {"tenant_id": tenant_id or "", "user_id": user_id}


class CeleryKicker:
    """Enqueues one drain task for a shard, synchronously (tests, scripts)."""

    def __call__(self, shard: int) -> None:
        app.send_task(DRAIN, args=[shard])

    def kick_for(self, shard: int, *, tenant_id: str | None, user_id: str) -> None:
        app.send_task(DRAIN, args=[shard], kwargs=drain_owner(tenant_id, user_id))


class BackgroundKicker:
    """Publishes drain tasks from a daemon thread, so the agent never waits on the broker.

    A Celery publish costs 0.5 ms on an idle machine and several ms under load, which is
    more than the rest of ``record_turn()``.  The turn is already durable (L0) and queued
    (Redis stream) when the kick is handed over; if the process dies before the publish,
    the shard's kick flag expires and Beat's ``ingest_reclaim`` kicks the shard instead.
    Pending kicks are flushed at interpreter exit (up to ``flush_timeout_s`` seconds).
    """

    def __init__(self, flush_timeout_s: float = 5.0) -> None:
        self._q: queue.SimpleQueue[tuple[int, dict[str, str]] | None] = queue.SimpleQueue()
        self._flush_timeout_s = flush_timeout_s
        self._thread = threading.Thread(target=self._run, name="memstrata-kicker", daemon=True)
        self._thread.start()
        self._pid = os.getpid()
        atexit.register(self.close)

    def __call__(self, shard: int) -> None:
        self._q.put((shard, {}))

    def kick_for(self, shard: int, *, tenant_id: str | None, user_id: str) -> None:
        self._q.put((shard, drain_owner(tenant_id, user_id)))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            shard, owner = item
            try:
                app.send_task(DRAIN, args=[shard], kwargs=owner)
            except Exception:  # the reclaim job re-kicks the shard; never kill the thread
                log.exception("could not enqueue drain for shard %s", shard)

    def close(self) -> None:
        """Send what is pending, then stop the thread."""
        if os.getpid() != self._pid or not self._thread.is_alive():
            return
        self._q.put(None)
        self._thread.join(self._flush_timeout_s)


_kicker: BackgroundKicker | None = None


def connect(*, background_kicks: bool = True, runtime: Runtime | None = None) -> MemoryClient:
    """A client for this process (build it after fork, once per agent process)."""
    global _kicker
    res = runtime or get_runtime()
    kicker: CeleryKicker | BackgroundKicker = CeleryKicker()
    if background_kicks:
        if _kicker is None or _kicker._pid != os.getpid():
            _kicker = BackgroundKicker()
        kicker = _kicker
    return MemoryClient(transcript=res.transcript, queue=res.queue, kicker=kicker)
