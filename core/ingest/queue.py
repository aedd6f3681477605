"""The ingest queue: sharded Redis streams of turn pointers plus a "kick" flag per shard.

Why not one Celery task per turn: a worker drains about 1k tasks/s on this machine and
``apply_async`` costs ~0.5 ms of the agent's time.  Instead ``record_turn()`` adds a
pointer to its shard's stream and, in the same Lua call, sets the shard's kick flag; only
the caller that *set* the flag enqueues a drain task.  The drain task reads the stream in
batches through a consumer group, and releases the flag atomically when it finds nothing
new (:meth:`IngestQueue.claim_or_release`), so a pointer added at any moment is either
read by the running drain or kicks a new one.  Unacknowledged entries of a crashed worker
are reclaimed after ``claim_idle_ms``; the flag's TTL guards against a lost drain task.
"""

from __future__ import annotations

import json
import os
import socket
import zlib
from dataclasses import dataclass
from typing import Any

import redis

from core.adapters.redis import redis_errors
from core.keys import GlobalKeys
from core.models.transcript import TurnPointer

GROUP = "ingest"

_ENQUEUE = """
redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return 1 end
return 0
"""

_CLAIM_OR_RELEASE = """
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                     'STREAMS', KEYS[1], '>')
if r and r[1] and #r[1][2] > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return r[1][2]
end
redis.call('DEL', KEYS[2])
return {}
"""


def shard_for(user_id: str, shards: int) -> int:
    """Stable shard of a user: all turns of one user go through one stream, in order."""
    return zlib.crc32(user_id.encode()) % shards


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Entry:
    entry_id: str
    pointer: TurnPointer | None  # None when the entry does not parse (dead-lettered)
    raw: str


class IngestQueue:
    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        shards: int = 4,
        kick_ttl_ms: int = 30_000,
        claim_idle_ms: int = 60_000,
    ) -> None:
        self._r = client
        self.keys = GlobalKeys(namespace)
        self.shards = shards
        self.kick_ttl_ms = kick_ttl_ms
        self.claim_idle_ms = claim_idle_ms
        self._enqueue = client.register_script(_ENQUEUE)
        self._claim = client.register_script(_CLAIM_OR_RELEASE)
        self._groups_ready: set[int] = set()

    def ensure_group(self, shard: int) -> None:
        if shard in self._groups_ready:
            return
        with redis_errors():
            try:
                self._r.xgroup_create(self.keys.ingest_stream(shard), GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._groups_ready.add(shard)

    def enqueue(self, pointer: TurnPointer) -> tuple[int, bool]:
        """Add a turn pointer; returns (shard, whether the caller must kick a drain)."""
        shard = shard_for(pointer.user_id, self.shards)
        self.ensure_group(shard)
        with redis_errors():
            kicked = self._enqueue(
                keys=[self.keys.ingest_stream(shard), self.keys.ingest_kick(shard)],
                args=[pointer.model_dump_json(exclude_none=True), "1", self.kick_ttl_ms],
            )
        return shard, bool(kicked)

    def try_kick(self, shard: int) -> bool:
        """Take the shard's kick flag if nobody holds it (Beat's safety net, continuations)."""
        with redis_errors():
            kick = self.keys.ingest_kick(shard)
            return bool(self._r.set(kick, "1", nx=True, px=self.kick_ttl_ms))

    def hold_kick(self, shard: int) -> None:
        with redis_errors():
            self._r.set(self.keys.ingest_kick(shard), "1", px=self.kick_ttl_ms)

    def claim_or_release(self, shard: int, consumer: str, count: int) -> list[Entry]:
        """Read up to ``count`` new entries; if there are none, release the kick flag."""
        self.ensure_group(shard)
        with redis_errors():
            raw = self._claim(
                keys=[self.keys.ingest_stream(shard), self.keys.ingest_kick(shard)],
                args=[GROUP, consumer, count, self.kick_ttl_ms],
            )
        return [_entry(eid, fields) for eid, fields in raw]

    def read_new(self, shard: int, consumer: str, count: int, block_ms: int) -> list[Entry]:
        """Wait up to ``block_ms`` for new entries without touching the kick flag.

        A drain lingers here before :meth:`claim_or_release`, so a steady trickle of turns
        is served by the running drain instead of a new Celery task per turn or two.
        """
        self.ensure_group(shard)
        with redis_errors():
            res: Any = self._r.xreadgroup(
                GROUP, consumer, {self.keys.ingest_stream(shard): ">"}, count=count,
                block=block_ms,
            )  # fmt: skip
        if not res:
            return []
        return [_entry(eid, fields) for eid, fields in res[0][1] if fields]

    def own_pending(self, shard: int, consumer: str, count: int) -> list[Entry]:
        """Entries this consumer read before and did not acknowledge (a retried drain)."""
        self.ensure_group(shard)
        with redis_errors():
            res: Any = self._r.xreadgroup(
                GROUP, consumer, {self.keys.ingest_stream(shard): "0"}, count=count
            )
        if not res:
            return []
        return [_entry(eid, fields) for eid, fields in res[0][1] if fields]

    def reclaim_stale(self, shard: int, consumer: str, count: int) -> list[Entry]:
        """Take over entries another consumer read but never acknowledged (it crashed)."""
        self.ensure_group(shard)
        with redis_errors():
            res: Any = self._r.xautoclaim(
                self.keys.ingest_stream(shard), GROUP, consumer,
                min_idle_time=self.claim_idle_ms, start_id="0-0", count=count,
            )  # fmt: skip
        messages: list[tuple[str, dict[str, str]]] = list(res[1])
        return [_entry(eid, fields) for eid, fields in messages if fields]

    def ack(self, shard: int, entry_ids: list[str]) -> None:
        if not entry_ids:
            return
        stream = self.keys.ingest_stream(shard)
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            pipe.xack(stream, GROUP, *entry_ids)
            pipe.xdel(stream, *entry_ids)
            pipe.execute()

    def dead_letter(self, entry: Entry, reason: str) -> None:
        """Keep a turn that failed permanently, with the reason, for an operator."""
        with redis_errors():
            self._r.xadd(
                self.keys.dead_letters,
                {"p": entry.raw, "reason": reason[:1000]},
                maxlen=100_000,
                approximate=True,
            )

    def backlog(self, shard: int) -> tuple[int, int]:
        """(entries in the stream, entries read but not yet acknowledged)."""
        self.ensure_group(shard)
        stream = self.keys.ingest_stream(shard)
        with redis_errors():
            length = int(self._r.xlen(stream))
            pending = self._r.xpending(stream, GROUP)
        return length, int(pending["pending"])


def _entry(entry_id: str, fields: dict[str, str] | list[str]) -> Entry:
    if isinstance(fields, list):  # raw Lua reply: [k, v, k, v]
        fields = dict(zip(fields[::2], fields[1::2], strict=True))
    raw = fields.get("p", "")
    try:
        pointer: TurnPointer | None = TurnPointer.model_validate(json.loads(raw))
    except ValueError:
        pointer = None
    return Entry(entry_id, pointer, raw)
