"""Undoing and re-deriving memory: ``retract`` (a PG fact or an LTM card), ``rebuild``
(a session's STM from L0), ``forget`` (long-inactive low-importance cards) and
``consolidate`` (merge an owner's same-topic and near-duplicate cards now)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.ops.runtime import CliError, connected_runtime


def _lifecycle() -> Lifecycle:
    return connected_runtime().lifecycle(on_cards=_index_cards)


def _index_cards(ids: Sequence[str]) -> None:
    from memstrata.tasks._options import LTM_INDEX, MAX_IDS
    from memstrata.tasks.app import app

    for i in range(0, len(ids), MAX_IDS):
        app.send_task(LTM_INDEX, args=[list(ids[i : i + MAX_IDS])], queue="ltm")


def _retract(args: argparse.Namespace) -> int:
    from memstrata.core.lifecycle.retract import retract_card, retract_pg_fact

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
    from memstrata.core.lifecycle.rebuild import rebuild_session
    from memstrata.ops.progress import confirm, interactive, progress

    confirm([f"rebuild {args.tenant or 'default'}/{args.user}/{args.session}: delete the "
             "session's STM items and re-derive them from its L0 transcript"],
            yes=args.yes, what="rebuild")  # fmt: skip
    lc = _lifecycle()
    with progress("rebuild", unit="turn", enabled=interactive(json_mode=args.json)) as tick:
        out = rebuild_session(lc, user_id=args.user, session_id=args.session,
                              tenant_id=args.tenant, now=time.time(), on_progress=tick,
                              chunk=20)  # fmt: skip
    if args.json:
        print(json.dumps({"session": args.session, "deleted": out.deleted, "turns": out.turns,
                          "written": out.written}))  # fmt: skip
        return 0
    print(f"session {args.session}: {out.deleted} items removed, {out.turns} turns replayed, "
          f"{out.written} written")  # fmt: skip
    return 0


def _forget(args: argparse.Namespace) -> int:
    from memstrata.core.lifecycle.maintenance import forget
    from memstrata.ops.progress import confirm, interactive, progress

    lc, at = _lifecycle(), time.time() + args.ahead
    plan = forget(lc, now=at, apply=False, limit=args.limit)
    if args.apply and plan:
        confirm([f"forget {len(plan)} LTM cards (memstrata forget --dry-run lists them)"],
                yes=args.yes, what="forget --apply")  # fmt: skip
        with progress("forget", unit="card", enabled=interactive(json_mode=args.json)) as tick:
            plan = forget(lc, now=at, apply=True, limit=args.limit, on_progress=tick)
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


def _consolidate(args: argparse.Namespace) -> int:
    from memstrata.core.lifecycle.consolidate import consolidate, consolidate_owner

    lc, now = _lifecycle(), time.time()
    if args.user:
        done = [consolidate_owner(lc, tenant_id=args.tenant, user_id=args.user, now=now)]
    else:  # every owner with a card changed in the window (--all: ever)
        done = consolidate(lc, now=now, since=0.0 if args.all else None, limit=args.limit)
    for r in done:
        if r.skipped:  # another lifecycle job holds the owner (the Beat run retries it)
            print(f"{r.tenant_id}/{r.user_id}: skipped, another lifecycle job holds it")
            continue
        print(f"{r.tenant_id}/{r.user_id}: {r.cards} cards, {len(r.merged)} merged card(s) "
              f"written, {r.hidden} hidden, {r.restored} restored, {len(r.entities)} entity "
              f"card(s) written, {len(r.entities_hidden)} hidden")  # fmt: skip
    return 0


def add_lifecycle(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    b.add_argument("--yes", action="store_true", help="confirm (else asked on a terminal)")
    b.add_argument("--json", action="store_true", help="one JSON line, no progress bar")
    b.set_defaults(func=_rebuild)
    f = sub.add_parser("forget", help="forget long-inactive low-importance LTM cards")
    mode = f.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="list only (default)")
    mode.add_argument("--apply", action="store_true", help="really forget them")
    f.add_argument("--ahead", type=float, default=0.0, help="plan as if N seconds later")
    f.add_argument("--limit", type=int, default=1000)
    f.add_argument("--json", action="store_true")
    f.add_argument("--yes", action="store_true", help="confirm --apply (else asked on a terminal)")
    f.set_defaults(func=_forget)
    c = sub.add_parser("consolidate", help="merge same-topic and near-duplicate LTM cards now")
    c.add_argument("--tenant", help="tenant of --user")
    c.add_argument("--user", help="only this owner (default: owners whose cards changed lately)")
    c.add_argument("--all", action="store_true", help="every owner with a card, not only recent")
    c.add_argument("--limit", type=int, help="most owners (default ..._CONSOLIDATE__MAX_OWNERS)")
    c.set_defaults(func=_consolidate)
