"""STM indexes of the order before 2026-12-07 (scores = times): left alone, then turned.

Since then every item index and ``expire`` hold negated times (``core.stm.index_order``).
An index an older version wrote must lose nothing before ``memstrata migrate`` turns it
(the sweep would otherwise take every positive score for an expiry long past), and the
migration must leave exactly what the current code writes.
"""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from memstrata.core.runtime import Runtime, close_runtime, reset_runtime
from memstrata.core.stm.index_order import Negated, legacy_index_found, negate_legacy_scores
from memstrata.ops.cli import main
from tests.integration.conftest import user_state
from tests.integration.test_lifecycle_env import lifecycle_pg
from tests.integration.test_stm_store import HOUR, T0, item, promotable

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

INDEX_FAMILIES = ("recent", "expire", "session:", "task:", "entity:")


def to_earlier_order(res: Runtime, user: str) -> tuple[int, int]:
    """Rewrite the user's index scores as an older version wrote them (the times)."""
    prefix = res.stm.keys(user).prefix
    keys = entries = 0
    for key in list(res.redis.scan_iter(match=f"{prefix}*", _type="zset")):
        if not key[len(prefix) :].startswith(INDEX_FAMILIES):
            continue
        rows = cast(list[tuple[str, float]], res.redis.zrange(key, 0, -1, withscores=True))
        assert rows and all(score < 0 for _member, score in rows)
        res.redis.zadd(key, {member: -score for member, score in rows})
        keys, entries = keys + 1, entries + len(rows)
    return keys, entries


def _stored(res: Runtime) -> list[str]:
    return sorted(i.id for i in res.stm.get_many("u_1", ["m_1", "m_2", "m_3"],
                                                   include_expired=True))  # fmt: skip


def test_indexes_of_the_earlier_order_lose_nothing_and_migrate_turns_them_once(
    res: Runtime, lifecycle_pg: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # Given three items written by this version, and its exact state
    res.stm.upsert_many([
        item("m_1", ttl=HOUR),
        item("m_2", at=T0 + 10, ttl=2 * HOUR, entities=("gc",)),
        item("m_3", at=T0 + 20.25, ttl=3 * HOUR, session="s_2", task=None),
    ])  # fmt: skip
    expected: dict[str, Any] = user_state(res, "u_1")
    hint = res.stm.gkeys.sweep_users
    assert res.redis.zscore(hint, "default/u_1") == T0 + HOUR
    # And the same indexes as a version before 2026-12-07 left them
    keys, entries = to_earlier_order(res, "u_1")
    assert (keys, entries) == (7, 14)  # recent, expire, 2 sessions, 1 task, 2 entities
    assert legacy_index_found(res.redis, res.settings.key_namespace)
    # When the sweep runs long after every expiry, before the migration
    removed, nxt = res.stm.sweep_user("u_1", now=T0 + 10 * HOUR, limit=100)
    # Then it removes nothing: the older entries are not its to judge
    assert (removed, nxt) == (0, None)
    assert _stored(res) == ["m_1", "m_2", "m_3"]
    res.redis.zrem(hint, "default/u_1")  # what the hinted sweep does with such an owner
    # And the promotion scan leaves them alone too
    assert promotable(res, now=T0) == []
    # When `memstrata migrate` runs (PostgreSQL already at head)
    monkeypatch.setenv("MEMSTRATA_POSTGRES_URL", lifecycle_pg)
    reset_runtime(res.settings)
    try:
        capsys.readouterr()
        assert main(["migrate"]) == 0
    finally:
        close_runtime()
    # Then it says what it turned
    assert "STM index order: 14 entries of 7 indexes now newest first" in capsys.readouterr().out
    # And the state is exactly what this version writes, and the sweep hint is back at
    # the owner's soonest expiry
    assert user_state(res, "u_1") == expected
    assert res.redis.zscore(hint, "default/u_1") == T0 + HOUR
    assert not legacy_index_found(res.redis, res.settings.key_namespace)
    # And the promotion scan reads the live items, soonest expiry first (an item that
    # expires at `now` is no longer live)
    assert promotable(res, now=T0 + HOUR) == ["m_2", "m_3"]
    # And a second run finds nothing to turn
    assert negate_legacy_scores(res.redis, res.settings.key_namespace) == Negated(0, 0)
    # And the sweep now removes what expired, soonest first, and names the next expiry
    # (`expire` files it under its whole second, rounded up)
    assert res.stm.sweep_user("u_1", now=T0 + 10 + 2 * HOUR, limit=100) == (
        2, math.ceil(T0 + 20.25 + 3 * HOUR))  # fmt: skip
    assert _stored(res) == ["m_3"]


def test_the_migration_turns_only_this_namespaces_time_indexes(res: Runtime) -> None:
    # Given an item of this version and, beside it, positive scores that are not its to
    # turn: the session's eviction order, the recall-access counts, another namespace's
    # index, and a no-tenant key that the owner adoption left in place (a conflict)
    res.stm.upsert(item("m_1"))
    ns = res.settings.key_namespace
    k = res.stm.keys("u_1")
    res.redis.zadd(k.access, {"redis_stm:m_1": 2.0})
    other = f"{ns}x:user:{{default/u_1}}:recent"
    res.redis.zadd(other, {"m_1": T0})
    conflict = f"{ns}:user:{{u_1}}:recent"
    res.redis.zadd(conflict, {"m_1": T0})
    try:
        before = user_state(res, "u_1")
        # When the migration runs
        done = negate_legacy_scores(res.redis, ns)
        # Then it turned nothing and changed nothing
        assert done == Negated(0, 0)
        assert user_state(res, "u_1") == before
        assert res.redis.zscore(other, "m_1") == T0
        assert res.redis.zscore(conflict, "m_1") == T0
        assert res.redis.zscore(res.stm.gkeys.sweep_users, "u_1") is None
    finally:
        res.redis.delete(other)


def test_the_migration_turns_key_batches_and_reports_its_progress(res: Runtime) -> None:
    # Given three owners whose indexes an older version wrote
    users = ("u_1", "u_2", "u_3")
    res.stm.upsert_many([item(f"m_{u}", user=u, key=f"k:{u}") for u in users])
    expected = {u: user_state(res, u) for u in users}
    turned = [to_earlier_order(res, u) for u in users]
    # When they are turned three keys at a time
    seen: list[tuple[int, int]] = []
    done = negate_legacy_scores(res.redis, res.settings.key_namespace, batch=3,
                                progress=lambda n: seen.append((n.keys, n.entries)))  # fmt: skip
    # Then every key is turned once, the running totals grow to the end, and each owner's
    # state is what this version writes
    assert (done.keys, done.entries) == tuple(map(sum, zip(*turned, strict=True)))
    assert len(seen) >= 2 and seen == sorted(seen) and seen[-1] == (done.keys, done.entries)
    assert {u: user_state(res, u) for u in users} == expected


def test_a_sessions_members_are_listed_oldest_first(res: Runtime) -> None:
    # Given three items of one session written in turn (the summary card lists them so)
    res.stm.upsert_many([item("m_b", at=T0 + 10), item("m_c", at=T0 + 20), item("m_a", at=T0)])
    # Then the session lists them oldest first, and the reads newest first
    assert res.stm.session_members("u_1", "s_1") == ["m_a", "m_b", "m_c"]
    assert [i.id for i in res.stm.by_session("u_1", "s_1")] == ["m_c", "m_b", "m_a"]
    assert [i.id for i in res.stm.recent("u_1")] == ["m_c", "m_b", "m_a"]
