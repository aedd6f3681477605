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
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from core.api import MemoryClient
from core.errors import StoreUnavailable
from core.ltm.config import LtmSettings
from core.runtime import Runtime
from core.settings import Settings, load_settings
from tests.integration.conftest import (  # noqa: F401  (fixtures re-exported for this suite)
    CeleryProcess,
    memory,
    producer,
    start_beat,
    start_celery,
)

READY_S = 15.0
CONVERGE_S = 90.0  # bounded wait for convergence; the XAUTOCLAIM idle time here is 1 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A restartable ``redis-server`` with AOF on a fixed free port and folder."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "yes", "--appendfsync", "always",
               "--dir", str(self.folder)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + READY_S
        while True:
            try:
                client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)
            finally:
                client.close()

    def kill(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)

    def restart(self, sig: signal.Signals, down_s: float) -> None:
        self.kill(sig)
        time.sleep(down_s)
        self.start()


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


def letters(n: int) -> str:
    """``n`` spelled in letters: the extractor's fingerprint folds digits, not letters."""
    out = ""
    while True:
        n, r = divmod(n, 26)
        out = chr(ord("a") + r) + out
        if n == 0:
            return out


def marker(tag: str) -> str:
    return f"mk{tag}z"


def marker_turn(tag: str) -> list[dict[str, str]]:
    return [{"role": "user",
             "content": f"My neighbour keeps a parrot named {marker(tag)} in the garden shed",
             "message_id": f"m-{tag}"}]  # fmt: skip


@dataclass
class Ledger:
    """Markers sent, acknowledged (``record_turn`` returned) and refused (it raised)."""

    acknowledged: list[tuple[str, str]] = field(default_factory=list)  # (user, tag)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def counts(self, res: Runtime) -> dict[str, int]:
        """``in_l0``, ``processed``, ``lost`` and ``duplicated`` over acknowledged markers."""
        l0 = _l0_text(res.settings.transcript_dir)
        stm: dict[str, list[str]] = {}
        processed = lost = duplicated = in_l0 = 0
        for user, tag in self.acknowledged:
            if user not in stm:
                stm[user] = _stm_items(res, user)
            m = marker(tag)
            in_l0 += 1 if m in l0 else 0
            hits = sum(v.count(m) > 0 for v in stm[user])
            copies = l0.count(m)
            processed += 1 if hits else 0
            lost += 0 if hits else 1
            duplicated += 1 if hits > 1 or copies > 1 else 0
        return {"acknowledged": len(self.acknowledged), "refused": len(self.refused),
                "in_l0": in_l0, "processed": processed, "lost": lost,
                "duplicated": duplicated}  # fmt: skip


def _l0_text(folder: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*.jsonl")))


def _stm_items(res: Runtime, user: str) -> list[str]:
    """Each STM item of ``user`` as one text (its hash values joined)."""
    prefix = res.stm.keys(user).prefix
    out = []
    for key in res.redis.scan_iter(match=f"{prefix}item:*", count=1000):
        values = res.redis.hgetall(key)
        out.append(" ".join(str(v) for v in values.values()))
    return out


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


def produce(client: MemoryClient, ledger: Ledger, phase: str, count: int, users: int = 3) -> None:
    """``count`` marker turns over ``users`` users; a turn refused with StoreUnavailable is
    counted as refused (re-queueing it from L0 is the reconciler's job), not acknowledged."""
    for k in range(count):
        user, tag = f"u{k % users}", f"{phase}x{letters(k)}"
        try:
            client.record_turn(user_id=user, session_id=f"s{phase}", messages=marker_turn(tag),
                               turn_id=f"t-{tag}")  # fmt: skip
        except StoreUnavailable:
            ledger.refused.append((user, tag))
        else:
            ledger.acknowledged.append((user, tag))
