"""The long-running roles: ``worker``, ``beat``, ``flower`` (each exec-ed in the
foreground), ``up`` (all of them supervised, and the demo), ``demo`` and ``migrate``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memstrata.core.metrics import configure_multiprocess
from memstrata.core.settings import load_settings
from memstrata.ops.demo_run import run_demo
from memstrata.ops.runtime import (
    CliError,
    absolute_transcript_dir,
    connected_runtime,
    workers_answering,
)
from memstrata.ops.up import up


def _exec(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Replace this process with ``argv`` (signals then reach Celery directly)."""
    sys.stdout.flush()
    os.execve(argv[0], argv, {**os.environ, **(env or {})})
    return 0  # pragma: no cover - execve does not return


def _worker(args: argparse.Namespace) -> int:
    from memstrata.ops.procs import WORKER_QUEUES, worker_argv

    absolute_transcript_dir()
    settings = load_settings()
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    unknown = sorted(set(queues) - set(WORKER_QUEUES))
    if unknown or not queues:
        raise CliError(f"-Q takes a comma-separated subset of {','.join(WORKER_QUEUES)}, "
                       f"not {args.queues!r}")  # fmt: skip
    configure_multiprocess(settings)  # before the fork: the pool's children share the folder
    if args.metrics_port:
        os.environ["MEMSTRATA_METRICS_PORT"] = str(args.metrics_port)
    argv = worker_argv(
        settings, concurrency=args.concurrency, pool=args.pool, loglevel=args.loglevel,
        queues=queues,
    )  # fmt: skip
    return _exec(argv)


def _beat(args: argparse.Namespace) -> int:
    from memstrata.ops.procs import beat_argv

    configure_multiprocess(load_settings())
    schedule = Path(args.schedule) if args.schedule else None
    return _exec(beat_argv(load_settings(), schedule=schedule, loglevel=args.loglevel))


def _flower(args: argparse.Namespace) -> int:
    from memstrata.ops.procs import flower_argv, flower_env

    settings = load_settings()
    try:
        env = flower_env(settings)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    print(f"Flower: http://{args.address}:{settings.flower_port}/ (user {settings.flower_user})")
    return _exec(flower_argv(settings, address=args.address), env)


def _demo(args: argparse.Namespace) -> int:
    res = connected_runtime()
    if not args.inline and not workers_answering(timeout_s=2.0):
        raise CliError(
            "no Celery worker answered a ping in this key namespace "
            f"({res.settings.key_namespace!r}): start one with `memstrata worker`, "
            "use `memstrata up`, or pass --inline"
        )
    return run_demo(
        res,
        args.session,
        inline=args.inline,
        timeout_s=args.timeout,
        keep=args.keep,
        verbose=args.verbose,
    )


def _migrate(args: argparse.Namespace) -> int:
    from memstrata.core import migrations
    from memstrata.core.runtime import get_runtime
    from memstrata.ops.layout import upgrade_layouts

    url = load_settings().postgres_url
    before = migrations.current(url)
    migrations.upgrade(url, args.revision)  # raises when the database did not get there
    after = migrations.current(url)
    for branch in migrations.BRANCHES:
        print(f"{branch}: {before.get(branch, 'empty')} → {after.get(branch, 'empty')}")
    for line in upgrade_layouts(get_runtime()):
        print(line)
    return 0


def add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    u = sub.add_parser("up", help="worker + Beat + Flower, the demo, then run until Ctrl-C")
    u.add_argument("--exit-after-demo", action="store_true", help="stop everything after the demo")
    u.add_argument("--no-demo", action="store_true", help="start the services only")
    u.add_argument("-c", "--concurrency", type=int, default=2, help="worker pool processes")
    u.add_argument("--flower-address", default="127.0.0.1", help="interface Flower binds")
    u.add_argument("--log-dir", default=None,
                   help="where the services' logs go (default var/<namespace>/log)")
    u.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for services")
    u.set_defaults(func=up)


def add_celery_roles(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = sub.add_parser("worker", help="run a Celery worker (default: every queue; events on)")
    w.add_argument("-c", "--concurrency", type=int, help="pool processes (default: CPU count)")
    w.add_argument("-P", "--pool", help="prefork (default), threads or solo")
    w.add_argument("-l", "--loglevel", default="info")
    w.add_argument("-Q", "--queues", default="ingest,ltm,maintenance",
                   help="queues to consume, comma-separated (one worker service per queue)")
    w.add_argument("--metrics-port", type=int,
                   help="serve this worker's counters on :PORT/metrics (MEMSTRATA_METRICS_PORT)")
    w.set_defaults(func=_worker)
    b = sub.add_parser("beat", help="run Celery Beat (the one scheduler) with beat_schedule.py")
    b.add_argument("-s", "--schedule", help="schedule file (default var/beat-<namespace>.schedule)")
    b.add_argument("-l", "--loglevel", default="info")
    b.set_defaults(func=_beat)
    f = sub.add_parser("flower", help="run Flower, basic auth on (MEMSTRATA_FLOWER_PASSWORD)")
    f.add_argument("--address", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    f.set_defaults(func=_flower)


def add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("demo", help="feed the bundled debugging sessions through record_turn()")
    d.add_argument("--session", action="append", help="only this demo (repeatable)")
    d.add_argument("--inline", action="store_true", help="process in this process, no worker")
    d.add_argument("--keep", action="store_true", help="keep the demo users' earlier state")
    d.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the workers")
    d.add_argument("-v", "--verbose", action="store_true", help="score breakdowns of refusals")
    d.set_defaults(func=_demo)


def add_migrate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("migrate", help="bring PostgreSQL (Alembic) and the Redis layout up to date")
    m.add_argument("--revision", default="heads", help="target Alembic revision (all branches)")
    m.set_defaults(func=_migrate)
