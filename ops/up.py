"""``memstrata up``: worker, Beat and Flower as supervised children, the demo, then wait.

The children get this process's environment (so the same ``MEMSTRATA_*`` settings and
key namespace), with L0's folder pinned to an absolute path.  ``up`` waits until a
worker answers a ping and Flower's port is open, runs the demo through the real
workers, and then stays in the foreground until Ctrl-C (or SIGTERM), restarting a child
that dies (at most 5 times in 5 minutes, with backoff; then it gives up), and stops the
children: Beat first, so nothing new is scheduled, the worker last,
so it can finish what it holds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from urllib.parse import urlparse

from memstrata.core.metrics import configure_multiprocess
from memstrata.core.redact import redact
from memstrata.core.settings import load_settings
from memstrata.ops.demo_run import run_demo
from memstrata.ops.layout import upgrade_layouts
from memstrata.ops.procs import (
    Child,
    Supervisor,
    beat_argv,
    flower_argv,
    flower_env,
    port_in_use,
    wait_for,
    worker_argv,
)
from memstrata.ops.runtime import (
    CliError,
    absolute_transcript_dir,
    connected_runtime,
    workers_answering,
)

STOP_TIMEOUT_S = 20.0


class _Stop(Exception):
    """Raised by the signal handler to leave the foreground loop."""


FOLLOW_UP = (
    "\nLook again any time (the demo's tenant is 'demo'; run `source .venv/bin/activate`\n"
    "first, or call .venv/bin/memstrata):\n"
    "  memstrata inspect --tenant demo --user demo-en --session en_debug_session\n"
    "  memstrata explain --tenant demo --user demo-zh --session zh_debug_session --refused\n"
    "  memstrata compress --tenant demo --user demo-en --session en_debug_session\n"
    "  memstrata sweep --dry-run --ahead 86400\n"
)
"""Printed after the demo; tests/integration/test_cli_follow_up.py runs these lines verbatim."""


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _ensure_flower_password() -> bool:
    """Generate a Flower password for this run if none is configured; True if generated."""
    settings = load_settings()
    if settings.flower_password is not None and settings.flower_password.get_secret_value():
        return False
    os.environ["MEMSTRATA_FLOWER_PASSWORD"] = secrets.token_urlsafe(15)
    return True


def namespace_dir(namespace: str) -> Path:
    """``var/<namespace>``: the folder of one deployment's local files (logs, milvus-lite)."""
    return Path("var") / namespace


def log_dir(namespace: str) -> Path:
    """``var/<namespace>/log``; ``var/log`` for the default namespace, as it always was."""
    return Path("var/log") if namespace == "memory" else namespace_dir(namespace) / "log"


def _children(args: argparse.Namespace) -> list[Child]:
    absolute_transcript_dir()
    settings = load_settings()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = Path(args.log_dir)
    milvus = []
    target = urlparse(settings.ltm.milvus_uri)
    if target.hostname in {"127.0.0.1", "localhost"}:  # the embedded default: serve it here
        address = f"127.0.0.1:{target.port or 19530}"
        if port_in_use("127.0.0.1", target.port or 19530):
            raise CliError(
                f"something already listens on {address} (another deployment's Milvus?); "
                "memstrata up serves its own there and never attaches to another: stop it, "
                "or set MEMSTRATA_LTM__MILVUS_URI to a free port"
            )
        db = namespace_dir(settings.key_namespace) / "milvus" / "ltm.db"
        if settings.key_namespace == "memory":
            db = Path("var/milvus/ltm.db")  # where the default namespace always kept it
        argv = [sys.executable, "-m", "memstrata.ops.cli", "milvus", str(db), address]
        milvus = [Child("milvus", argv, env, logs / "milvus.log")]
    return [
        *milvus,
        Child("worker", worker_argv(settings, concurrency=args.concurrency), env,
              logs / "worker.log"),
        Child("beat", beat_argv(settings), env, logs / "beat.log"),
        Child("flower", flower_argv(settings, address=args.flower_address),
              {**env, **flower_env(settings)}, logs / "flower.log"),
    ]  # fmt: skip


def _dead(children: list[Child]) -> Child | None:
    return next((c for c in children if c.exit_code() is not None), None)


def _report_death(child: Child) -> None:
    print(
        f"\n{child.name} (pid {child.pid}) exited with code {child.exit_code()}; "
        f"last lines of {child.log_path}:\n{child.tail()}",
        file=sys.stderr,
        flush=True,
    )


def _wait_ready(children: list[Child], args: argparse.Namespace) -> None:
    settings = load_settings()

    def worker_ready() -> bool:
        if _dead(children):
            return True
        return bool(workers_answering(timeout_s=0.5))

    def flower_ready() -> bool:
        return bool(_dead(children)) or port_in_use(args.flower_address, settings.flower_port)

    t0 = time.monotonic()
    ok = wait_for(worker_ready, timeout_s=args.timeout) and wait_for(
        flower_ready, timeout_s=args.timeout
    )
    dead = _dead(children)
    if dead is not None:
        _report_death(dead)
        raise CliError(f"{dead.name} did not start")
    if not ok:
        raise CliError(f"services not ready after {args.timeout:g} s; see {args.log_dir}/")
    print(f"Services ready after {time.monotonic() - t0:.1f} s.", flush=True)


def _banner(children: list[Child], args: argparse.Namespace, generated: bool) -> None:
    settings = load_settings()
    password = settings.flower_password.get_secret_value() if settings.flower_password else ""
    print(f"memstrata up: key namespace {settings.key_namespace!r}, "
          f"Redis {redact(str(settings.redis_url))}")
    for c in children:
        print(f"  {c.name:<7} pid {c.pid:<7} log {c.log_path}")
    note = " (generated for this run; set MEMSTRATA_FLOWER_PASSWORD to fix it)" if generated else ""
    print(
        f"Flower: http://{args.flower_address}:{settings.flower_port}/  "
        f"user {settings.flower_user}  password {password}{note}",
        flush=True,
    )


def _foreground(children: list[Child]) -> int:
    """Supervise until Ctrl-C: a dead child is restarted (bounded, with backoff); only a
    child that keeps dying stops the stack."""
    print("\nRunning. Press Ctrl-C to stop worker, Beat and Flower.", flush=True)
    supervisor = Supervisor(children)
    while True:
        if supervisor.poll(time.monotonic()) is not None:
            return 1
        time.sleep(0.5)


def _stop_all(children: list[Child]) -> None:
    """Stop Beat, then Flower, then the worker; never let a closed stdout stop the stopping."""
    order = ("beat", "flower", "worker", "milvus")  # the store goes last: workers use it
    for child in sorted(children, key=lambda c: order.index(c.name)):
        if child.proc is None:
            continue
        code = child.stop(timeout_s=STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            print(f"  stopped {child.name} (exit {code})", flush=True)


def up(args: argparse.Namespace) -> int:
    absolute_transcript_dir()
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    res = connected_runtime()
    settings = res.settings
    args.log_dir = args.log_dir or str(log_dir(settings.key_namespace))
    if port_in_use(args.flower_address, settings.flower_port):
        raise CliError(
            f"port {settings.flower_port} on {args.flower_address} is taken "
            "(another Flower?); set MEMSTRATA_FLOWER_PORT"
        )
    generated = _ensure_flower_password()
    configure_multiprocess(settings)  # the children inherit the namespace's metrics folder
    try:
        children = _children(args)
    except ValueError as exc:  # flower_env: no usable Flower password
        raise CliError(str(exc)) from exc
    for line in upgrade_layouts(res):  # every check passed; before any worker reads the data
        print(line)
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        for child in children:
            child.start()
        _banner(children, args, generated)
        _wait_ready(children, args)
        if not args.no_demo:
            worker = children[0]
            code = run_demo(
                res, None, inline=False, timeout_s=args.timeout,
                alive=lambda: worker.exit_code() is None,
            )  # fmt: skip
            print(FOLLOW_UP)
            _banner(children, args, generated)
        if not args.exit_after_demo:
            code = _foreground(children)
    except _Stop as stop:
        print(f"\n{stop}: stopping …", flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop_all(children)
    return code
