"""Redis STM store against a real Redis: the Lua upsert paths, indexes, delete, cap, sweep."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from memstrata.core.errors import InvalidId, InvalidInput, PayloadTooLarge, StoreUnavailable
from memstrata.core.ids import entity_key_part
from memstrata.core.lifecycle.views import read_users
from memstrata.core.models.memory import MemoryItem, MemoryStatus, MemoryType
from memstrata.core.runtime import Runtime
from memstrata.core.stm.store import StmStore

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0
HOUR = 3600.0


def item(
    mid: str,
    *,
    summary: str | None = None,
    user: str = "u_1",
    session: str = "s_1",
    task: str | None = "bug456",
    mtype: MemoryType = MemoryType.DECISION,
    entities: tuple[str, ...] = ("payment-service",),
    importance: float = 0.5,
    confidence: float = 0.85,
    at: float = T0,
    ttl: float = HOUR,
    key: str | None = None,
    fp: str | None = None,
    msgs: tuple[str, ...] = ("t1.0",),
    tool_calls: tuple[str, ...] = (),
    **extra: Any,
) -> MemoryItem:
    summary = summary or f"roll back payment-service ({mid})"
    return MemoryItem(
        id=mid,
        user_id=user,
        session_id=session,
        task_id=task,
        memory_type=mtype,
        subtype="current_decision",
        summary=summary,
        detail={"why": "createOrder timeouts"},
        entities=list(entities),
        tags=["decision"],
        source={
            "kind": "conversation",
            "message_ids": list(msgs),
            "tool_call_ids": list(tool_calls),
        },
        confidence=confidence,
        importance=importance,
        created_at=at,
        updated_at=at,
        last_access_at=at,
        expires_at=at + ttl,
        fingerprint=fp or hashlib.sha1(summary.encode()).hexdigest()[:24],
        canonical_fact_key=key or f"bug456:decision:{mid}",
        seen_sessions=[session],
        **extra,
    )


def snapshot(res: Runtime) -> dict[str, Any]:
    """Every key of the test namespace with its full content."""
    r = res.redis
    out: dict[str, Any] = {}
    for key in sorted(r.scan_iter(match=f"{res.settings.key_namespace}:*", count=1000)):
        kind = r.type(key)
        if kind == "hash":
            out[key] = r.hgetall(key)
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "string":
            out[key] = r.get(key)
        else:  # pragma: no cover - the STM writes no other types
            out[key] = kind
    return out


def user_keys(res: Runtime, user: str = "u_1") -> dict[str, Any]:
    prefix = res.stm.keys(user).prefix
    return {k[len(prefix) :]: v for k, v in snapshot(res).items() if k.startswith(prefix)}


def zsets(res: Runtime, user: str = "u_1") -> dict[str, dict[str, float]]:
    return {k: dict(v) for k, v in user_keys(res, user).items() if isinstance(v, list)}


def assert_no_dangling_references(res: Runtime, user: str = "u_1") -> set[str]:
    """Every zset member and dedup mapping of the user refers to an existing item."""
    keys = user_keys(res, user)
    items = {k.removeprefix("item:") for k in keys if k.startswith("item:")}
    for name, value in keys.items():
        if isinstance(value, list):
            members = {m for m, _s in value}
            assert members <= items, f"zset {name} refers to missing items {members - items}"
        elif name in ("canon", "fp"):
            assert set(value.values()) <= items, f"{name} maps to missing items"
    return items


def stored_hash(res: Runtime, mid: str, user: str = "u_1") -> dict[str, str]:
    return cast(dict[str, str], res.redis.hgetall(res.stm.keys(user).item(mid)))  # decoded


# ---------------------------------------------------------------- insert


def test_insert_writes_the_item_every_index_and_both_dedup_maps(res: Runtime) -> None:
    # Given a decision about payment-service and createOrder
    new = item("m_1", entities=("payment-service", "createOrder", "thread pool"), ttl=2 * HOUR)
    # When it is upserted into an empty STM
    result = res.stm.upsert(new)
    # Then it is inserted as version 1
    assert (result.op, result.memory_id, result.version, result.evicted) == (
        "inserted",
        "m_1",
        1,
        (),
    )
    # And the hash holds the item compactly: what its key says (id, owner), its status
    # and every field at its default are left out, the rest as written, plus the index list
    raw = stored_hash(res, "m_1")
    left_out = {"id", "user_id", "tenant_id", "status", "version", "mention_count", "history",
                "seen_sessions", "created_at", "last_access_at"}  # fmt: skip
    expected = {k: v for k, v in new.to_redis_hash().items() if k not in left_out}
    expected["source"] = '{"message_ids":["t1.0"]}'  # kind "conversation", no tool calls
    assert {k: v for k, v in raw.items() if k != "ix"} == expected
    # And it reads back as the item that was written
    assert res.stm.get("u_1", "m_1") == new
    # And its index list leaves out what its fields imply (recent, its session, its task)
    assert raw["ix"] == " ".join([
        "entity:payment-service",
        "entity:createorder",
        f"entity:{entity_key_part('thread pool')}",
    ])  # fmt: skip
    # And every index scores it by its negated updated_at (newest first), the expire index
    # by its negated expires_at (core.stm.index_order)
    assert zsets(res) == {
        "recent": {"m_1": -T0},
        "session:s_1": {"m_1": -T0},
        "task:bug456": {"m_1": -T0},
        "entity:payment-service": {"m_1": -T0},
        "entity:createorder": {"m_1": -T0},
        f"entity:{entity_key_part('thread pool')}": {"m_1": -T0},
        "expire": {"m_1": -(T0 + 2 * HOUR)},
        # eviction order of the session: importance (4 decimals) above updated_at
        "evict:s_1": {"m_1": 5000 * 1e10 + T0},
    }
    keys = user_keys(res)
    assert keys["canon"] == {"bug456:decision:m_1": "m_1"}
    assert keys["fp"] == {new.fingerprint: "m_1"}
    # And the global sweep hint knows when this user next has something to expire
    # (its member is the owner scope: no tenant is the default tenant)
    assert res.redis.zscore(res.stm.gkeys.sweep_users, "default/u_1") == T0 + 2 * HOUR
    # And it reads back equal to what was written
    assert res.stm.get("u_1", "m_1") == new


def test_expiry_scores_are_whole_seconds_and_the_sweep_and_promotion_scan_go_by_them(
    res: Runtime,
) -> None:
    # Given an item written between two seconds
    at = T0 + 0.75
    res.stm.upsert(item("m_1", at=at, ttl=HOUR, importance=0.25))
    z = zsets(res)
    # Then the time indexes and the eviction order keep its exact time (recall's recency
    # order; least important, then oldest)
    assert z["recent"] == {"m_1": -at}
    assert z["evict:s_1"] == {"m_1": 2500 * 1e10 + at}
    # And `expire` files it under its expiry's whole second, rounded up (an integer,
    # which a listpack keeps as one), and so does the sweep hint
    assert z["expire"] == {"m_1": -(T0 + HOUR + 1)}
    assert res.redis.zscore(res.stm.gkeys.sweep_users, "default/u_1") == T0 + HOUR + 1
    # When the promotion scan runs before the exact expiry, and after it within its second
    # Then it reads the item only while it is live
    assert promotable(res, now=T0 + HOUR + 0.5) == ["m_1"]
    assert promotable(res, now=T0 + HOUR + 0.9) == []
    # And the sweep leaves it until that second and names it as the next expiry
    assert res.stm.sweep_user("u_1", now=T0 + HOUR + 0.9, limit=10) == (0, T0 + HOUR + 1)
    # And takes it at that second
    assert res.stm.sweep_user("u_1", now=T0 + HOUR + 1, limit=10) == (1, None)
    assert zsets(res) == {}


def promotable(res: Runtime, *, now: float, user: str = "u_1") -> list[str]:
    """The ids the promotion scan reads as live for ``user`` at ``now``."""
    [batch] = read_users(res.lifecycle_store, [f"default/{user}"], now=now)
    return [view.memory_id for view in batch.items]


def test_an_item_of_the_earlier_layout_reads_the_same_and_is_compacted_when_rewritten(
    res: Runtime,
) -> None:
    # Given an item stored before compact hashes: every field, and a type index entry
    old = item("m_1", entities=("createOrder",))
    k = res.stm.keys("u_1")
    full = old.to_redis_hash()
    full["_idx"] = json.dumps(["recent", "session:s_1", "type:decision", "task:bug456",
                               "entity:createorder"])  # fmt: skip
    res.redis.hset(k.item("m_1"), mapping=dict[Any, Any](full))
    for suffix in json.loads(full["_idx"]):
        res.redis.zadd(k.prefix + suffix, {"m_1": T0})
    res.redis.zadd(k.expire, {"m_1": T0 + HOUR})
    res.redis.hset(k.canon, old.canonical_fact_key, "m_1")
    res.redis.hset(k.fp, old.fingerprint, "m_1")
    # Then it reads back as it was written
    assert res.stm.get("u_1", "m_1") == old
    # When the same fact is said again in a later message
    again = item("m_1", entities=("createOrder",), msgs=("t2.0",), at=T0 + 60)
    assert res.stm.upsert(again).op == "merged"
    # Then the hash is compact, the type index entry is gone, nothing dangles
    raw = stored_hash(res, "m_1")
    assert not {"id", "user_id", "status", "version", "history"} & set(raw)
    assert "type:decision" not in zsets(res)
    assert "_idx" not in raw and "type:decision" not in raw["ix"]
    assert assert_no_dangling_references(res) == {"m_1"}
    got = res.stm.get("u_1", "m_1")
    assert got is not None and got.mention_count == 2
    assert got.source.message_ids == ["t1.0", "t2.0"]
    assert got.created_at == T0 and got.updated_at == T0 + 60


def _previous_layout(res: Runtime, mid: str, *, ttl: float) -> MemoryItem:
    """An item as the upsert script wrote it before 2026-12-02: compact, but every index
    suffix in the JSON list ``_idx``."""
    old = item(mid, entities=("createOrder",), ttl=ttl)
    res.stm.upsert(old)
    k = res.stm.keys("u_1")
    raw = stored_hash(res, mid)
    suffixes = ["recent", "session:s_1", "task:bug456", *raw.pop("ix").split()]
    res.redis.delete(k.item(mid))
    res.redis.hset(k.item(mid), mapping=dict[Any, Any]({**raw, "_idx": json.dumps(suffixes)}))
    return old


@pytest.mark.parametrize("how", ["sweep", "delete", "merge"])
def test_an_item_whose_index_list_is_the_json_idx_is_read_removed_and_merged_whole(
    res: Runtime, how: str
) -> None:
    # Given an item of the previous layout (its index list in `_idx`)
    old = _previous_layout(res, "m_1", ttl=HOUR)
    assert res.stm.get("u_1", "m_1") == old
    # When it is swept, deleted or merged
    if how == "sweep":
        assert res.stm.sweep_user("u_1", now=T0 + 2 * HOUR, limit=10)[0] == 1
    elif how == "delete":
        assert res.stm.delete("u_1", ["m_1"]) == 1
    else:
        again = item("m_1", entities=("createOrder", "gc"), msgs=("t2.0",), at=T0 + 60)
        assert res.stm.upsert(again).op == "merged"
        raw = stored_hash(res, "m_1")
        assert "_idx" not in raw and raw["ix"] == "entity:createorder entity:gc"
    # Then no index keeps an entry of a removed item, and a merged one is in all of them
    live = assert_no_dangling_references(res)
    if how == "merge":
        assert live == {"m_1"}
        assert set(zsets(res)) >= {"recent", "session:s_1", "task:bug456",
                                   "entity:createorder", "entity:gc"}  # fmt: skip
    else:
        assert live == set() and zsets(res) == {}


def test_item_without_a_task_is_not_in_any_task_index(res: Runtime) -> None:
    res.stm.upsert(item("m_1", task=None, entities=()))
    assert set(zsets(res)) == {"recent", "session:s_1", "expire", "evict:s_1"}


# ---------------------------------------------------------------- merged


def test_restated_fact_from_another_message_is_merged_without_a_version_bump(
    res: Runtime,
) -> None:
    # Given a stored fact from message t1.0 in session s_1
    first = item("m_1", importance=0.4, confidence=0.7, msgs=("t1.0",), tool_calls=("c1",))
    res.stm.upsert(first)
    # When the same fact (same fingerprint, same key) is restated in s_2, message t5.0
    again = item(
        "m_other",
        summary=first.summary,
        key=first.canonical_fact_key,
        session="s_2",
        entities=("payment-service", "createOrder"),
        importance=0.6,
        confidence=0.9,
        msgs=("t5.0",),
        tool_calls=("c7",),
        at=T0 + 60,
        ttl=HOUR,
    )
    result = res.stm.upsert(again)
    # Then the existing item absorbs it: one more mention, merged provenance, same version
    assert (result.op, result.memory_id, result.version) == ("merged", "m_1", 1)
    merged = res.stm.get("u_1", "m_1")
    assert merged is not None
    assert merged.version == 1
    assert merged.mention_count == 2
    assert merged.summary == first.summary
    assert merged.created_at == T0
    assert merged.updated_at == T0 + 60
    assert merged.source.message_ids == ["t1.0", "t5.0"]
    assert merged.source.tool_call_ids == ["c1", "c7"]
    assert merged.entities == ["payment-service", "createOrder"]
    assert merged.seen_sessions == ["s_1", "s_2"]
    assert merged.session_id == "s_2"
    assert (merged.importance, merged.confidence) == (0.6, 0.9)  # the higher of both
    assert merged.expires_at == T0 + 60 + HOUR  # the later of both
    assert merged.history == []
    # And the twin id was never created; indexes follow the new time and new session
    assert res.stm.get("u_1", "m_other") is None
    z = zsets(res)
    assert z["recent"] == {"m_1": -(T0 + 60)}
    assert z["session:s_1"] == {"m_1": -(T0 + 60)}
    assert z["session:s_2"] == {"m_1": -(T0 + 60)}
    assert z["entity:createorder"] == {"m_1": -(T0 + 60)}
    assert z["expire"] == {"m_1": -(T0 + 60 + HOUR)}
    assert_no_dangling_references(res)


def test_merge_keeps_the_higher_importance_and_the_later_expiry(res: Runtime) -> None:
    res.stm.upsert(item("m_1", importance=0.8, ttl=5 * HOUR))
    res.stm.upsert(item("m_1", importance=0.3, ttl=HOUR, msgs=("t2.0",), at=T0 + 10))
    merged = res.stm.get("u_1", "m_1")
    assert merged is not None
    assert (merged.importance, merged.expires_at) == (0.8, T0 + 5 * HOUR)


# ---------------------------------------------------------------- updated


def test_changed_fact_under_the_same_key_bumps_the_version_and_keeps_history(
    res: Runtime,
) -> None:
    # Given a decision stored under bug456:decision:pool
    old = item(
        "m_1",
        summary="set the thread pool size to 200",
        entities=("thread_pool", "payment-service"),
        key="bug456:decision:pool",
        msgs=("t1.0",),
    )
    res.stm.upsert(old)
    # When a new decision arrives under the same canonical key with new content
    new = item(
        "m_ignored",
        summary="set the thread pool size to 400 and add a bulkhead",
        entities=("thread_pool",),
        key="bug456:decision:pool",
        msgs=("t3.1",),
        at=T0 + 120,
        importance=0.3,
    )
    result = res.stm.upsert(new)
    # Then the same item gets version 2 with the new content
    assert (result.op, result.memory_id, result.version) == ("updated", "m_1", 2)
    cur = res.stm.get("u_1", "m_1")
    assert cur is not None
    assert cur.summary == new.summary
    assert cur.fingerprint == new.fingerprint
    assert cur.version == 2
    assert cur.importance == 0.3
    assert cur.created_at == T0
    assert cur.updated_at == T0 + 120
    assert cur.source.message_ids == ["t3.1"]
    assert cur.mention_count == 2
    # And the old content is kept as superseded provenance
    assert [h.model_dump() for h in cur.history] == [
        {
            "version": 1,
            "summary": "set the thread pool size to 200",
            "fingerprint": old.fingerprint,
            "updated_at": T0,
            "message_ids": ["t1.0"],
        }
    ]
    # And the old fingerprint no longer resolves; the key maps to the same item
    keys = user_keys(res)
    assert keys["fp"] == {new.fingerprint: "m_1"}
    assert keys["canon"] == {"bug456:decision:pool": "m_1"}
    # And the indexes follow the new content: the dropped entity no longer lists it
    z = zsets(res)
    assert "entity:payment-service" not in z
    assert z["entity:thread_pool"] == {"m_1": -(T0 + 120)}
    assert z["expire"] == {"m_1": -(T0 + 120 + HOUR)}
    assert_no_dangling_references(res)


def test_history_keeps_only_the_newest_superseded_versions(res: Runtime) -> None:
    store = StmStore(res.redis, namespace=res.settings.key_namespace, history_cap=2)
    for v in range(1, 5):
        result = store.upsert(
            item("m_1", summary=f"pool size {v}00", key="k:pool", msgs=(f"t{v}.0",), at=T0 + v)
        )
    assert (result.op, result.version) == ("updated", 4)
    cur = store.get("u_1", "m_1")
    assert cur is not None
    assert [h.version for h in cur.history] == [2, 3]
    assert [h.summary for h in cur.history] == ["pool size 200", "pool size 300"]


def test_an_item_without_message_ids_stays_readable_after_an_update(res: Runtime) -> None:
    # Given an item written without source message ids (allowed by the model), updated once
    res.stm.upsert(item("m_1", summary="pool size 200", key="k:pool", msgs=()))
    result = res.stm.upsert(item("m_1", summary="pool size 400", key="k:pool", msgs=(), at=T0 + 1))
    assert (result.op, result.version) == ("updated", 2)
    # When it is read back / Then the history entry parses, and the index read works
    cur = res.stm.get("u_1", "m_1")
    assert cur is not None
    assert [(h.summary, h.message_ids) for h in cur.history] == [("pool size 200", [])]
    assert ids(res.stm.recent("u_1")) == ["m_1"]


# ---------------------------------------------------------------- unchanged (redelivery)


def test_redelivered_write_changes_nothing_at_all(res: Runtime) -> None:
    # Given an item written from message t1.0
    first = item("m_1", msgs=("t1.0",))
    res.stm.upsert(first)
    before = snapshot(res)
    # When the very same write is delivered again (later, as a retry would be)
    result = res.stm.upsert(item("m_1", msgs=("t1.0",), at=T0 + 999, importance=0.9))
    # Then it is reported unchanged and every key of the namespace is byte-for-byte the same
    assert (result.op, result.memory_id, result.version) == ("unchanged", "m_1", 1)
    assert snapshot(res) == before


def test_redelivery_of_a_superseded_version_does_not_roll_the_item_back(res: Runtime) -> None:
    # Given v1 from t1.0, then v2 from t2.0 under the same key
    res.stm.upsert(item("m_1", summary="pool size 200", key="k:pool", msgs=("t1.0",)))
    res.stm.upsert(item("m_1", summary="pool size 400", key="k:pool", msgs=("t2.0",), at=T0 + 5))
    before = snapshot(res)
    # When the first turn is redelivered
    result = res.stm.upsert(item("m_1", summary="pool size 200", key="k:pool", msgs=("t1.0",)))
    # Then nothing changes: v2 stays current
    assert (result.op, result.version) == ("unchanged", 2)
    assert snapshot(res) == before


def test_redelivery_of_a_merged_restatement_is_unchanged(res: Runtime) -> None:
    res.stm.upsert(item("m_1", msgs=("t1.0",)))
    res.stm.upsert(item("m_1", msgs=("t2.0",), at=T0 + 5))
    before = snapshot(res)
    assert res.stm.upsert(item("m_1", msgs=("t2.0",), at=T0 + 50)).op == "unchanged"
    assert snapshot(res) == before


def test_an_older_version_delivered_late_is_filed_under_history(res: Runtime) -> None:
    # Given v1 (event time T0) and v2 (T0 + 100) of one fact
    res.stm.upsert(item("m_1", summary="pool size 200", key="k:pool", msgs=("t1.0",)))
    res.stm.upsert(item("m_1", summary="pool size 400", key="k:pool", msgs=("t3.0",), at=T0 + 100))
    before_indexes = zsets(res)
    # When a third version with an older event time (T0 + 50) arrives late
    late = item("m_1", summary="pool size 300", key="k:pool", msgs=("t2.0",), at=T0 + 50)
    result = res.stm.upsert(late)
    # Then it is reported stale, the newer content stays current and indexes are untouched
    assert (result.op, result.memory_id, result.version) == ("stale", "m_1", 2)
    cur = res.stm.get("u_1", "m_1")
    assert cur is not None
    assert (cur.summary, cur.version, cur.updated_at) == ("pool size 400", 2, T0 + 100)
    assert zsets(res) == before_indexes
    # And the late content is kept as provenance, so its redelivery is recognised
    assert [(h.version, h.summary, h.message_ids) for h in cur.history] == [
        (1, "pool size 200", ["t1.0"]),
        (0, "pool size 300", ["t2.0"]),
    ]
    before = snapshot(res)
    assert res.stm.upsert(late).op == "unchanged"
    assert snapshot(res) == before


def test_a_late_restatement_does_not_make_the_item_look_older(res: Runtime) -> None:
    # Given a fact last stated at T0 + 100
    res.stm.upsert(item("m_1", msgs=("t3.0",), at=T0 + 100))
    # When the same fact from an earlier message (event time T0 + 50) is merged late
    result = res.stm.upsert(item("m_1", msgs=("t2.0",), at=T0 + 50))
    # Then it counts as a mention, but the item keeps its newest time in hash and indexes
    assert result.op == "merged"
    cur = res.stm.get("u_1", "m_1")
    assert cur is not None
    assert cur.mention_count == 2
    assert (cur.updated_at, cur.last_access_at) == (T0 + 100, T0 + 100)
    assert zsets(res)["recent"] == {"m_1": -(T0 + 100)}


# ---------------------------------------------------------------- batches and limits


def test_upsert_many_applies_each_write_in_order(res: Runtime) -> None:
    results = res.stm.upsert_many(
        [
            item("m_1", summary="pool 200", key="k:pool", msgs=("t1.0",)),
            item("m_2", summary="roll back", key="k:rb", msgs=("t1.1",)),
            item("m_1", summary="pool 400", key="k:pool", msgs=("t1.2",), at=T0 + 1),
        ]
    )
    assert [(r.op, r.memory_id, r.version) for r in results] == [
        ("inserted", "m_1", 1),
        ("inserted", "m_2", 1),
        ("updated", "m_1", 2),
    ]
    assert res.stm.upsert_many([]) == []


@pytest.mark.parametrize(
    "oversized",
    [
        {"summary": "s" * 401},
        {"detail": {"log": "x" * 4000}},
    ],
    ids=["summary", "detail"],
)
def test_oversized_item_raises_and_nothing_of_the_batch_is_written(
    res: Runtime, oversized: dict[str, Any]
) -> None:
    # Given a batch of one valid item and one over the configured size limits
    good = item("m_1")
    bad = item("m_2").model_copy(update=oversized)
    # When it is upserted / Then PayloadTooLarge, and Redis holds nothing of it
    with pytest.raises(PayloadTooLarge):
        res.stm.upsert_many([good, bad])
    assert snapshot(res) == {}


def test_only_active_items_can_be_written(res: Runtime) -> None:
    with pytest.raises(InvalidInput, match="active"):
        res.stm.upsert(item("m_1", status=MemoryStatus.SUPERSEDED))
    assert snapshot(res) == {}


# ---------------------------------------------------------------- reads


def seed_reads(res: Runtime) -> None:
    res.stm.upsert_many(
        [
            item("m_old", at=T0, mtype=MemoryType.FACT, entities=("database",)),
            item("m_mid", at=T0 + 10, session="s_2", task="bug789", entities=("createOrder",)),
            item("m_new", at=T0 + 20, entities=("createOrder", "database")),
            item("m_other_user", user="u_2", at=T0 + 30, entities=("database",)),
        ]
    )


def ids(items: list[MemoryItem]) -> list[str]:
    return [i.id for i in items]


def test_reads_return_items_newest_first_per_index(res: Runtime) -> None:
    seed_reads(res)
    assert ids(res.stm.recent("u_1")) == ["m_new", "m_mid", "m_old"]
    assert ids(res.stm.by_session("u_1", "s_1")) == ["m_new", "m_old"]
    assert ids(res.stm.by_task("u_1", "bug789")) == ["m_mid"]
    assert ids(res.stm.by_entity("u_1", "createOrder")) == ["m_new", "m_mid"]
    assert ids(res.stm.by_entity("u_1", "CREATEORDER")) == ["m_new", "m_mid"]
    assert ids(res.stm.by_type("u_1", "fact")) == ["m_old"]
    assert ids(res.stm.by_type("u_1", "decision")) == ["m_new", "m_mid"]
    assert ids(res.stm.by_entity("u_2", "database")) == ["m_other_user"]


def test_reads_honour_the_limit(res: Runtime) -> None:
    seed_reads(res)
    assert ids(res.stm.recent("u_1", limit=2)) == ["m_new", "m_mid"]
    assert ids(res.stm.by_entity("u_1", "database", limit=1)) == ["m_new"]
    for bad in (0, 1001):
        with pytest.raises(InvalidInput, match="limit"):
            res.stm.recent("u_1", limit=bad)


def test_reads_skip_items_expired_at_the_given_time(res: Runtime) -> None:
    res.stm.upsert_many([item("m_short", ttl=60), item("m_long", ttl=HOUR, at=T0 - 1)])
    assert ids(res.stm.recent("u_1", now=T0 + 59)) == ["m_short", "m_long"]
    assert ids(res.stm.recent("u_1", now=T0 + 60)) == ["m_long"]
    assert ids(res.stm.recent("u_1")) == ["m_short", "m_long"]  # no clock, no filter


def test_batch_get_keeps_order_and_skips_missing_ids(res: Runtime) -> None:
    seed_reads(res)
    got = res.stm.get_many("u_1", ["m_new", "m_missing", "m_old", "m_other_user"])
    assert ids(got) == ["m_new", "m_old"]
    assert res.stm.get("u_1", "m_missing") is None
    assert res.stm.get_many("u_1", []) == []


def test_reads_reject_unsafe_ids_and_unknown_types(res: Runtime) -> None:
    with pytest.raises(InvalidId):
        res.stm.get_many("u_1", ["m_1", "m:*"])
    with pytest.raises(InvalidId):
        res.stm.recent("u:*")
    with pytest.raises(InvalidId):
        res.stm.by_session("u_1", "s 1")
    with pytest.raises(InvalidInput, match="unknown memory type"):
        res.stm.by_type("u_1", "rumour")


def test_reader_skips_an_index_entry_whose_item_is_gone(res: Runtime) -> None:
    seed_reads(res)
    res.redis.delete(res.stm.keys("u_1").item("m_mid"))  # e.g. lost before the sweep ran
    assert ids(res.stm.recent("u_1")) == ["m_new", "m_old"]


# ---------------------------------------------------------------- dedup lookup


def test_lookup_finds_items_by_key_then_fingerprint_with_all_message_ids(res: Runtime) -> None:
    res.stm.upsert(item("m_1", summary="pool 200", key="k:pool", msgs=("t1.0",)))
    res.stm.upsert(item("m_1", summary="pool 400", key="k:pool", msgs=("t2.0",), at=T0 + 1))
    fp_400 = item("x", summary="pool 400").fingerprint
    hits = res.stm.lookup(
        "u_1", [("k:pool", "nope"), ("k:other", fp_400), ("k:none", "nope"), ("k:pool", fp_400)]
    )
    by_key, by_fp, missing, both = hits
    assert by_key is not None and by_fp is not None and both is not None
    assert (by_key.memory_id, by_key.by, by_key.fingerprint) == ("m_1", "canon", fp_400)
    assert set(by_key.message_ids) == {"t1.0", "t2.0"}
    assert by_key.mention_count == 2
    assert (by_fp.memory_id, by_fp.by) == ("m_1", "fp")
    assert missing is None
    assert both.by == "canon"
    assert res.stm.lookup("u_1", []) == []


# ---------------------------------------------------------------- delete


def test_delete_removes_the_item_every_index_entry_and_its_dedup_maps(res: Runtime) -> None:
    # Given two items sharing indexes, one of them updated once
    res.stm.upsert(item("m_1", entities=("createOrder", "database"), key="k:1", msgs=("t1.0",)))
    res.stm.upsert(
        item("m_1", summary="v2", entities=("createOrder",), key="k:1", msgs=("t2.0",), at=T0 + 1)
    )
    res.stm.upsert(item("m_2", summary="keep me", entities=("createOrder",), key="k:2"))
    # When the first is deleted
    assert res.stm.delete("u_1", ["m_1", "m_never_existed"]) == 1
    # Then nothing in the namespace refers to it any more
    assert assert_no_dangling_references(res) == {"m_2"}
    keys = user_keys(res)
    assert keys["canon"] == {"k:2": "m_2"}
    assert list(keys["fp"].values()) == ["m_2"]
    assert not any("m_1" in json.dumps(v) for v in keys.values())
    assert ids(res.stm.by_entity("u_1", "createOrder")) == ["m_2"]
    # And a second delete finds nothing
    assert res.stm.delete("u_1", ["m_1"]) == 0
    assert res.stm.delete("u_1", []) == 0


def test_deleting_everything_leaves_no_user_keys(res: Runtime) -> None:
    res.stm.upsert_many([item("m_1"), item("m_2", summary="b", entities=("db",), task=None)])
    res.stm.delete("u_1", ["m_1", "m_2"])
    assert user_keys(res) == {}


def test_delete_after_a_fingerprint_merge_leaves_no_dangling_key_mapping(res: Runtime) -> None:
    # Given a fact stored under one key, then restated (same fingerprint) under another key
    res.stm.upsert(item("m_1", summary="same fact", key="k:original", msgs=("t1.0",)))
    again = item("m_x", summary="same fact", key="k:alias", msgs=("t2.0",), at=T0 + 1)
    assert res.stm.upsert(again).op == "merged"
    # When the item is deleted
    res.stm.delete("u_1", ["m_1"])
    # Then no canonical key still points at it
    assert_no_dangling_references(res)
    assert user_keys(res) == {}


def test_delete_rejects_unsafe_ids_before_touching_redis(res: Runtime) -> None:
    res.stm.upsert(item("m_1"))
    with pytest.raises(InvalidId):
        res.stm.delete("u_1", ["m_1", "*"])
    assert res.stm.get("u_1", "m_1") is not None


# ---------------------------------------------------------------- per-session cap


def test_session_cap_evicts_the_least_important_then_the_oldest(res: Runtime) -> None:
    # Given a store that keeps 3 items per session
    capped = StmStore(res.redis, namespace=res.settings.key_namespace, session_cap=3)
    capped.upsert_many(
        [
            item("m_keep_important", importance=0.9, at=T0, entities=("createOrder",)),
            item("m_low_old", importance=0.2, at=T0 + 1, entities=("database",)),
            item("m_low_new", importance=0.2, at=T0 + 2, entities=("database",)),
        ]
    )
    # When a fourth item arrives in the same session
    result = capped.upsert(item("m_new", importance=0.5, at=T0 + 3))
    # Then the oldest of the least important is evicted, with all its index entries
    assert (result.op, result.evicted) == ("inserted", ("m_low_old",))
    assert ids(capped.by_session("u_1", "s_1")) == ["m_new", "m_low_new", "m_keep_important"]
    assert capped.get("u_1", "m_low_old") is None
    assert assert_no_dangling_references(res) == {"m_new", "m_low_new", "m_keep_important"}
    # When two more arrive, the least important go first whatever their age
    capped.upsert(item("m_5", importance=0.6, at=T0 + 4))
    capped.upsert(item("m_6", importance=0.7, at=T0 + 5))
    assert ids(capped.by_session("u_1", "s_1")) == ["m_6", "m_5", "m_keep_important"]
    assert assert_no_dangling_references(res) == {"m_6", "m_5", "m_keep_important"}


def test_the_session_cap_tells_the_older_of_two_items_of_one_second(res: Runtime) -> None:
    # Given two equally important items written within one second, the older with the
    # id that sorts last
    capped = StmStore(res.redis, namespace=res.settings.key_namespace, session_cap=2)
    capped.upsert_many([item("m_z_older", importance=0.3, at=T0 + 0.25),
                        item("m_a_newer", importance=0.3, at=T0 + 0.75)])  # fmt: skip
    # When a third item arrives in the same session
    result = capped.upsert(item("m_c", importance=0.9, at=T0 + 0.9))
    # Then the older of the two goes, not the one whose id sorts first
    assert result.evicted == ("m_z_older",)
    assert ids(capped.by_session("u_1", "s_1")) == ["m_c", "m_a_newer"]


def test_a_newcomer_less_important_than_everything_else_is_evicted_at_once(
    res: Runtime,
) -> None:
    capped = StmStore(res.redis, namespace=res.settings.key_namespace, session_cap=2)
    capped.upsert_many([item("m_a", importance=0.8), item("m_b", importance=0.7, at=T0 + 1)])
    result = capped.upsert(item("m_low", importance=0.1, at=T0 + 2))
    assert (result.op, result.evicted) == ("inserted", ("m_low",))
    assert sorted(ids(capped.recent("u_1"))) == ["m_a", "m_b"]
    assert assert_no_dangling_references(res) == {"m_a", "m_b"}


def test_the_session_cap_evicts_task_state_before_a_durable_statement(res: Runtime) -> None:
    # Given a store of 3 items per session whose conversation facts wait for their
    # session's end to become episode cards, holding two of them of low importance
    capped = StmStore(
        res.redis, namespace=res.settings.key_namespace, session_cap=3,
        durable_subtypes=frozenset({"conversation_fact"}),
    )  # fmt: skip
    said = [
        item(m, importance=0.1, at=T0 + n).model_copy(update={"subtype": "conversation_fact"})
        for n, m in enumerate(("m_said_1", "m_said_2"))
    ]
    capped.upsert_many([*said, item("m_plan", importance=0.9, at=T0 + 2)])
    # When more important task state arrives, twice
    first = capped.upsert(item("m_step", importance=0.5, at=T0 + 3))
    second = capped.upsert(item("m_step_2", importance=0.95, at=T0 + 4))
    # Then task state makes room, the durable statements stay for their promotion
    assert first.evicted == ("m_step",)
    assert second.evicted == ("m_plan",)
    assert sorted(ids(capped.by_session("u_1", "s_1"))) == ["m_said_1", "m_said_2", "m_step_2"]
    assert assert_no_dangling_references(res) == {"m_said_1", "m_said_2", "m_step_2"}
    # And once only durable statements are left, the least important, oldest goes first
    third = capped.upsert(
        item("m_said_3", importance=0.5, at=T0 + 5).model_copy(
            update={"subtype": "conversation_fact"}
        )
    )
    assert third.evicted == ("m_step_2",)
    fourth = capped.upsert(
        item("m_said_4", importance=0.5, at=T0 + 6).model_copy(
            update={"subtype": "conversation_fact"}
        )
    )
    assert fourth.evicted == ("m_said_1",)


def test_session_cap_is_per_session(res: Runtime) -> None:
    capped = StmStore(res.redis, namespace=res.settings.key_namespace, session_cap=1)
    results = capped.upsert_many(
        [item("m_a", session="s_a"), item("m_b", session="s_b", summary="other")]
    )
    assert [r.evicted for r in results] == [(), ()]
    assert sorted(ids(capped.recent("u_1"))) == ["m_a", "m_b"]


# ---------------------------------------------------------------- per-owner and per-tenant caps


def test_the_owner_cap_evicts_the_least_important_of_the_least_recently_updated(
    res: Runtime,
) -> None:
    # Given a store that keeps at most 4 items per owner, over three sessions
    capped = StmStore(res.redis, namespace=res.settings.key_namespace, user_cap=4)
    capped.upsert_many([
        item("m_old_vital", importance=0.9, at=T0, session="s_a"),
        item("m_old_minor", importance=0.2, at=T0 + 1, session="s_a"),
        item("m_mid", importance=0.5, at=T0 + 2, session="s_b"),
        item("m_new_minor", importance=0.2, at=T0 + 3, session="s_c"),
    ])  # fmt: skip
    # When a fifth and a sixth item arrive
    fifth = capped.upsert(item("m_5", importance=0.6, at=T0 + 4, session="s_c"))
    sixth = capped.upsert(item("m_6", importance=0.7, at=T0 + 5, session="s_b"))
    # Then each evicts one: the least important, and of equals the older one
    assert (fifth.evicted, fifth.owner_items) == (("m_old_minor",), 4)
    assert (sixth.evicted, sixth.owner_items) == (("m_new_minor",), 4)
    assert sorted(ids(capped.recent("u_1"))) == ["m_5", "m_6", "m_mid", "m_old_vital"]
    # And nothing of the evicted items is left in any index or dedup map
    assert assert_no_dangling_references(res) == {"m_5", "m_6", "m_mid", "m_old_vital"}
    # And another owner is not touched by this owner's cap
    capped.upsert(item("m_other", user="u_2"))
    assert ids(capped.recent("u_2")) == ["m_other"]
    assert len(capped.recent("u_1")) == 4


def test_the_tenant_cap_takes_from_its_heaviest_user_and_counts_follow_sweep_and_delete(
    res: Runtime,
) -> None:
    # Given a tenant of at most 5 items, and a user of another tenant
    ns = res.settings.key_namespace
    capped = StmStore(res.redis, namespace=ns, tenant_cap=5)
    capped.upsert_many([item(f"m_a{i}", user="alice", tenant_id="t_1", importance=0.1 * (i + 1),
                             at=T0 + i, key=f"k:a{i}") for i in range(4)])  # fmt: skip
    capped.upsert_many([item(f"m_b{i}", user="bob", tenant_id="t_1", at=T0 + i, key=f"k:b{i}",
                             ttl=10) for i in range(2)])  # fmt: skip
    capped.upsert_many([item(f"m_c{i}", user="alice", tenant_id="t_2", key=f"k:c{i}")
                        for i in range(6)])  # fmt: skip
    # Then the tenant holds 5: its heaviest user (alice, 4 items) gave up her least important
    def held(user: str, tenant: str) -> list[str]:
        return sorted(ids(capped.recent(user, tenant_id=tenant)))

    assert held("alice", "t_1") == ["m_a1", "m_a2", "m_a3"]
    assert held("bob", "t_1") == ["m_b0", "m_b1"]
    assert capped.tenant_items("t_1") == 5
    # And the other tenant, over 5 items itself in one user, is capped on its own
    assert len(held("alice", "t_2")) == 5 and capped.tenant_items("t_2") == 5
    # When bob's items expire and are swept, and alice deletes one
    capped.sweep(now=T0 + 60, max_items=100)
    capped.delete("alice", ["m_a1"], tenant_id="t_1")
    # Then the tenant's count follows, and there is room again
    assert capped.tenant_items("t_1") == 2
    capped.upsert(item("m_a9", user="alice", tenant_id="t_1", key="k:a9", at=T0 + 9))
    assert held("alice", "t_1") == ["m_a2", "m_a3", "m_a9"]
    assert capped.tenant_items("t_1") == 3


# ---------------------------------------------------------------- sweep


def test_sweep_removes_expired_items_from_every_index_and_reports_the_next_expiry(
    res: Runtime,
) -> None:
    # Given three expired items (with tasks, entities, types) and one live item
    res.stm.upsert_many(
        [
            item("m_exp1", ttl=10, entities=("createOrder", "database"), task="bug1"),
            item("m_exp2", ttl=20, mtype=MemoryType.OBSERVATION, session="s_2", summary="b"),
            item("m_exp3", ttl=30, entities=("线程池",), task=None, summary="c"),
            item("m_live", ttl=HOUR, entities=("createOrder",), summary="d"),
        ]
    )
    # When the user's expired items are swept at T0 + 30
    removed, nxt = res.stm.sweep_user("u_1", now=T0 + 30, limit=100)
    # Then all three are gone from the item store and from every zset and dedup map
    assert (removed, nxt) == (3, T0 + HOUR)
    assert assert_no_dangling_references(res) == {"m_live"}
    assert set(zsets(res)) == {
        "recent",
        "session:s_1",
        "task:bug456",
        "entity:createorder",
        "expire",
        "evict:s_1",
    }


def test_sweep_of_one_user_respects_its_bound(res: Runtime) -> None:
    res.stm.upsert_many([item(f"m_{i}", ttl=i + 1, summary=f"s{i}") for i in range(5)])
    removed, nxt = res.stm.sweep_user("u_1", now=T0 + 100, limit=2)
    # the two that expire first go; the next expiry is already due
    assert (removed, nxt) == (2, T0 + 3)
    assert sorted(ids(res.stm.recent("u_1"))) == ["m_2", "m_3", "m_4"]
    assert_no_dangling_references(res)
    assert res.stm.sweep_user("u_1", now=T0 + 100, limit=10) == (3, None)
    assert user_keys(res) == {}


def test_sweep_walks_every_due_user_through_the_hint_and_respects_the_bound(
    res: Runtime,
) -> None:
    # Given three users with expired items and one whose items are all live
    for user, n in (("u_a", 2), ("u_b", 3), ("u_c", 1)):
        res.stm.upsert_many(
            [item(f"m_{i}", user=user, ttl=10 + i, summary=f"{user}{i}") for i in range(n)]
        )
    res.stm.upsert(item("m_live", user="u_live", ttl=HOUR))
    hint = res.stm.gkeys.sweep_users
    assert dict(cast(list[tuple[str, float]], res.redis.zrange(hint, 0, -1, withscores=True))) == {
        "default/u_a": T0 + 10,
        "default/u_b": T0 + 10,
        "default/u_c": T0 + 10,
        "default/u_live": T0 + HOUR,
    }
    now = T0 + 100
    # When a sweep may remove at most 4 items
    first = res.stm.sweep(now=now, max_items=4, per_user=2)
    # Then exactly 4 go, and users with leftovers stay due in the hint
    assert first.removed == 4
    remaining = sum(len(res.stm.recent(u)) for u in ("u_a", "u_b", "u_c"))
    assert remaining == 2
    # When the sweep runs again without a tight bound
    second = res.stm.sweep(now=now, max_items=100)
    # Then every expired item of every user is gone and only the live user stays in the hint
    assert second.removed == 2
    for user in ("u_a", "u_b", "u_c"):
        assert res.stm.recent(user) == []
        assert user_keys(res, user) == {}
    assert ids(res.stm.recent("u_live")) == ["m_live"]
    hinted = cast(list[tuple[str, float]], res.redis.zrange(hint, 0, -1, withscores=True))
    assert dict(hinted) == {"default/u_live": T0 + HOUR}
    # And a third sweep finds nothing to do
    assert res.stm.sweep(now=now, max_items=100).removed == 0


def test_sweep_resets_a_stale_hint_to_the_users_real_next_expiry(res: Runtime) -> None:
    # Given a hint that is earlier than anything the user holds (the item was extended)
    res.stm.upsert(item("m_1", ttl=10))
    res.stm.upsert(item("m_1", ttl=HOUR, msgs=("t2.0",), at=T0 + 5))  # merged: later expiry
    hint = res.stm.gkeys.sweep_users
    assert res.redis.zscore(hint, "default/u_1") == T0 + 10
    # When the sweep runs after the stale hint
    report = res.stm.sweep(now=T0 + 100, max_items=10)
    # Then nothing is removed and the hint moves to the real expiry
    assert report.removed == 0
    assert res.redis.zscore(hint, "default/u_1") == T0 + 5 + HOUR
    assert res.stm.get("u_1", "m_1") is not None


def test_expired_but_unswept_items_are_replaced_not_merged(res: Runtime) -> None:
    # an upsert over a stale dedup mapping (item gone) starts a fresh item
    res.stm.upsert(item("m_1", key="k:1", msgs=("t1.0",)))
    res.redis.delete(res.stm.keys("u_1").item("m_1"))
    result = res.stm.upsert(item("m_1", key="k:1", msgs=("t1.0",), at=T0 + 5))
    assert (result.op, result.version) == ("inserted", 1)
    assert assert_no_dangling_references(res) == {"m_1"}


# ---------------------------------------------------------------- errors


def test_unreachable_redis_raises_store_unavailable() -> None:
    client = redis.Redis(
        host="127.0.0.1",
        port=1,
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )
    store = StmStore(client, namespace="tunreachable")
    with pytest.raises(StoreUnavailable):
        store.upsert(item("m_1"))
    with pytest.raises(StoreUnavailable):
        store.recent("u_1")
    client.close()


# ---------------------------------------------------------------- tenant scope


def test_the_same_user_id_in_two_tenants_never_shares_memory(res: Runtime) -> None:
    # Given user "u_1" exists in tenants t_a and t_b and writes the same canonical fact
    a = item("m_same", summary="tenant A fact", tenant_id="t_a")
    b = item("m_same", summary="tenant B fact", tenant_id="t_b")
    res.stm.upsert_many([a, b])
    # Then each tenant reads only its own item, and the tenant-less scope sees nothing
    assert [i.summary for i in res.stm.by_session("u_1", "s_1", tenant_id="t_a")] == [
        "tenant A fact"
    ]
    assert [i.summary for i in res.stm.by_session("u_1", "s_1", tenant_id="t_b")] == [
        "tenant B fact"
    ]
    assert res.stm.by_session("u_1", "s_1") == []
    assert res.stm.keys("u_1", "t_a").prefix != res.stm.keys("u_1", "t_b").prefix
    # And deleting in one tenant leaves the other untouched
    assert res.stm.delete("u_1", ["m_same"], tenant_id="t_a") == 1
    assert res.stm.get("u_1", "m_same", tenant_id="t_b") is not None


def test_the_sweep_finds_expired_items_in_every_tenant_scope(res: Runtime) -> None:
    res.stm.upsert_many(
        [
            item("m1", tenant_id="t_a", ttl=10),
            item("m2", tenant_id="t_b", ttl=10),
            item("m3", ttl=10),
        ]
    )
    report = res.stm.sweep(now=T0 + 11, max_items=100)
    assert report.removed == 3
    for tenant in ("t_a", "t_b", None):
        assert res.stm.recent("u_1", tenant_id=tenant) == []
    assert res.redis.zcard(res.stm.gkeys.sweep_users) == 0


def test_a_changed_fact_stated_outside_its_task_keeps_an_exact_index_list(
    res: Runtime,
) -> None:
    # Given a decision of task bug456
    res.stm.upsert(item("m_1", entities=("gc",)))
    # When it changes in a message outside any task (the hash keeps task_id, the task's
    # index no longer holds it, so `task:bug456` is not implied)
    changed = item("m_1", task=None, summary="keep payment-service", msgs=("t2.0",), at=T0 + 1)
    assert res.stm.upsert(changed).op == "updated"
    raw = stored_hash(res, "m_1")
    assert raw["task_id"] == "bug456" and "task:bug456" not in zsets(res)
    idx = json.loads(raw["_idx"])
    assert idx[:2] == ["recent", "session:s_1"] and "ix" not in raw
    assert not [s for s in idx if s.startswith("task:")]
    # Then deleting it leaves no index entry behind
    assert res.stm.delete("u_1", ["m_1"]) == 1
    assert zsets(res) == {} and assert_no_dangling_references(res) == set()


def test_recall_marks_of_one_batch_leave_the_state_of_one_write_per_mark(res: Runtime) -> None:
    """The batch is coalesced (one flag per session, one ZINCRBY per memory): the flag is
    the session's last recall's, each memory counts every recall that returned it, and
    both keys carry their TTLs, as when every mark was written on its own."""
    from memstrata.core.stm.store import RecallMark

    stm = res.stm
    marks = [
        RecallMark(user_id="u_1", tenant_id=None, session_id="s_1", flag="ok",
                   members=("redis_stm:a", "redis_stm:b")),
        RecallMark(user_id="u_2", tenant_id=None, session_id="s_1", flag="ok",
                   members=("redis_stm:a",)),
        RecallMark(user_id="u_1", tenant_id=None, session_id="s_2", flag="ok", members=()),
        RecallMark(user_id="u_1", tenant_id=None, session_id="s_1", flag="insufficient",
                   members=("redis_stm:a",)),
        # the default tenant named and no tenant are one owner: the last mark wins
        RecallMark(user_id="u_1", tenant_id="default", session_id="s_3", flag="ok",
                   members=()),
        RecallMark(user_id="u_1", tenant_id=None, session_id="s_3", flag="insufficient",
                   members=()),
        RecallMark(user_id="u_1", tenant_id="default", session_id="s_3", flag="ok",
                   members=()),
    ]  # fmt: skip
    stm.record_recalls(marks, flag_ttl_s=60, access_ttl_s=600)
    r, k1, k2 = res.redis, stm.keys("u_1", None), stm.keys("u_2", None)
    assert r.get(k1.last_recall("s_1")) == "insufficient"
    assert r.get(k1.last_recall("s_2")) == "ok"
    assert r.get(k1.last_recall("s_3")) == "ok"
    assert r.get(k2.last_recall("s_1")) == "ok"
    assert r.zrange(k1.access, 0, -1, withscores=True) == [("redis_stm:b", 1.0),
                                                           ("redis_stm:a", 2.0)]  # fmt: skip
    assert r.zrange(k2.access, 0, -1, withscores=True) == [("redis_stm:a", 1.0)]
    assert 0 < r.ttl(k1.last_recall("s_1")) <= 60
    assert 500 < r.ttl(k1.access) <= 600
    assert 500 < r.ttl(k2.access) <= 600


def test_a_client_that_returns_bytes_is_refused_when_the_store_is_made() -> None:
    # the scripts' replies are parsed as text; with bytes the first drain failed deep in
    # a JSON decode (ops.bench.ingest.profile given a plain client)
    with pytest.raises(InvalidInput, match="decode_responses=True"):
        StmStore(redis.Redis(host="127.0.0.1", port=6379), namespace="tbytes")
