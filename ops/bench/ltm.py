"""Long-term memory benchmark: indexing throughput, write and search latency, quality.

Why these figures (issue 4): one card's LTM write (ledger + embedding + both
projections) should stay within 50 ms p95 (seed 2 §2.2); a hybrid search within 30 ms
p95 at 100k cards, query embedding included; and hybrid should be at least as good as
the better single mode on MADial-Bench Recall@5 in both languages.  Everything runs on
the real stack: a milvus-lite 2.5.1 server of its own (temp folder, free port), a
scratch PostgreSQL database, the default embedding model.  Searches are filtered by
tenant and user, as the read path does.

The bulk load's vectors come from a disk cache (:mod:`ops.bench.ltm_vectors`, built once
with ``nice -n 10 python -m memstrata.ops.bench.ltm_vectors 100000``), so a 100k run
measures the index at that size in minutes; the single-card writes and every query
embed live.  At each scale the index calls themselves are timed one card at a time
(``strategy``: insert or upsert of a new id, upsert or delete of a held one), which is
what shows where a write's time goes as the collection grows.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memstrata.core import migrations
from memstrata.core.ltm.card import LtmCard, card_id
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.milvus import milvus_errors
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.ltm.search import SearchMode, SearchPolicy
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.db import scratch_postgres
from memstrata.ops.bench.common.machine import load_average
from memstrata.ops.bench.common.stats import percentile, r3
from memstrata.ops.bench.ltm_data import (
    DEFAULT_MADIAL,
    madial_cases,
    memory_draft,
    metrics,
    synthetic_draft,
    synthetic_query,
)
from memstrata.ops.bench.ltm_vectors import PrecomputedEmbedder, load_draft, model, precompute

TARGET_WRITE_P95_MS = 50.0
TARGET_HYBRID_P95_MS = 30.0
BATCH = 500
LOAD_WRITERS = 4  # ledger writer threads of the bulk load (the pool holds 5)
STRATEGY_OPS = ("insert_new", "upsert_new", "upsert_held", "delete_held")
PROBE_TENANT = "bench-probe"  # cards written straight into the indexes by ``_strategy``
MODES = (SearchMode.LEXICAL, SearchMode.VECTOR, SearchMode.HYBRID)
MODE_NAMES = tuple(m.value for m in MODES)


@contextlib.contextmanager
def ltm_stack(
    pg_url: str | None = None, *, embedder: CachedEmbedder | None = None, **overrides: Any
) -> Iterator[Runtime]:
    """A runtime whose LTM is a milvus-lite server of its own, on ``pg_url`` (migrated)
    or on a scratch database of its own; everything is stopped and dropped afterwards."""
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ltm-bench-"))
        if pg_url is None:
            pg_url = stack.enter_context(scratch_postgres("memstrata_bench_ltm_"))
            migrations.upgrade(pg_url)
        server = MilvusServer(Path(tmp) / "bench.db", f"127.0.0.1:{free_port()}")
        server.start()
        stack.callback(server.stop)
        ltm = LtmSettings(milvus_uri=server.uri, collection_prefix="bench", milvus_timeout_s=30)
        settings = load_settings(postgres_url=pg_url, ltm=ltm, **overrides)
        runtime = Runtime(settings, embedder=embedder)
        stack.callback(runtime.close)
        yield runtime


def _quality(rt: LtmRuntime, root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    policy = SearchPolicy(candidates=20, top_k=10)
    for lang in ("en", "zh"):
        memories, queries = madial_cases(lang, root)
        tenant = f"madial-{lang}"
        written = rt.ledger.write_many([memory_draft(m, tenant) for m in memories])
        ids = {w.memory_id: m.key for w, m in zip(written, memories, strict=True)}
        rt.projector.project(list(ids))
        per_mode: dict[str, Any] = {}
        for mode in MODES:
            rows = []
            for q in queries:
                flt = CardFilter(tenant_id=tenant, user_id=f"u{q.user}")
                ranked = [
                    ids[r.memory_id]
                    for r in rt.search.search(q.text, flt, mode=mode, policy=policy)
                ]
                row = metrics(ranked, q.gold, 5)
                row["recall@1"] = metrics(ranked, q.gold, 1)["recall@1"]
                row["recall@10"] = metrics(ranked, q.gold, 10)["recall@10"]
                rows.append(row)
            per_mode[mode.value] = {k: r3(sum(r[k] for r in rows) / len(rows)) for k in rows[0]}
        out[lang] = {"memories": len(memories), "queries": len(queries), **per_mode}
    return out


def _load(rt: LtmRuntime, start: int, count: int) -> dict[str, float]:
    """Write ``count`` synthetic cards and project them in batches of 500 (vectors from the
    disk cache: :mod:`ops.bench.ltm_vectors`).  ``LOAD_WRITERS`` threads write the ledger
    batches ahead while this one projects: a ledger batch waits on PostgreSQL round trips
    (two statements a card), which would otherwise make a 100k load take most of an hour
    on a loaded host.  ``ledger_s`` sums the writers' time, ``project_s`` this thread's."""

    def write(lo: int) -> tuple[list[str], float]:
        drafts = [load_draft(i) for i in range(lo, min(lo + BATCH, start + count))]
        t0 = time.perf_counter()
        ids = [r.memory_id for r in rt.ledger.write_many(drafts)]
        return ids, time.perf_counter() - t0

    ledger_s = project_s = 0.0
    with ThreadPoolExecutor(LOAD_WRITERS, thread_name_prefix="bench-ledger") as pool:
        pending = [pool.submit(write, lo) for lo in range(start, start + count, BATCH)]
        for future in pending:
            ids, spent = future.result()
            ledger_s += spent
            t1 = time.perf_counter()
            rt.projector.project(ids)
            project_s += time.perf_counter() - t1
    return {"ledger_s": ledger_s, "project_s": project_s}


def _reproject(rt: LtmRuntime, count: int) -> float:
    """Re-projection (upserts) of ``count`` held cards in one batch, vectors from the
    cache: the cost of a rebuild or a batch of updates, without the model."""
    ids = rt.ledger.ids(limit=count)
    t0 = time.perf_counter()
    for lo in range(0, len(ids), BATCH):
        rt.projector.project(ids[lo : lo + BATCH], force=True)
    return len(ids) / (time.perf_counter() - t0)


def _p(times: list[float]) -> dict[str, float]:
    return {"p50": r3(percentile(times, 50)), "p95": r3(percentile(times, 95))}


def _timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1000


def _strategy(rt: LtmRuntime, n: int, size: int, rng: random.Random) -> dict[str, Any]:
    """One card per call, straight on each index: insert vs upsert of a new id, upsert and
    delete of a held one (the held ones are put back); the vectors are computed first."""
    new = [
        LtmCard.from_draft(synthetic_draft(i, rng, tenant=PROBE_TENANT, users=100), now=time.time())
        for i in range(20_000_000 + 10 * size, 20_000_000 + 10 * size + 2 * n)
    ]
    drafts = [load_draft(rng.randrange(size)) for _ in range(n)]
    cards, _ = rt.ledger.work(list({card_id(d.tenant_id, d.user_id, d.canonical_key): 0
                                    for d in drafts}))  # fmt: skip
    held = list(cards.values())
    emb = rt.embedder.embed_documents
    vec = {c.memory_id: emb([c.embedding_text(2000)])[0:1] for c in new + held}
    out: dict[str, Any] = {}
    for name, index in (("vector", rt.vector), ("lexical", rt.lexical)):

        def write(op: str, card: LtmCard, index: Any = index, name: str = name) -> None:
            extra = [vec[card.memory_id]] if name == "vector" else []
            getattr(index, op)([card], *extra)

        times: dict[str, list[float]] = {k: [] for k in STRATEGY_OPS}
        for i in range(n):
            times["insert_new"].append(_timed(write, "insert", new[2 * i]))
            times["upsert_new"].append(_timed(write, "upsert", new[2 * i + 1]))
        for card in held:
            times["upsert_held"].append(_timed(write, "upsert", card))
            times["delete_held"].append(_timed(index.delete, [card.memory_id]))
            write("insert", card)
        out[name] = {k: _p(v) for k, v in times.items() if v}
    return out


def _writes(rt: LtmRuntime, n: int, users: int, rng: random.Random, base: int) -> list[float]:
    """One card at a time, as a promotion does: ledger write + embed + both projections."""
    times = []
    for i in range(base, base + n):
        draft = synthetic_draft(i, rng, tenant="bench", users=users)
        t0 = time.perf_counter()
        memory_id = rt.ledger.write(draft).memory_id
        rt.projector.project([memory_id])
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _after_flush(
    rt: LtmRuntime, size: int, users: int, rng: random.Random, quick: bool
) -> dict[str, Any]:
    """Seal every segment (``flush``) and time the index calls and searches again: does
    milvus-lite's id lookup or its search get cheaper on sealed segments?"""
    t0 = time.perf_counter()
    with milvus_errors("flush", rt.milvus):
        for collection in (rt.vector.collection, getattr(rt.lexical, "collection", "")):
            if collection:
                rt.milvus.client.flush(collection, timeout=int(rt.settings.milvus_timeout_s))
    return {
        "cards": size,
        "flush_s": r3(time.perf_counter() - t0),
        "strategy": _strategy(rt, 10 if quick else 30, size, rng),
        "search_ms": _searches(rt, 30 if quick else 60, users, rng),
    }


def _updates(
    rt: LtmRuntime, n: int, size: int, rng: random.Random, *, versioned: bool = True
) -> list[float]:
    """One held card rewritten at a time (new version): ledger write + embed + both
    projections, which insert the new version's row (versioned rows, the default) or,
    with ``versioned`` false, upsert the card's row in place (what every update did
    before versioned rows: the same run's before and after)."""
    shipped = rt.projector.versioned
    if not versioned:
        rt.projector.versioned = frozenset()
    times = []
    try:
        for k in range(n):
            draft = load_draft(rng.randrange(size))
            draft = draft.model_copy(update={"summary": f"{draft.summary} (revised {k})"})
            t0 = time.perf_counter()
            memory_id = rt.ledger.write(draft).memory_id
            rt.projector.project([memory_id])
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        rt.projector.versioned = shipped
    return times


def _purge(rt: LtmRuntime) -> dict[str, float]:
    """What the reconciler's purge of the rows the updates replaced costs: one run, every
    recorded row (one delete call per index); ``rows``: how many, ``ms``: its wall time."""
    waiting = rt.ledger.count_stale()
    t0 = time.perf_counter()
    rows = rt.projector.purge_stale(max(1, waiting))
    return {"rows": rows, "ms": r3((time.perf_counter() - t0) * 1000)}


def _searches(
    rt: LtmRuntime, n: int, users: int, rng: random.Random
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    queries = [(f"{synthetic_query(rng)} {i}", f"u{rng.randrange(users)}") for i in range(n)]
    for mode in MODES:
        times = []
        for text, user in queries:
            flt = CardFilter(tenant_id="bench", user_id=user)
            t0 = time.perf_counter()
            rt.search.search(f"{text} {mode.value}", flt, mode=mode)  # distinct text: no cache hit
            times.append((time.perf_counter() - t0) * 1000)
        out[mode.value] = {"p50": r3(percentile(times, 50)), "p95": r3(percentile(times, 95))}
    return out


def run(quick: bool) -> dict[str, Any]:
    """Quality on MADial-Bench, then throughput and latency at each scale."""
    override = os.environ.get("MEMSTRATA_BENCH_LTM_SCALES")  # e.g. "10000,100000"
    scales = [int(x) for x in override.split(",")] if override else None
    scales = scales or ([2000] if quick else [10_000, 100_000])
    root = Path(os.environ.get("MEMSTRATA_MADIAL_DIR", DEFAULT_MADIAL))
    rng = random.Random(42)
    figures: dict[str, Any] = {
        "quick": quick,
        "scales_env": override or "",
        "loadavg_at_start": [round(x, 2) for x in load_average()],
        "embedding": "use-multilingual",
    }
    t0 = time.perf_counter()
    inner = model()
    precomputed = PrecomputedEmbedder(inner, precompute(max(scales), inner))
    figures["precompute_s"] = r3(time.perf_counter() - t0)
    ltm_settings = load_settings().ltm
    embedder = CachedEmbedder(
        precomputed, capacity=ltm_settings.embedding_cache_size,
        max_batch=ltm_settings.embedding_batch,
    )  # fmt: skip
    with ltm_stack(embedder=embedder) as runtime:
        rt = runtime.ltm
        figures["embedding"] = rt.embedder.name
        figures["quality"] = _quality(rt, root)
        users = 100
        loaded = 0
        per_scale: list[dict[str, Any]] = []
        for size in scales:
            precomputed.live = 0
            t0 = time.perf_counter()
            phases = _load(rt, loaded, size - loaded)
            wall = time.perf_counter() - t0
            new = size - loaded
            loaded = size
            live = precomputed.live
            writes = _writes(rt, 50 if quick else 200, users, rng, base=10_000_000 + size)
            updates = _updates(rt, 20 if quick else 50, size, rng)
            purge = _purge(rt)
            upserted = _updates(rt, 20 if quick else 50, size, rng, versioned=False)
            entry: dict[str, Any] = {
                "cards": size,
                "load_s": r3(wall),
                "load_embedded_live": live,
                "index_cards_per_s": r3(new / wall),
                "project_cards_per_s": r3(new / phases["project_s"]),
                "ledger_cards_per_s": r3(new / phases["ledger_s"]),
                "write_p50_ms": r3(percentile(writes, 50)),
                "write_p95_ms": r3(percentile(writes, 95)),
                "update_p50_ms": r3(percentile(updates, 50)),
                "update_p95_ms": r3(percentile(updates, 95)),
                "update_upsert_p50_ms": r3(percentile(upserted, 50)),
                "update_upsert_p95_ms": r3(percentile(upserted, 95)),
                "purge": purge,
                "search_ms": _searches(rt, 60 if quick else 200, users, rng),
                "strategy": _strategy(rt, 10 if quick else 30, size, rng),
                "reproject_cards_per_s": r3(_reproject(rt, BATCH)),
            }
            per_scale.append(entry)
        last = per_scale[-1]
        figures["after_flush"] = _after_flush(rt, last["cards"], users, rng, quick)
        figures.update(
            {
                "cards": last["cards"],
                "index_cards_per_s": last["index_cards_per_s"],
                "write_p95_ms": last["write_p95_ms"],
                "update_p95_ms": last["update_p95_ms"],
                "search_p95_ms": {m: v["p95"] for m, v in last["search_ms"].items()},
                "scales": per_scale,
            }
        )
    figures["loadavg_at_end"] = [round(x, 2) for x in load_average()]
    return figures


def _scale_rows(scales: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| cards | bulk load cards/s (ledger + 2 projections, cached vectors) | projection/s "
        "| re-projection/s (upserts, batch of 500) | new card write p50 / p95 ms "
        "| card update p50 / p95 ms | card update upserted (versioned rows off) p50 / p95 ms "
        "| lexical p50 / p95 ms | vector p50 / p95 ms | hybrid p50 / p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in scales:
        cells = [
            s["cards"],
            s["index_cards_per_s"],
            s["project_cards_per_s"],
            s["reproject_cards_per_s"],
            f"{s['write_p50_ms']} / {s['write_p95_ms']}",
            f"{s['update_p50_ms']} / {s['update_p95_ms']}",
            f"{s.get('update_upsert_p50_ms', '-')} / {s.get('update_upsert_p95_ms', '-')}",
            *(f"{s['search_ms'][m]['p50']} / {s['search_ms'][m]['p95']}" for m in MODE_NAMES),
        ]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return rows


def _strategy_rows(scales: list[dict[str, Any]], flushed: dict[str, Any] | None) -> list[str]:
    rows = [
        "| cards | index | insert, new id | upsert, new id | upsert, held id | delete, held id |",
        "|---|---|---|---|---|---|",
    ]
    for s in scales:
        for index in ("vector", "lexical"):
            ops = s["strategy"][index]
            cells = [f"{ops[o]['p50']} / {ops[o]['p95']}" if o in ops else "-"
                     for o in STRATEGY_OPS]  # fmt: skip
            rows.append(f"| {s['cards']} | {index} | " + " | ".join(cells) + " |")
    if flushed:
        for index in ("vector", "lexical"):
            ops = flushed["strategy"][index]
            cells = [f"{ops[o]['p50']} / {ops[o]['p95']}" if o in ops else "-"
                     for o in STRATEGY_OPS]  # fmt: skip
            rows.append(f"| {flushed['cards']}, flushed | {index} | " + " | ".join(cells) + " |")
    return rows


def _purge_line(scales: list[dict[str, Any]]) -> list[str]:
    runs = [s for s in scales if "purge" in s]
    if not runs:
        return []
    parts = [f"{s['purge']['rows']} rows in {s['purge']['ms']} ms at {s['cards']} cards"
             for s in runs]  # fmt: skip
    return [
        "The reconciler's purge of the rows the updates replaced (one run, one delete call "
        f"per index; each update leaves its old version's key and the bare one): "
        f"{'; '.join(parts)}.",
        "",
    ]


def _flush_line(flushed: dict[str, Any] | None) -> list[str]:
    if not flushed:
        return []
    searches = ", ".join(f"{m} {v['p50']} / {v['p95']}" for m, v in flushed["search_ms"].items())
    return [
        "",
        f"After `flush` ({flushed['flush_s']} s) at {flushed['cards']} cards, searches p50 / "
        f"p95 ms: {searches}.",
    ]


def _quality_rows(quality: dict[str, Any]) -> list[str]:
    rows = [
        "| lang | mode | recall@1 | recall@5 | ndcg@5 | mrr | recall@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = ("recall@1", "recall@5", "ndcg@5", "mrr", "recall@10")
    for lang in ("en", "zh"):
        for mode in MODE_NAMES:
            m = quality[lang][mode]
            rows.append(f"| {lang} | {mode} | " + " | ".join(str(m[k]) for k in keys) + " |")
    return rows


def markdown(figures: dict[str, Any]) -> str:
    f = figures

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    write_ok = verdict(f["write_p95_ms"] <= TARGET_WRITE_P95_MS)
    update_ok = verdict(f["update_p95_ms"] <= TARGET_WRITE_P95_MS)
    hybrid_ok = verdict(f["search_p95_ms"]["hybrid"] <= TARGET_HYBRID_P95_MS)
    fusion = []
    for lang in ("en", "zh"):
        q = f["quality"][lang]
        best = max(q["lexical"]["recall@5"], q["vector"]["recall@5"])
        fusion.append(f"{lang} {verdict(q['hybrid']['recall@5'] >= best)}")
    quick = " --quick" if f.get("quick") else ""
    env = f"MEMSTRATA_BENCH_LTM_SCALES={f['scales_env']} " if f.get("scales_env") else ""
    return (
        "\n".join(
            [
                f"### Long-term memory (`{env}memstrata bench ltm{quick}`)",
                "",
                f"Embedding model `{f['embedding']}`; milvus-lite 2.5.1 server (FLAT, BM25 "
                f"function), PostgreSQL ledger; load average {f['loadavg_at_start']} at start, "
                f"{f.get('loadavg_at_end')} at end.  Searches filtered by tenant and user, query "
                "embedding included, distinct query texts (no cache hits).  Bulk load from "
                "pre-computed vectors (`var/bench-cache`, "
                f"{sum(s.get('load_embedded_live', 0) for s in f['scales'])} embedded live); "
                "a write or an update embeds its card live.  New cards are inserted, and so "
                "are updates, under a versioned row key; the rows they replace are purged "
                "by the reconciler (docs/LTM.md).",
                "",
                *_scale_rows(f["scales"]),
                "",
                f"Targets: one new card's write p95 ≤ {TARGET_WRITE_P95_MS} ms: {write_ok} "
                f"(an update: {update_ok}); hybrid p95 ≤ {TARGET_HYBRID_P95_MS} ms at "
                f"{f['cards']} cards: {hybrid_ok}; hybrid ≥ best single mode on recall@5: "
                f"{', '.join(fusion)}.",
                "",
                *_purge_line(f["scales"]),
                "Index calls, one card each, p50 / p95 ms (`strategy`): what a write costs "
                "as the collection grows.",
                "",
                *_strategy_rows(f["scales"], f.get("after_flush")),
                *_flush_line(f.get("after_flush")),
                "",
                "MADial-Bench (candidates: the user's memories; query: the dialogue before the "
                "test turn; gold: relevant-id):",
                "",
                *_quality_rows(f["quality"]),
            ]
        )
        + "\n"
    )


if __name__ == "__main__":  # pragma: no cover - manual run
    import json
    import sys

    result = run("--quick" in sys.argv)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    print(markdown(result))
