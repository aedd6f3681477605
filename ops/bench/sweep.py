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
from importlib import resources
from typing import Any

import redis
from sqlalchemy import create_engine

from core.lifecycle import LifecycleSettings
from core.lifecycle.runtime import Lifecycle
from core.lifecycle.scan import scan
from core.ltm.ledger import Ledger
from core.models.memory import MemoryItem, MemorySource, MemoryStatus, MemoryType
from core.stm.keys import parse_user_scope
from core.stm.store import StmStore
from ops.bench.common import machine, new_namespace, purge, r3, redis_url

TARGET_SWEEP_PER_S = 50_000

# Proposed replacement of core/stm/lua/sweep.lua (measured here, not yet in core/stm): one
# variadic ZREM per index (per-session eviction zsets included), one HMGET + HDEL per
# dedup map and one DEL for all the user's expired items, instead of ~13 calls per item;
# the Python side pipelines the script over all due users (one round trip per 256 users
# instead of two per user).
PROPOSED_SWEEP_LUA = """
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', P .. 'expire', '-inf', now, 'LIMIT', 0, limit)
local function chunks(list, fn)
  for i = 1, #list, 1000 do fn(i, math.min(i + 999, #list)) end
end
local by_index, keys = {}, {}
local canon_f, canon_id, fp_f, fp_id = {}, {}, {}, {}
for _, id in ipairs(ids) do
  local ikey = P .. 'item:' .. id
  local f = redis.call('HMGET', ikey, '_idx', 'canonical_fact_key', 'fingerprint')
  if f[1] then
    for _, suffix in ipairs(cjson.decode(f[1])) do
      local l = by_index[suffix]
      if not l then l = {}; by_index[suffix] = l end
      l[#l + 1] = id
    end
    for _, suffix in ipairs(cjson.decode(f[1])) do
      if string.sub(suffix, 1, 8) == 'session:' then
        local ek = 'evict:' .. string.sub(suffix, 9)
        local l = by_index[ek]
        if not l then l = {}; by_index[ek] = l end
        l[#l + 1] = id
      end
    end
  end
  if f[2] then canon_f[#canon_f + 1] = f[2]; canon_id[#canon_id + 1] = id end
  if f[3] then fp_f[#fp_f + 1] = f[3]; fp_id[#fp_id + 1] = id end
  keys[#keys + 1] = ikey
end
for suffix, l in pairs(by_index) do
  chunks(l, function(i, j) redis.call('ZREM', P .. suffix, unpack(l, i, j)) end)
end
local function unmap(h, fields, owners)
  chunks(fields, function(i, j)
    local cur = redis.call('HMGET', P .. h, unpack(fields, i, j))
    local del = {}
    for k = i, j do if cur[k - i + 1] == owners[k] then del[#del + 1] = fields[k] end end
    if #del > 0 then redis.call('HDEL', P .. h, unpack(del)) end
  end)
end
unmap('canon', canon_f, canon_id)
unmap('fp', fp_f, fp_id)
local removed = 0
chunks(keys, function(i, j) removed = removed + redis.call('DEL', unpack(keys, i, j)) end)
chunks(ids, function(i, j) redis.call('ZREM', P .. 'expire', unpack(ids, i, j)) end)
local nxt = redis.call('ZRANGE', P .. 'expire', 0, 0, 'WITHSCORES')
if #nxt == 0 then return {removed, ''} end
return {removed, nxt[2]}
"""
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


def proposed_sweep(store: StmStore, *, now: float, max_items: int, per_user: int = 500) -> int:
    """The proposed ``StmStore.sweep``: the batched script, pipelined over due users."""
    common = (resources.files("core.stm") / "lua" / "common.lua").read_text(encoding="utf-8")
    script = store.r.register_script(common + PROPOSED_SWEEP_LUA)
    gk = store.gkeys.sweep_users
    removed = 0
    while removed < max_items:
        due = [str(s) for s in store.r.zrangebyscore(gk, "-inf", now, start=0, num=256)]
        if not due:
            break
        pipe = store.r.pipeline(transaction=False)
        for scope in due:
            user, tenant = parse_user_scope(scope)
            script(keys=[store.keys(user, tenant).prefix], args=[now, per_user], client=pipe)
        replies = pipe.execute()
        pipe = store.r.pipeline(transaction=False)
        progressed = False
        for scope, (n, nxt) in zip(due, replies, strict=True):
            removed += int(n)
            progressed = progressed or int(n) > 0
            if not nxt:
                pipe.zrem(gk, scope)
            elif float(nxt) > now or int(n) < per_user:
                pipe.zadd(gk, {scope: float(nxt)})
        pipe.execute()
        if not progressed:
            break
    return removed


def _timed_sweep(store: StmStore, now: float, proposed: bool) -> tuple[int, float]:
    t = time.perf_counter()
    removed = 0
    while True:
        if proposed:
            n = proposed_sweep(store, now=now, max_items=100_000)
        else:
            n = store.sweep(now=now, max_items=100_000).removed
        removed += n
        if n == 0:
            break
    return removed, time.perf_counter() - t


def _count_keys(client: redis.Redis, namespace: str) -> int:
    return sum(1 for _ in client.scan_iter(match=f"{namespace}:user:*", count=5000))


def run(quick: bool) -> dict[str, Any]:
    n, users = (20_000, 200) if quick else (1_000_000, 10_000)
    now = time.time()
    ns = new_namespace("benchsweep")
    client = redis.Redis.from_url(redis_url(), decode_responses=True, socket_timeout=60)
    store = StmStore(client, namespace=ns, session_cap=10_000)
    figures: dict[str, Any] = {"machine": machine(client), "items": n, "users": users}
    try:
        load_s = 0.0
        for part in range(0, n, 100_000):  # build and load in parts: bounded client memory
            load_s += _load(store, _items(min(100_000, n - part), users, now, start=part))
        held = sum(int(client.zcard(store.keys(f"u{u}").expire)) for u in range(users))
        figures["items"] = held
        figures["load_items_per_s"] = round(held / load_s)
        engine = create_engine("postgresql+psycopg://unused@127.0.0.1:1/unused")  # dry run
        lc = Lifecycle(redis=client, stm=store, engine=engine, ledger=Ledger(engine),
                       settings=LifecycleSettings())  # fmt: skip
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
        removed, sweep_s = _timed_sweep(store, now + 7200, proposed=False)
        keys_after = _count_keys(client, ns)
        # the proposed script on the same data, loaded again
        for part in range(0, n, 100_000):
            _load(store, _items(min(100_000, n - part), users, now, start=part))
        p_removed, p_sweep_s = _timed_sweep(store, now + 7200, proposed=True)
        figures.update(
            {
                "sweep_items_per_s": round(removed / sweep_s),
                "sweep_removed": removed,
                "sweep_s": r3(sweep_s),
                "sweep_items_per_s_proposed": round(p_removed / p_sweep_s),
                "sweep_removed_proposed": p_removed,
                "keys_before_sweep": keys_before,
                "keys_after_sweep": keys_after,
                "keys_after_proposed_sweep": _count_keys(client, ns),
                "target_sweep_per_s": TARGET_SWEEP_PER_S,
                "target_scan_s": TARGET_SCAN_S,
                "quick": quick,
            }
        )
        engine.dispose()
    finally:
        purge(client, ns)
        client.close()
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
            f"| same, with the proposed batched sweep script (not yet in core/stm) | "
            f"{f['sweep_items_per_s_proposed']:,} | "
            f"{'met' if f['sweep_items_per_s_proposed'] >= TARGET_SWEEP_PER_S else 'MISSED'} |",
            f"| promotion scan of all items (read + decide), s | **{f['promotion_scan_s']}** "
            f"({f['scan_items_per_s']:,} items/s) | < {TARGET_SCAN_S:g}: {scan_ok} |",
            f"| keys under the users' prefixes before / after the sweep | "
            f"{f['keys_before_sweep']:,} / {f['keys_after_sweep']:,} "
            f"(proposed: {f['keys_after_proposed_sweep']:,}) | 0 |",
            "",
            f"Scan decisions: {routes}.",
        ]
    )
