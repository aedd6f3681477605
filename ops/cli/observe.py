"""``memstrata status [--json]`` and ``memstrata metrics --port N`` (docs/OPERATIONS.md)."""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from memstrata.core.metrics import configure_multiprocess
from memstrata.core.settings import load_settings

NEEDS_ATTENTION = 3  # exit code: the command ran, and something needs an operator


def _status(args: argparse.Namespace) -> int:
    from memstrata.beat_schedule import build_schedule
    from memstrata.core.runtime import get_runtime
    from memstrata.ops.status import collect, render_text
    from memstrata.tasks.app import app

    rt = get_runtime()
    out = collect(rt, app=app, schedule=build_schedule(rt.settings), timeout_s=args.timeout,
                  max_lag_s=args.max_lag)  # fmt: skip
    if args.json:
        print(out.model_dump_json(indent=2))
    else:
        print(render_text(out))
    return 0 if out.ok else NEEDS_ATTENTION


def _metrics(args: argparse.Namespace) -> int:
    settings = load_settings()
    folder = configure_multiprocess(settings)
    from memstrata.core.exposition import serve

    server = serve(args.port, address=args.address, state=not args.no_state)
    print(f"metrics: http://{args.address}:{args.port}/metrics (files: {folder})", flush=True)
    stop = threading.Event()

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    try:
        stop.wait()
    finally:
        server.shutdown()
    return 0


def add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "status",
        help="workers, Beat jobs, backlog, dead letters, ledger, stores; exit 3 if attention",
    )
    s.add_argument("--json", action="store_true", help="the full report as JSON")
    s.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for workers")
    s.add_argument("--max-lag", type=float, default=300.0,
                   help="ingest lag (s) above which a shard needs attention")  # fmt: skip
    s.set_defaults(func=_status)


def add_metrics(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("metrics", help="serve /metrics: the namespace's counters and state")
    m.add_argument("--port", type=int, default=9464, help="port to listen on (default 9464)")
    m.add_argument("--address", default="127.0.0.1", help="interface to bind")
    m.add_argument("--no-state", action="store_true",
                   help="only the counters (no Redis/PostgreSQL reads per scrape)")  # fmt: skip
    m.set_defaults(func=_metrics)
