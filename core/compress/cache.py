"""Redis state of compression: cached views and per-session context size.

* The view cache makes the compression task idempotent: a view is a pure function of
  (transcript up to its last message, STM, budget), so it is stored under the session's
  last message id and budget, and a repeated request for the same version is a read.
* The activity record (raw context tokens, last message id, last activity) lets the
  ingest path enqueue compression when a session passes the token threshold, and Beat
  find long sessions that went idle.  Counting is one Lua call per turn (a drained
  batch's calls in one round trip) and idempotent: a message is counted once (``HSETNX``
  on its id), so a redelivered turn changes nothing.

Key shapes are built in ``core/keys.py`` (``CompressKeys``, ``GlobalKeys.compress_active``;
docs/KEYS.md).  They sit beside the STM keys, not under them (compression state is derived
and has its own lifetime); deleting a user must also delete ``<ns>:compress:{<scope>}:*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis
from redis.commands.core import Script

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.compress.model import CompressedView
from memstrata.core.compress.tokens import TokenCounter, message_tokens
from memstrata.core.errors import CorruptRecord
from memstrata.core.ids import validate_id
from memstrata.core.keys import CompressKeys, GlobalKeys, parse_user_scope, scope_member
from memstrata.core.models.transcript import TranscriptRecord

VIEW_TTL_S = 24 * 3600
ACTIVITY_TTL_S = 7 * 24 * 3600  # a session quiet for a week is done; its counters go

# KEYS: ctx, ctok.  ARGV: ttl_s, last message id, at, then (message id, tokens) pairs.
# Returns {tokens before, tokens after}; the last message only moves forward in time.
_NOTE_TURN = """
local added = 0
for i = 4, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    added = added + tonumber(ARGV[i + 1])
  end
end
local after = redis.call('HINCRBY', KEYS[1], 'tokens', added)
local prev = tonumber(redis.call('HGET', KEYS[1], 'at') or '-1')
if tonumber(ARGV[3]) >= prev then
  redis.call('HSET', KEYS[1], 'last_message_id', ARGV[2], 'at', ARGV[3])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return {after - added, after}
"""


class ViewCache:
    """Compressed views by (session, last message id, budget); entries expire after a day."""

    def __init__(self, client: redis.Redis, *, namespace: str, ttl_s: int = VIEW_TTL_S) -> None:
        self._r = client
        self.namespace = validate_id(namespace, kind="key namespace")
        self.ttl_s = ttl_s

    def get(
        self,
        user_id: str,
        session_id: str,
        last_message_id: str,
        budget: int | None,
        *,
        tenant_id: str | None = None,
    ) -> CompressedView | None:
        keys = CompressKeys(self.namespace, user_id, tenant_id)
        key = keys.view(session_id, last_message_id, budget)
        with redis_errors():
            raw = self._r.get(key)
        if raw is None:
            return None
        try:
            return CompressedView.model_validate_json(raw)
        except ValueError as exc:
            raise CorruptRecord(f"unreadable cached view {key}: {exc}") from exc

    def put(self, view: CompressedView) -> None:
        keys = CompressKeys(self.namespace, view.user_id, view.tenant_id)
        key = keys.view(view.session_id, view.last_message_id, view.budget_tokens)
        with redis_errors():
            pipe = self._r.pipeline(transaction=True)  # one hash tag: also a Cluster MULTI
            pipe.set(key, view.model_dump_json(), ex=self.ttl_s)
            pipe.hset(keys.ctx(view.session_id), "compressed_mid", view.last_message_id)
            pipe.execute()


@dataclass(frozen=True)
class SessionContext:
    user_id: str
    tenant_id: str | None
    session_id: str
    tokens: int
    last_message_id: str | None
    at: float
    compressed_mid: str | None


class SessionActivity:
    """Running raw-context size of each session, and which sessions went idle."""

    def __init__(self, client: redis.Redis, *, namespace: str) -> None:
        self._r = client
        self.namespace = validate_id(namespace, kind="key namespace")
        self._note: Script = client.register_script(_NOTE_TURN)
        self._active = GlobalKeys(self.namespace).compress_active

    def note_turn(
        self, records: Sequence[TranscriptRecord], counter: TokenCounter
    ) -> tuple[int, int] | None:
        """Count one turn into its session; returns (tokens before, tokens after).

        Idempotent: messages already counted add nothing, so a redelivered turn returns
        ``before == after`` and cannot trigger a second compression.
        """
        return self.note_turns([records], counter)[0]

    def note_turns(
        self, turns: Sequence[Sequence[TranscriptRecord]], counter: TokenCounter
    ) -> list[tuple[int, int] | None]:
        """:meth:`note_turn` for each turn of a drained batch, in order, in one round trip
        (issue 17: one pipeline and one script check per turn were ~10 % of a drain's CPU).

        Each turn's script runs on its own, in order, so a session's second turn sees its
        first; the active-sessions index gets one ``ZADD GT`` per session with its newest
        turn's time, the end state of one per turn.  ``None`` for a turn with no records."""
        calls: list[tuple[CompressKeys, Sequence[TranscriptRecord]]] = []
        newest: dict[str, float] = {}
        for records in turns:
            if not records:
                continue
            first, last = records[0], records[-1]
            keys = CompressKeys(self.namespace, first.user_id, first.tenant_id)
            calls.append((keys, records))
            member = scope_member(keys.scope, first.session_id)
            newest[member] = max(last.at, newest.get(member, last.at))
        if not calls:
            return [None] * len(turns)
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)  # the ZSET is global: another slot
            for keys, records in calls:
                first, last = records[0], records[-1]
                args: list[str | int | float] = [ACTIVITY_TTL_S, last.message_id, repr(last.at)]
                for r in records:
                    args += [r.message_id, message_tokens(counter, r)]
                self._note(keys=[keys.ctx(first.session_id), keys.ctok(first.session_id)],
                           args=args, client=pipe)  # fmt: skip
            pipe.zadd(self._active, newest, gt=True)
            replies = pipe.execute()[: len(calls)]
        counted = iter(replies)
        out: list[tuple[int, int] | None] = []
        for records in turns:
            if records:
                before, after = next(counted)
                out.append((int(before), int(after)))
            else:
                out.append(None)
        return out

    def token_counts(
        self, user_id: str, session_id: str, *, tenant_id: str | None = None
    ) -> dict[str, int]:
        """Tokens of each message counted at ingest, so compression need not count again."""
        keys = CompressKeys(self.namespace, user_id, tenant_id)
        with redis_errors():
            row = self._r.hgetall(keys.ctok(session_id))
        return {str(k): int(v) for k, v in row.items()}

    def get(
        self, user_id: str, session_id: str, *, tenant_id: str | None = None
    ) -> SessionContext | None:
        keys = CompressKeys(self.namespace, user_id, tenant_id)
        with redis_errors():
            row = self._r.hgetall(keys.ctx(session_id))
        if not row:
            return None
        data = {str(k): str(v) for k, v in row.items()}  # the client decodes; be explicit
        return SessionContext(
            user_id,
            tenant_id,
            session_id,
            int(data.get("tokens", "0")),
            data.get("last_message_id"),
            float(data.get("at", "0")),
            data.get("compressed_mid"),
        )

    def last_activity(
        self, user_id: str, session_id: str, *, tenant_id: str | None = None
    ) -> float | None:
        """When the session was last active (its newest turn), ``None`` if not tracked."""
        member = scope_member(CompressKeys(self.namespace, user_id, tenant_id).scope, session_id)
        with redis_errors():
            at = self._r.zscore(self._active, member)
        return None if at is None else float(at)

    def quiet_since(self, cutoff: float, *, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` ``(<scope>|<session>, last activity)`` quiet since ``cutoff``,
        oldest first (read only: sessions quiet for a week leave in :meth:`idle`)."""
        with redis_errors():
            raw = self._r.zrangebyscore(
                self._active, "-inf", cutoff, start=0, num=limit, withscores=True
            )
        return [(str(m), float(s)) for m, s in cast(list[tuple[str, float]], raw)]

    def idle(
        self, *, now: float, idle_s: float, min_tokens: int, limit: int = 100
    ) -> list[SessionContext]:
        """Sessions quiet for ``idle_s`` seconds, over ``min_tokens``, not compressed since.

        Sessions quiet for more than a week leave the index (their views would expire
        unused anyway).
        """
        key = self._active
        with redis_errors():
            self._r.zremrangebyscore(key, "-inf", now - ACTIVITY_TTL_S)
            members = self._r.zrangebyscore(key, "-inf", now - idle_s, start=0, num=limit * 4)
        out = []
        for member in members:
            scope, _, session_id = str(member).rpartition("|")
            user_id, tenant_id = parse_user_scope(scope)
            ctx = self.get(user_id, session_id, tenant_id=tenant_id)
            if ctx is None or ctx.tokens < min_tokens:
                continue
            if ctx.compressed_mid is not None and ctx.compressed_mid == ctx.last_message_id:
                continue
            out.append(ctx)
            if len(out) >= limit:
                break
        return out


def crossed(before: int, after: int, *, threshold: int, step: int) -> bool:
    """True when a session's raw context passes ``threshold``, then every ``step`` tokens."""
    if after < threshold:
        return False
    if before < threshold:
        return True
    return (after - threshold) // step != (before - threshold) // step


def due_for_compression(
    activity: SessionActivity,
    turns: Sequence[Sequence[TranscriptRecord]],
    counter: TokenCounter,
    *,
    threshold: int,
    step: int,
) -> list[TranscriptRecord]:
    """Count each turn into its session; the last record of each session whose raw context
    just passed ``threshold`` (then each further ``step``): those need a compression."""
    due: dict[tuple[str | None, str, str], TranscriptRecord] = {}
    for records, seen in zip(turns, activity.note_turns(turns, counter), strict=True):
        if seen is not None and crossed(seen[0], seen[1], threshold=threshold, step=step):
            last = records[-1]
            due[(last.tenant_id, last.user_id, last.session_id)] = last
    return list(due.values())
