"""Recall bookkeeping off the hot path: access counts and the last-recall flag.

``recall()`` only appends a record to an in-process deque; a daemon thread writes the
records in one pipeline every ``interval_s`` seconds (and at exit).  Waking a thread on
every recall cost more than the write itself on a busy 2-core machine.  The counts feed
promotion ("repeated hits") and LTM access counts; a lost batch at a crash only delays
them.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading

from memstrata.core.errors import MemstrataError
from memstrata.core.stm.store import RecallMark, StmStore

log = logging.getLogger(__name__)

FLAG_TTL_S = 3600
ACCESS_TTL_S = 30 * 24 * 3600


class AccessLog:
    """Buffers :class:`RecallMark` records and writes them through the STM store."""

    def __init__(self, stm: StmStore, *, interval_s: float = 0.2) -> None:
        self._stm = stm
        self.interval_s = interval_s
        self._pending: collections.deque[RecallMark] = collections.deque(maxlen=100_000)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recall-access", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def add(self, record: RecallMark) -> None:
        self._pending.append(record)

    def flush(self) -> int:
        """Write what is pending now; returns the number of records written."""
        batch = []
        while self._pending:
            batch.append(self._pending.popleft())
        if not batch:
            return 0
        try:
            self._stm.record_recalls(batch, flag_ttl_s=FLAG_TTL_S, access_ttl_s=ACCESS_TTL_S)
        except MemstrataError as exc:
            log.warning("recall bookkeeping of %d records skipped: %s", len(batch), exc)
            return 0
        return len(batch)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.flush()
