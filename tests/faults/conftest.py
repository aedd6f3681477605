"""Fault-suite fixtures: a throwaway Redis with AOF, real worker and Beat, marker ledgers.

Every test here gets its own ``redis-server`` on a free port (``--appendonly yes``,
``--appendfsync always`` so a SIGKILL loses nothing Redis acknowledged), never the shared
6379, and its own Celery worker and Beat subprocesses (``tests/integration/conftest.py``).
A *marker* is one user message that the rule extractor always turns into one STM item;
:class:`Ledger` counts, per marker, whether it was acknowledged by ``record_turn``, is
in L0, is in STM (processed), and is lost or duplicated.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.ops.bench.common.scratch_redis import RedisServer
from memstrata.ops.bench.faults import Ledger, letters, marker_turn, produce
from tests.integration.conftest import (  # noqa: F401  (fixtures re-exported for this suite)
    CeleryProcess,
    memory,
    producer,
    start_beat,
    start_celery,
)

__all__ = ["Ledger", "RedisServer", "Workers", "letters", "marker_turn", "produce",
           "wait_converged"]  # fmt: skip
CONVERGE_S = 90.0  # bounded wait for convergence; the XAUTOCLAIM idle time here is 1 s


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.kill(signal.SIGTERM)


@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path) -> Settings:
    """The suite's settings: the throwaway Redis, a fresh namespace and L0 folder."""
    return load_settings(
        redis_url=redis_server.url,
        key_namespace=f"f{uuid.uuid4().hex[:10]}",
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        ltm=LtmSettings(enabled=False, history_enabled=False),  # the Milvus test sets its own
    )


def worker_args(node: str, concurrency: int = 1) -> list[str]:
    """As ``memstrata worker`` runs it: gossip, mingle, heartbeat and task events on (the
    fanout/pub-sub channels they add are part of what a Redis restart has to survive)."""
    return ["-Q", "ingest,ltm,maintenance", "-P", "prefork", "-c", str(concurrency), "-n", node,
            "-E"]  # fmt: skip


@dataclass
class Workers:
    """Starts (and restarts) the suite's worker; every process started is stopped after."""

    res: Runtime
    tmp_path: Path
    started: list[CeleryProcess] = field(default_factory=list)

    def start(self, concurrency: int = 2) -> CeleryProcess:
        n = len(self.started)
        worker = start_celery(
            "worker",
            worker_args(f"w{n}-{self.res.settings.key_namespace}@%h", concurrency),
            settings=self.res.settings,
            log_path=self.tmp_path / f"worker{n}.log",
        )
        self.started.append(worker)
        worker.wait_for_log(" ready.", timeout_s=30)
        return worker

    def kill_group(self, worker: CeleryProcess) -> None:
        os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(10)


@pytest.fixture
def workers(res: Runtime, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(res, tmp_path)
    yield w
    for p in w.started:
        p.stop()


def wait_converged(
    ledger: Ledger,
    res: Runtime,
    timeout_s: float = CONVERGE_S,
    worker: CeleryProcess | None = None,
) -> float:
    """Poll until every acknowledged marker is processed; the seconds it took, or fail."""
    t0 = time.monotonic()
    while True:
        counts = ledger.counts(res)
        if counts["lost"] == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            tail = ""
            if worker is not None:
                alive = "alive" if worker.proc.poll() is None else f"exited {worker.proc.poll()}"
                tail = f"\nworker {alive}; log:\n{worker.log_tail(30)}"
            pytest.fail(f"not converged after {timeout_s}s: {counts}{tail}")
        time.sleep(0.5)
