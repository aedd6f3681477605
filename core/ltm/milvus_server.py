"""Launcher of the single-machine Milvus: milvus-lite 2.5.1's bundled C++ server.

The ``milvus-lite`` wheel ships a ``milvus`` binary that serves the Milvus gRPC API for
one data file (``milvus <db_file> <address> [LOG_LEVEL]``).  Every memstrata process then
connects with ``MilvusClient(uri="http://127.0.0.1:PORT")`` exactly as to a real Milvus.
The bare binary neither refuses a second server on the same file nor keeps its logs
out of the temp folder, so this launcher adds both (MEASURED.md):

* an exclusive ``flock`` on ``<db_file>.server.lock``, inherited by the server process,
  so the lock lives exactly as long as the server does, even if the launcher dies;
* ``GLOG_log_dir`` set to a folder of ours;
* SIGTERM to stop, SIGKILL only if it does not exit within ``stop_timeout_s``;
* on Linux, the server gets SIGTERM when its launcher dies (``PR_SET_PDEATHSIG``), so a
  killed test run or ops script leaves no orphan server behind.

Run as ``python -m memstrata.core.ltm.milvus_server DB_FILE 127.0.0.1:19530`` to serve in the
foreground (ops scripts); tests and code use :class:`MilvusServer`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.errors import MilvusServerError

_DB_NAME_RE = re.compile(r"[A-Za-z0-9.\-_]{1,36}")  # what the binary itself accepts
_TCP_RE = re.compile(r"(?P<host>[0-9.]+|localhost):(?P<port>\d{1,5})")


def bundled_binary() -> Path:
    """Path of the ``milvus`` binary inside the installed milvus-lite wheel."""
    # find_spec, not import: milvus_lite/__init__ needs pkg_resources (setuptools<81)
    spec = importlib.util.find_spec("milvus_lite")
    if spec is None or not spec.submodule_search_locations:
        raise MilvusServerError("milvus-lite is not installed (pip install milvus-lite==2.5.1)")
    path = Path(next(iter(spec.submodule_search_locations))) / "lib" / "milvus"
    if not path.exists():
        raise MilvusServerError(f"no milvus binary at {path}: milvus-lite 2.5.x is required")
    return path


def free_port() -> int:
    """A TCP port that was free a moment ago (for tests and throwaway servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _check_address(address: str) -> None:
    if address.startswith("unix:"):
        if len(address) > 100:
            raise InvalidInput("unix socket path too long (max ~100 bytes)")
        return
    if not _TCP_RE.fullmatch(address):
        raise InvalidInput(f"address {address!r}: expected HOST:PORT or unix:/path")


def uri_for(address: str) -> str:
    """The ``MilvusClient`` uri of a server listening on ``address``."""
    return address if address.startswith("unix:") else f"http://{address}"


class MilvusServer:
    """One milvus-lite server process for one data file.

    ``start()`` returns when the server accepts connections (or raises
    :class:`MilvusServerError`); ``stop()`` is idempotent.  Timeouts are seconds.
    """

    def __init__(
        self,
        db_file: Path,
        address: str,
        *,
        log_dir: Path | None = None,
        log_level: str = "ERROR",
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.db_file = Path(db_file).resolve()
        if not _DB_NAME_RE.fullmatch(self.db_file.name):
            raise InvalidInput(
                f"milvus db file name {self.db_file.name!r}: use [A-Za-z0-9._-]{{1,36}}"
            )
        _check_address(address)
        self.address = address
        self.log_dir = Path(log_dir or self.db_file.parent / "milvus-logs").resolve()
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.lock_path = self.db_file.with_name(self.db_file.name + ".server.lock")
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None

    @property
    def uri(self) -> str:
        return uri_for(self.address)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _take_lock(self) -> IO[str]:
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        lock = self.lock_path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()
            lock.close()
            raise MilvusServerError(
                f"a Milvus server already serves {self.db_file} ({holder or 'holder unknown'})"
            ) from None
        return lock

    def start(self) -> None:
        """Start the server and wait until its port (or socket) accepts connections."""
        if self.proc is not None and self.proc.poll() is None:
            return
        binary = bundled_binary()
        lock = self._take_lock()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = f"{binary.parent}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
        env["GLOG_log_dir"] = str(self.log_dir)
        out = (self.log_dir / "server.out").open("ab")
        try:
            self.proc = subprocess.Popen(
                [str(binary), str(self.db_file), self.address, self.log_level],
                cwd=str(self.db_file.parent),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(lock.fileno(),),  # the server holds the lock as long as it lives
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        finally:
            out.close()
        lock.seek(0)
        lock.truncate()
        lock.write(json.dumps({"pid": self.proc.pid, "address": self.address}))
        lock.flush()
        self._lock = lock
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise MilvusServerError(
                    f"milvus server exited with {self.proc.returncode}; see {self.log_dir}"
                )
            if self._accepts():
                return
            time.sleep(0.05)
        raise MilvusServerError(f"milvus server not ready after {self.start_timeout_s}s")

    def _accepts(self) -> bool:
        try:
            if self.address.startswith("unix:"):
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.settimeout(0.5)
                    sock.connect(self.address[len("unix:") :])
            else:
                host, port = self.address.rsplit(":", 1)
                with socket.create_connection((host, int(port)), timeout=0.5):
                    pass
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; releases the file lock."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def __enter__(self) -> MilvusServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def serve_forever(db_file: Path, address: str, log_dir: Path | None = None) -> int:
    """Foreground mode for ops scripts: start, wait, stop on SIGTERM/SIGINT."""
    server = MilvusServer(db_file, address, log_dir=log_dir)
    stopping = False

    def _on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server.start()
    try:
        while not stopping and server.proc is not None and server.proc.poll() is None:
            time.sleep(0.2)
        code = 0 if stopping else 1
    finally:
        server.stop()
    return code


if __name__ == "__main__":  # pragma: no cover - ops entry point
    if len(sys.argv) not in (3, 4):
        sys.stderr.write(
            "usage: python -m memstrata.core.ltm.milvus_server DB_FILE HOST:PORT [LOG_DIR]\n"
        )
        sys.exit(2)
    sys.exit(
        serve_forever(
            Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]) if len(sys.argv) == 4 else None
        )
    )
