"""Celery worker subprocesses of one namespace, and this process's Celery app following
the benchmark's environment."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstrata.ops.bench.common.cpu import children_cpu_seconds
from memstrata.ops.bench.common.env import REPO


@dataclass
class WorkerGroup:
    """Celery worker subprocesses of one namespace, each in its own process group.

    Started with ``start()`` (waits until every node answers a ping) and always stopped
    with ``stop()`` (SIGTERM to the group, SIGKILL after a grace period), also when the
    benchmark fails, so no worker outlives its namespace.
    """

    env: Mapping[str, str]
    count: int = 1
    pool: str = "solo"
    concurrency: int = 1
    queues: str = "ingest,maintenance"
    log_dir: Path | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def start(self, timeout_s: float = 30.0, *, wait: bool = True) -> float:
        """Start the workers; returns seconds until all answered a ping (if ``wait``)."""
        t0 = time.perf_counter()
        tag = uuid.uuid4().hex[:6]
        for i in range(self.count):
            name = f"bench{tag}w{i}@%h"
            cmd = [
                sys.executable, "-m", "celery", "-A", "memstrata.tasks.app", "worker",
                "-Q", self.queues, "-P", self.pool, "-c", str(self.concurrency),
                "-n", name, "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                "--without-heartbeat",
            ]  # fmt: skip
            log = (
                open(self.log_dir / f"worker{i}.log", "wb")  # noqa: SIM115 - closed by the child
                if self.log_dir
                else subprocess.DEVNULL
            )
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.procs.append(proc)
            self.names.append(name.replace("%h", platform.node()))
        if wait:
            self._wait_ready(timeout_s)
        return time.perf_counter() - t0

    def _wait_ready(self, timeout_s: float) -> None:
        from memstrata.tasks.app import app

        deadline = time.monotonic() + timeout_s
        want = set(self.names)
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"celery worker exited early with code {p.returncode}")
            replies = app.control.ping(destination=list(want), timeout=0.5) or []
            seen = {name for reply in replies for name in reply}
            if want <= seen:
                return
        raise TimeoutError(f"workers {sorted(want)} not ready after {timeout_s:.0f} s")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def cpu_seconds(self) -> float:
        return sum(children_cpu_seconds(pid) for pid in self.pids)

    def stop(self, grace_s: float = 5.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        # the pool children of a prefork worker share its group: make sure none is left
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        self.procs.clear()
        self.names.clear()


@contextlib.contextmanager
def workers(env: Mapping[str, str], **kwargs: Any) -> Iterator[WorkerGroup]:
    group = WorkerGroup(env=env, **kwargs)
    try:
        group.start()
        yield group
    finally:
        group.stop()


def celery_follow_env() -> None:
    """Point this process's Celery app at the settings of the current environment.

    The app reads its configuration once per process; a benchmark that changes the key
    namespace (and so the broker's key prefix) must reconfigure it, and hand it back
    afterwards, or ``memstrata bench all`` would send one benchmark's tasks to another's
    queues.  Connections are pooled per broker options, so dropping the pools is enough.
    """
    from memstrata.core.settings import load_settings
    from memstrata.tasks.app import app, celery_config

    app.conf.update(celery_config(load_settings()))
    app._pool = None
    app.amqp._producer_pool = None
