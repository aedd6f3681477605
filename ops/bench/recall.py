"""``memstrata bench recall``: recall() latency per route (issue 5).

Set-up: one tenant and user in a scratch PostgreSQL database (migrated from empty), 10k
STM items for the user spread over 50 sessions and 20 tasks (``--quick``: 1k), the
profile cache warm, as in steady operation.  Routes measured, each with its own query:

* ``stm_only``: "那个接口还是超时" inside an active task → Redis only;
* ``pg_stm``: a preference question that also refers to the task → PG block + Redis;
* ``hybrid``: PG + STM + LTM hybrid search over ``MEMSTRATA_BENCH_RECALL_CARDS`` cards
  (10k by default, 2k with ``--quick``) on a local milvus-lite server, including the
  query embedding (every query text is distinct, so the embedding cache never answers);
  then the same queries again (``hybrid_repeat``: embeddings from the query cache);
* ``hybrid_history``: the same route once the user's raw history is indexed too
  (``MEMSTRATA_BENCH_RECALL_HISTORY`` messages, by default as many as cards: user and
  assistant messages about the same services and errors, so both of its lists return
  hits): recall searches the raw-history collections beside the cards, as it does in a
  deployment where L0 is projected (docs/LTM.md).  ``hybrid`` runs with that index empty.

``redis_roundtrip_*``: the STM-only recall's one Redis read sent bare (``recall_read.lua``
with the profile cache's keys), timed in turn with each recall so both see the same load.

Figures are medians and p95 of wall time around ``Recaller.recall()`` in this process.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import text

from memstrata.core import migrations
from memstrata.core.adapters.redis import run_script
from memstrata.core.authority.admin import create_project, create_tenant, create_user
from memstrata.core.authority.facts import grant_role, set_profile
from memstrata.core.extract.entities import extract_entities
from memstrata.core.extract.lexicon import default_lexicon
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType
from memstrata.core.recall.pool import SourceType
from memstrata.core.recall.service import Recaller, RecallRequest, RecallSettings
from memstrata.core.runtime import Runtime
from memstrata.core.stm.store import lua
from memstrata.ops.bench.common.cpu import (
    alive_cpu_seconds,
    descendants_cpu_seconds,
    redis_cpu_seconds,
)
from memstrata.ops.bench.common.db import scratch_postgres
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.stats import median, percentile, r3

TENANT = "bench"
USER = "u_bench"
PROJECT = "payments"
_ENTITIES = ["createOrder", "payment-service", "prod-k8s", "database", "thread_pool",
             "downstream", "cache", "kafka", "redis", "gc", "PAY-1234", "HTTP504"]  # fmt: skip
_TYPES = list(MemoryType)


@contextlib.contextmanager
def migrated_postgres() -> Iterator[str]:
    """A scratch database with every schema branch (authority, LTM ledger, audit) migrated."""
    with scratch_postgres("memstrata_bench_recall_") as url:
        migrations.upgrade(url)
        yield url


def _seed_authority(res: Runtime) -> None:
    with res.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": TENANT, "name": "Bench"})
        create_user(db=conn, user={"tenant_id": TENANT, "id": USER})
        create_project(db=conn, project={"tenant_id": TENANT, "id": PROJECT, "name": "Pay",
                                         "default_env": "prod-cn"})  # fmt: skip
        grant_role(db=conn, tenant_id=TENANT, user_id=USER, project_id=PROJECT,
                   role="developer", scope="read_only")  # fmt: skip
        set_profile(db=conn, tenant_id=TENANT, user_id=USER,
                    update={"language": "zh-CN", "answer_style": "brief_first"})  # fmt: skip


def _items(n: int, now: float, rng: random.Random) -> list[MemoryItem]:
    out = []
    for i in range(n):
        ents = rng.sample(_ENTITIES, 2)
        mtype = _TYPES[i % len(_TYPES)]
        at = now - rng.uniform(0, 86_400)
        summary = f"{ents[0]} 在 {ents[1]} 上的第 {i} 条记录：超时与线程池排查"
        out.append(MemoryItem(
            id=f"m{i:06d}", user_id=USER, tenant_id=TENANT, session_id=f"s{i % 50}",
            task_id=f"bug{i % 20}", memory_type=mtype, subtype="bench", summary=summary,
            entities=ents, source=MemorySource(message_ids=[f"t{i}.0"]), confidence=0.9,
            importance=rng.random(), created_at=at, updated_at=at, last_access_at=at,
            expires_at=now + 7 * 86_400, fingerprint=f"fp{i:010d}",
            canonical_fact_key=f"bug{i % 20}:bench:{i}",
        ))  # fmt: skip
    return out


def _time(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _bare_reads(res: Runtime, req: RecallRequest, now: float) -> Callable[[], Any]:
    """The Redis read of an STM-only recall, sent bare: the ``recall_read.lua`` call with
    the same arguments (indexes, last-recall flag, the profile cache's two keys), its reply
    left unparsed."""
    r = res.redis
    script = r.register_script(lua("common.lua") + lua("recall_read.lua"))
    ck = res.profile_cache.keys(TENANT, USER)
    k = res.stm.keys(USER, TENANT)
    p = len(k.prefix)
    ents = extract_entities(req.query, default_lexicon(), extra=(PROJECT,))[:5]
    suffixes = [k.session(req.session_id)[p:], k.task(str(req.task_id))[p:]]
    suffixes += [k.entity(e)[p:] for e in ents] + [k.recent[p:]]
    args: list[str | float] = [RecallSettings().stm_per_index, now,
                               k.last_recall(req.session_id)[p:], 2, k.suffix(ck.snapshot),
                               k.suffix(ck.version), *suffixes]  # fmt: skip

    def reads() -> None:  # the lean call recall's own read makes (core.adapters.redis)
        run_script(r, script, [k.prefix], args)

    return reads


def _interleaved(
    recall: Callable[[], Any], bare: Callable[[], Any], n: int
) -> tuple[list[float], list[float]]:
    """Recall and its bare Redis reads timed in turn, so both see the same machine load."""
    ms, rt = [], []
    for _ in range(n):
        ms += _time(recall, 1)
        rt += _time(bare, 1)
    return ms, rt


def _route_figures(
    recaller: Recaller,
    queries: dict[str, RecallRequest],
    n: int,
    bare: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Per route p50/p95; ``bare`` (STM only): its Redis reads alone, beside each call."""
    figures: dict[str, Any] = {}
    for name, req in queries.items():
        recaller.recall(req)  # warm: profile cache, script loads, jieba
        if name == "stm_only" and bare is not None:
            bare()
            ms, rt = _interleaved(lambda r=req: recaller.recall(r), bare, n)  # type: ignore[misc]
            figures["redis_roundtrip_p50_ms"] = r3(median(rt))
            figures["redis_roundtrip_p95_ms"] = r3(percentile(rt, 95))
            figures["stm_only_over_roundtrip"] = r3(median(ms) / median(rt))
        else:
            ms = _time(lambda r=req: recaller.recall(r), n)  # type: ignore[misc]
        figures[f"{name}_p50_ms"] = r3(median(ms))
        figures[f"{name}_p95_ms"] = r3(percentile(ms, 95))
        out = recaller.recall(req)
        figures[f"{name}_route"] = {
            "pg": out.route.need_pg,
            "redis": out.route.need_redis,
            "ltm": out.route.need_ltm,
        }
    return figures


def _seed_ltm(rt: Any, cards: int, rng: random.Random) -> None:
    """``cards`` synthetic incident cards of the user across 7 projects, embedded and indexed."""
    from memstrata.ops.bench.ltm import BATCH
    from memstrata.ops.bench.ltm_data import synthetic_draft

    for lo in range(0, cards, BATCH):
        drafts = [
            synthetic_draft(i, rng, tenant=TENANT, users=1).model_copy(
                update={"user_id": USER, "project_id": PROJECT if i % 7 == 0 else f"p{i % 7}"}
            )
            for i in range(lo, min(lo + BATCH, cards))
        ]
        ids = [r.memory_id for r in rt.ledger.write_many(drafts)]
        rt.projector.project(ids)
    rt.lexical.refresh()


def _history_messages(cards: int) -> int:
    """Raw-history messages to index: ``MEMSTRATA_BENCH_RECALL_HISTORY``, else as many as
    cards."""
    return int(os.environ.get("MEMSTRATA_BENCH_RECALL_HISTORY", cards))


def _seed_history(rt: Any, messages: int) -> int:
    """``messages`` raw user / assistant messages of the user, indexed as L0's projection
    is (``HistoryIndex.project``), in turns of two over 100 sessions; how many were
    indexed (none when the raw-history index is off)."""
    from memstrata.core.models.transcript import Role, TranscriptRecord
    from memstrata.ops.bench.ltm_data import APIS, CODES, EN, SERVICES, ZH

    if rt.history is None or messages <= 0:
        return 0
    rng = random.Random(11)  # its own: the cards and queries stay those of earlier runs
    now = time.time() - messages
    pending: list[TranscriptRecord] = []
    for i in range(messages):
        api, service, code = rng.choice(APIS), rng.choice(SERVICES), rng.choice(CODES)
        user = i % 2 == 0
        content = (
            f"{api} on {service} {rng.choice(EN)}, {rng.choice(ZH)}？"
            if user
            else f"Checked {service}: {code} while calling {api}. {rng.choice(EN)}."
        )
        pending.append(TranscriptRecord(
            message_id=f"m{i}", turn_id=f"t{i // 2}", user_id=USER, tenant_id=TENANT,
            session_id=f"h{i % 100}", role=Role.USER if user else Role.ASSISTANT,
            content=content, at=now + i, recorded_at=now + i,
        ))  # fmt: skip
        if len(pending) >= 256:
            rt.history.project(pending)
            pending = []
    rt.history.project(pending)
    rt.history.lexical.refresh()
    return messages


def run(quick: bool = False) -> dict[str, Any]:
    rng = random.Random(7)
    n_items = 1_000 if quick else 10_000
    n_queries = 50 if quick else 300
    # 100k cards take ~30 min to embed here (~60 cards/s, embedding-bound; see docs/LTM.md
    # for LTM search at 100k): the default full run uses 10k, the env var sets any size
    n_cards = int(os.environ.get("MEMSTRATA_BENCH_RECALL_CARDS", 2_000 if quick else 10_000))
    ns = new_namespace("benchrecall")
    from memstrata.ops.bench.ltm import ltm_stack

    with (
        migrated_postgres() as pg_url,
        ltm_stack(pg_url, redis_url=redis_url(), key_namespace=ns) as res,
    ):
        try:
            _seed_authority(res)
            now = time.time()
            items = _items(n_items, now, rng)
            for i in range(0, len(items), 500):
                res.stm.upsert_many(items[i : i + 500])
            recaller = res.recaller(ltm=False)
            base = {"tenant_id": TENANT, "user_id": USER, "session_id": "s7", "task_id": "bug7",
                    "project_id": PROJECT}  # fmt: skip
            queries = {
                "stm_only": RecallRequest(query="那个接口还是超时", **base),
                "pg_stm": RecallRequest(query="这个任务按我的回答偏好来，默认环境是哪个？", **base),
            }
            bare = _bare_reads(res, queries["stm_only"], now)
            figures = _route_figures(recaller, queries, n_queries, bare)
            recaller.close()
            figures.update({"stm_items": n_items, "queries_per_route": n_queries})
            figures.update(_hybrid(res, base, n_cards, n_queries, rng))
            figures["machine"] = machine(res.redis)
            return figures
        finally:
            purge(res.redis, ns)


def _hybrid(
    res: Runtime, base: dict[str, Any], n_cards: int, n_queries: int, rng: random.Random
) -> dict[str, Any]:
    """PG + STM + LTM: the runtime's long-term memory on its milvus-lite server."""
    rt = res.ltm
    t0 = time.perf_counter()
    _seed_ltm(rt, n_cards, rng)
    load_s = time.perf_counter() - t0
    n_history = _history_messages(n_cards)
    # distinct texts so the query-embedding cache never answers: the embedding is part of
    # every measured call (the runs with raw history ask texts of their own)
    words = ["超时", "线程池", "数据库", "网关", "缓存", "重试", "限流", "发布"]

    def queries(tag: str, n: int = n_queries) -> list[RecallRequest]:
        return [
            RecallRequest(
                query=f"按我的偏好，这个 createOrder {rng.choice(words)}"
                f"以前有没有类似案例？#{tag}{i}",
                **base,
            )
            for i in range(n)
        ]

    recaller = res.recaller()
    try:
        # one query first, explained: the route the measured ones take
        first = recaller.recall(queries("first", 1)[0].model_copy(update={"explain": True}))
        route = first.route
        asked = queries("")
        ms, degraded = _time_each(recaller, asked)
        # the same queries again: their embeddings now come from the query cache
        again, _ = _time_each(recaller, asked)
        t0 = time.perf_counter()
        n_history = _seed_history(rt, n_history)
        history_load_s = time.perf_counter() - t0
        with_history = recaller.recall(queries("hfirst", 1)[0].model_copy(update={"explain": True}))
        pooled = with_history.explain.candidates if with_history.explain else []
        raw_pooled = sum(1 for c in pooled if c.candidate.source_type is SourceType.RAW_HISTORY)
        ms_history, history_degraded = _time_each(recaller, queries("h"))
    finally:
        recaller.close()
    return {
        "hybrid_p50_ms": r3(median(ms)),
        "hybrid_p95_ms": r3(percentile(ms, 95)),
        "hybrid_repeat_p50_ms": r3(median(again)),
        "hybrid_repeat_p95_ms": r3(percentile(again, 95)),
        "hybrid_history_p50_ms": r3(median(ms_history)),
        "hybrid_history_p95_ms": r3(percentile(ms_history, 95)),
        "hybrid_route": {"pg": route.need_pg, "redis": route.need_redis, "ltm": route.need_ltm,
                         "mode": route.ltm_mode.value if route.ltm_mode else None},
        "hybrid_degraded": first.degraded,
        # measured calls that came back without a layer: their time is not the route's
        "hybrid_degraded_calls": degraded,
        "hybrid_history_degraded": with_history.degraded,
        "hybrid_history_degraded_calls": history_degraded,
        "hybrid_history_raw_pooled": raw_pooled,
        "ltm_cards": n_cards,
        "ltm_load_s": r3(load_s),
        "history_messages": n_history,
        "history_load_s": r3(history_load_s),
    }  # fmt: skip


def _time_each(recaller: Recaller, reqs: list[RecallRequest]) -> tuple[list[float], int]:
    """Wall ms of each recall, and how many came back degraded (a layer skipped)."""
    out, degraded = [], 0
    for req in reqs:
        t0 = time.perf_counter()
        result = recaller.recall(req)
        out.append((time.perf_counter() - t0) * 1000)
        degraded += bool(result.degraded)
    return out, degraded


def markdown(f: dict[str, Any]) -> str:
    rows = [
        ("STM only (Redis)", "stm_only", "p50 ≤ 1 ms, p95 ≤ 2 ms"),
        ("the STM-only recall's Redis read alone (recall_read.lua incl. the profile cache)",
         "redis_roundtrip", "—"),
        ("PG + STM", "pg_stm", "—"),
        ("PG + STM + LTM hybrid, every query new", "hybrid", "p95 ≤ 15 ms incl. query embedding"),
        ("PG + STM + LTM hybrid, query asked before (embedding cached)", "hybrid_repeat", "—"),
        ("PG + STM + LTM hybrid with the raw-history index filled, every query new",
         "hybrid_history", "—"),
    ]  # fmt: skip
    lines = [
        "## recall() latency per route",
        "",
        f"Command: `memstrata bench recall` — {f.get('stm_items')} STM items for the user, "
        f"{f.get('ltm_cards', 'no')} LTM cards, {f.get('history_messages', 'no')} raw-history "
        f"messages (the last row only), {f.get('queries_per_route')} queries per route.",
        "",
        "| route | p50 ms | p95 ms | target |",
        "|---|---:|---:|---|",
    ]
    for label, key, target in rows:
        if f"{key}_p50_ms" in f:
            lines.append(f"| {label} | {f[f'{key}_p50_ms']} | {f[f'{key}_p95_ms']} | {target} |")
    if "hybrid_history_degraded_calls" in f:
        lines += ["", f"Measured hybrid calls that came back degraded (a layer skipped): "
                      f"{f.get('hybrid_degraded_calls')} without raw history, "
                      f"{f['hybrid_history_degraded_calls']} with it."]  # fmt: skip
    if "stm_only_over_roundtrip" in f:
        lines += ["", f"STM-only recall ÷ its bare Redis read (p50, timed in turn in one loop): "
                      f"**{f['stm_only_over_roundtrip']}×**."]  # fmt: skip
    return "\n".join(lines)


_PROFILE_GROUPS: tuple[tuple[str, Callable[[str, str], bool]], ...] = (  # first match wins
    ("socket send / receive (waiting on Redis)",
     lambda f, n: any(m in n for m in ("'sendall'", "'recv_into'", "'poll'"))),
    ("redis-py client", lambda f, n: "site-packages/redis" in f or "hiredis" in n),
    ("pydantic", lambda f, n: "pydantic" in f or "'validate_" in n),
    ("recall pool (dedup, rescore, verdicts)", lambda f, n: f.endswith("core/recall/pool.py")),
    ("recall service (candidates, routing glue)",
     lambda f, n: f.endswith("core/recall/service.py")),
    ("term extraction", lambda f, n: f.endswith("core/recall/text.py")
     or any(m in n for m in ("'findall'", "'casefold'", "'isupper'"))),
    ("STM read parsing", lambda f, n: f.endswith("core/stm/store.py")),
    ("json", lambda f, n: "json" in f),
)  # fmt: skip


def profile_stm_only(calls: int = 300) -> dict[str, Any]:
    """CPU per STM-only recall (not profiled), then the cProfile time of as many calls by
    group, with 10k STM items and no LTM: the text summary in docs/BENCHMARKS.md."""
    import cProfile
    import pstats

    from memstrata.core.ltm.config import LtmSettings
    from memstrata.core.settings import load_settings

    ns = new_namespace("profrecall")
    with migrated_postgres() as pg_url:
        rt = Runtime(load_settings(postgres_url=pg_url, redis_url=redis_url(), key_namespace=ns,
                                   ltm=LtmSettings(enabled=False)))  # fmt: skip
        try:
            _seed_authority(rt)
            items = _items(10_000, time.time(), random.Random(7))
            for i in range(0, len(items), 500):
                rt.stm.upsert_many(items[i : i + 500])
            recaller = rt.recaller(ltm=False)
            req = RecallRequest(query="那个接口还是超时", tenant_id=TENANT, user_id=USER,
                                session_id="s7", task_id="bug7", project_id=PROJECT)  # fmt: skip
            for _ in range(30):
                recaller.recall(req)
            c0 = time.process_time()
            for _ in range(calls):
                recaller.recall(req)
            cpu_ms = (time.process_time() - c0) / calls * 1000
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(calls):
                recaller.recall(req)
            prof.disable()
            recaller.close()
        finally:
            purge(rt.redis, ns)
            rt.close()
    groups: dict[str, float] = {}
    total = 0.0
    for (path, _line, name), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        tottime = float(row[2])
        total += tottime
        label = next((g for g, hit in _PROFILE_GROUPS if hit(path, name)), "other")
        groups[label] = groups.get(label, 0.0) + tottime
    share = {g: round(100 * t / total, 1) for g, t in sorted(groups.items(), key=lambda x: -x[1])}
    return {"cpu_ms_per_call": r3(cpu_ms), "calls": calls, "profiled_share_pct": share}


def _backends(res: Runtime) -> list[int]:
    """The PostgreSQL backends of this benchmark's scratch database (its own connections)."""
    with res.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        )
        return [int(r[0]) for r in rows]


def _serving_cpu_s(res: Runtime, backends: list[int]) -> dict[str, float]:
    """CPU seconds so far of each process a recall keeps busy: this one (recall's Python,
    the query embedding, the store clients), its children (the bench's milvus-lite
    server), the Redis server (every client of it) and ``backends`` (PostgreSQL)."""
    return {
        "recall process": time.process_time(),
        "milvus-lite": descendants_cpu_seconds(os.getpid()),
        "redis": redis_cpu_seconds(res.redis),
        "postgres": alive_cpu_seconds(backends),
    }


def _cpu_per_recall(
    before: dict[str, float], after: dict[str, float], calls: int
) -> dict[str, float]:
    """Milliseconds of CPU per recall in each process, and their sum: what two cores share."""
    per = {k: (after[k] - before[k]) * 1000 / calls for k in before}
    return {**{k: r3(v) for k, v in per.items()}, "sum": r3(sum(per.values()))}


def profile_hybrid(
    cards: int = 10_000, queries: int = 200, history: int | None = None
) -> dict[str, Any]:
    """Where a hybrid recall's wall time goes: each stage's own time per recall (p50 /
    p95 ms over ``queries`` new texts, then the same texts again with their embeddings
    cached), timed around the runtime's index, embedder and ledger calls; the text
    summary in docs/BENCHMARKS.md.  Stages overlap (threads): they do not add up.
    ``cpu_ms_per_recall``: the CPU each serving process spent per recall (this process,
    the milvus-lite server, Redis, the database's PostgreSQL backends) and their sum,
    which the machine's cores share: on 2 cores, half the sum is a floor under the wall
    time however well the stages overlap.
    ``history`` raw messages are indexed too (``MEMSTRATA_BENCH_RECALL_HISTORY``, by
    default as many as ``cards``; 0 leaves the raw-history index empty)."""
    if history is None:
        history = _history_messages(cards)
    from memstrata.ops.bench.ltm import ltm_stack

    rng = random.Random(7)
    ns = new_namespace("profhybrid")
    spent: dict[str, float] = {}

    def timed(obj: Any, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + (time.perf_counter() - t0) * 1000

        setattr(obj, name, wrapper)

    out: dict[str, Any] = {"cards": cards, "history_messages": history, "queries": queries}
    with (
        migrated_postgres() as pg_url,
        ltm_stack(pg_url, redis_url=redis_url(), key_namespace=ns) as res,
    ):
        try:
            _seed_authority(res)
            now = time.time()
            items = _items(10_000, now, rng)
            for i in range(0, len(items), 500):
                res.stm.upsert_many(items[i : i + 500])
            _seed_ltm(res.ltm, cards, rng)
            out["history_messages"] = _seed_history(res.ltm, history)
            lt = res.ltm
            timed(lt.embedder, "embed_query", "query embedding (both searches' waits)")
            timed(lt.search.vector, "search", "LTM vector search")
            timed(lt.search.lexical, "search", "LTM lexical search")
            timed(lt.ledger, "cards", "ledger read of the cards (PostgreSQL)")
            if lt.history is not None:  # its own index clients (another collection pair)
                assert lt.history.vector is not lt.search.vector
                timed(lt.history.vector, "search", "raw-history vector search")
                timed(lt.history.lexical, "search", "raw-history lexical search")
                timed(lt.history.lexical, "get", "raw-history text read (vector-only hits)")
                timed(lt.ledger, "curated", "ledger read of the raw hits' curated messages")
            recaller = res.recaller()
            base = {"tenant_id": TENANT, "user_id": USER, "session_id": "s7",
                    "task_id": "bug7", "project_id": PROJECT}  # fmt: skip
            words = ["超时", "线程池", "数据库", "网关", "缓存", "重试", "限流", "发布"]
            texts = [f"按我的偏好，这个 createOrder {rng.choice(words)}以前有没有类似案例？#{i}"
                     for i in range(queries)]  # fmt: skip
            for i in range(10):  # the pools open their connections: the backends are known
                recaller.recall(RecallRequest(query=f"warm {words[i % len(words)]} #{i}", **base))
            backends = _backends(res)
            for run in ("new", "repeat"):
                per: dict[str, list[float]] = {}
                cpu0 = _serving_cpu_s(res, backends)
                for query in texts:
                    spent.clear()
                    t0 = time.perf_counter()
                    recaller.recall(RecallRequest(query=query, **base))
                    per.setdefault("recall (wall)", []).append((time.perf_counter() - t0) * 1000)
                    for label, ms in spent.items():
                        per.setdefault(label, []).append(ms)
                cpu = _cpu_per_recall(cpu0, _serving_cpu_s(res, backends), len(texts))
                out[run] = {k: {"p50": r3(median(v)), "p95": r3(percentile(v, 95))}
                            for k, v in per.items()}  # fmt: skip
                out[run]["cpu_ms_per_recall"] = cpu
            recaller.close()
            out["machine"] = machine(res.redis)
        finally:
            purge(res.redis, ns)
    return out


if __name__ == "__main__":  # python -m memstrata.ops.bench.recall [--hybrid]: the profiles
    import json
    import sys

    found = profile_hybrid() if "--hybrid" in sys.argv else profile_stm_only()
    print(json.dumps(found, indent=1, ensure_ascii=False))
