"""A throwaway ``redis-server`` on a free port, optionally with memstrata's shipped config.

For figures that depend on the server's settings (bytes per item: encodings) and for
tests that must change a setting the shared server may not (``maxmemory``).  No
persistence, its own temporary folder; stopped (its own pid) and removed afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from memstrata.ops.bench.common.env import REPO

SHIPPED_CONF = REPO / "ops" / "redis.conf"


def available() -> bool:
    return shutil.which("redis-server") is not None


def server_command(port: int, folder: Path, *args: str, conf: Path | None = None) -> list[str]:
    """A throwaway ``redis-server``'s command line: ``conf`` first, then no persistence and
    no ``maxmemory`` (a caller that wants a limit passes it in ``args``), then ``args``."""
    first = [str(conf)] if conf is not None else []
    return ["redis-server", *first, "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(folder), "--save", "", "--appendonly", "no", "--maxmemory", "0",
            *args]  # fmt: skip


def wait_until_up(
    client: redis.Redis, proc: subprocess.Popen[bytes], *, timeout_s: float, poll_s: float
) -> None:
    """Until the server answers ``PING``; raises if it exits or is not up in ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(poll_s)


@contextlib.contextmanager
def scratch_redis(*args: str, conf: Path | None = None) -> Iterator[redis.Redis]:
    """A client of a fresh ``redis-server`` (``conf`` first, then ``args``), then stop it.

    Durability settings of ``conf`` are overridden (no AOF, no snapshots) and so is any
    ``maxmemory``: a caller that wants a limit passes it in ``args``.
    """
    from memstrata.core.ltm.milvus_server import free_port

    folder = Path(tempfile.mkdtemp(prefix="memstrata-redis-"))
    port = free_port()
    proc = subprocess.Popen(server_command(port, folder, *args, conf=conf),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=10)
    try:
        wait_until_up(client, proc, timeout_s=15, poll_s=0.02)
        yield client
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


class RedisServer:
    """A restartable ``redis-server`` with AOF (``appendfsync always``) on a free port."""

    def __init__(self, folder: Path) -> None:
        from memstrata.core.ltm.milvus_server import free_port

        self.port = free_port()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self, ready_s: float = 15.0) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "yes", "--appendfsync", "always",
               "--dir", str(self.folder)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + ready_s
        try:
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

    def stop(self) -> None:
        """SIGTERM (Redis writes its AOF and exits); ``start`` again keeps the data."""
        self.kill(signal.SIGTERM)
        self.proc = None
