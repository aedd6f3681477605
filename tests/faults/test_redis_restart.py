"""D1: a Redis restart (SIGTERM and SIGKILL, AOF kept) under load leaves a live worker.

Turns flow from one producer while the suite's Redis is restarted several times.  After
the restarts the *same* worker process must still be alive (no supervisor restarts it
here) and every turn ``record_turn`` acknowledged must reach STM exactly once.  Turns
recorded while Redis is down raise ``StoreUnavailable`` and are counted as refused, not
acknowledged: re-queueing those from L0 is the reconciler's job, not this test's.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping

import pytest

from memstrata.core.api import MemoryClient
from memstrata.core.runtime import Runtime
from tests.faults.conftest import (
    Ledger,
    RedisServer,
    Workers,
    letters,
    produce,
    wait_converged,
)
from tests.integration.conftest import CeleryProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RESTARTS = (signal.SIGTERM, signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)
TURNS_PER_PHASE = 15
OUTAGE_S = 2.0


def test_worker_survives_redis_restarts(
    res: Runtime,
    memory: MemoryClient,
    redis_server: RedisServer,
    workers: Workers,
    start_beat: Callable[[Mapping[str, str]], CeleryProcess],
) -> None:
    worker = workers.start()
    start_beat({})
    ledger = Ledger()
    for n, sig in enumerate(RESTARTS):
        produce(memory, ledger, f"p{letters(n)}", TURNS_PER_PHASE)  # the worker is mid-drain now
        redis_server.kill(sig)
        produce(memory, ledger, f"d{letters(n)}", 2)  # during the outage: refused, not acknowledged
        time.sleep(OUTAGE_S)  # long enough for the worker to notice and start reconnecting
        redis_server.start()
    produce(memory, ledger, "end", TURNS_PER_PHASE)
    wait_converged(ledger, res, worker=worker)
    counts = ledger.counts(res)
    assert worker.proc.poll() is None, f"worker died:\n{worker.log_tail()}"
    assert "Unrecoverable error" not in worker.log(), worker.log_tail()
    assert counts["lost"] == 0 and counts["duplicated"] == 0, counts
    assert counts["in_l0"] == counts["acknowledged"], counts
