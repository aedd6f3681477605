"""Worker SIGKILL mid-drain: the whole process group, twice, while turns flow.

A replacement worker is started after each kill (as a supervisor would).  Entries the
killed worker had read but not acknowledged are reclaimed (XAUTOCLAIM via Beat's
``ingest-reclaim``), so every acknowledged turn reaches STM exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from memstrata.core.api import MemoryClient
from memstrata.core.runtime import Runtime
from tests.faults.conftest import Ledger, Workers, letters, produce, wait_converged
from tests.integration.conftest import CeleryProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KILLS = 2
TURNS_PER_PHASE = 20


def test_worker_sigkill_mid_drain_loses_and_duplicates_nothing(
    res: Runtime,
    memory: MemoryClient,
    workers: Workers,
    start_beat: Callable[[Mapping[str, str]], CeleryProcess],
) -> None:
    worker = workers.start()
    start_beat({})
    ledger = Ledger()
    for n in range(KILLS):
        produce(memory, ledger, f"k{letters(n)}", TURNS_PER_PHASE)  # the worker is draining
        workers.kill_group(worker)
        produce(memory, ledger, f"w{letters(n)}", 5)  # accepted while no worker runs
        worker = workers.start()
    produce(memory, ledger, "end", TURNS_PER_PHASE)
    wait_converged(ledger, res, worker=worker)
    counts = ledger.counts(res)
    assert counts["refused"] == 0, counts
    assert counts["lost"] == 0 and counts["duplicated"] == 0, counts
    assert (
        counts["in_l0"] == counts["acknowledged"] == KILLS * (TURNS_PER_PHASE + 5) + TURNS_PER_PHASE
    ), counts
