"""Progress bars and confirmations for long or destructive CLI commands.

A bar (tqdm: count, rate, ETA) is drawn on stderr only when stderr is a terminal and the
command was not asked for ``--json``, so piped or scripted runs stay quiet.  A destructive
command prints its plan and goes ahead only with ``--yes`` or after a "y" typed on a
terminal; without a terminal and without ``--yes`` it refuses.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from memstrata.ops.runtime import CliError


class Tick(Protocol):
    def __call__(self, done: int, total: int) -> None: ...


def interactive(*, json_mode: bool = False) -> bool:
    return not json_mode and sys.stderr.isatty()


@contextmanager
def progress(desc: str, *, unit: str, enabled: bool) -> Iterator[Tick]:
    """A callback ``tick(done, total)`` that moves a bar (or does nothing when disabled)."""
    if not enabled:
        yield lambda done, total: None
        return
    from tqdm import tqdm

    with tqdm(desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True) as bar:

        def tick(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield tick


@contextmanager
def ticking(desc: str, *, enabled: bool, every_s: float = 1.0) -> Iterator[None]:
    """Elapsed time of one long step whose inside reports nothing (a single benchmark),
    redrawn every ``every_s`` by a helper thread; nothing when disabled."""
    if not enabled:
        yield
        return
    import threading

    from tqdm import tqdm

    stop = threading.Event()
    with tqdm(desc=desc, total=1, unit="run", file=sys.stderr, dynamic_ncols=True) as bar:

        def redraw() -> None:
            while not stop.wait(every_s):
                bar.refresh()

        thread = threading.Thread(target=redraw, daemon=True)
        thread.start()
        try:
            yield
            bar.update(1)
        finally:
            stop.set()
            thread.join()


def confirm(plan: Sequence[str], *, yes: bool, what: str) -> None:
    """Print ``plan``; go on with ``yes`` or a typed "y", else raise :class:`CliError`."""
    text = "\n".join(plan)
    if yes:
        print(text, file=sys.stderr)
        return
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise CliError(f"{what} changes data: pass --yes to confirm (no terminal to ask on). "
                       f"Plan: {'; '.join(p.strip() for p in plan)}")  # fmt: skip
    print(text, file=sys.stderr)
    answer = input("Proceed? [y/N] ").strip().lower()
    if answer not in {"y", "yes"}:
        raise CliError(f"{what}: cancelled, nothing changed")
