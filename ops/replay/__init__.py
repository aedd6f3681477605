"""Replay public agent sessions through ``record_turn()`` and report what STM kept.

Why: the extractor and the write policy were tuned on scripted turns; real tool-using
sessions (``/work/shared/bench/agent-sessions``, five formats, see its ``FORMAT.md``) show
what they store and refuse in the wild.  The loaders follow the FORMAT.md recipes
(tau-bench: trial 0 only) and make tool-call ids unique within a session.  Replay groups
messages into turns as an agent would hand them over: a user message starts a turn; an
assistant message and its tool results belong to the current one.  Turns over the
configured limits are adapted (split at assistant boundaries, long texts cut) and the
report counts each adaptation.  Data is read in place, never copied.

:mod:`~ops.replay.formats` holds the five loaders, :mod:`~ops.replay.turns` the turn
grouping, :mod:`~ops.replay.replayer` the replay itself and :mod:`~ops.replay.report`
the markdown report; this module is the command line.

    python -m memstrata.ops.replay --source tau-bench --limit 3 --report docs/replay-report.md
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.replay.formats import (
    DEFAULT_ROOT,
    SOURCES,
    Raw,
    Session,
    load_source,
    unique_call_ids,
)
from memstrata.ops.replay.replayer import InlineKicker, Replayer, SessionReport, safe_id
from memstrata.ops.replay.report import render_markdown
from memstrata.ops.replay.turns import TRUNCATION, group_turns, to_message

__all__ = [
    "DEFAULT_ROOT",
    "SOURCES",
    "TRUNCATION",
    "InlineKicker",
    "Raw",
    "Replayer",
    "Session",
    "SessionReport",
    "build_parser",
    "group_turns",
    "load_source",
    "main",
    "render_markdown",
    "safe_id",
    "to_message",
    "unique_call_ids",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m memstrata.ops.replay", description=__doc__.split("\n")[0]
    )
    p.add_argument("--source", default="all", help=f"all, or one of: {', '.join(SOURCES)}")
    p.add_argument("--limit", type=int, default=2, help="sessions per source (default 2)")
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the agent-sessions folder")
    p.add_argument("--report", type=Path, help="write the markdown report here")
    p.add_argument(
        "--namespace", help="Redis key namespace, kept afterwards (default: a fresh one, purged)"
    )
    p.add_argument("--keep", action="store_true", help="keep the fresh namespace and transcripts")
    p.add_argument(
        "--celery",
        action="store_true",
        help="hand turns to running workers (uses MEMSTRATA_* settings) instead of draining here",
    )
    return p


def _replay_all(
    replayer: Replayer, names: Sequence[str], args: argparse.Namespace
) -> list[SessionReport]:
    from memstrata.ops.progress import interactive, progress

    sessions = [s for name in names for s in load_source(name, args.root, limit=args.limit)]
    reports = []
    with progress("replay", unit="session", enabled=interactive()) as tick:
        for done, session in enumerate(sessions, 1):
            rep = replayer.replay(session)
            reports.append(rep)
            print(
                f"{session.session_id}: {rep.turns} turns, {rep.written} written, "
                f"{rep.refused} refused, {rep.stored_items} in STM, {len(rep.errors)} errors"
            )
            tick(done, len(sessions))
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = list(SOURCES) if args.source == "all" else [args.source]
    if any(n not in SOURCES for n in names):
        print(
            f"unknown source {args.source!r}; choose from all, {', '.join(SOURCES)}",
            file=sys.stderr,
        )
        return 2
    if args.celery:  # the workers' namespace and L0 folder, from MEMSTRATA_*; nothing purged
        from memstrata.core.runtime import get_runtime
        from memstrata.tasks.client import CeleryKicker

        res = get_runtime()
        reports = _replay_all(Replayer(res, kicker=CeleryKicker()), names, args)
    else:
        # only a namespace made here is purged; a named one may hold someone's data
        purge = not args.keep and not args.namespace
        ns = args.namespace or f"replay-{uuid.uuid4().hex[:8]}"
        l0 = Path(tempfile.mkdtemp(prefix="memstrata-replay-"))
        res = Runtime(load_settings(key_namespace=ns, transcript_dir=l0))
        try:
            reports = _replay_all(Replayer(res), names, args)
        finally:
            if purge:
                for key in res.redis.scan_iter(match=f"{ns}:*", count=1000):
                    res.redis.delete(key)
                shutil.rmtree(l0, ignore_errors=True)
            else:
                print(f"kept: Redis namespace {ns!r}, transcripts in {l0}")
            res.close()
    given = argv if argv is not None else sys.argv[1:]
    command = "python -m memstrata.ops.replay " + " ".join(given)
    text = render_markdown(reports, command=command.strip(), cap=res.settings.stm_session_cap)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text, encoding="utf-8")
        print(f"report written to {args.report}")
    return 1 if any(r.errors for r in reports) else 0
