"""The ingest queue: sharded Redis streams of turn pointers plus a "kick" flag per shard.

Why not one Celery task per turn: a worker drains about 1k tasks/s on this machine and
``apply_async`` costs ~0.5 ms of the agent's time.  Instead ``record_turn()`` adds a
pointer to its shard's stream and, in the same Lua call, sets the shard's kick flag; only
the caller that *set* the flag enqueues a drain task.  The drain task reads the stream in
batches through a consumer group, and releases the flag atomically when it finds nothing
new (:meth:`IngestQueue.claim_or_release`), so a pointer added at any moment is either
read by the running drain or kicks a new one.  Unacknowledged entries of a crashed worker
are reclaimed after ``claim_idle_ms``; the flag's TTL guards against a lost drain task.

**Watermarks.**  The same script keeps, per session, the end offset in its L0 file up to
which every turn is on the stream (``ingest_queued``, in the stream's hash slot).  It only
moves forward over a turn that starts exactly there, so a turn written to L0 but never
queued (Redis down between the two steps, a crash) leaves the watermark below the file
size until the reconciler (:mod:`core.ingest.reconcile`) queues it.  :meth:`enqueue_once`
adds nothing for a turn at or below the watermark: a retried ``record_turn`` or a
reconciler run never queues a turn twice.  See docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import socket
import zlib
from dataclasses import dataclass
from typing import Any

import redis

from memstrata.core.adapters.redis import redis_errors, run_script
from memstrata.core.keys import GlobalKeys, user_scope
from memstrata.core.models.transcript import TurnPointer

GROUP = "ingest"

# KEYS: stream, kick flag, session watermark.  ARGV: pointer, kick TTL (ms), turn offset,
# turn end, the watermark to assume when there is none, watermark TTL (ms), once (0/1),
# consumer group.  Returns -1: queued before (nothing added), 1: added and the flag
# taken, 0: added.  A stream that is gone (Redis lost its data) gets its group back
# first, or drains that created the group before would read nothing from it.
_ENQUEUE = """
local wm = tonumber(redis.call('GET', KEYS[3]) or ARGV[5])
if ARGV[7] == '1' and wm >= tonumber(ARGV[4]) then return -1 end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[8], '0', 'MKSTREAM')
end
redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])
if wm == tonumber(ARGV[3]) then redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[6]) end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 1 end
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
class Enqueued:
    shard: int
    kicked: bool  # this call took the shard's kick flag: the caller must kick a drain
    added: bool  # False: the turn was on the stream already (at or below the watermark)


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
        watermark_ttl_ms: int = 25 * 3600 * 1000,
    ) -> None:
        self._r = client
        self.keys = GlobalKeys(namespace)
        self.shards = shards
        self.kick_ttl_ms = kick_ttl_ms
        self.claim_idle_ms = claim_idle_ms
        self.watermark_ttl_ms = watermark_ttl_ms
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

    def enqueue(self, pointer: TurnPointer, *, generation: str = "") -> tuple[int, bool]:
        """Add a turn pointer, even a queued one; returns (shard, whether to kick a drain)."""
        out = self._add(pointer, generation=generation, base=0, once=False)
        return out.shard, out.kicked

    def enqueue_once(self, pointer: TurnPointer, *, generation: str, base: int = 0) -> Enqueued:
        """Add a turn pointer unless the turn is at or below its session file's watermark.

        ``generation`` names the session file (``TranscriptStore.generation``).  ``base``
        is the watermark to assume when there is none: 0 for ``record_turn`` (only a
        file's first turn starts one), the offset of its first turn for the reconciler.
        """
        return self._add(pointer, generation=generation, base=base, once=True)

    def watermark_key(
        self, *, user_id: str, tenant_id: str | None, session_id: str, generation: str
    ) -> str:
        shard = shard_for(user_id, self.shards)
        scope = user_scope(user_id, tenant_id)
        return self.keys.ingest_queued(shard, scope, session_id, generation)

    def watermarks(self, keys: list[str]) -> list[int | None]:
        """The watermarks stored under ``keys`` (None: the session has none), one round trip."""
        if not keys:
            return []
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)  # GETs, not MGET: the keys span slots
            for key in keys:
                pipe.get(key)
            values: list[str | None] = pipe.execute()
        return [None if v is None else int(v) for v in values]

    def start_watermark(self, key: str, offset: int) -> bool:
        """Set a session's watermark to ``offset`` unless it has one (the reconciler's baseline)."""
        with redis_errors():
            return bool(self._r.set(key, offset, nx=True, px=self.watermark_ttl_ms))

    def _add(self, pointer: TurnPointer, *, generation: str, base: int, once: bool) -> Enqueued:
        shard = shard_for(pointer.user_id, self.shards)
        self.ensure_group(shard)
        stream, kick = self.keys.ingest_stream(shard), self.keys.ingest_kick(shard)
        end = pointer.offset + pointer.length
        mark = self.watermark_key(
            user_id=pointer.user_id,
            tenant_id=pointer.tenant_id,
            session_id=pointer.session_id,
            generation=generation,
        )
        args: list[str | int] = [pointer.model_dump_json(exclude_none=True), self.kick_ttl_ms]
        args += [pointer.offset, end, base, self.watermark_ttl_ms, int(once), GROUP]
        # the lean call (core.adapters.redis.run_script): record_turn's one Redis call,
        # without redis-py's per-command wrapper and packer (docs/PERFORMANCE.md)
        status = int(run_script(self._r, self._enqueue, [stream, kick, mark], args))
        return Enqueued(shard, kicked=status == 1, added=status >= 0)

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
