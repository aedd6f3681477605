"""``memstrata erase --tenant T --user U [--dry-run] [--json]``: remove one owner's data
from every layer (``core.erase``), or with ``--dry-run`` list what would go."""

from __future__ import annotations

import argparse
import json

from memstrata.ops.runtime import connected_runtime

_LAYERS = (("l0", "L0 transcripts"), ("redis", "Redis"), ("pg", "PostgreSQL"),
           ("ltm", "LTM indexes"))  # fmt: skip


def _erase(args: argparse.Namespace) -> int:
    from memstrata.core.erase import erase_owner
    from memstrata.core.ids import user_key

    if not args.dry_run:
        from memstrata.core.ids import owner_tenant, validate_id
        from memstrata.ops.progress import confirm

        validate_id(args.user, kind="user_id")  # a bad id is refused before any question
        owner = f"{owner_tenant(args.tenant)}/{args.user}"
        confirm([f"erase {owner}: delete every L0 transcript, Redis key and element, "
                 "PostgreSQL row and LTM index entry of this owner",
                 f"  (list them first: memstrata erase --tenant {owner_tenant(args.tenant)} "
                 f"--user {args.user} --dry-run)"], yes=args.yes, what="erase")  # fmt: skip
    rt = connected_runtime()
    tenant = args.tenant or rt.settings.tenant
    key = user_key(args.user)
    from memstrata.ops.progress import interactive, progress

    with progress("erase", unit="step", enabled=interactive(json_mode=args.json)) as tick:
        report = erase_owner(rt, user_id=key, tenant_id=tenant, dry_run=args.dry_run,
                             on_progress=tick)  # fmt: skip
    if not args.dry_run:
        rt.owners.forget(tenant, key)
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    owner = f"{report.tenant_id}/{args.user}"
    counts = report.found if report.dry_run else report.removed
    if report.resumed:
        done = ", ".join(report.steps_before) or "none"
        print(f"an earlier erase of {owner} was interrupted (steps it had finished: {done})")
    verb = "would remove" if report.dry_run else "removed"
    print(f"{'dry run: ' if report.dry_run else ''}owner {owner}: {verb}")
    for prefix, label in _LAYERS:
        rows = [(k, v) for k, v in sorted(counts.items()) if k.startswith(prefix + ".")]
        if rows:
            shown = ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in rows)
            print(f"  {label}: {shown}")
    for layer, why in sorted(report.skipped.items()):
        print(f"  skipped {layer}: {why}")
    if report.dry_run:
        print("nothing was changed (run without --dry-run to erase)")
    else:
        print(f"erase of {owner} finished; one audit record (action 'erase', no content) kept")
    return 0


def add_erase(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = sub.add_parser(
        "erase", help="remove one owner's data from every layer (L0, Redis, PostgreSQL, LTM)"
    )
    e.add_argument("--tenant", help="the owner's tenant (default MEMSTRATA_TENANT, 'default')")
    e.add_argument("--user", required=True, help="the owner's user id (any string)")
    e.add_argument("--dry-run", action="store_true", help="list what would be removed")
    e.add_argument("--json", action="store_true", help="print the report as one JSON object")
    e.add_argument("--yes", action="store_true", help="confirm (else asked on a terminal)")
    e.set_defaults(func=_erase)
