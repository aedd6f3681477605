"""D1 end to end: Redis restarts under a worker that ``memstrata up``'s supervisor runs.

The worker and Beat are started as ``memstrata up`` starts them (``ops.procs.Child`` with
``worker_argv``/``beat_argv``) and a :class:`~memstrata.ops.procs.Supervisor` polls them
from a thread, as ``up``'s foreground loop does.  The suite's AOF Redis is restarted six
times (SIGTERM and SIGKILL alternating) while marker turns flow; in the last cycle the
worker is SIGKILLed too while Redis is down, so the supervisor must start a replacement
against a broker that is not there yet.  After **each** restart a probe turn must be
processed (a worker is consuming again); turns refused during an outage are retried with
their ``turn_id`` once Redis is back (RELIABILITY.md R3).  At the end every acknowledged
turn is in STM once and in L0 once.  Speed is not asserted: the waits are upper bounds.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.core.api import MemoryClient
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.ops.bench.faults import marker_turn
from memstrata.ops.procs import Child, Supervisor, beat_argv, worker_argv
from tests.faults.conftest import Ledger, RedisServer, letters, produce, wait_converged
from tests.integration.conftest import process_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RESTARTS = (signal.SIGTERM, signal.SIGKILL) * 3
TURNS_PER_CYCLE = 8
OUTAGE_S = 1.5
CONSUMING_WITHIN_S = 45.0  # upper bound for a probe turn after a restart (a supervised
# replacement worker on the loaded 2-core machine takes ~10 s to boot)


@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path) -> Settings:
    """The suite's settings; kick flags held 1 s so a lost kick delays a drain by 1 s, not 30."""
    return load_settings(
        redis_url=redis_server.url,
        key_namespace=f"f{uuid.uuid4().hex[:10]}",
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        ingest_kick_ttl_ms=1000,
        ltm=LtmSettings(enabled=False, history_enabled=False),
    )


class Supervised:
    """Worker and Beat as ``memstrata up`` runs them, polled from a thread."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        env = process_env(settings)
        self.worker = Child("worker", worker_argv(settings, concurrency=2, pool="prefork"), env,
                            folder / "worker.log")  # fmt: skip
        self.beat = Child("beat", beat_argv(settings, schedule=folder / "beat-schedule"), env,
                          folder / "beat.log")  # fmt: skip
        self.supervisor = Supervisor([self.worker, self.beat], backoff_s=0.5, max_backoff_s=2.0)
        self.gave_up: Child | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set() and self.gave_up is None:
            self.gave_up = self.supervisor.poll(time.monotonic())
            self._stop.wait(0.2)

    def start(self) -> None:
        self.worker.start()
        self.beat.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for child in (self.beat, self.worker):
            child.stop(timeout_s=15.0)

    def restarts(self, name: str) -> int:
        return len(self.supervisor.restarts.get(name, []))

    def logs(self) -> str:
        return f"worker:\n{self.worker.tail(40)}\nbeat:\n{self.beat.tail(10)}"


@pytest.fixture
def supervised(res: Runtime, tmp_path: Path) -> Iterator[Supervised]:
    s = Supervised(res.settings, tmp_path / "up")
    s.start()
    yield s
    s.stop()


def retry_refused(client: MemoryClient, ledger: Ledger) -> None:
    """Retry each refused turn with its ``turn_id`` (Redis is back): acknowledged once."""
    for user, tag in list(ledger.refused):
        client.record_turn(user_id=user, session_id=f"s{tag.split('x')[0]}",
                           messages=marker_turn(tag), turn_id=f"t-{tag}")  # fmt: skip
        ledger.refused.remove((user, tag))
        ledger.acknowledged.append((user, tag))


def probe(client: MemoryClient, res: Runtime, n: int, sup: Supervised) -> None:
    """One turn recorded after a restart must be processed: some worker consumes again."""
    ledger = Ledger()
    deadline = time.monotonic() + 10
    while not ledger.acknowledged:  # Redis answers PING before it accepts every command
        produce(client, ledger, f"probe{letters(n)}", 1, users=1)  # refused while it loads
        if not ledger.acknowledged:
            assert time.monotonic() < deadline, "Redis did not come back"
            ledger.refused.clear()
            time.sleep(0.2)
    try:
        wait_converged(ledger, res, timeout_s=CONSUMING_WITHIN_S)
    except pytest.fail.Exception:
        pytest.fail(f"restart {n}: no worker consumed within {CONSUMING_WITHIN_S}s\n"
                    f"{sup.logs()}")  # fmt: skip


def test_supervised_worker_consumes_again_after_every_redis_restart(
    res: Runtime,
    memory: MemoryClient,
    redis_server: RedisServer,
    supervised: Supervised,
) -> None:
    probe(memory, res, 0, supervised)  # the worker is up and consuming
    ledger = Ledger()
    for n, sig in enumerate(RESTARTS, start=1):
        produce(memory, ledger, f"p{letters(n)}", TURNS_PER_CYCLE)  # the worker is mid-drain
        redis_server.kill(sig)
        produce(memory, ledger, f"d{letters(n)}", 2)  # during the outage: refused
        if n == len(RESTARTS):  # and the worker dies while its broker is away
            assert supervised.worker.proc is not None
            os.killpg(supervised.worker.proc.pid, signal.SIGKILL)
        time.sleep(OUTAGE_S)
        redis_server.start()
        retry_refused(memory, ledger)
        probe(memory, res, n, supervised)  # then a worker is consuming again
        assert supervised.gave_up is None, supervised.logs()
    wait_converged(ledger, res)
    counts = ledger.counts(res)
    # Then every acknowledged turn (the retried ones too) is in STM once and in L0 once
    assert counts["refused"] == 0 and counts["lost"] == 0 and counts["duplicated"] == 0, counts
    assert counts["acknowledged"] == counts["in_l0"] == len(RESTARTS) * (TURNS_PER_CYCLE + 2)
    # And the supervisor replaced the killed worker; Beat never needed it
    assert supervised.restarts("worker") >= 1, supervised.logs()
    assert supervised.restarts("beat") == 0, supervised.logs()
    assert "Unrecoverable error" not in supervised.worker.log_path.read_text(), supervised.logs()
