"""``memstrata bench <name>|all``: run benchmarks (``ops/bench``) and print their figures."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any


def _bench(args: argparse.Namespace) -> int:
    from memstrata.ops.bench import BENCHES
    from memstrata.ops.progress import interactive, ticking

    bar = interactive(json_mode=args.json)
    try:
        systems = _quality_options(args)
    except ValueError as exc:
        print(f"memstrata bench: {exc}", file=sys.stderr)
        return 2
    if args.name == "all":
        return _bench_all(args, bar)
    if args.name == "plots":  # redraw from the figures of the last `bench all`, measure nothing
        return _replot(args.out)
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
        with ticking(f"bench {name}", enabled=bar):
            if name == "quality":
                results[name] = module.run(quick=args.quick, dataset=args.dataset,
                                           fmt=args.format, systems=systems)  # fmt: skip
            elif name == "embedders":
                results[name] = module.run(quick=args.quick, dataset=args.dataset,
                                           fmt=args.format)  # fmt: skip
            else:
                results[name] = module.run(quick=args.quick)
        pngs = _plots(name, results[name])
        if not args.json:
            print(module.markdown(results[name]))
            for png in pngs:
                print(f"plot written to {png}", file=sys.stderr)
    if args.json:
        print(json.dumps(results[names[0]] if len(names) == 1 else results))
    return 1 if "quality" in results and _quality_failed(results["quality"]) else 0


def _quality_options(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The quality options checked before anything runs: ``--systems`` as names (None:
    every one) and, for a whole-suite run, ``MEMSTRATA_BENCH_QUALITY_SKIP`` (known runs,
    sections to keep), so a misspelt name fails before an hour's run; ValueError says
    what is wrong."""
    from memstrata.ops.bench.quality.runner import system_names
    from memstrata.ops.bench.quality.suite import SKIP_ENV, kept_sections, suite

    suite_runs = args.name == "all" or (args.name == "quality" and args.dataset is None)
    whole_suite = suite_runs and not args.quick
    if whole_suite:
        kept_sections(suite())  # MEMSTRATA_BENCH_QUALITY_SKIP: known runs, sections to keep
    elif args.name == "quality" and os.environ.get(SKIP_ENV, "").strip():
        print(f"memstrata bench: {SKIP_ENV} applies to the whole suite only; ignored here",
              file=sys.stderr)  # fmt: skip
    if args.systems is None:
        return None
    if args.name != "quality":
        raise ValueError("--systems applies to a quality run with --dataset or --quick only")
    if whole_suite:
        raise ValueError("the suite behind docs/QUALITY.md runs every system: --systems "
                         "needs --dataset or --quick")  # fmt: skip
    return system_names(args.systems)


def _bench_all(args: argparse.Namespace, bar: bool) -> int:
    """Every benchmark, one after the other; docs/BENCHMARKS.md regenerated."""
    from memstrata.ops.bench import BENCHES
    from memstrata.ops.bench.report import run_all, skip_list
    from memstrata.ops.progress import progress

    def errors_only(line: str) -> None:  # the bar (or silence) replaces step lines
        if line.startswith("Traceback"):
            print(line, file=sys.stderr)

    try:
        skip_list(BENCHES)  # a misspelt MEMSTRATA_BENCH_SKIP fails before an hour's run
    except ValueError as exc:
        print(f"memstrata bench all: {exc}", file=sys.stderr)
        return 2
    with progress("bench all", unit="bench", enabled=bar) as tick:
        results = run_all(BENCHES, quick=args.quick, progress=errors_only, on_progress=tick)
    if args.json:
        print(json.dumps(results))
    else:
        print("docs/BENCHMARKS.md and docs/benchmarks.json regenerated", file=sys.stderr)
    failed = _quality_failed(results.get("quality") or {})
    return 0 if not any("error" in f for f in results.values()) and not failed else 1


def _replot(out: str | None) -> int:
    from memstrata.ops.bench.common.env import REPO
    from memstrata.ops.bench.plots import render

    source = REPO / "docs" / "benchmarks.json"
    results = json.loads(source.read_text(encoding="utf-8")).get("results", {})
    folder = Path(out) if out else REPO / "docs" / "figures"
    for name, figures in results.items():
        if name != "quality":
            for png in render(name, figures, folder):
                print(png)
    return 0


def _plots(name: str, figures: dict[str, Any]) -> list[Path]:
    """The benchmark's performance plots into docs/figures (the page is ``bench all``'s)."""
    from memstrata.ops.bench.common.env import REPO
    from memstrata.ops.bench.plots import render

    if name == "quality":  # the quality run draws its own plots
        return []
    try:
        return render(name, figures, REPO / "docs" / "figures")
    except Exception as exc:  # a plot must not lose the figures just measured
        print(f"memstrata bench {name}: no plots ({type(exc).__name__}: {exc})", file=sys.stderr)
        return []


def _quality_failed(figures: dict[str, Any]) -> bool:
    """Print a quality run's errors (its results are written all the same); True if any."""
    from memstrata.ops.bench.quality import failures

    lines = failures(figures)
    if lines:
        print(f"memstrata bench quality: {len(lines)} error(s) in this run:", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
    return bool(lines)


def add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("bench", help="run a benchmark and print its figures")
    b.add_argument("name", help="benchmark name, 'all', or 'plots' (redraw the performance "
                   "plots from docs/benchmarks.json without measuring)")
    b.add_argument("--out", help="plots: the folder to draw into (default docs/figures)")
    b.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    b.add_argument("--json", action="store_true", help="print one JSON object of figures")
    b.add_argument(
        "--dataset",
        help="quality, embedders: benchmark file or folder, read in place (default: the whole "
        "suite of docs/QUALITY.md, which quality regenerates; with --quick the LoCoMo quick "
        "slice)",
    )
    b.add_argument(
        "--format",
        choices=["locomo", "memdaily", "madial", "beam"],
        help="quality, embedders: dataset format (default: detected from the file)",
    )
    b.add_argument(
        "--systems",
        help="quality with --dataset or --quick: comma-separated systems to run, e.g. "
        "memstrata,bm25_raw (default: every one; the suite always runs every one)",
    )
    b.set_defaults(func=_bench)
