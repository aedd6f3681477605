"""The ``memstrata`` console entry point: one subcommand per role."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence


def _bench(args: argparse.Namespace) -> int:
    from ops.bench import BENCHES

    names = list(BENCHES) if args.name == "all" else [args.name]
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
        results[name] = module.run(quick=args.quick)
        if not args.json:
            print(module.markdown(results[name]))
    if args.json:
        print(json.dumps(results[names[0]] if len(names) == 1 else results))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memstrata", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="run a benchmark and print its figures")
    b.add_argument("name", help="benchmark name, or 'all'")
    b.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    b.add_argument("--json", action="store_true", help="print one JSON object of figures")
    b.set_defaults(func=_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
