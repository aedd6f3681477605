"""Run the Celery roles (worker, Beat, Flower) as child processes and stop them cleanly.

Each child runs in its own session (so its own process group): Ctrl-C in the terminal
reaches only ``memstrata up``, which then stops the children in a fixed order.  A stop
sends SIGTERM to the child's main process (a Celery worker then finishes its running
tasks: a warm shutdown), waits ``timeout_s`` seconds, and only then SIGKILLs the whole
process group, so no pool process is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from memstrata.core.settings import Settings

CELERY_APP = "memstrata.tasks.app"
WORKER_QUEUES = ("ingest", "ltm", "maintenance")


def celery_argv(*args: str) -> list[str]:
    """``python -m celery -A memstrata.tasks.app <args>`` with this interpreter (the venv's)."""
    return [sys.executable, "-m", "celery", "-A", CELERY_APP, *args]


def _node_name(settings: Settings, queues: Sequence[str]) -> str:
    """``memstrata-<ns>@%h``, with the queues when a worker serves only some of them, so
    per-queue workers on one host have distinct names (Celery refuses duplicates)."""
    part = "" if set(queues) == set(WORKER_QUEUES) else "-" + "-".join(queues)
    return f"memstrata-{settings.key_namespace}{part}@%h"


def worker_argv(
    settings: Settings,
    *,
    concurrency: int | None = None,
    pool: str | None = None,
    loglevel: str = "info",
    hostname: str | None = None,
    queues: Sequence[str] = WORKER_QUEUES,
) -> list[str]:
    """A worker on every memstrata queue, with task events on (``-E``) for Flower."""
    argv = celery_argv(
        "worker",
        "-Q", ",".join(queues),
        "-E",
        "-l", loglevel,
        "-n", hostname or _node_name(settings, queues),
    )  # fmt: skip
    if concurrency:
        argv += ["-c", str(concurrency)]
    if pool:
        argv += ["-P", pool]
    return argv


def beat_argv(
    settings: Settings, *, schedule: Path | None = None, loglevel: str = "info"
) -> list[str]:
    """Celery Beat with its schedule file under ``var/`` (one file per key namespace)."""
    path = schedule or Path("var") / f"beat-{settings.key_namespace}.schedule"
    path.parent.mkdir(parents=True, exist_ok=True)
    return celery_argv("beat", "-s", str(path), "-l", loglevel)


def flower_argv(settings: Settings, *, address: str) -> list[str]:
    """Flower on ``address:flower_port``; credentials travel in the environment, not argv."""
    return celery_argv("flower", f"--port={settings.flower_port}", f"--address={address}")


MIN_FLOWER_PASSWORD_CHARS = 12
"""Shorter Flower passwords are refused outside ``MEMSTRATA_PROFILE=dev`` (review D8: a
1-character password was accepted); the generated ones have 20 or more."""


def flower_env(settings: Settings) -> dict[str, str]:
    """``FLOWER_BASIC_AUTH`` for the Flower process (kept out of ``ps`` output)."""
    if settings.flower_password is None or not settings.flower_password.get_secret_value():
        raise ValueError(
            "Flower needs a password: set MEMSTRATA_FLOWER_PASSWORD "
            "(bash ops/quickstart.sh generates one into var/flower-password)"
        )
    password = settings.flower_password.get_secret_value()
    if len(password) < MIN_FLOWER_PASSWORD_CHARS and settings.profile != "dev":
        raise ValueError(
            f"MEMSTRATA_FLOWER_PASSWORD is shorter than {MIN_FLOWER_PASSWORD_CHARS} characters; "
            "set a longer one (or unset it: memstrata up and ops/quickstart.sh generate one)"
        )
    if ":" in settings.flower_user or "," in settings.flower_user + password:
        raise ValueError("MEMSTRATA_FLOWER_USER may not contain ':' and neither may contain ','")
    return {"FLOWER_BASIC_AUTH": f"{settings.flower_user}:{password}"}


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@dataclass
class Child:
    """One supervised role: its command line, environment and log file."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=dict(self.env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM the main process, wait, then SIGKILL its whole process group."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    print(
                        f"  {self.name} did not stop in {timeout_s:g} s: SIGKILL", file=sys.stderr
                    )
        # whatever is left of the group (pool processes of a killed worker)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        code = self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def wait_for(predicate: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout_s`` seconds have passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


@dataclass
class Supervisor:
    """Restarts dead children, bounded: at most ``max_restarts`` per child in ``window_s``,
    each after an exponential backoff (``backoff_s`` doubling up to ``max_backoff_s``).

    :meth:`poll` is called from a foreground loop with the current monotonic time; it
    returns a child that has used up its restarts (the caller then stops the stack), or
    ``None``.  Every death and restart is printed to stderr with the child's log tail.
    """

    children: list[Child]
    max_restarts: int = 5
    window_s: float = 300.0
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    restarts: dict[str, list[float]] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            print(text, file=sys.stderr, flush=True)

    def poll(self, now: float) -> Child | None:
        for child in self.children:
            code = child.exit_code()
            if code is None:
                continue
            if child.name not in self.due:
                recent = [t for t in self.restarts.get(child.name, []) if now - t < self.window_s]
                self.restarts[child.name] = recent
                if len(recent) >= self.max_restarts:
                    self._say(
                        f"\n{child.name} (pid {child.pid}) exited with code {code} after "
                        f"{len(recent)} restarts in {self.window_s:g} s: giving up; last lines "
                        f"of {child.log_path}:\n{child.tail()}"
                    )
                    return child
                delay = min(self.backoff_s * 2 ** len(recent), self.max_backoff_s)
                self.due[child.name] = now + delay
                self._say(
                    f"\n{child.name} (pid {child.pid}) exited with code {code}; restart "
                    f"{len(recent) + 1}/{self.max_restarts} in {delay:g} s; last lines of "
                    f"{child.log_path}:\n{child.tail()}"
                )
            elif now >= self.due[child.name]:
                del self.due[child.name]
                child.stop(timeout_s=1.0)  # reap what is left of its process group
                child.start()
                self.restarts[child.name].append(now)
                self._say(f"  restarted {child.name}: pid {child.pid}")
        return None
