"""Redis state of the lifecycle layer, beside STM: every read and write of its keys.

* per owner (same hash tag as the owner's STM): the ``lifecycle`` HASH (memory id →
  JSON lifecycle record), ``card_access`` (card id → "<count>|<epoch s>") and reads of
  the ``access`` ZSET recall writes (:meth:`core.stm.store.StmStore.record_recalls`);
* global: the seed-2 ``lifecycle:batch`` queue, ``lifecycle:finalised`` sessions and the
  round-robin cursors of the promotion scan and the access sync;
* the promotion scan's bulk read (``lua/lifecycle_read.lua``), registered once.

Values are JSON strings here: the lifecycle package owns their models (``Record``,
``BatchEntry``), this class only where and how they are stored.  An item is named by
``(user_id, tenant_id, memory_id)`` (:data:`ItemRef`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import redis
from redis.commands.core import Script

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.ids import validate_id
from memstrata.core.keys import LifecycleKeys, UserKeys, parse_user_scope, scope_member, user_scope
from memstrata.core.stm.store import lua

ItemRef = tuple[str, str | None, str]  # user_id, tenant_id, memory id (or card id)
Cursor = Literal["scan", "access"]


def batch_field(user_id: str, tenant_id: str | None, memory_id: str) -> str:
    """The batch queue's field of one item: ``<scope>|<memory_id>``."""
    return scope_member(user_scope(user_id, tenant_id), memory_id)


class LifecycleStore:
    """The lifecycle layer's hashes, cursors and bulk read over an injected Redis client."""

    def __init__(self, client: redis.Redis, *, namespace: str) -> None:
        self._r = client
        self.namespace = validate_id(namespace, kind="key namespace")
        self.keys = LifecycleKeys(self.namespace)
        self._read_users: Script = client.register_script(lua("lifecycle_read.lua"))

    # ------------------------------------------------------------------ records
    def records(
        self, user_id: str, tenant_id: str | None, memory_ids: Sequence[str]
    ) -> list[str | None]:
        """The stored lifecycle record (JSON) of each id, ``None`` where there is none."""
        if not memory_ids:
            return []
        with redis_errors():
            raw = self._r.hmget(self.keys.state(user_id, tenant_id), list(memory_ids))
        return [None if v is None else str(v) for v in raw]

    def set_records(self, rows: Sequence[tuple[ItemRef, str]]) -> None:
        """Store lifecycle records (JSON), one pipelined round trip."""
        if not rows:
            return
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for (user_id, tenant_id, memory_id), rec in rows:
                pipe.hset(self.keys.state(user_id, tenant_id), memory_id, rec)
            pipe.execute()

    # ------------------------------------------------------------------ batch queue
    def batch_add(self, rows: Sequence[tuple[ItemRef, str]]) -> None:
        """Queue entries (JSON); ``HSETNX``: an entry already queued keeps its decay."""
        if not rows:
            return
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for ref, entry in rows:
                pipe.hsetnx(self.keys.batch, batch_field(*ref), entry)
            pipe.execute()

    def batch_entries(self, *, limit: int) -> list[str]:
        """Up to ``limit`` queued entries (HSCAN: bounded, no full read of a huge queue)."""
        out: list[str] = []
        with redis_errors():
            for _field, raw in self._r.hscan_iter(self.keys.batch, count=min(limit, 1000)):
                out.append(str(raw))
                if len(out) >= limit:
                    break
        return out

    def batch_apply(
        self,
        *,
        remove: Sequence[ItemRef],
        put: Sequence[tuple[ItemRef, str]],
        records: Sequence[tuple[ItemRef, str]],
    ) -> None:
        """One round trip of the batch job: entries leave the queue (merged or dropped),
        entries go back (decayed), and the items' lifecycle records are stored."""
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            if remove:
                pipe.hdel(self.keys.batch, *[batch_field(*ref) for ref in remove])
            for ref, entry in put:
                pipe.hset(self.keys.batch, batch_field(*ref), entry)
            for (user_id, tenant_id, memory_id), rec in records:
                pipe.hset(self.keys.state(user_id, tenant_id), memory_id, rec)
            pipe.execute()

    # ------------------------------------------------------------------ cursors
    def _cursor_key(self, which: Cursor) -> str:
        return self.keys.scan_cursor if which == "scan" else self.keys.access_cursor

    def cursor(self, which: Cursor) -> str:
        """Where a round-robin job resumes (``""``: from the start)."""
        with redis_errors():
            return str(self._r.get(self._cursor_key(which)) or "")

    def set_cursor(self, which: Cursor, after: str | None) -> None:
        """Resume after ``after`` next run; ``None`` (a full pass): start over."""
        with redis_errors():
            if after is None:
                self._r.delete(self._cursor_key(which))
            else:
                self._r.set(self._cursor_key(which), after)

    # ------------------------------------------------------------------ recall hits
    def access_hits(self, user_id: str, tenant_id: str | None) -> list[tuple[str, float]]:
        """The owner's recall hits: ``(<source>:<id>, count)``."""
        with redis_errors():
            raw = self._r.zrange(self.keys.access(user_id, tenant_id), 0, -1, withscores=True)
        return [(str(m), float(s)) for m, s in cast(list[tuple[str, float]], raw)]

    def card_access(self, user_id: str, tenant_id: str | None) -> dict[str, str]:
        """Card id → "<access count>|<epoch s when the count last grew>" of one owner."""
        with redis_errors():
            raw = self._r.hgetall(self.keys.card_access(user_id, tenant_id))
        return {str(k): str(v) for k, v in raw.items()}

    def card_access_of(self, cards: Sequence[ItemRef]) -> list[str | None]:
        """The ``card_access`` value of each (user, tenant, card id), ``None`` if unknown."""
        if not cards:
            return []
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for user_id, tenant_id, card_id in cards:
                pipe.hget(self.keys.card_access(user_id, tenant_id), card_id)
            return [None if v is None else str(v) for v in pipe.execute()]

    def set_card_access(self, rows: Sequence[tuple[ItemRef, str]]) -> None:
        if not rows:
            return
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for (user_id, tenant_id, card_id), value in rows:
                pipe.hset(self.keys.card_access(user_id, tenant_id), card_id, value)
            pipe.execute()

    # ------------------------------------------------------------------ finalised sessions
    def finalised(self, members: Sequence[str]) -> list[str | None]:
        """When each ``<scope>|<session>`` was last finalised (its activity then), or ``None``."""
        if not members:
            return []
        with redis_errors():
            raw = self._r.hmget(self.keys.finalised, list(members))
        return [None if v is None else str(v) for v in raw]

    def mark_finalised(
        self, user_id: str, session_id: str, *, tenant_id: str | None, activity_at: str
    ) -> None:
        member = scope_member(user_scope(user_id, tenant_id), session_id)
        with redis_errors():
            self._r.hset(self.keys.finalised, member, activity_at)

    # ------------------------------------------------------------------ the scan's read
    def read_users(
        self, scopes: Sequence[str], *, now: float, never: str, fields: Sequence[str]
    ) -> list[str]:
        """The raw JSON reply of ``lifecycle_read.lua`` for each user scope, one pipelined
        round trip: live undecided items (``fields`` of each), lifecycle records, hits.

        I/O only, so a prefetch thread can run it while the caller parses and decides the
        previous users (the GIL is released in the socket wait).
        """
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for scope in scopes:
                user, tenant = parse_user_scope(scope)
                keys = [UserKeys(self.namespace, user, tenant).prefix,
                        self.keys.state(user, tenant), self.keys.access(user, tenant)]  # fmt: skip
                self._read_users(keys=keys, args=[repr(now), never, *fields], client=pipe)
            return [str(r) for r in pipe.execute()]
