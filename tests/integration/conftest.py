"""Real Celery processes for integration tests: a worker (and Beat) per test namespace.

The worker is a subprocess started exactly as in production (``celery -A memstrata.tasks.app
worker``, prefork with one child, so ``worker_process_init`` rebuilds the resources after
fork), with the test's settings handed over as ``MEMSTRATA_*`` environment variables.
Because the broker's ``global_keyprefix`` is ``<namespace>:celery:``, each test talks to
its own queues and can run beside the demo or another test run on the same Redis.
The test process sends tasks through its own small Celery app built from the same
``celery_config`` (the global ``tasks.app.app`` is configured once per process from the
environment, so it cannot follow a per-test namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from pydantic import SecretStr

from memstrata.core.api import MemoryClient
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings
from memstrata.tasks._options import DRAIN
from memstrata.tasks.app import celery_config
from memstrata.tasks.client import drain_owner

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def settings_env(settings: Settings) -> dict[str, str]:
    """``MEMSTRATA_*`` variables that rebuild exactly ``settings`` in another process.

    Nested models use the ``__`` delimiter of :class:`Settings`; secrets are revealed
    because the child needs the real value.
    """
    env: dict[str, str] = {}

    def put(prefix: str, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            key = f"{prefix}{name.upper()}"
            if isinstance(value, Mapping):
                put(f"{key}__", value)
            elif isinstance(value, SecretStr):
                env[key] = value.get_secret_value()
            elif isinstance(value, list | tuple | set | frozenset):
                env[key] = json.dumps(
                    sorted(value) if isinstance(value, set | frozenset) else list(value)
                )
            elif value is not None:
                env[key] = str(value)

    put("MEMSTRATA_", settings.model_dump())
    return env


def process_env(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``MEMSTRATA_*`` replaced by the test's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(settings_env(settings))
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class CeleryProcess:
    """One ``celery`` subprocess (worker or beat) with its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def succeeded(self, task_name: str) -> int:
        """How many runs of ``task_name`` the worker has logged as succeeded."""
        return len(re.findall(rf"Task {re.escape(task_name)}\[[^\]]+\] succeeded", self.log()))

    def wait_for_log(self, needle: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.log():
                return
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.1)
        pytest.fail(f"{self.name} not ready after {timeout_s}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL of the process group if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def _die_with_parent() -> None:
    """Linux: SIGTERM the child if pytest dies, so no worker outlives an aborted run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_celery(
    role: str,
    args: list[str],
    *,
    settings: Settings,
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> CeleryProcess:
    cmd = [sys.executable, "-m", "celery", "-A", "memstrata.tasks.app", role, *args,
           "--loglevel", "INFO"]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=process_env(settings, env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: teardown reaches the children
            preexec_fn=_die_with_parent,
        )
    return CeleryProcess(role, proc, log_path)


@pytest.fixture
def celery_worker(res: Runtime, tmp_path: Path) -> Iterator[CeleryProcess]:
    """A real worker on all three queues of the test's namespace, ready when yielded.

    Depends on ``res`` so it stops before the namespace's keys are purged.
    """
    node = f"w-{res.settings.key_namespace}@%h"
    worker = start_celery(
        "worker",
        [
            "-Q",
            "ingest,ltm,maintenance",
            "-P",
            "prefork",
            "-c",
            "1",
            "-n",
            node,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        settings=res.settings,
        log_path=tmp_path / "worker.log",
    )
    try:
        worker.wait_for_log(" ready.")
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def start_beat(
    res: Runtime, tmp_path: Path
) -> Iterator[Callable[[Mapping[str, str]], CeleryProcess]]:
    """Factory for a Beat process with extra env (e.g. a short sweep interval)."""
    started: list[CeleryProcess] = []

    def start(env: Mapping[str, str]) -> CeleryProcess:
        beat = start_celery(
            "beat",
            ["-s", str(tmp_path / "beat-schedule"), "--pidfile", ""],
            settings=res.settings,
            log_path=tmp_path / "beat.log",
            env=env,
        )
        started.append(beat)
        beat.wait_for_log("beat: Starting...")
        return beat

    yield start
    for beat in started:
        beat.stop()


@pytest.fixture
def producer(settings: Settings) -> Iterator[Celery]:
    """A Celery app that sends to the test namespace's queues (same config as the worker)."""
    app = Celery("memstrata-test-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    yield app
    app.close()


class AppKicker:
    """``tasks.client.CeleryKicker``, bound to the test's producer app."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def __call__(self, shard: int) -> None:
        self.app.send_task(DRAIN, args=[shard])

    def kick_for(self, shard: int, *, tenant_id: str | None, user_id: str) -> None:
        self.app.send_task(DRAIN, args=[shard], kwargs=drain_owner(tenant_id, user_id))


@pytest.fixture
def memory(res: Runtime, producer: Celery) -> MemoryClient:
    """What an agent process holds: ``record_turn`` hands turns to the real worker."""
    return MemoryClient(transcript=res.transcript, queue=res.queue, kicker=AppKicker(producer))


def wait_until(
    predicate: Callable[[], bool],
    what: str,
    *,
    timeout_s: float = 20.0,
    interval_s: float = 0.05,
    worker: CeleryProcess | None = None,
) -> None:
    """Poll ``predicate`` until it holds; fail with the worker's log tail if it never does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    tail = f"\nworker log:\n{worker.log_tail()}" if worker else ""
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}{tail}")


def shard_idle(res: Runtime, shard: int) -> bool:
    """No drain queued or running and nothing left in the shard's stream."""
    if res.redis.exists(res.queue.keys.ingest_kick(shard)):
        return False
    return res.queue.backlog(shard) == (0, 0)


def wait_drained(res: Runtime, shard: int, worker: CeleryProcess) -> None:
    wait_until(lambda: shard_idle(res, shard), f"shard {shard} to drain", worker=worker)


def user_state(res: Runtime, user_id: str, *, decisions: bool = True) -> dict[str, Any]:
    """Every STM key of a user with its full content (no TTLs), for exact comparisons."""
    out: dict[str, Any] = {}
    prefix = res.stm.keys(user_id).prefix
    for key in sorted(res.redis.scan_iter(match=f"{prefix}*", count=1000)):
        suffix = key[len(prefix) :]
        if not decisions and suffix.startswith("decisions:"):
            continue
        kind = res.redis.type(key)
        if kind == "hash":
            out[suffix] = res.redis.hgetall(key)
        elif kind == "zset":
            out[suffix] = res.redis.zrange(key, 0, -1, withscores=True)
        else:
            out[suffix] = (kind, res.redis.dump(key))
    return out
