"""``memstrata dead-letters list|retry|drop``: the turns the ingest drain gave up on.

A dead letter is a turn pointer and the reason (docs/WRITE_PATH.md §2); the turn itself
stays in L0.  ``retry`` puts the pointer back on its shard's stream and kicks a drain
(fix the cause first, or raise the budget that stopped it: a turn that fails again is
dead-lettered again, after its attempts); ``drop`` forgets it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator

from memstrata.core.ingest.deadletters import DeadLetter, DeadLetters
from memstrata.core.ingest.queue import shard_for
from memstrata.ops.runtime import CliError, connected_runtime

PAGE = 500


def _describe(letter: DeadLetter, shards: int) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(letter.at))
    p = letter.pointer
    if p is None:
        what = f"unparseable pointer {letter.raw[:60]!r}"
    else:
        owner = f"{p.tenant_id}/{p.user_id}" if p.tenant_id else p.user_id
        what = (
            f"shard {shard_for(p.user_id, shards)}  {owner}  session {p.session_id}  "
            f"turn {p.turn_id}"
        )
    return f"{letter.id}  {when}Z  {what}\n    {letter.reason}"


def _everything(store: DeadLetters) -> Iterator[DeadLetter]:
    after = None
    while page := store.page(limit=PAGE, after=after):
        yield from page
        after = page[-1].id


def _chosen(store: DeadLetters, args: argparse.Namespace) -> list[DeadLetter]:
    if args.all == bool(args.ids):
        raise CliError(f"{args.action} needs dead-letter ids or --all (not both)")
    return list(_everything(store)) if args.all else store.get(args.ids)


def _kick(shard: int) -> None:
    from memstrata.tasks._options import DRAIN
    from memstrata.tasks.app import app

    app.send_task(DRAIN, args=[shard])


def _dead_letters(args: argparse.Namespace) -> int:
    res = connected_runtime()
    store, shards = res.dead_letters, res.settings.ingest_shards
    if args.action == "list":
        if args.ids:
            raise CliError("list takes no ids (use --after ID to page)")
        letters = store.page(limit=args.limit, after=args.after)
        if args.json:
            print(json.dumps([d.as_dict() for d in letters], ensure_ascii=False))
            return 0
        total = store.count()
        print(
            f"{total} dead letter(s){f', showing {len(letters)}' if len(letters) < total else ''}"
        )
        for letter in letters:
            print(_describe(letter, shards))
        return 0
    letters = _chosen(store, args)
    if args.action == "retry":
        done = store.retry(letters, queue=res.queue, kick=_kick)
        for letter, shard in done:
            turn = letter.pointer.turn_id if letter.pointer else "?"
            print(f"re-queued {letter.id}: turn {turn} on shard {shard}")
        print(f"{len(done)} dead letter(s) re-queued")
        return 0
    dropped = store.drop([d.id for d in letters])
    print(f"{dropped} dead letter(s) dropped")
    return 0


def add_dead_letters(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser(
        "dead-letters", help="turns the ingest drain gave up on: list | retry | drop"
    )
    d.add_argument("action", choices=["list", "retry", "drop"])
    d.add_argument("ids", nargs="*", help="dead-letter ids (as list prints them)")
    d.add_argument("--all", action="store_true", help="retry / drop every dead letter")
    d.add_argument("--limit", type=int, default=50, help="list: at most this many (oldest first)")
    d.add_argument("--after", help="list: start after this id")
    d.add_argument("--json", action="store_true", help="list: one JSON array")
    d.set_defaults(func=_dead_letters)
