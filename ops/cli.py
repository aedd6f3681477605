"""The ``memstrata`` console entry point: one subcommand per role.

    memstrata up [--exit-after-demo]   worker + Beat + Flower, the demo, then run until Ctrl-C
    memstrata worker | beat | flower   one Celery role in the foreground (exec)
    memstrata demo [--inline]          feed the bundled sessions through record_turn()
    memstrata inspect | explain        what is in STM, and why each candidate was (not) stored
    memstrata sweep [--dry-run]        run the expire sweep once
    memstrata migrate                  bring every PostgreSQL table up to date (Alembic)
    memstrata replay [...]             replay public agent sessions (ops/replay.py)
    memstrata bench <name>             benchmarks (ops/bench)
    memstrata ltm status|reindex|requeue  LTM projections: counts, rebuild, dead letters
    memstrata milvus [DB_FILE] [ADDR]  the local milvus-lite server in the foreground
    memstrata retract fact|card ...    undo a promotion (PG fact or LTM card), audited
    memstrata rebuild --user --session re-derive a session's STM from its L0 transcript
    memstrata forget [--dry-run]       forget long-inactive low-importance LTM cards

Settings come from ``MEMSTRATA_*`` environment variables (``core.settings``), read when a
command starts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.errors import MemstrataError
from core.redact import redact
from core.runtime import Runtime, close_runtime, get_runtime
from core.settings import load_settings


class CliError(Exception):
    """A problem the user can fix; printed without a traceback, exit code 1."""


# ---------------------------------------------------------------------- shared helpers
def _resources() -> Runtime:
    res = get_runtime()
    try:
        res.redis.ping()
    except Exception as exc:
        raise CliError(
            f"Redis is not reachable at {res.settings.redis_url} ({exc}); "
            "set MEMSTRATA_REDIS_URL or run bash ops/quickstart.sh"
        ) from exc
    return res


def _absolute_transcript_dir() -> None:
    """Pin L0's folder to an absolute path so every child process reads the same files."""
    settings = load_settings()
    os.environ["MEMSTRATA_TRANSCRIPT_DIR"] = str(settings.transcript_dir.resolve())


def _workers_answering(timeout_s: float = 1.0) -> list[str]:
    from tasks.app import app

    replies = app.control.ping(timeout=timeout_s) or []
    return sorted(name for reply in replies for name in reply)


def _exec(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Replace this process with ``argv`` (signals then reach Celery directly)."""
    sys.stdout.flush()
    os.execve(argv[0], argv, {**os.environ, **(env or {})})
    return 0  # pragma: no cover - execve does not return


# ---------------------------------------------------------------------- bench
def _bench(args: argparse.Namespace) -> int:
    from ops.bench import BENCHES

    if args.name == "all":
        from ops.bench.report import run_all

        results = run_all(BENCHES, quick=args.quick, progress=lambda m: print(m, file=sys.stderr))
        if args.json:
            print(json.dumps(results))
        else:
            print("docs/BENCHMARKS.md and docs/benchmarks.json regenerated", file=sys.stderr)
        return 0 if not any("error" in f for f in results.values()) else 1
    names = [args.name]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(
            f"unknown benchmark {unknown[0]!r}; choose from: all, {', '.join(BENCHES)}",
            file=sys.stderr,
        )
        return 2
    results = {}
    for name in names:
        module = importlib.import_module(BENCHES[name])
        if name == "quality":
            results[name] = module.run(quick=args.quick, dataset=args.dataset, fmt=args.format)
        else:
            results[name] = module.run(quick=args.quick)
        if not args.json:
            print(module.markdown(results[name]))
    if args.json:
        print(json.dumps(results[names[0]] if len(names) == 1 else results))
    return 0


# ---------------------------------------------------------------------- Celery roles
def _worker(args: argparse.Namespace) -> int:
    from ops.procs import worker_argv

    _absolute_transcript_dir()
    argv = worker_argv(
        load_settings(), concurrency=args.concurrency, pool=args.pool, loglevel=args.loglevel
    )
    return _exec(argv)


def _beat(args: argparse.Namespace) -> int:
    from ops.procs import beat_argv

    schedule = Path(args.schedule) if args.schedule else None
    return _exec(beat_argv(load_settings(), schedule=schedule, loglevel=args.loglevel))


def _flower(args: argparse.Namespace) -> int:
    from ops.procs import flower_argv, flower_env

    settings = load_settings()
    try:
        env = flower_env(settings)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    print(f"Flower: http://{args.address}:{settings.flower_port}/ (user {settings.flower_user})")
    return _exec(flower_argv(settings, address=args.address), env)


# ---------------------------------------------------------------------- demo
def run_demo(
    res: Runtime,
    names: Sequence[str] | None,
    *,
    inline: bool,
    timeout_s: float,
    keep: bool = False,
    verbose: bool = False,
    alive: Callable[[], bool] | None = None,
) -> int:
    """Feed the bundled sessions, wait for the workers, print the report; 0 when complete."""
    from core.api import MemoryClient
    from ops import demo_run

    sessions = demo_run.load_sessions(names)
    demo_run.ensure_demo_authority(res, sessions)
    if not keep:
        for s in sessions:
            demo_run.reset_user(res, s.user_id)
    if inline:
        client = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=lambda _s: None)
    else:
        from tasks.app import app
        from tasks.client import connect

        client = connect()
        with app.producer_or_acquire() as producer:  # connect now, not inside the first turn
            producer.connection.ensure_connection(max_retries=3)
    print(f"Feeding {len(sessions)} demo session(s) through record_turn() …", flush=True)
    fed = [demo_run.feed(client, s) for s in sessions]
    shards = set().union(*(f.shards for f in fed))
    t0 = time.monotonic()
    if inline:
        demo_run.drain_inline(res, shards)
        done = True
    else:
        done = demo_run.wait_until_drained(res, shards, timeout_s=timeout_s, alive=alive)
    waited = time.monotonic() - t0
    where = "in this process" if inline else "by the workers"
    state = "processed" if done else "NOT fully processed"
    print(f"All turns {state} {where} after {waited * 1000:.0f} ms.", flush=True)
    for f in fed:
        print(demo_run.session_report(res, f, verbose=verbose), flush=True)
        print(demo_run.recall_report(res, f.session), flush=True)
    dead = demo_run.dead_letters(res, {t for f in fed for t in f.turn_ids})
    if dead:
        print(f"\nDead-lettered turns ({len(dead)}):")
        for turn_id, reason in dead:
            print(f"  {turn_id}: {reason}")
    return 0 if done and not dead else 1


def _demo(args: argparse.Namespace) -> int:
    res = _resources()
    if not args.inline and not _workers_answering(timeout_s=2.0):
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


# ---------------------------------------------------------------------- inspect / explain
def _inspect(args: argparse.Namespace) -> int:
    from ops.report import items_block

    res = _resources()
    stm, user, limit = res.stm, args.user, args.limit
    if args.session:
        items, what = stm.by_session(user, args.session, limit=limit), f"session {args.session}"
    elif args.task:
        items, what = stm.by_task(user, args.task, limit=limit), f"task {args.task}"
    elif args.entity:
        items, what = stm.by_entity(user, args.entity, limit=limit), f"entity {args.entity}"
    elif args.type:
        items, what = stm.by_type(user, args.type, limit=limit), f"type {args.type}"
    else:
        items, what = stm.recent(user, limit=limit), "all sessions"
    if args.json:
        print(json.dumps([i.model_dump(mode="json") for i in items], ensure_ascii=False, indent=1))
        return 0
    print(f"STM of user {user}, {what}: {len(items)} item(s), newest first")
    if items:
        print(items_block(items))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from core.ingest.pipeline import read_decisions
    from core.models.candidate import Verdict
    from ops.report import decisions_block

    res = _resources()
    decisions = read_decisions(res.stm, args.user, args.session)
    if args.refused:
        decisions = [d for d in decisions if d.verdict is Verdict.REFUSED]
    if args.written:
        decisions = [d for d in decisions if d.verdict is Verdict.WRITTEN]
    if args.grep:
        needle = args.grep.casefold()
        decisions = [d for d in decisions if needle in d.summary.casefold()]
    if args.json:
        print(json.dumps([d.model_dump(mode="json") for d in decisions], ensure_ascii=False))
        return 0
    print(
        f"Write decisions of user {args.user}, session {args.session}: {len(decisions)} "
        f"(threshold {res.settings.write_threshold:g}; kept "
        f"{res.settings.decision_ttl_s // 3600} h)"
    )
    if decisions:
        print(decisions_block(decisions, verbose=True))
    return 0


# ---------------------------------------------------------------------- compress
def _compress(args: argparse.Namespace) -> int:
    from core.compress.cache import SessionActivity, ViewCache
    from core.compress.explain import explain
    from core.compress.service import compress_cached

    res = _resources()
    ns = res.settings.key_namespace
    view, cached = compress_cached(
        transcript=res.transcript,
        stm=res.stm,
        cache=ViewCache(res.redis, namespace=ns),
        user_id=args.user,
        session_id=args.session,
        budget_tokens=args.budget or res.settings.compress_budget_tokens,
        activity=SessionActivity(res.redis, namespace=ns),
    )
    if args.json:
        print(view.model_dump_json())
        return 0
    if args.explain:
        print(explain(view))
        return 0
    print(view.text())
    print(
        f"\n[{view.level.value}: {view.raw_tokens} → {view.view_tokens} tokens, "
        f"{view.ratio:.1f}:1{', cached' if cached else ''}]"
    )
    return 0


def _add_compress(sub: Any) -> None:
    c = sub.add_parser("compress", help="a session's compressed context within a token budget")
    c.add_argument("--user", required=True)
    c.add_argument("--session", required=True)
    c.add_argument("--budget", type=int, help="tokens (default MEMSTRATA_COMPRESS_BUDGET_TOKENS)")
    c.add_argument("--explain", action="store_true", help="class and reason per tool result")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_compress)


# ---------------------------------------------------------------------- recall
def _recall(args: argparse.Namespace) -> int:
    from core.recall.service import RecallRequest

    # bad input is refused before any store is touched (main() prints the first problem)
    request = RecallRequest(
        tenant_id=args.tenant, user_id=args.user, session_id=args.session, query=args.query,
        task_id=args.task, project_id=args.project, workspace_id=args.workspace,
        top_k=args.top_k, token_budget=args.budget, explain=args.explain,
    )  # fmt: skip
    res = _resources()
    res.warm_ltm()  # a one-shot process: load LTM before the recall's time budget starts
    recaller = res.recaller()
    try:
        out = recaller.recall(request)
    finally:
        recaller.close()
    if args.json:
        print(out.model_dump_json())
        return 0
    print(out.text or "(nothing to inject)")
    if out.degraded:
        print(f"\ndegraded: {out.degraded}")
    if out.explain is not None:
        e = out.explain
        print(f"\nprofile: {e.profile.model_dump()}")
        print(f"route:   {e.route.model_dump(exclude={'reasons'})} reasons={e.route.reasons}")
        print(f"cache:   {e.cache}   timings (ms): {e.timings_ms}")
        for s in e.candidates:
            c = s.candidate
            print(f"  {s.verdict.value:24s} {s.score:6.3f} {c.source_type.value:9s} "
                  f"{c.summary[:70]}  ({s.reason})")  # fmt: skip
    return 0


def _add_recall(sub: Any) -> None:
    r = sub.add_parser("recall", help="build the memory block for a query (the read path)")
    r.add_argument("query")
    r.add_argument("--tenant", default=None, help="the user's tenant (default: the default tenant)")
    r.add_argument("--user", required=True)
    r.add_argument("--session", required=True)
    r.add_argument("--task")
    r.add_argument("--project")
    r.add_argument("--workspace")
    r.add_argument("--top-k", type=int, default=8)
    r.add_argument("--budget", type=int, default=600, help="token budget of the block")
    r.add_argument("--explain", action="store_true", help="show profile, route, every candidate")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_recall)


# ---------------------------------------------------------------------- sweep
def _sweep(args: argparse.Namespace) -> int:
    res = _resources()
    if args.ahead and not args.dry_run:
        raise CliError("--ahead only goes with --dry-run (a real sweep uses the real clock)")
    limit = args.max_items or res.settings.sweep_batch
    if args.dry_run:
        from ops.sweep_plan import plan_sweep, render_plan

        plan = plan_sweep(res, now=time.time() + args.ahead, max_items=limit)
        if args.json:
            print(json.dumps([{"user_id": u, "memory_id": i.id} for u, i in plan]))
        else:
            print(render_plan(plan, ahead_s=args.ahead))
        return 0
    from tasks.maintenance import sweep_expired

    out = sweep_expired(max_items=limit)
    if args.json:
        print(json.dumps(out))
    elif out.get("skipped"):
        print("sweep skipped: another sweep holds the lock (Beat's run); try again shortly")
    else:
        print(f"sweep removed {out['removed']} expired item(s) of {out['users']} user(s)")
    return 0


# ---------------------------------------------------------------------- migrate
def _migrate(args: argparse.Namespace) -> int:
    from core import migrations

    url = load_settings().postgres_url
    before = migrations.current(url)
    migrations.upgrade(url, args.revision)  # raises when the database did not get there
    after = migrations.current(url)
    for branch in migrations.BRANCHES:
        print(f"{branch}: {before.get(branch, 'empty')} → {after.get(branch, 'empty')}")
    return 0


# ---------------------------------------------------------------------- ltm
def _ltm(args: argparse.Namespace) -> int:
    from core.ltm import admin

    ltm = get_runtime().ltm
    if args.action == "status":
        out: object = admin.status(ltm)
    elif args.action == "reindex":
        out = admin.reindex(ltm, drop=not args.no_drop)
    else:
        out = {"requeued": admin.requeue(ltm)}
    print(json.dumps(out, indent=2))
    return 0


def _milvus(args: argparse.Namespace) -> int:
    from core.ltm.milvus_server import serve_forever

    return serve_forever(
        Path(args.db_file), args.address, Path(args.log_dir) if args.log_dir else None
    )


def _add_ltm(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("ltm", help="long-term memory: status | reindex | requeue")
    t.add_argument("action", choices=["status", "reindex", "requeue"])
    t.add_argument("--no-drop", action="store_true", help="reindex without dropping first")
    t.set_defaults(func=_ltm)
    v = sub.add_parser("milvus", help="serve the local milvus-lite server in the foreground")
    v.add_argument("db_file", nargs="?", default="var/milvus/ltm.db")
    v.add_argument("address", nargs="?", default="127.0.0.1:19530")
    v.add_argument("--log-dir", default=None)
    v.set_defaults(func=_milvus)


# ---------------------------------------------------------------------- lifecycle
def _lifecycle() -> Any:
    return _resources().lifecycle(on_cards=_index_cards)


def _index_cards(ids: Sequence[str]) -> None:
    from tasks._options import LTM_INDEX, MAX_IDS
    from tasks.app import app

    for i in range(0, len(ids), MAX_IDS):
        app.send_task(LTM_INDEX, args=[list(ids[i : i + MAX_IDS])], queue="ltm")


def _retract(args: argparse.Namespace) -> int:
    from core.lifecycle.retract import retract_card, retract_pg_fact

    lc = _lifecycle()
    if args.kind == "card":
        out = retract_card(lc, card_id=args.target, now=time.time(), reason=args.reason)
    else:
        if not (args.tenant and args.user):
            raise CliError("retract fact needs --tenant and --user")
        out = retract_pg_fact(
            lc, tenant_id=args.tenant, user_id=args.user, fact_key=args.target,
            now=time.time(), reason=args.reason,
        )  # fmt: skip
    state = "retracted" if out.changed else "already not current"
    sources = ", ".join(out.memory_ids) or "-"
    print(f"{args.kind} {out.target}: {state}; source STM items {sources}")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    from core.lifecycle.rebuild import rebuild_session

    out = rebuild_session(_lifecycle(), user_id=args.user, session_id=args.session,
                          tenant_id=args.tenant, now=time.time())  # fmt: skip
    print(f"session {args.session}: {out.deleted} items removed, {out.turns} turns replayed, "
          f"{out.written} written")  # fmt: skip
    return 0


def _forget(args: argparse.Namespace) -> int:
    from core.lifecycle.maintenance import forget

    plan = forget(_lifecycle(), now=time.time() + args.ahead, apply=args.apply, limit=args.limit)
    rows = [
        {"card": f.card.memory_id, "user": f.card.user_id, "tenant": f.card.tenant_id,
         "reason": f.reason}
        for f in plan
    ]  # fmt: skip
    if args.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        print(f"{r['card']}  {r['tenant']}/{r['user']}  {r['reason']}")
    verb = "forgotten" if args.apply else "would be forgotten (dry run; --apply to forget)"
    print(f"{len(plan)} cards {verb}")
    return 0


def _add_lifecycle(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("retract", help="undo a promotion: a PG fact or an LTM card")
    r.add_argument("kind", choices=["fact", "card"])
    r.add_argument("target", help="fact key (profile.answer_style) or card id (ltm_...)")
    r.add_argument("--tenant", help="tenant of a fact")
    r.add_argument("--user", help="user of a fact")
    r.add_argument("--reason", default="retracted from the CLI")
    r.set_defaults(func=_retract)
    b = sub.add_parser("rebuild", help="re-derive a session's STM from its L0 transcript")
    b.add_argument("--user", required=True)
    b.add_argument("--session", required=True)
    b.add_argument("--tenant")
    b.set_defaults(func=_rebuild)
    f = sub.add_parser("forget", help="forget long-inactive low-importance LTM cards")
    mode = f.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="list only (default)")
    mode.add_argument("--apply", action="store_true", help="really forget them")
    f.add_argument("--ahead", type=float, default=0.0, help="plan as if N seconds later")
    f.add_argument("--limit", type=int, default=1000)
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_forget)


def _replay(argv: Sequence[str]) -> int:
    """Everything after ``replay`` goes to ``ops.replay`` untouched (its own options)."""
    from ops import replay

    code: int = replay.main(list(argv))
    return code


# ---------------------------------------------------------------------- parser
def _add_celery_roles(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = sub.add_parser("worker", help="run a Celery worker on ingest, ltm, maintenance (events on)")
    w.add_argument("-c", "--concurrency", type=int, help="pool processes (default: CPU count)")
    w.add_argument("-P", "--pool", help="prefork (default), threads or solo")
    w.add_argument("-l", "--loglevel", default="info")
    w.set_defaults(func=_worker)
    b = sub.add_parser("beat", help="run Celery Beat (the one scheduler) with beat_schedule.py")
    b.add_argument("-s", "--schedule", help="schedule file (default var/beat-<namespace>.schedule)")
    b.add_argument("-l", "--loglevel", default="info")
    b.set_defaults(func=_beat)
    f = sub.add_parser("flower", help="run Flower, basic auth on (MEMSTRATA_FLOWER_PASSWORD)")
    f.add_argument("--address", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    f.set_defaults(func=_flower)


def _add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ops.up import up

    u = sub.add_parser("up", help="worker + Beat + Flower, the demo, then run until Ctrl-C")
    u.add_argument("--exit-after-demo", action="store_true", help="stop everything after the demo")
    u.add_argument("--no-demo", action="store_true", help="start the services only")
    u.add_argument("-c", "--concurrency", type=int, default=2, help="worker pool processes")
    u.add_argument("--flower-address", default="127.0.0.1", help="interface Flower binds")
    u.add_argument("--log-dir", default="var/log", help="where the services' logs go")
    u.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for services")
    u.set_defaults(func=up)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("demo", help="feed the bundled debugging sessions through record_turn()")
    d.add_argument("--session", action="append", help="only this demo (repeatable)")
    d.add_argument("--inline", action="store_true", help="process in this process, no worker")
    d.add_argument("--keep", action="store_true", help="keep the demo users' earlier state")
    d.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the workers")
    d.add_argument("-v", "--verbose", action="store_true", help="score breakdowns of refusals")
    d.set_defaults(func=_demo)


def _add_queries(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    i = sub.add_parser("inspect", help="show a user's STM items (by session/task/entity/type)")
    i.add_argument("--user", required=True)
    scope = i.add_mutually_exclusive_group()
    scope.add_argument("--session")
    scope.add_argument("--task")
    scope.add_argument("--entity")
    scope.add_argument("--type", help="fact, decision, hypothesis, observation, ...")
    i.add_argument("--limit", type=int, default=50)
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_inspect)
    e = sub.add_parser("explain", help="why each candidate of a session was stored or refused")
    e.add_argument("--user", required=True)
    e.add_argument("--session", required=True)
    only = e.add_mutually_exclusive_group()
    only.add_argument("--refused", action="store_true", help="only refusals")
    only.add_argument("--written", action="store_true", help="only writes")
    e.add_argument("--grep", help="only decisions whose summary contains this text")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_explain)
    s = sub.add_parser("sweep", help="run the expire sweep once")
    s.add_argument("--dry-run", action="store_true", help="list what would be removed")
    s.add_argument("--ahead", type=float, default=0.0, help="dry run as if N seconds later")
    s.add_argument("--max-items", type=int, help="bound (default MEMSTRATA_SWEEP_BATCH)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_sweep)
    m = sub.add_parser("migrate", help="bring every PostgreSQL table up to date (Alembic)")
    m.add_argument("--revision", default="heads", help="target Alembic revision (all branches)")
    m.set_defaults(func=_migrate)
    # listed for --help only: main() hands `replay ...` to ops.replay before parsing
    sub.add_parser("replay", help="replay public agent sessions (ops/replay.py; --help there)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memstrata", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="run a benchmark and print its figures")
    b.add_argument("name", help="benchmark name, or 'all'")
    b.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    b.add_argument("--json", action="store_true", help="print one JSON object of figures")
    b.add_argument(
        "--dataset",
        help="quality: benchmark file or folder, read in place (default: the whole suite of "
        "docs/QUALITY.md, which it regenerates; with --quick the LoCoMo quick slice)",
    )
    b.add_argument(
        "--format",
        choices=["locomo", "memdaily", "madial"],
        help="quality: dataset format (default: detected from the file)",
    )
    b.set_defaults(func=_bench)
    _add_up(sub)
    _add_celery_roles(sub)
    _add_demo(sub)
    _add_queries(sub)
    _add_recall(sub)
    _add_compress(sub)
    _add_ltm(sub)
    _add_lifecycle(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["replay"]:
        return _replay(args_in[1:])
    parser = build_parser()
    args = parser.parse_args(args_in)
    try:
        code: int = args.func(args)
    except (CliError, MemstrataError, ValidationError) as exc:
        # one line, never a traceback, never a password (a URL in a vendor error)
        if isinstance(exc, ValidationError):  # bad input or settings: the first problem
            first = exc.errors(include_url=False, include_input=False)[0]
            cause = first.get("ctx", {}).get("error")
            what = str(cause) if isinstance(cause, MemstrataError) else first["msg"]
            message = f"{'.'.join(str(p) for p in first['loc']) or exc.title}: {what}"
        else:
            message = str(exc)
        print(f"memstrata {args.command}: {' '.join(redact(message).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memstrata … | head`: stop quietly, like other CLI tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        close_runtime()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
