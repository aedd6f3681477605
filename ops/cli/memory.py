"""Looking at memory: ``inspect`` (STM items), ``explain`` (write decisions), ``recall``
(the read path), ``compress`` (a session's compressed context) and ``sweep`` (expiry)."""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from memstrata.core.runtime import Runtime
from memstrata.ops.runtime import CliError, connected_runtime


def _owner(args: argparse.Namespace, res: Runtime) -> tuple[str, str]:
    """``(tenant, user key)`` of ``--tenant`` (default ``MEMSTRATA_TENANT``) and ``--user``
    (any external id, mapped by ``core.ids.user_key``)."""
    from memstrata.core.ids import owner_tenant, user_key

    return owner_tenant(args.tenant or res.settings.tenant), user_key(args.user)


def _inspect(args: argparse.Namespace) -> int:
    from memstrata.ops.report import items_block

    res = connected_runtime()
    tenant, user = _owner(args, res)
    if args.ltm:
        return _inspect_ltm(args, res, tenant, user)
    stm, n, t = res.stm, args.limit, tenant
    if args.session:
        items = stm.by_session(user, args.session, limit=n, tenant_id=t)
        what = f"session {args.session}"
    elif args.task:
        items, what = stm.by_task(user, args.task, limit=n, tenant_id=t), f"task {args.task}"
    elif args.entity:
        items = stm.by_entity(user, args.entity, limit=n, tenant_id=t)
        what = f"entity {args.entity}"
    elif args.type:
        items, what = stm.by_type(user, args.type, limit=n, tenant_id=t), f"type {args.type}"
    else:
        items, what = stm.recent(user, limit=n, tenant_id=t), "all sessions"
    if args.json:  # the user as given (alice@example.com), not its key part
        from memstrata.core.models.memory import MemoryView

        shown = [MemoryView.of(i).model_dump(mode="json") for i in items]
        print(json.dumps(shown, ensure_ascii=False, indent=1))
        return 0
    print(f"STM of user {args.user} (tenant {tenant}), {what}: {len(items)} item(s), newest first")
    if items:
        print(items_block(items))
    return 0


def _inspect_ltm(args: argparse.Namespace, res: Runtime, tenant: str, user: str) -> int:
    """The user's long-term cards: episodes, session summaries, merged and entity cards."""
    from memstrata.ops.report import cards_block

    if args.session or args.task or args.entity:
        raise CliError("inspect --ltm filters by --type only (episode, session_summary, "
                       "consolidated, entity, ...)")  # fmt: skip
    found = res.ledger.owned(
        tenant, user, memory_type=args.type, active_only=not args.all, limit=args.limit
    )
    if args.json:  # the user as given (alice@example.com), not its key part
        from memstrata.core.ltm.card import CardView

        shown = [CardView.of(c).model_dump(mode="json") for c in found]
        print(json.dumps(shown, ensure_ascii=False, indent=1))
        return 0
    what = f"type {args.type}" if args.type else "every type"
    state = "active and superseded" if args.all else "active"
    print(f"LTM of user {args.user} (tenant {tenant}), {what}, {state}: {len(found)} card(s), "
          "most recently changed first")  # fmt: skip
    if found:
        print(cards_block(found))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from memstrata.core.ingest.pipeline import read_decisions
    from memstrata.core.models.candidate import Verdict
    from memstrata.ops.report import decisions_block

    res = connected_runtime()
    if args.card:
        return _explain_card(args, res)
    if not (args.user and args.session):
        raise CliError("explain needs --user and --session (or --card ID)")
    tenant, user = _owner(args, res)
    decisions = read_decisions(res, user, args.session, tenant_id=tenant)
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
        f"Write decisions of user {args.user} (tenant {tenant}), session {args.session}: "
        f"{len(decisions)} "
        f"(threshold {res.settings.write_threshold:g}; kept "
        f"{res.settings.decision_ttl_s // 3600} h)"
    )
    if decisions:
        print(decisions_block(decisions, verbose=True))
    return 0


def _explain_card(args: argparse.Namespace, res: Runtime) -> int:
    """What consolidation merged into a card and why, or what it was merged into."""
    from dataclasses import asdict

    from memstrata.core.lifecycle.consolidate import explain_card

    out = explain_card(res.lifecycle(), args.card)
    if args.json:
        print(json.dumps(asdict(out), ensure_ascii=False, default=str))
    else:
        print("\n".join(out.lines()))
    return 0


def _compress(args: argparse.Namespace) -> int:
    from memstrata.core.compress.cache import SessionActivity, ViewCache
    from memstrata.core.compress.explain import explain
    from memstrata.core.compress.service import compress_cached

    res = connected_runtime()
    tenant, user = _owner(args, res)
    ns = res.settings.key_namespace
    view, cached = compress_cached(
        transcript=res.transcript,
        stm=res.stm,
        cache=ViewCache(res.redis, namespace=ns),
        user_id=user,
        tenant_id=tenant,
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


def _recall(args: argparse.Namespace) -> int:
    from memstrata.core.ids import user_key
    from memstrata.core.recall.service import RecallRequest
    from memstrata.core.settings import load_settings

    # bad input is refused before any store is touched (main() prints the first problem)
    request = RecallRequest(
        tenant_id=args.tenant or load_settings().tenant, user_id=user_key(args.user),
        session_id=args.session, query=args.query,
        task_id=args.task, project_id=args.project, workspace_id=args.workspace,
        top_k=args.top_k, token_budget=args.budget, explain=args.explain, as_of=args.as_of,
    )  # fmt: skip
    res = connected_runtime()
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


def _sweep(args: argparse.Namespace) -> int:
    res = connected_runtime()
    if args.ahead and not args.dry_run:
        raise CliError("--ahead only goes with --dry-run (a real sweep uses the real clock)")
    limit = args.max_items or res.settings.sweep_batch
    if args.dry_run:
        from memstrata.ops.sweep_plan import plan_sweep, render_plan

        plan = plan_sweep(res, now=time.time() + args.ahead, max_items=limit)
        if args.json:
            print(json.dumps([{"owner": o, "memory_id": i.id} for o, i in plan]))
        else:
            print(render_plan(plan, ahead_s=args.ahead))
        return 0
    from memstrata.tasks.maintenance import sweep_expired

    out = sweep_expired(max_items=limit)
    if args.json:
        print(json.dumps(out))
    elif out.get("skipped"):
        print("sweep skipped: another sweep holds the lock (Beat's run); try again shortly")
    else:
        print(f"sweep removed {out['removed']} expired item(s) of {out['users']} user(s)")
    return 0


def add_inspect_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    i = sub.add_parser("inspect", help="show a user's STM items (by session/task/entity/type) "
                       "or (--ltm) long-term cards")  # fmt: skip
    i.add_argument("--tenant", help="the user's tenant (default MEMSTRATA_TENANT, 'default')")
    i.add_argument("--user", required=True, help="the user id (any string: alice@example.com)")
    scope = i.add_mutually_exclusive_group()
    scope.add_argument("--session")
    scope.add_argument("--task")
    scope.add_argument("--entity")
    scope.add_argument("--type", help="fact, decision, hypothesis, observation, ...; with "
                       "--ltm: episode, session_summary, consolidated, entity, ...")  # fmt: skip
    i.add_argument("--ltm", action="store_true",
                   help="long-term cards (PostgreSQL ledger) instead of STM items")  # fmt: skip
    i.add_argument("--all", action="store_true",
                   help="with --ltm: superseded cards too (merged, replaced)")  # fmt: skip
    i.add_argument("--limit", type=int, default=50)
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_inspect)
    e = sub.add_parser("explain", help="why each candidate of a session was stored or refused, "
                       "or (--card) what was merged into an LTM card and why")  # fmt: skip
    e.add_argument("--tenant", help="the user's tenant (default MEMSTRATA_TENANT, 'default')")
    e.add_argument("--user")
    e.add_argument("--session")
    e.add_argument("--card", help="an LTM card id (ltm_...): its consolidation, sources, audit")
    only = e.add_mutually_exclusive_group()
    only.add_argument("--refused", action="store_true", help="only refusals")
    only.add_argument("--written", action="store_true", help="only writes")
    e.add_argument("--grep", help="only decisions whose summary contains this text")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_explain)


def add_sweep(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("sweep", help="run the expire sweep once")
    s.add_argument("--dry-run", action="store_true", help="list what would be removed")
    s.add_argument("--ahead", type=float, default=0.0, help="dry run as if N seconds later")
    s.add_argument("--max-items", type=int, help="bound (default MEMSTRATA_SWEEP_BATCH)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_sweep)


def add_recall(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("recall", help="build the memory block for a query (the read path)")
    r.add_argument("query")
    r.add_argument("--tenant", help="the user's tenant (default MEMSTRATA_TENANT, 'default')")
    r.add_argument("--user", required=True)
    r.add_argument("--session", required=True)
    r.add_argument("--task")
    r.add_argument("--project")
    r.add_argument("--workspace")
    r.add_argument("--top-k", type=int, default=8)
    r.add_argument("--budget", type=int, default=600, help="token budget of the block")
    r.add_argument("--explain", action="store_true", help="show profile, route, every candidate")
    r.add_argument(
        "--as-of", type=moment, metavar="WHEN",
        help="memory as it stood then: seconds since the epoch or an ISO 8601 date/time "
        "(UTC unless it names a zone)",
    )  # fmt: skip
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_recall)


def moment(text: str) -> float:
    """``--as-of``: seconds since the epoch, or an ISO 8601 date or date-time (UTC unless
    it carries an offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither seconds since the epoch nor an ISO 8601 date/time"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def add_compress(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("compress", help="a session's compressed context within a token budget")
    c.add_argument("--tenant", help="the user's tenant (default MEMSTRATA_TENANT, 'default')")
    c.add_argument("--user", required=True)
    c.add_argument("--session", required=True)
    c.add_argument("--budget", type=int, help="tokens (default MEMSTRATA_COMPRESS_BUDGET_TOKENS)")
    c.add_argument("--explain", action="store_true", help="class and reason per tool result")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_compress)
