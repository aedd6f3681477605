"""STM store benchmark: one ``StmStore.upsert`` (one Lua EVALSHA) per realistic item.

Why these figures: the write path's cost per fact is one upsert, and the recall path's
first step is an index read, so their latency bounds everything built on STM.  The item
mix is what the ingest pipeline produces: mostly new facts, some restated (merge) and
some changed (version bump), spread over many users and sessions so that the per-session
cap (50) evicts the least important items as it would in a long debugging session.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Iterator
from typing import Any

import redis

from memstrata.core.models.identity import fingerprint
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType
from memstrata.core.stm.store import StmStore
from memstrata.ops.bench.common.cpu import busy_share, machine_busy
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.stats import percentile, r3

TARGET_UPSERT_P99_MS = 1.0
ROUNDS = 5

_TYPES = (
    MemoryType.FACT, MemoryType.DECISION, MemoryType.OBSERVATION, MemoryType.CONSTRAINT,
    MemoryType.PREFERENCE, MemoryType.HYPOTHESIS,
)  # fmt: skip
_EN = (
    "The {e0} connection pool is exhausted on {env}: 50/50 active, p99 {n} ms",
    "Decided to roll back {e0} to the previous release before touching {e1}",
    "{e1} is not the cause: its latency stayed at {n} ms during the incident",
    "Do not restart {e0} on {env} during business hours",
    "Next step: inspect the thread pool of {e0} and the slow queries on {e1}",
)
_ZH = (
    "已确认 {e0} 在 {env} 的连接池耗尽，p99 延迟 {n} ms",
    "决定先回滚 {e0}，再看 {e1} 的慢查询",
    "已排除 {e1} 问题，延迟稳定在 {n} ms",
    "不要在工作时间重启 {env} 的 {e0}",
    "下一步：重点看 {e0} 的线程池和 {e1} 的 GC 日志",
)
_ENTS = (
    "order-service", "payment-api", "inventory-svc", "checkout-gateway", "database", "cache",
    "thread_pool", "connection_pool", "BUG-4821", "prod-eu", "createOrder",
)  # fmt: skip


def _items(n: int, users: int, sessions_per_user: int, seed: int, now: float) -> list[MemoryItem]:
    """``n`` realistic items: 80 % new facts, 10 % restated (merge), 10 % changed (update)."""
    rnd = random.Random(seed)
    out: list[MemoryItem] = []
    for i in range(n):
        u = rnd.randrange(users)
        s = rnd.randrange(sessions_per_user)
        user_id, session_id = f"u{u}", f"s{u}_{s}"
        task_id: str | None = f"task{u}_{s}"
        roll = rnd.random()
        if roll < 0.1 and out:  # a restated fact: same content, new message
            prev = out[rnd.randrange(len(out))]
            out.append(
                prev.model_copy(
                    update={
                        "source": MemorySource(message_ids=[f"m{i}.0"]),
                        "updated_at": now + i * 1e-4,
                        "last_access_at": now + i * 1e-4,
                    }
                )
            )
            continue
        e0, e1 = rnd.sample(_ENTS, 2)
        tmpl = (_EN if i % 2 else _ZH)[rnd.randrange(len(_EN))]
        env = rnd.choice(("prod", "staging"))
        summary = tmpl.format(e0=e0, e1=e1, env=env, n=rnd.randint(5, 900))
        mtype = rnd.choice(_TYPES)
        key = f"{task_id}:{mtype.value}:{e0}:{i}"
        if roll < 0.2 and out:  # a changed fact: same slot as an earlier item, new content
            prev = out[rnd.randrange(len(out))]
            user_id, session_id, task_id, key = (
                prev.user_id, prev.session_id, prev.task_id, prev.canonical_fact_key
            )  # fmt: skip
        at = now + i * 1e-4
        out.append(
            MemoryItem(
                id=f"m_{i:08d}",
                user_id=user_id,
                session_id=session_id,
                task_id=task_id,
                memory_type=mtype,
                subtype="bench",
                summary=summary,
                detail={"role": "assistant", "topic": e0, "numbers": [rnd.randint(1, 99)]},
                entities=[e0, e1],
                tags=[mtype.value],
                source=MemorySource(
                    kind="conversation", message_ids=[f"m{i}.0", f"m{i}.1"], tool_call_ids=[]
                ),
                confidence=round(rnd.uniform(0.6, 1.0), 2),
                importance=round(rnd.uniform(0.2, 1.0), 3),
                created_at=at,
                updated_at=at,
                last_access_at=at,
                expires_at=at + 3600,
                fingerprint=fingerprint(user_id, task_id or session_id, "bench", summary),
                canonical_fact_key=key,
                seen_sessions=[session_id],
            )
        )
    return out


def _evalsha_stats(client: redis.Redis) -> tuple[int, int]:
    stats: dict[str, Any] = client.info("commandstats")
    row = stats.get("cmdstat_evalsha", {})
    return int(row.get("calls", 0)), int(row.get("usec", 0))


@contextlib.contextmanager
def _store(session_cap: int = 50) -> Iterator[tuple[redis.Redis, StmStore, str]]:
    ns = new_namespace("benchstm")
    client = redis.Redis.from_url(redis_url(), decode_responses=True, socket_timeout=10)
    try:
        yield client, StmStore(client, namespace=ns, session_cap=session_cap), ns
    finally:
        purge(client, ns)
        client.close()


def _timed(store: StmStore, items: list[MemoryItem], rounds: int) -> dict[str, Any]:
    """Upsert one by one in ``rounds`` equal rounds; per-round p50/p99 and the pooled tail."""
    lat: list[float] = []
    evicting: list[float] = []
    ops: dict[str, int] = {}
    evicted = 0
    per_round = len(items) // rounds
    out_rounds: list[dict[str, float]] = []
    for k in range(rounds):
        first, busy0 = len(lat), machine_busy()
        t_start = time.perf_counter()
        for it in items[k * per_round : (k + 1) * per_round]:
            t = time.perf_counter_ns()
            res = store.upsert(it)
            lat.append((time.perf_counter_ns() - t) / 1e6)
            ops[res.op] = ops.get(res.op, 0) + 1
            evicted += len(res.evicted)
            if res.evicted:
                evicting.append(lat[-1])
        elapsed = time.perf_counter() - t_start
        mine = lat[first:]
        out_rounds.append(
            {
                "p50_ms": r3(percentile(mine, 50)),
                "p99_ms": r3(percentile(mine, 99)),
                "per_s": round(len(mine) / elapsed),
                "machine_busy": busy_share(busy0, machine_busy()),
            }
        )
    return {
        # the median of the rounds' figures: one disturbed round cannot move it
        "p50_ms": statistics.median(x["p50_ms"] for x in out_rounds),
        "p99_ms": statistics.median(x["p99_ms"] for x in out_rounds),
        "per_s": statistics.median(x["per_s"] for x in out_rounds),
        "rounds": out_rounds,
        "pooled_p99_ms": r3(percentile(lat, 99)),
        "p999_ms": r3(percentile(lat, 99.9)),
        "max_ms": r3(max(lat)),
        "count": len(lat),
        "ops": ops,
        "evicted": evicted,
        "evicting_p50_ms": r3(percentile(evicting, 50)),
        "evicting_p99_ms": r3(percentile(evicting, 99)),
    }


def run(quick: bool) -> dict[str, Any]:
    """Single upserts (sessions filling, then full), batches and reads on the configured Redis.

    Two regimes, because the per-session cap (50) changes the script's work: while a
    session fills, an upsert writes the item and its indexes; once it is full (after ~7
    turns at ~7 items a turn, so the common case of a long session), every new item also
    evicts the least important one.
    """
    users, spu = (10, 2) if quick else (40, 2)
    sessions = users * spu
    n_fill = sessions * 45  # below the cap on average
    n_full = 3000 if quick else 20_000
    n_batch = 10_000 if quick else 50_000
    batch = 100
    n_reads = 1000 if quick else 5000
    now = time.time()
    figures: dict[str, Any] = {}
    with _store() as (client, store, _ns):
        figures["machine"] = machine(client)
        warm = _items(300, users, spu, seed=1, now=now)
        for it in warm:
            store.upsert(it.model_copy(update={"user_id": "warm"}))
        items = _items(n_fill + sessions * 15 + n_full, users, spu, seed=2, now=now)
        # client-side share of one upsert: validation-free encoding of the hash + index list
        enc = []
        for it in items[:2000]:
            t = time.perf_counter_ns()
            store._encode(it)
            enc.append((time.perf_counter_ns() - t) / 1e6)
        calls0, usec0 = _evalsha_stats(client)
        filling = _timed(store, items[:n_fill], ROUNDS)
        calls1, usec1 = _evalsha_stats(client)
        filling["server_us_per_call"] = round((usec1 - usec0) / max(1, calls1 - calls0), 1)
        for it in items[n_fill : n_fill + sessions * 15]:  # top every session up to the cap
            store.upsert(it)
        calls0, usec0 = _evalsha_stats(client)
        full = _timed(store, items[n_fill + sessions * 15 :], ROUNDS)
        calls1, usec1 = _evalsha_stats(client)
        full["server_us_per_call"] = round((usec1 - usec0) / max(1, calls1 - calls0), 1)

        # reads: newest 20 of a session, as recall's first step does
        rnd = random.Random(3)
        read_lat, read_n = [], []
        for _ in range(n_reads):
            u = rnd.randrange(users)
            t = time.perf_counter_ns()
            got = store.by_session(f"u{u}", f"s{u}_{rnd.randrange(spu)}", limit=20)
            read_lat.append((time.perf_counter_ns() - t) / 1e6)
            read_n.append(len(got))
    # batches, in a fresh namespace so the single-upsert run does not skew them
    with _store() as (_client, store, _ns):
        bitems = _items(n_batch, users * 4, spu, seed=4, now=now)
        store.upsert_many(bitems[:batch])
        blat = []
        t_start = time.perf_counter()
        for k in range(batch, len(bitems), batch):
            chunk = bitems[k : k + batch]
            t = time.perf_counter_ns()
            store.upsert_many(chunk)
            blat.append((time.perf_counter_ns() - t) / 1e6)
        b_elapsed = time.perf_counter() - t_start
        b_done = len(bitems) - batch

    figures["memory"] = _memory(quick)
    figures["redis_bytes_per_item"] = figures["memory"]["bytes_per_item"]
    figures.update(
        {
            # headline: full sessions, the steady state of any session longer than ~7 turns
            "upsert_p50_ms": full["p50_ms"],
            "upsert_p99_ms": full["p99_ms"],
            "upsert_per_s": full["per_s"],
            "upsert_full_sessions": full,
            "upsert_filling_sessions": filling,
            "upsert_encode_p50_ms": r3(percentile(enc, 50)),
            "target_upsert_p99_ms": TARGET_UPSERT_P99_MS,
            "batch_size": batch,
            "upsert_many_items_per_s": round(b_done / b_elapsed),
            "upsert_many_batch_p50_ms": r3(percentile(blat, 50)),
            "upsert_many_batch_p99_ms": r3(percentile(blat, 99)),
            "read_by_session_p50_ms": r3(percentile(read_lat, 50)),
            "read_by_session_p99_ms": r3(percentile(read_lat, 99)),
            "read_by_session_items_mean": round(statistics.fmean(read_n), 1),
            "quick": quick,
        }
    )
    return figures


def _memory(quick: bool) -> dict[str, Any]:
    """Bytes per item on the configured Redis, and on a scratch one with ops/redis.conf."""
    from memstrata.ops.bench import stm_memory
    from memstrata.ops.bench.common import scratch_redis

    client = redis.Redis.from_url(redis_url(), decode_responses=True, socket_timeout=10)
    try:
        out: dict[str, Any] = {"configured": stm_memory.run(client, quick=quick)}
    finally:
        client.close()
    if scratch_redis.available():
        with scratch_redis.scratch_redis(conf=scratch_redis.SHIPPED_CONF) as shipped:
            out["shipped"] = stm_memory.run(shipped, quick=quick)
    out["bytes_per_item"] = (out.get("shipped") or out["configured"])["bytes_per_item"]
    out["target_bytes_per_item"] = stm_memory.TARGET_BYTES_PER_ITEM
    return out


def _memory_lines(mem: dict[str, Any]) -> list[str]:
    from memstrata.ops.bench import stm_memory

    ok = "met" if mem["bytes_per_item"] <= mem["target_bytes_per_item"] else "MISSED"
    lines = [
        "Redis bytes per stored item (`MEMORY USAGE … SAMPLES 0` of the item hashes and of "
        "the owners' index keys, divided by the live items; write decisions are not "
        f"counted): **{mem['bytes_per_item']}** for the mix at {stm_memory.SIZES[-1]} items "
        f"per user with the shipped configuration (target ≤ {mem['target_bytes_per_item']}: "
        f"{ok}).",
        "",
        "| Redis | load | items per user | bytes per item | item hash | index entries | "
        "item encodings |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, key in (("configured", "configured"), ("shipped (ops/redis.conf)", "shipped")):
        if key in mem:
            s = mem[key]["server"]
            name = f"{label}: hash value ≤ {s['hash-max-listpack-value']} B"
            lines += stm_memory.markdown_rows(name, mem[key])
    per_turn = mem["configured"][f"marker_{stm_memory.SIZES[-1]}"]["decision_bytes_per_turn"]
    lines += ["", f"Write decisions, not counted above: {per_turn} bytes per marker turn.", ""]
    return lines


def _row(name: str, r: dict[str, Any]) -> str:
    ops = ", ".join(f"{k} {v}" for k, v in sorted(r["ops"].items()))
    return (
        f"| {name} | {r['p50_ms']} / {r['p99_ms']} | "
        + ", ".join(f"{x['p99_ms']} ({x['machine_busy']})" for x in r["rounds"])
        + f" | {r['pooled_p99_ms']} / {r['p999_ms']} / {r['max_ms']} | {r['per_s']} | "
        f"{r['server_us_per_call']} | {r['count']}: {ops}; {r['evicted']} evicted |"
    )


def markdown(figures: dict[str, Any]) -> str:
    f = figures
    ok = "met" if f["upsert_p99_ms"] <= TARGET_UPSERT_P99_MS else "MISSED"
    return "\n".join(
        [
            "### STM upsert (`memstrata bench stm" + (" --quick" if f.get("quick") else "") + "`)",
            "",
            f"Single upserts, one client: p50 / p99 **{f['upsert_p50_ms']} / "
            f"{f['upsert_p99_ms']} ms** with full sessions (target p99 ≤ "
            f"{TARGET_UPSERT_P99_MS:g} ms: {ok}), {f['upsert_per_s']} items/s.",
            "",
            f"| sessions | p50 / p99 ms (median of {ROUNDS} rounds) | p99 per round "
            "(machine busy) | pooled p99 / p99.9 / max ms | items/s | µs in Redis per call | "
            "items |",
            "|---|---|---|---|---|---|---|",
            _row("filling (below the cap)", f["upsert_filling_sessions"]),
            _row("full (each insert evicts)", f["upsert_full_sessions"]),
            "",
            "| other figure | value |",
            "|---|---|",
            f"| upserts that evicted, p50 / p99 | "
            f"{f['upsert_full_sessions']['evicting_p50_ms']} / "
            f"{f['upsert_full_sessions']['evicting_p99_ms']} ms |",
            f"| Python encoding per item | {f['upsert_encode_p50_ms']} ms p50 |",
            f"| `upsert_many` ({f['batch_size']} per pipeline) | {f['upsert_many_items_per_s']} "
            f"items/s; batch p50 / p99 {f['upsert_many_batch_p50_ms']} / "
            f"{f['upsert_many_batch_p99_ms']} ms |",
            f"| `by_session(limit=20)` | p50 {f['read_by_session_p50_ms']} / p99 "
            f"{f['read_by_session_p99_ms']} ms "
            f"({f['read_by_session_items_mean']} items on average) |",
            "",
            *(_memory_lines(f["memory"]) if "memory" in f else []),
        ]
    )
