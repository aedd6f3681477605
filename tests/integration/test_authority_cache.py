"""The profile cache in real Redis, stamped with PG versions: missing / stale are real signals."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from memstrata.core.authority.admin import delete_user
from memstrata.core.authority.cache import CacheStatus, ProfileCache
from memstrata.core.authority.facts import upsert_fact
from memstrata.core.authority.read import read_snapshot
from memstrata.core.authority.schemas import FactWriteResult
from memstrata.core.runtime import Runtime
from tests.integration import authority_db
from tests.integration.authority_db import World

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world
cache = authority_db.cache


def _write(engine: Engine, w: World, value: str) -> FactWriteResult:
    with engine.begin() as conn:
        return upsert_fact(
            db=conn,
            tenant_id=w.tenant_id,
            user_id=w.alice,
            canonical_fact_key="profile.answer_style",
            domain="profile",
            value=value,
        )


def test_first_read_is_missing_then_hits(engine: Engine, world: World, cache: ProfileCache) -> None:
    # Given an empty cache: the query profile sees profile_cache_missing
    assert cache.get(world.tenant_id, world.alice).profile_cache_missing
    # When the snapshot is loaded through the cache
    with engine.connect() as conn:
        snap, lookup = cache.load(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    assert lookup.status is CacheStatus.MISSING
    # Then the next lookup is a hit with the same snapshot
    again = cache.get(world.tenant_id, world.alice)
    assert again.status is CacheStatus.HIT and again.snapshot == snap


def test_every_write_makes_the_entry_stale_until_reloaded(
    engine: Engine, world: World, cache: ProfileCache
) -> None:
    with engine.connect() as conn:
        cache.load(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    # When an authoritative write commits and invalidates
    result = _write(engine, world, "detailed")
    cache.invalidate(result.version)
    # Then the entry is stale (the old snapshot is still there for tolerant callers)
    lookup = cache.get(world.tenant_id, world.alice)
    assert lookup.profile_cache_stale and lookup.snapshot is not None
    assert lookup.snapshot.profile_value("answer_style") == "brief_first"
    # And the read-through load goes to PG and refreshes the entry
    with engine.connect() as conn:
        snap, seen = cache.load(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    assert seen.status is CacheStatus.STALE
    assert snap.profile_value("answer_style") == "detailed"
    assert cache.get(world.tenant_id, world.alice).status is CacheStatus.HIT


def test_idempotent_write_does_not_invalidate(
    engine: Engine, world: World, cache: ProfileCache
) -> None:
    with engine.connect() as conn:
        cache.load(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    result = _write(engine, world, "brief_first")  # already the value
    assert not result.changed
    cache.invalidate(result.version)
    assert cache.get(world.tenant_id, world.alice).status is CacheStatus.HIT


def test_a_slow_reader_cannot_put_back_an_older_snapshot(
    engine: Engine, world: World, cache: ProfileCache
) -> None:
    # Given a reader that read PG before a write committed
    with engine.connect() as conn:
        old = read_snapshot(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    cache.invalidate(_write(engine, world, "detailed").version)
    # When it tries to fill the cache afterwards, the fill is refused
    assert cache.put(old) is False
    assert cache.get(world.tenant_id, world.alice).profile_cache_missing


def test_verify_catches_a_lost_invalidation(
    engine: Engine, world: World, cache: ProfileCache
) -> None:
    with engine.connect() as conn:
        cache.load(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    _write(engine, world, "detailed")  # committed, but the invalidation never happened
    assert cache.get(world.tenant_id, world.alice).status is CacheStatus.HIT
    with engine.connect() as conn:
        checked = cache.verify(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    assert checked.status is CacheStatus.STALE


def test_deleted_user_entry_is_dropped(
    engine: Engine, world: World, cache: ProfileCache, res: Runtime
) -> None:
    with engine.connect() as conn:
        cache.load(db=conn, tenant_id=world.tenant_id, user_id=world.bob)
    with engine.begin() as conn:
        gone = delete_user(db=conn, tenant_id=world.tenant_id, user_id=world.bob)
    cache.invalidate(gone, drop=True)
    assert cache.get(world.tenant_id, world.bob).profile_cache_missing
    keys = cache.keys(world.tenant_id, world.bob)
    assert res.redis.pttl(keys.version) > 0  # the version outlives the entry, with a TTL


def test_keys_share_the_users_hash_tag_and_namespace(cache: ProfileCache, res: Runtime) -> None:
    keys = cache.keys("acme", "u1")
    ns = res.settings.key_namespace
    # the owner's hash tag, the same as its STM keys: one slot per (tenant, user)
    assert keys.snapshot == f"{ns}:user:{{acme/u1}}:authority:snapshot"
    assert keys.version == f"{ns}:user:{{acme/u1}}:authority:version"
    assert keys.snapshot.startswith(res.stm.keys("u1", "acme").prefix)
