"""Long-term memory: ``ltm status|reindex|reindex-history|requeue`` and ``milvus``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memstrata.core.runtime import get_runtime


def _ltm(args: argparse.Namespace) -> int:
    from memstrata.core.ltm import admin
    from memstrata.ops.progress import confirm, interactive, progress

    runtime = get_runtime()
    if args.action in {"reindex", "reindex-history"} and args.drop:
        what = "both card indexes" if args.action == "reindex" else "the raw-history index"
        confirm([f"ltm {args.action} --drop: delete {what}, recreate them empty and re-project",
                 "  every entry; searches find nothing until that is done"],
                yes=args.yes, what=f"ltm {args.action} --drop")  # fmt: skip
    ltm = runtime.ltm
    if args.action == "status":
        out: object = admin.status(ltm)
    elif args.action == "reindex":
        with progress("reindex", unit="card", enabled=interactive(json_mode=args.json)) as tick:
            out = admin.reindex(ltm, drop=args.drop, on_progress=tick)
    elif args.action == "reindex-history":
        out = admin.reindex_history(ltm, runtime.transcript, drop=args.drop)
    else:
        out = {"requeued": admin.requeue(ltm)}
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


def _milvus(args: argparse.Namespace) -> int:
    from memstrata.core.ltm.milvus_server import serve_forever

    return serve_forever(
        Path(args.db_file), args.address, Path(args.log_dir) if args.log_dir else None
    )


def add_ltm(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("ltm", help="long-term memory: status | reindex | reindex-history | requeue")
    t.add_argument("action", choices=["status", "reindex", "reindex-history", "requeue"])
    t.add_argument("--drop", action="store_true",
                   help="reindex: drop and recreate the indexes first (default: build new "
                        "ones beside and swap, search keeps working); needs --yes or a typed y")
    t.add_argument("--no-drop", action="store_true", help=argparse.SUPPRESS)  # the default now
    t.add_argument("--yes", action="store_true", help="confirm a destructive action")
    t.add_argument("--json", action="store_true", help="one JSON line, no progress bar")
    t.set_defaults(func=_ltm)
    v = sub.add_parser("milvus", help="serve the local milvus-lite server in the foreground")
    v.add_argument("db_file", nargs="?", default="var/milvus/ltm.db")
    v.add_argument("address", nargs="?", default="127.0.0.1:19530")
    v.add_argument("--log-dir", default=None)
    v.set_defaults(func=_milvus)
