"""Turns the drain gave up on, and the attempt counts that decide when it gives up.

**Attempts.**  A turn is processed alone when its batch failed or when a drain finds it
left over (read by a drain that then failed, timed out or was killed).  Each time it
starts alone, its counter in ``<ns>:ingest:{s<n>}:attempts`` goes up; an attempt that
ends in a transient store error gives its count back (best effort: the store is the one
failing).  A worker killed at the hard time limit leaves no error behind but its count
stays, so a turn that kills whatever processes it is caught as surely as one that raises.
The drain dead-letters a turn once ``max_attempts`` attempts have not completed, with
the last error it recorded (docs/WRITE_PATH.md §2).  The counters are our own, not
``XPENDING``'s delivery count: that one also counts deliveries that ended in a store
outage, or in which the turn was never looked at.

**Dead letters.**  The stream ``<ns>:ingest:dead`` keeps the pointer and the reason
(written by :meth:`core.ingest.queue.IngestQueue.dead_letter`).  :class:`DeadLetters`
pages through them, re-queues a turn (its pointer goes back on its shard's stream: the turn
itself is in L0) and drops them; ``memstrata dead-letters list|retry|drop`` is the CLI.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.errors import InvalidInput, NotFound, StoreUnavailable
from memstrata.core.ingest.queue import IngestQueue
from memstrata.core.keys import GlobalKeys
from memstrata.core.models.transcript import TurnPointer

ATTEMPTS_TTL_S = 7 * 24 * 3600
_STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
ERROR_CHARS = 500


class Attempts:
    """Per-shard counters of turns processed alone without completing."""

    def __init__(self, client: redis.Redis, *, namespace: str) -> None:
        self._r = client
        self.keys = GlobalKeys(namespace)

    def counts(self, shard: int, entry_ids: Sequence[str]) -> list[tuple[int, str | None]]:
        """(attempts so far, last recorded error) of each entry, one round trip."""
        if not entry_ids:
            return []
        fields = [f for eid in entry_ids for f in (eid, f"{eid}:error")]
        with redis_errors():
            values: list[Any] = self._r.hmget(self.keys.ingest_attempts(shard), fields)
        return [(int(values[2 * i] or 0), values[2 * i + 1]) for i in range(len(entry_ids))]

    def start(self, shard: int, entry_id: str) -> int:
        """Count one more attempt of the entry; returns the count, this one included."""
        key = self.keys.ingest_attempts(shard)
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            pipe.hincrby(key, entry_id, 1)
            pipe.expire(key, ATTEMPTS_TTL_S)
            count, _ = pipe.execute()
        return int(count)

    def give_back(self, shard: int, entry_id: str) -> None:
        """Uncount an attempt that a transient store error ended (best effort)."""
        try:
            with redis_errors():
                self._r.hincrby(self.keys.ingest_attempts(shard), entry_id, -1)
        except StoreUnavailable:
            pass  # the store is down: the attempt stays counted, at worst one too many

    def failed(self, shard: int, entry_id: str, error: str) -> None:
        """Record the error an attempt ended with (the dead letter's reason, later)."""
        key = self.keys.ingest_attempts(shard)
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            pipe.hset(key, f"{entry_id}:error", error[:ERROR_CHARS])
            pipe.expire(key, ATTEMPTS_TTL_S)
            pipe.execute()

    def forget(self, shard: int, entry_ids: Sequence[str]) -> None:
        """Drop the counters of entries that were acknowledged or dead-lettered."""
        if not entry_ids:
            return
        fields = [f for eid in entry_ids for f in (eid, f"{eid}:error")]
        with redis_errors():
            self._r.hdel(self.keys.ingest_attempts(shard), *fields)


@dataclass(frozen=True)
class DeadLetter:
    id: str  # the dead-letter stream's entry id
    reason: str
    raw: str  # the turn pointer as it was queued
    pointer: TurnPointer | None  # None when the raw pointer does not parse

    @property
    def at(self) -> float:
        """When it was dead-lettered (epoch seconds, from the stream id)."""
        return int(self.id.split("-", 1)[0]) / 1000

    def as_dict(self) -> dict[str, Any]:
        p = self.pointer
        return {
            "id": self.id,
            "at": self.at,
            "reason": self.reason,
            "pointer": p.model_dump(mode="json", exclude_none=True) if p else None,
            "raw": None if p else self.raw,
        }


Kick = Callable[[int], object]


class DeadLetters:
    """The dead-letter stream: list, re-queue, drop."""

    def __init__(self, client: redis.Redis, *, namespace: str) -> None:
        self._r = client
        self.keys = GlobalKeys(namespace)

    def count(self) -> int:
        with redis_errors():
            return int(self._r.xlen(self.keys.dead_letters))

    def page(self, *, limit: int = 100, after: str | None = None) -> list[DeadLetter]:
        """Oldest first, at most ``limit``, after the entry id ``after`` when given."""
        start = f"({after}" if after else "-"
        with redis_errors():
            rows: Any = self._r.xrange(self.keys.dead_letters, min=start, count=limit)
        return [_letter(eid, fields) for eid, fields in rows]

    def get(self, ids: Sequence[str]) -> list[DeadLetter]:
        """The dead letters with these ids; :class:`NotFound` names any that is missing."""
        bad = [eid for eid in ids if not _STREAM_ID.fullmatch(eid)]
        if bad:
            raise InvalidInput(
                f"not a dead-letter id: {', '.join(bad)} (ids look like 1700000000000-0)"
            )
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for eid in ids:
                pipe.xrange(self.keys.dead_letters, min=eid, max=eid, count=1)
            found: list[Any] = pipe.execute()
        missing = [eid for eid, rows in zip(ids, found, strict=True) if not rows]
        if missing:
            raise NotFound(f"no dead letter {', '.join(missing)}")
        return [_letter(*rows[0]) for rows in found]

    def retry(
        self, letters: Sequence[DeadLetter], *, queue: IngestQueue, kick: Kick
    ) -> list[tuple[DeadLetter, int]]:
        """Put each turn's pointer back on its shard's stream, then drop the dead letter;
        kicks a drain for every shard whose flag this took.  Returns (letter, shard).

        Re-queued before dropped: a crash in between leaves a dead letter whose turn was
        queued again, which processing the turn twice makes no worse (it is idempotent).
        """
        bad = [d.id for d in letters if d.pointer is None]
        if bad:
            raise InvalidInput(f"cannot retry {', '.join(bad)}: the pointer does not parse")
        out = []
        for letter in letters:
            assert letter.pointer is not None
            shard, kicked = queue.enqueue(letter.pointer)
            if kicked:
                kick(shard)
            self.drop([letter.id])
            out.append((letter, shard))
        return out

    def drop(self, ids: Sequence[str]) -> int:
        """Delete dead letters; returns how many existed."""
        if not ids:
            return 0
        with redis_errors():
            return int(self._r.xdel(self.keys.dead_letters, *ids))


def _letter(entry_id: str, fields: dict[str, str]) -> DeadLetter:
    raw = fields.get("p", "")
    try:
        pointer: TurnPointer | None = TurnPointer.model_validate(json.loads(raw))
    except ValueError:
        pointer = None
    return DeadLetter(entry_id, fields.get("reason", ""), raw, pointer)
