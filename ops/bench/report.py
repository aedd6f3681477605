"""``memstrata bench all``: run every benchmark, one after the other, each in a fresh
interpreter, and regenerate ``docs/BENCHMARKS.md`` from their figures.

Sequential on purpose: on a 2-core machine two benchmarks at once measure each other.
Each in its own process (as pyperf runs its benchmarks) because one benchmark's leftovers
(a 100k-card LTM run's heap, a library's threads, a cache warmed by another benchmark)
would otherwise tax or flatter the next one's figures, which must equal what
``memstrata bench <name>`` measures alone; and a benchmark that crashes its interpreter
is recorded as failed instead of ending the run.
Each section is the benchmark's own ``markdown(figures)`` followed by its performance
plots (``ops/bench/plots.py``, PNGs in ``docs/figures/``); the raw figures are kept as
JSON beside the page (``docs/benchmarks.json``) so a reader can check every number.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from importlib import import_module
from pathlib import Path
from typing import Any

from memstrata.ops.bench.common.env import REPO
from memstrata.ops.bench.common.machine import load_average, machine
from memstrata.ops.bench.plots import embed, render

HEADER = """# Benchmarks

Every figure on this page was produced by one command, run on the machine described
below, benchmarks one after the other, each in a fresh interpreter:

```bash
{command}
```

Single benchmarks: `memstrata bench <name> [--quick] [--json]` with `<name>` one of
{names}. The machine is small and shared: figures are medians and high percentiles of
many repetitions measured within one run, and ratios are taken between figures of the
same run. Raw figures: [`benchmarks.json`](benchmarks.json). Before/after measurements of
single changes, made outside `bench all`, are kept in [PERFORMANCE.md](PERFORMANCE.md).

## Machine

{machine}
"""


SKIP_ENV = "MEMSTRATA_BENCH_SKIP"


def skip_list(benches: Mapping[str, str]) -> set[str]:
    """The benchmarks ``MEMSTRATA_BENCH_SKIP`` (comma-separated names) leaves out of
    ``bench all``; an unknown name is an error, not a silently full run."""
    names = {n.strip() for n in os.environ.get(SKIP_ENV, "").split(",") if n.strip()}
    unknown = sorted(names - set(benches))
    if unknown:
        raise ValueError(f"{SKIP_ENV}: unknown benchmark(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(benches)}")  # fmt: skip
    return names


Measure = Callable[[str, bool], dict[str, Any]]


_finished = threading.Event()  # a child's benchmark has returned or raised


def measure(module_name: str, quick: bool) -> dict[str, Any]:
    """One benchmark's figures, in this process (a child's entry point)."""
    try:
        return dict(import_module(module_name).run(quick=quick))
    finally:
        _finished.set()


PARENT_POLL_S = 0.5
CLEANUP_GRACE_S = 30.0


def _parent_gone(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("the bench process that started this benchmark is gone")


def exit_with_parent(parent: int) -> None:
    """A benchmark child's initializer: when the process that started it is gone (``bench
    all`` killed, its own clean-up never run), interrupt the benchmark, so its ``finally``
    blocks stop the servers and workers it started, then end the process and its own
    multiprocessing children (at the latest ``CLEANUP_GRACE_S`` later: a clean-up that
    is under way when the parent goes is interrupted too).  Without it a killed run
    left its benchmark measuring on for nobody, beside the next run
    (docs/PERFORMANCE.md, 2026-12-07 night).

    The interrupt is a real signal, so it also ends a sleep or a socket wait
    (``_thread.interrupt_main`` waits for those to return), and ``SIGUSR1``, not
    ``SIGINT``: a job started in the background inherits ``SIGINT`` ignored.  The parent
    is watched by polling, not by ``PR_SET_PDEATHSIG`` as the milvus-lite server is
    (``core.ltm.milvus_server``): that signal follows the thread that spawned the child
    (the caller of ``submit``, or the executor's manager thread when it replaces a
    worker), not the process, and Linux alone sends it."""
    signal.signal(signal.SIGUSR1, _parent_gone)  # the initializer runs in the main thread
    main = threading.get_ident()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        signal.pthread_kill(main, signal.SIGUSR1)
        _finished.wait(CLEANUP_GRACE_S)
        for child in multiprocessing.active_children():  # os._exit skips their clean-up
            child.terminate()
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def measure_in_child(module_name: str, quick: bool) -> dict[str, Any]:
    """One benchmark's figures from a fresh interpreter (``spawn``: nothing inherited but
    the environment and ``sys.path``); its exception is raised here, with the child's
    traceback as its cause, and a child that dies raises ``BrokenProcessPool``.  The
    child ends when this process does, however this one ends (:func:`exit_with_parent`)."""
    with ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"),
        initializer=exit_with_parent, initargs=(os.getpid(),),
    ) as child:  # fmt: skip
        return child.submit(measure, module_name, quick).result()


def _machine_block(info: Mapping[str, Any]) -> str:
    rows = [f"| {k} | {v} |" for k, v in info.items() if not isinstance(v, dict | list)]
    versions = info.get("versions")
    if isinstance(versions, dict):
        rows.append("| versions | " + ", ".join(f"{k} {v}" for k, v in versions.items()) + " |")
    return "\n".join(["| | |", "|---|---|", *rows])


def _plots(name: str, figures: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The benchmark's performance plots in ``<out_dir>/figures``; a plot that cannot be
    drawn is reported, never a reason to lose the run's figures."""
    try:
        return render(name, figures, out_dir / "figures")
    except Exception as exc:
        print(f"[bench all] {name}: no plots ({type(exc).__name__}: {exc})")
        return []


def run_all(
    benches: Mapping[str, str],
    *,
    quick: bool,
    out_dir: Path = REPO / "docs",
    progress: Callable[[str], None] = print,
    on_progress: Callable[[int, int], None] | None = None,
    run_bench: Measure = measure_in_child,
) -> dict[str, Any]:
    """Run each benchmark (``run_bench``: each in a fresh interpreter); a failing one is
    recorded (with its error) and the rest go on.  ``progress`` gets a line per step,
    ``on_progress(benchmarks done, benchmarks)`` a count (a terminal's progress bar)."""
    results: dict[str, Any] = {}
    sections: list[str] = []
    skipped = skip_list(benches)
    for done, (name, module_name) in enumerate(benches.items()):
        if on_progress is not None:
            on_progress(done, len(benches))
        if name in skipped:
            results[name] = {"skipped": True}
            sections.append(f"## {name}\n\nNot run by this `bench all` ({SKIP_ENV}); "
                            f"`memstrata bench {name}` runs it alone.")  # fmt: skip
            continue
        progress(f"[bench all] {name} … (load average {load_average()[0]:.2f})")
        t0 = time.monotonic()
        try:
            figures = run_bench(module_name, quick)
            module = import_module(module_name)  # its markdown(), here
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            progress(traceback.format_exc())
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            sections.append(f"## {name}\n\nFAILED in this run: `{type(exc).__name__}: {exc}`")
            continue
        figures.setdefault("wall_s", round(time.monotonic() - t0, 1))
        results[name] = figures
        sections.append(embed(module.markdown(figures), _plots(name, figures, out_dir),
                              relative_to=out_dir))  # fmt: skip
        progress(f"[bench all] {name} done in {figures['wall_s']} s")
    if on_progress is not None:
        on_progress(len(benches), len(benches))
    overrides = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                         if k.startswith("MEMSTRATA_BENCH_"))  # fmt: skip
    command = (overrides + " " if overrides else "") + "memstrata bench all"
    command += " --quick" if quick else ""
    info = machine()
    info["run_at_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    info["python"] = platform.python_version()
    page = HEADER.format(
        command=command,
        names=", ".join(f"`{n}`" for n in benches),
        machine=_machine_block(info),
    )
    page += "\n" + "\n\n".join(sections) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "BENCHMARKS.md").write_text(page, encoding="utf-8")
    (out_dir / "benchmarks.json").write_text(
        json.dumps({"machine": info, "results": results}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    return results
