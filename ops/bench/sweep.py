"""Expire sweep and promotion scan at scale (issue 6: 1M STM items across 10k users).

``sweep_items_per_s``: items the STM sweep (``StmStore.sweep``) removes per second from the
item store and every index, all items being expired.  ``promotion_scan_s``: seconds for
one promotion scan (read every live item's policy fields + decide) over all items; a dry
run, because what a real scan then writes scales with the items that move, not with the
items read (measured separately by the integration tests).  Load: realistic items via the
production upsert script; the mix of kinds and wording is the seed's (preferences,
conclusions, next steps, guesses, tool output; en + zh).
"""

from __future__ import annotations

import random
import time
from typing import Any

import redis

from memstrata.core.keys import GlobalKeys
from memstrata.core.lifecycle.scan import scan
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryStatus, MemoryType
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.core.stm.store import StmStore
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.stats import r3

TARGET_SWEEP_PER_S = 50_000

TARGET_SCAN_S = 60.0

_KINDS: tuple[tuple[MemoryType, str, str, float], ...] = (
    # memory type, subtype, summary template, share
    (MemoryType.PREFERENCE, "user_preference", "I prefer {e} answers first", 0.05),
    (MemoryType.PREFERENCE, "user_preference", "我喜欢先看{e}的结论", 0.05),
    (MemoryType.FACT, "conclusion", "Timeouts of this kind are usually the {e}", 0.15),
    (MemoryType.FACT, "conclusion", "这类超时常见根因是{e}", 0.15),
    (MemoryType.DECISION, "next_step", "Next, look at the {e} for bug{n}", 0.15),
    (MemoryType.DECISION, "next_step", "bug{n} 下一步先看{e}", 0.1),
    (MemoryType.HYPOTHESIS, "hypothesis", "Maybe the {e} is saturated", 0.1),
    (MemoryType.OBSERVATION, "tool_output", "{e} p99 {n} ms in the log from just now", 0.1),
    (MemoryType.CONSTRAINT, "user_constraint", "Never restart the {e} in business hours", 0.15),
)
_ENTS = ("thread_pool", "connection_pool", "cache", "database", "dns", "gc", "order-service")


def _items(n: int, users: int, now: float, start: int) -> list[MemoryItem]:
    """Items ``start .. start + n - 1`` (unique ids and keys), spread round robin over users."""
    rnd = random.Random(start)
    weights = [k[3] for k in _KINDS]
    out = []
    for i in range(start, start + n):
        u = i % users
        sessions = [f"s{u}_{rnd.randrange(5)}" for _ in range(1 + (rnd.random() < 0.2))]
        mtype, subtype, tmpl, _w = rnd.choices(_KINDS, weights)[0]
        e = rnd.choice(_ENTS)
        summary = tmpl.format(e=e, n=rnd.randrange(1000))
        key = (f"user:pref:{e}_{i}" if mtype is MemoryType.PREFERENCE
               else f"{sessions[-1]}:{subtype}:{e}:{i}")  # fmt: skip
        at = now - rnd.uniform(0, 5 * 86400)
        out.append(
            MemoryItem.model_construct(  # trusted bench data: skip validation (1M items)
                id=f"m_{i:09d}", user_id=f"u{u}", session_id=sessions[-1], memory_type=mtype,
                subtype=subtype, summary=summary, detail={"topic": e}, entities=[e],
                tags=[subtype], source=MemorySource(message_ids=[f"msg{i}"]),
                confidence=0.9, importance=round(rnd.uniform(0.1, 0.95), 3), created_at=at,
                updated_at=at, last_access_at=at, expires_at=now + 3600,
                fingerprint=f"fp{i:014d}", canonical_fact_key=key,
                mention_count=1 + (rnd.random() < 0.1) * 2, seen_sessions=sessions,
                tenant_id=None, task_id=None, version=1, status=MemoryStatus.ACTIVE,
                history=[], agent_id=None, owner_agent=None, shared_scope=None,
            )
        )  # fmt: skip
    return out


def _load(store: StmStore, items: list[MemoryItem], chunk: int = 1000) -> float:
    t = time.perf_counter()
    for k in range(0, len(items), chunk):
        store.upsert_many(items[k : k + chunk])
    return time.perf_counter() - t


def _timed_sweep(store: StmStore, now: float) -> tuple[int, float]:
    t = time.perf_counter()
    removed = 0
    while True:
        n = store.sweep(now=now, max_items=100_000).removed
        removed += n
        if n == 0:
            break
    return removed, time.perf_counter() - t


def _count_keys(client: redis.Redis, namespace: str) -> int:
    return sum(1 for _ in client.scan_iter(match=GlobalKeys(namespace).user_glob, count=5000))


def run(quick: bool) -> dict[str, Any]:
    n, users = (20_000, 200) if quick else (1_000_000, 10_000)
    now = time.time()
    ns = new_namespace("benchsweep")
    # the promotion scan runs dry: no PostgreSQL is opened (the URL points nowhere)
    res = Runtime(load_settings(
        redis_url=redis_url(), key_namespace=ns, redis_socket_timeout_s=60,
        stm_session_cap=10_000, postgres_url="postgresql+psycopg://unused@127.0.0.1:1/unused",
        stm_tenant_cap=0,  # 1M items in one tenant: a scale test, not a bounded deployment
    ))  # fmt: skip
    client, store = res.redis, res.stm
    figures: dict[str, Any] = {"machine": machine(client), "items": n, "users": users}
    try:
        load_s = 0.0
        for part in range(0, n, 100_000):  # build and load in parts: bounded client memory
            load_s += _load(store, _items(min(100_000, n - part), users, now, start=part))
        held = sum(int(client.zcard(store.keys(f"u{u}").expire)) for u in range(users))
        figures["items"] = held
        figures["load_items_per_s"] = round(held / load_s)
        lc = res.lifecycle()
        t = time.perf_counter()
        report = scan(lc, now=now, max_items=10**9, max_s=10**6, dry_run=True)
        scan_s = time.perf_counter() - t
        figures.update(
            {
                "promotion_scan_s": r3(scan_s),
                "scan_items_per_s": round(report.items / scan_s),
                "scan_items": report.items,
                "scan_routes": dict(report.routes),
            }
        )
        keys_before = _count_keys(client, ns)
        removed, sweep_s = _timed_sweep(store, now + 7200)
        keys_after = _count_keys(client, ns)
        figures.update(
            {
                "sweep_items_per_s": round(removed / sweep_s),
                "sweep_removed": removed,
                "sweep_s": r3(sweep_s),
                "keys_before_sweep": keys_before,
                "keys_after_sweep": keys_after,
                "target_sweep_per_s": TARGET_SWEEP_PER_S,
                "target_scan_s": TARGET_SCAN_S,
                "quick": quick,
            }
        )
    finally:
        purge(client, ns)
        res.close()
    return figures


def markdown(figures: dict[str, Any]) -> str:
    f = figures
    sweep_ok = "met" if f["sweep_items_per_s"] >= TARGET_SWEEP_PER_S else "MISSED"
    scan_ok = "met" if f["promotion_scan_s"] < TARGET_SCAN_S else "MISSED"
    routes = ", ".join(f"{k} {v}" for k, v in sorted(f["scan_routes"].items()))
    return "\n".join(
        [
            "### Expire sweep and promotion scan (`memstrata bench sweep"
            + (" --quick" if f.get("quick") else "")
            + "`)",
            "",
            f"{f['items']:,} STM items across {f['users']:,} users "
            f"(loaded at {f['load_items_per_s']:,} items/s through the upsert script).",
            "",
            "| figure | value | target |",
            "|---|---|---|",
            f"| expire sweep, items removed from all indexes per s | "
            f"**{f['sweep_items_per_s']:,}** | ≥ {TARGET_SWEEP_PER_S:,}: {sweep_ok} |",
            f"| promotion scan of all items (read + decide), s | **{f['promotion_scan_s']}** "
            f"({f['scan_items_per_s']:,} items/s) | < {TARGET_SCAN_S:g}: {scan_ok} |",
            f"| keys under the users' prefixes before / after the sweep | "
            f"{f['keys_before_sweep']:,} / {f['keys_after_sweep']:,} | 0 |",
            "",
            f"Scan decisions: {routes}.",
        ]
    )
