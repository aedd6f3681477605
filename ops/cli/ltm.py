"""Long-term memory: ``ltm status|reindex|reindex-history|requeue`` and ``milvus``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memstrata.core.runtime import get_runtime


def _ltm(args: argparse.Namespace) -> int:
    from memstrata.core.ltm import admin

    runtime = get_runtime()
    ltm = runtime.ltm
    if args.action == "status":
        out: object = admin.status(ltm)
    elif args.action == "reindex":
        out = admin.reindex(ltm, drop=not args.no_drop)
    elif args.action == "reindex-history":
        out = admin.reindex_history(ltm, runtime.transcript, drop=not args.no_drop)
    else:
        out = {"requeued": admin.requeue(ltm)}
    print(json.dumps(out, indent=2))
    return 0


def _milvus(args: argparse.Namespace) -> int:
    from memstrata.core.ltm.milvus_server import serve_forever

    return serve_forever(
        Path(args.db_file), args.address, Path(args.log_dir) if args.log_dir else None
    )


def add_ltm(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("ltm", help="long-term memory: status | reindex | reindex-history | requeue")
    t.add_argument("action", choices=["status", "reindex", "reindex-history", "requeue"])
    t.add_argument("--no-drop", action="store_true", help="reindex without dropping first")
    t.set_defaults(func=_ltm)
    v = sub.add_parser("milvus", help="serve the local milvus-lite server in the foreground")
    v.add_argument("db_file", nargs="?", default="var/milvus/ltm.db")
    v.add_argument("address", nargs="?", default="127.0.0.1:19530")
    v.add_argument("--log-dir", default=None)
    v.set_defaults(func=_milvus)
