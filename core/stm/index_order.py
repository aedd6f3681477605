"""The order of an owner's STM indexes: scores are negated times, the newest entry first.

The item indexes (``recent``, ``session:``, ``task:``, ``entity:``) score an entry by the
negated ``updated_at`` of its item and ``expire`` by the negated ``expires_at``, rounded
up to the whole second since 2026-12-07 (``common.lua``, "Index order"; :func:`time_of`
of an ``expire`` score is that second).  An owner's sorted sets are listpacks
(``ops/redis.conf``), and a listpack ``ZADD`` scans from the head for the new score's
place: a new item, always the newest, used to be placed after a scan of every entry and
is now placed at once (issue 17; docs/PERFORMANCE.md).  Readers take the newest first
with ``ZRANGE``.

Until 2026-12-07 the scores were the times themselves.  :func:`negate_legacy_scores`
(run by ``memstrata migrate``) turns the positive scores an older version left, key by
key, each key in one atomic script; running it again finds nothing.  Before it ran, the
sweep and the promotion scan leave the older entries alone (their ranges end below 0),
so nothing is lost, only ordered oddly; ``memstrata status`` names the leftover
(:func:`legacy_index_found`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import redis

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.keys import GlobalKeys

# the index families whose scores are times (`type:` is the index dropped in 2026-12,
# still listed by older items and removed when they are next written)
_INDEX_SUFFIX = re.compile(r"^(recent|expire|(session|task|entity|type):.+)$")
# a scope of today's owner layout, `<tenant>/<user>`: keys of the no-tenant layout that
# its adoption left in place (conflicts, core/owner_layout.py) are an operator's to judge
# (SCAN's match pattern already holds the namespace)
_USER_KEY = re.compile(r"^[^:]+:user:\{(?P<scope>[^{}/]+/[^{}/]+)\}:(?P<suffix>.+)$")

# KEYS[1] = one index; negate every positive score, in chunks (Lua's unpack has a limit).
# Returns {entries turned, the smallest time turned or ''}: `expire`'s is the owner's
# soonest expiry, the sweep hint's score.
_NEGATE = """
local rows = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES')
local flat = {}
for i = 1, #rows, 2 do
  flat[#flat + 1] = -tonumber(rows[i + 1])
  flat[#flat + 1] = rows[i]
  if #flat >= 2000 then redis.call('ZADD', KEYS[1], unpack(flat)); flat = {} end
end
if #flat > 0 then redis.call('ZADD', KEYS[1], unpack(flat)) end
return {#rows / 2, rows[2] or ''}
"""


def score_of(at: float) -> float:
    """The index score of a time: ``updated_at`` exactly; ``expire`` files an expiry under
    :func:`expire_second` of it, and a range bound such as ``score_of(now)`` still selects
    the entries due by ``now``."""
    return -at


def expire_second(expires_at: float) -> int:
    """The whole second ``expire`` files an expiry under: rounded up, so an item is swept
    at most a second late and never early (common.lua ``expire_score``: integral scores
    are what a listpack stores and reads back without parsing)."""
    return math.ceil(expires_at)


def time_of(score: float) -> float:
    """The time an index score stands for (:func:`score_of` reversed)."""
    return -score


@dataclass
class Negated:
    """What one :func:`negate_legacy_scores` turned."""

    keys: int = 0
    entries: int = 0


def negate_legacy_scores(
    client: redis.Redis,
    namespace: str,
    *,
    batch: int = 500,
    progress: Callable[[Negated], None] | None = None,
) -> Negated:
    """Turn every positive index score of the namespace into its negation, once.

    Keys are taken as SCAN finds them, ``batch`` at a time (one pipelined round trip of
    scripts each); each key is turned atomically by one script, so a reader sees it whole
    before or after, and a key SCAN returns twice is simply found turned.  An owner whose
    ``expire`` index held such entries is put back on the sweep hint at its soonest
    expiry (``ZADD LT``): the sweep, which skips older entries, may have dropped it.
    ``progress`` is called with the running totals after each batch that turned some.
    """
    out = Negated()
    negate = client.register_script(_NEGATE)
    hint = GlobalKeys(namespace).sweep_users

    def turn(part: list[tuple[str, str, str]]) -> None:
        pipe = client.pipeline(transaction=False)
        for key, _scope, _suffix in part:
            negate(keys=[key], client=pipe)
        replies = pipe.execute()
        pipe = client.pipeline(transaction=False)
        before = out.keys
        for (_key, scope, suffix), (n, soonest) in zip(part, replies, strict=True):
            if int(n):
                out.keys += 1
                out.entries += int(n)
                if suffix == "expire":
                    pipe.zadd(hint, {scope: float(soonest)}, lt=True)
        pipe.execute()
        if progress is not None and out.keys > before:
            progress(out)

    with redis_errors():
        part: list[tuple[str, str, str]] = []
        for raw in client.scan_iter(match=f"{namespace}:user:*", count=1000, _type="zset"):
            m = _USER_KEY.match(str(raw))
            if m and _INDEX_SUFFIX.match(m["suffix"]):
                part.append((str(raw), m["scope"], m["suffix"]))
                if len(part) >= batch:
                    turn(part)
                    part = []
        if part:
            turn(part)
    return out


def legacy_index_found(
    client: redis.Redis, namespace: str, *, probe: int = 2000, scans: int = 200
) -> bool:
    """Whether one of the first ``probe`` ``expire`` indexes that at most ``scans`` SCAN
    calls find holds an entry of the earlier order (a bounded probe for ``memstrata
    status``, not a census: older entries are on every owner that wrote before the
    upgrade)."""
    cursor, checked = 0, 0
    with redis_errors():
        for _ in range(scans):
            cursor, found = client.scan(
                cursor, match=f"{namespace}:user:*:expire", count=1000, _type="zset"
            )
            found = found[: probe - checked]
            pipe = client.pipeline(transaction=False)
            for key in found:
                pipe.zrangebyscore(key, "(0", "+inf", start=0, num=1)
            if any(pipe.execute()):
                return True
            checked += len(found)
            if cursor == 0 or checked >= probe:
                break
    return False
