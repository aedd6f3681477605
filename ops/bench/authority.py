"""Authority layer benchmark: snapshot reads (cold from PostgreSQL, cached in Redis) and
stable-fact upserts.

Why these figures: every recall that needs a profile, a permission or a filter starts
with a snapshot, so its latency is paid on the hot path; the targets are ≤ 3 ms p50 cold
and ≤ 0.5 ms p50 cached (issue 3).  Upserts are off the hot path (promotion, explicit
saves) but show what a write costs with its lock, history row, projection and version
bump, committed.  The run uses its own scratch database (created and dropped here) and
its own Redis namespace, next to a realistic population of users.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from pydantic import JsonValue
from sqlalchemy import Engine

from memstrata.core import migrations
from memstrata.core.authority.admin import (
    create_project,
    create_tenant,
    create_user,
    create_workspace,
    set_agent_setting,
)
from memstrata.core.authority.cache import ProfileCache
from memstrata.core.authority.db import autocommit_reader, make_engine
from memstrata.core.authority.facts import grant_role, set_profile, upsert_fact
from memstrata.core.authority.read import read_snapshot
from memstrata.ops.bench.common.db import scratch_postgres
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.stats import percentile, r3

TARGET_CACHED_P50_MS = 0.5
TARGET_COLD_P50_MS = 3.0
TENANT = "bench"


def _seed(engine: Engine, users: int) -> None:
    """``users`` users, each with a profile, 8 preferences, 4 constraints and 3 project roles."""
    with engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": TENANT, "name": "Bench"})
        for p in range(10):
            create_project(
                db=conn,
                project={
                    "tenant_id": TENANT,
                    "id": f"p{p}",
                    "name": f"Project {p}",
                    "default_env": f"prod-{p}",
                    "env_tags": ["k8s", f"zone{p % 3}"],
                    "attributes": {"owner_team": f"team{p}", "sla": "99.9"},
                },
            )
            create_workspace(
                db=conn,
                workspace={
                    "tenant_id": TENANT,
                    "id": f"w{p}",
                    "project_id": f"p{p}",
                    "name": f"WS {p}",
                },
            )
        settings: dict[str, JsonValue] = {
            "max_tokens": 800,
            "temperature": 0.2,
            "tools": ["grep", "sql"],
        }
        for name, value in settings.items():
            set_agent_setting(db=conn, tenant_id=TENANT, agent_id="default", name=name, value=value)
    for u in range(users):
        uid = f"u{u}"
        with engine.begin() as conn:
            create_user(db=conn, user={"tenant_id": TENANT, "id": uid})
            set_profile(
                db=conn,
                tenant_id=TENANT,
                user_id=uid,
                update={
                    "language": "zh-CN",
                    "answer_style": "brief_first",
                    "timezone": "Asia/Shanghai",
                },
            )
            for k in range(8):
                upsert_fact(
                    db=conn,
                    tenant_id=TENANT,
                    user_id=uid,
                    domain="preference",
                    canonical_fact_key=f"preference.p{k}",
                    value={"choice": k},
                )
            for k in range(4):
                upsert_fact(
                    db=conn,
                    tenant_id=TENANT,
                    user_id=uid,
                    domain="constraint",
                    canonical_fact_key=f"constraint.c{k}",
                    value=f"rule {k} for {uid}",
                )
            for k in range(3):
                grant_role(
                    db=conn,
                    tenant_id=TENANT,
                    user_id=uid,
                    project_id=f"p{(u + k) % 10}",
                    role="developer",
                    scope="read_only",
                )


def _time(n: int, fn: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter_ns()
        fn(i)
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def run(quick: bool) -> dict[str, Any]:
    """Cold and cached snapshot reads, and committed fact upserts, on a scratch database."""
    n = 300 if quick else 3000
    users = 50 if quick else 500
    client = redis.Redis.from_url(redis_url(), decode_responses=True, socket_timeout=5)
    ns = new_namespace("benchauth")
    figures: dict[str, Any] = {"machine": machine(client)}
    try:
        with scratch_postgres("memstrata_bench_") as url:
            migrations.upgrade(url)
            engine = make_engine(url, pool_size=2)
            try:
                figures.update(_measure(engine, client, ns, n, users))
            finally:
                engine.dispose()
    finally:
        purge(client, ns)
        client.close()
    figures["quick"] = quick
    return figures


def _measure(engine: Engine, client: redis.Redis, ns: str, n: int, users: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    _seed(engine, users)
    seed_s = time.perf_counter() - t0
    cache = ProfileCache(client, namespace=ns, entry_ttl_s=600)

    reader = autocommit_reader(engine)

    def cold(i: int) -> None:
        with reader.connect() as conn:
            read_snapshot(db=conn, tenant_id=TENANT, user_id=f"u{i % users}")

    def cold_txn(i: int) -> None:
        with engine.connect() as conn:
            read_snapshot(db=conn, tenant_id=TENANT, user_id=f"u{i % users}")

    def miss_load(i: int) -> None:
        uid = f"u{i % users}"
        client.delete(cache.keys(TENANT, uid).snapshot)
        with reader.connect() as conn:
            cache.load(db=conn, tenant_id=TENANT, user_id=uid)

    def cached(i: int) -> None:
        lookup = cache.get(TENANT, f"u{i % users}")
        assert lookup.snapshot is not None

    values = ("brief_first", "detailed")

    def upsert(i: int) -> None:
        with engine.begin() as conn:
            upsert_fact(
                db=conn,
                tenant_id=TENANT,
                user_id=f"u{i % users}",
                canonical_fact_key="profile.answer_style",
                domain="profile",
                value=values[(i // users + 1) % 2],
            )

    def same(i: int) -> None:
        with engine.begin() as conn:
            upsert_fact(
                db=conn,
                tenant_id=TENANT,
                user_id=f"u{i % users}",
                canonical_fact_key="constraint.c0",
                domain="constraint",
                value=f"rule 0 for u{i % users}",
            )

    _time(min(n, 100), cold)  # warm the pool and the server's caches
    cold_lat = _time(n, cold)
    cold_txn_lat = _time(n, cold_txn)
    miss_lat = _time(n, miss_load)
    for u in range(users):  # every user cached
        with engine.connect() as conn:
            cache.load(db=conn, tenant_id=TENANT, user_id=f"u{u}")
    cached_lat = _time(n, cached)
    upsert_lat = _time(n, upsert)
    same_lat = _time(n, same)
    with engine.connect() as conn:
        snap = read_snapshot(db=conn, tenant_id=TENANT, user_id="u0")
    return {
        "snapshot_cold_p50_ms": r3(percentile(cold_lat, 50)),
        "snapshot_cold_p99_ms": r3(percentile(cold_lat, 99)),
        "snapshot_cold_txn_p50_ms": r3(percentile(cold_txn_lat, 50)),
        "snapshot_cold_txn_p99_ms": r3(percentile(cold_txn_lat, 99)),
        "snapshot_miss_load_p50_ms": r3(percentile(miss_lat, 50)),
        "snapshot_miss_load_p99_ms": r3(percentile(miss_lat, 99)),
        "snapshot_cached_p50_ms": r3(percentile(cached_lat, 50)),
        "snapshot_cached_p99_ms": r3(percentile(cached_lat, 99)),
        "fact_upsert_p50_ms": r3(percentile(upsert_lat, 50)),
        "fact_upsert_p99_ms": r3(percentile(upsert_lat, 99)),
        "fact_upsert_unchanged_p50_ms": r3(percentile(same_lat, 50)),
        "fact_upsert_unchanged_p99_ms": r3(percentile(same_lat, 99)),
        "snapshot_facts": len(snap.facts),
        "snapshot_json_bytes": len(snap.model_dump_json()),
        "users": users,
        "samples": n,
        "seed_s": round(seed_s, 2),
        "target_snapshot_cached_p50_ms": TARGET_CACHED_P50_MS,
        "target_snapshot_cold_p50_ms": TARGET_COLD_P50_MS,
    }


def markdown(figures: dict[str, Any]) -> str:
    f = figures

    def verdict(value: float, target: float) -> str:
        return "met" if value <= target else "MISSED"

    cached_ok = verdict(f["snapshot_cached_p50_ms"], TARGET_CACHED_P50_MS)
    cold_ok = verdict(f["snapshot_cold_p50_ms"], TARGET_COLD_P50_MS)
    return "\n".join(
        [
            "### Authority snapshot and stable facts (`memstrata bench authority"
            + (" --quick" if f.get("quick") else "")
            + "`)",
            "",
            f"{f['users']} users, {f['samples']} samples per figure; one snapshot = "
            f"{f['snapshot_facts']} current facts + roles, workspaces, agent settings "
            f"({f['snapshot_json_bytes']} bytes of JSON).",
            "",
            "| figure | p50 | p99 |",
            "|---|---|---|",
            f"| snapshot, cached (Redis MGET + parse) | {f['snapshot_cached_p50_ms']} ms "
            f"(target ≤ {TARGET_CACHED_P50_MS} ms: {cached_ok}) "
            f"| {f['snapshot_cached_p99_ms']} ms |",
            "| snapshot, cold (PostgreSQL, one statement, autocommit) "
            f"| {f['snapshot_cold_p50_ms']} ms "
            f"(target ≤ {TARGET_COLD_P50_MS} ms: {cold_ok}) | {f['snapshot_cold_p99_ms']} ms |",
            f"| snapshot, cold, inside a transaction (+ BEGIN / ROLLBACK) "
            f"| {f['snapshot_cold_txn_p50_ms']} ms | {f['snapshot_cold_txn_p99_ms']} ms |",
            f"| snapshot, cache miss (Redis + PG + refill) | {f['snapshot_miss_load_p50_ms']} ms "
            f"| {f['snapshot_miss_load_p99_ms']} ms |",
            f"| fact upsert, value changed (committed) | {f['fact_upsert_p50_ms']} ms "
            f"| {f['fact_upsert_p99_ms']} ms |",
            f"| fact upsert, value unchanged (committed) | {f['fact_upsert_unchanged_p50_ms']} ms "
            f"| {f['fact_upsert_unchanged_p99_ms']} ms |",
            "",
        ]
    )


if __name__ == "__main__":  # pragma: no cover - manual run
    import json

    result = run(quick=True)
    print(json.dumps(result, indent=2))
    print(markdown(result))
