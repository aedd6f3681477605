"""Compression benchmark: ratio, constraint/decision retention and speed on real agent
sessions and on scripted debugging sessions; LoCoMo evidence retention at fixed budgets.

Why these figures (issue: session context compression): seed 2 sets the bar at about
15:1; a compressor that reaches it by dropping a user's constraint or a decision is
worse than none, so retention of every active constraint and decision is measured on
the same views; and the compressor runs before every prompt of a long session, so a
300-turn session must compress in well under a model call (target p95 ≤ 200 ms).

Agent sessions are replayed turn by turn through the real write path (L0 + rule
extraction + Redis STM), then compressed at a budget of raw/15 (or the smallest budget
that holds the near-field, when that is larger).  System prompts are left out of both
sides of the ratio (FORMAT.md: fixed boilerplate the agent re-adds).  The dataset paths
are arguments; files are read in place, never copied.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from memstrata.core.compress.cache import SessionActivity
from memstrata.core.compress.engine import compress
from memstrata.core.compress.errors import BudgetTooSmall
from memstrata.core.compress.model import CompressedView
from memstrata.core.compress.service import compress_session, session_items
from memstrata.core.compress.text import clear_caches
from memstrata.core.compress.tokens import default_counter
from memstrata.core.models.memory import MemoryItem, MemoryType
from memstrata.core.models.transcript import MessageIn, Role, TranscriptRecord
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.stats import median, percentile, r3

# ``../shared/bench`` beside the repository (read in place); MEMSTRATA_BENCH_DIR overrides.
SHARED = Path(
    os.environ.get("MEMSTRATA_BENCH_DIR", Path(__file__).resolve().parents[3] / "shared" / "bench")
)
AGENT_DIR = SHARED / "agent-sessions"
LOCOMO = SHARED / "locomo" / "locomo_dev.json"
MAX_MESSAGE_CHARS = 1_000_000  # benchmark limits: no replayed message is cut
MAX_TURN_MESSAGES = 64
LONG_SESSION_TOKENS = 8000  # below this a session never reaches a compression trigger
TARGET_RATIO = 15.0
TARGET_P95_MS = 200.0
LOCOMO_RATIOS = (5, 10, 15)

Turn = list[MessageIn]


# --------------------------------------------------------------------------- scripted sessions
_EN: dict[str, Any] = {
    "task": "The checkout p99 latency jumped from 180 ms to 2.4 s after this morning's deploy. "
    "Find the root cause and fix it.",
    "constraints": [
        "Do not restart payment-service during business hours.",
        "We must not change the orders table schema.",
        "Only deploy through the canary pipeline, never straight to prod.",
    ],
    "decisions": [
        "We'll roll back order-service to v1.4.2 before touching the pool settings.",
        "We decided to raise the payments-db pool from 50 to 80 connections.",
        "Let's pin the redis client to 4.6.0 until the timeout bug is fixed.",
    ],
    "nexts": [
        "Next step: check the slow query log of payments-db.",
        "Next, verify the thread pool of inventory-service.",
    ],
    "asks": ["Also look at inventory-service, it alerted too.", "What do the GC logs say?"],
    "services": ["order-service", "payment-service", "inventory-service", "payments-db"],
    "look": "Let me look at the {svc} logs around the spike.",
    "quote": "The {svc} logs show active={a} max={m} and wait_ms={w}: requests queue for a "
    "connection.",
    "confirm": "Confirmed: the root cause is pool exhaustion in {svc} (active={a}, max={m}).",
    "move": "Nothing decisive there; moving on to the next component.",
}
_ZH: dict[str, Any] = {
    "task": "今天上午发布后，结算接口 p99 延迟从 180 ms 涨到 2.4 s，帮我定位根因并修复。",
    "constraints": [
        "不要在工作时间重启 payment-service。",
        "必须保持 orders 表结构不变。",
        "只能通过灰度流水线发布，禁止直接发生产。",
    ],
    "decisions": [
        "决定先把 order-service 回滚到 v1.4.2，再调整连接池。",
        "方案是把 payments-db 连接池从 50 调到 80。",
        "改用 redis 客户端 4.6.0，等超时问题修复后再升级。",
    ],
    "nexts": ["下一步：检查 payments-db 的慢查询日志。", "接下来看 inventory-service 的线程池。"],
    "asks": ["inventory-service 也告警了，一起看看。", "GC 日志里有什么？"],
    "services": ["order-service", "payment-service", "inventory-service", "payments-db"],
    "look": "我看一下 {svc} 在延迟飙升时段的日志。",
    "quote": "{svc} 日志显示 active={a} max={m}，wait_ms={w}：请求在排队等连接。",
    "confirm": "已确认：根因是 {svc} 的连接池耗尽（active={a}，max={m}）。",
    "move": "这里没有关键线索，继续看下一个组件。",
}


def _log_output(rng: random.Random, svc: str, a: int, m: int, w: int, lines: int) -> str:
    out = []
    for k in range(lines):
        rid = f"{rng.getrandbits(48):012x}"
        ms = rng.randint(3, 90)
        out.append(
            f"2026-11-30T08:{k % 60:02d}:{rng.randint(0, 59):02d}Z INFO {svc} "
            f"request_id={rid} route=/api/checkout status=200 took={ms}ms"
        )
        if k == lines // 2:
            out.append(
                f"2026-11-30T08:{k % 60:02d}:07Z ERROR {svc} pool exhausted: "
                f"active={a} max={m} wait_ms={w}"
            )
    return "\n".join(out)


def scripted_session(
    lang: str = "en", cycles: int = 60, seed: int = 7, lines: tuple[int, int] = (30, 70)
) -> list[Turn]:
    """A long debugging session with big log outputs, constraints, decisions and plans.

    One cycle is an agent step (thought + tool call, then the tool's output); every
    tenth cycle the user speaks, stating a constraint or asking for more.  The reply to
    a log either quotes its numbers (a strong dependency, often confirmed as a
    conclusion) or moves on (weak).  Deterministic for a given seed.
    """
    t = _EN if lang == "en" else _ZH
    rng = random.Random(seed)
    turns: list[Turn] = [[MessageIn(role=Role.USER, content=t["task"] + " " + t["constraints"][0])]]
    pending = ""
    for c in range(cycles):
        if c and c % 10 == 0:
            k = c // 10
            say = t["constraints"][k % 3] if k % 2 else t["asks"][k % 2]
            turns.append([MessageIn(role=Role.USER, content=say)])
        svc = t["services"][c % 4]
        a, m, w = rng.randint(40, 50), 50, rng.randint(900, 3000)
        thought = (
            pending + " " + t["look"].format(svc=svc) if pending else t["look"].format(svc=svc)
        )
        if c % 15 == 7:
            thought += " " + t["decisions"][(c // 15) % 3]
        if c % 20 == 12:
            thought += " " + t["nexts"][(c // 20) % 2]
        cid = f"call-{c:04d}"
        args = json.dumps({"cmd": f"kubectl logs deploy/{svc} --since=1h | tail -n 400", "n": c})
        output = _log_output(rng, svc, a, m, w, rng.randint(*lines))
        turns.append(
            [
                MessageIn(
                    role=Role.ASSISTANT,
                    content=thought.strip(),
                    tool_calls=[{"id": cid, "name": "shell", "arguments": args}],
                ),
                MessageIn(role=Role.TOOL, content=output, tool_call_id=cid),
            ]
        )
        if c % 3 == 0:
            pending = t["confirm"].format(svc=svc, a=a, m=m)
        elif c % 3 == 1:
            pending = t["quote"].format(svc=svc, a=a, m=m, w=w)
        else:
            pending = t["move"]
    turns.append([MessageIn(role=Role.ASSISTANT, content=pending)])
    return turns


def ingest(
    res: Runtime,
    user_id: str,
    session_id: str,
    turns: Sequence[Turn],
    *,
    t0: float | None = None,
    activity: SessionActivity | None = None,
    tenant_id: str | None = None,
) -> list[TranscriptRecord]:
    """Append turns to L0 and run them through the real extraction + STM write path.

    Turns are one second apart, ending now unless ``t0`` is given (items must not be
    born expired).  With ``activity``, each turn is also counted as the ingest hook
    (``tasks.compress.track_turns``) counts it.
    """
    t0 = time.time() - len(turns) if t0 is None else t0
    batch: list[tuple[Any, Sequence[TranscriptRecord]]] = []
    records: list[TranscriptRecord] = []
    for n, turn in enumerate(turns):
        appended = res.transcript.append_turn(
            user_id=user_id, session_id=session_id, messages=turn, at=t0 + n, tenant_id=tenant_id
        )
        records.extend(appended.records)
        batch.append((appended.pointer, appended.records))
        if activity is not None:
            activity.note_turn(appended.records, default_counter())
        if len(batch) >= 100:
            res.pipeline.process(batch)
            batch = []
    if batch:
        res.pipeline.process(batch)
    return records


# --------------------------------------------------------------------------- agent sessions
def agent_sessions(
    root: Path = AGENT_DIR, *, per_source: int | None = None
) -> Iterator[tuple[str, str, list[Turn]]]:
    """(source, session id, turns) for every session, read by ``ops.replay``'s loaders
    (the FORMAT.md recipes, tool-call ids made unique, tau-bench trial 0 only)."""
    from memstrata.ops.replay import SOURCES, group_turns, load_source, to_message

    for source in SOURCES:
        for session in load_source(source, root, limit=per_source):
            turns = [
                [to_message(raw, MAX_MESSAGE_CHARS)[0] for raw in turn]
                for turn in group_turns(session.messages, max_messages=MAX_TURN_MESSAGES)
            ]
            yield source, session.session_id, turns


# --------------------------------------------------------------------------- measures
def retained(item: MemoryItem, view: CompressedView) -> bool:
    """An item is in the view if its text is, or every message it came from is verbatim."""
    if item.summary in view.text():
        return True
    shown = {m for x in view.messages if x.part.value != "summary" for m in x.message_ids}
    return bool(item.source.message_ids) and set(item.source.message_ids) <= shown


def _must_keep(items: Sequence[MemoryItem]) -> list[MemoryItem]:
    return [i for i in items if i.memory_type in (MemoryType.DECISION, MemoryType.CONSTRAINT)]


def _safe(session_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", session_id)[:120]


def _at_ratio(
    records: Sequence[TranscriptRecord], items: Sequence[MemoryItem], ratio: float
) -> tuple[CompressedView, bool]:
    """The view at raw/ratio, or at the smallest budget the near-field allows (flag False)."""
    raw = compress(records, items, budget_tokens=None).raw_tokens
    try:
        return compress(records, items, budget_tokens=max(1, int(raw / ratio))), True
    except BudgetTooSmall as exc:
        return compress(records, items, budget_tokens=exc.needed), False


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": r3(median(values)),
        "p10": r3(percentile(values, 10)),
        "min": r3(min(values)) if values else float("nan"),
    }


def _agent_figures(res: Runtime, quick: bool, root: Path) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for n, (source, sid, turns) in enumerate(agent_sessions(root, per_source=3 if quick else None)):
        user, session = f"a{n}", _safe(sid)
        records = ingest(res, user, session, turns)
        items = session_items(res.stm, user, session)
        view, fit = _at_ratio(records, items, TARGET_RATIO)
        default_counter().clear()
        clear_caches()
        t = time.perf_counter()
        compress_session(transcript=res.transcript, stm=res.stm, user_id=user,
                         session_id=session, budget_tokens=view.budget_tokens)  # fmt: skip
        ms = (time.perf_counter() - t) * 1000
        must_keep = _must_keep(items)
        trunc = _truncation_kept(records, view.budget_tokens or view.raw_tokens)
        rows.append({
            "trunc_kept": sum(bool(i.source.message_ids) and set(i.source.message_ids) <= trunc
                              for i in must_keep),
            "source": source, "session": sid, "raw": view.raw_tokens, "view": view.view_tokens,
            "ratio": view.ratio, "fit": fit, "must": len(must_keep),
            "kept": sum(retained(i, view) for i in must_keep), "ms": ms,
            "messages": len(records),
        })  # fmt: skip
    ratios = [r["ratio"] for r in rows]
    long = [r["ratio"] for r in rows if r["raw"] >= LONG_SESSION_TOKENS]
    by_source = {
        src: _stats([r["ratio"] for r in rows if r["source"] == src])
        for src in dict.fromkeys(r["source"] for r in rows)
    }
    must = sum(r["must"] for r in rows)
    kept = sum(r["kept"] for r in rows)
    return {
        "sessions": len(rows),
        "raw_tokens": sum(r["raw"] for r in rows),
        "all": _stats(ratios),
        "long": _stats(long),
        "by_source": by_source,
        "at_target_budget": sum(r["fit"] for r in rows),
        "must_total": must,
        "must_kept": kept,
        "retained": r3(kept / must) if must else 1.0,
        "truncation_retained": r3(sum(r["trunc_kept"] for r in rows) / must) if must else 1.0,
        "cold_ms_p95": r3(percentile([r["ms"] for r in rows], 95)),
        "cold_ms_max": r3(max((r["ms"] for r in rows), default=float("nan"))),
        "max_messages": max((r["messages"] for r in rows), default=0),
    }


def _scripted_figures(res: Runtime, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lang in ("en", "zh"):
        user = f"s{lang}"
        records = ingest(res, user, "debug", scripted_session(lang, 60 if quick else 150))
        items = session_items(res.stm, user, "debug")
        view, fit = _at_ratio(records, items, TARGET_RATIO)
        must = _must_keep(items)
        out[lang] = {
            "turns": len({r.turn_id for r in records}), "raw": view.raw_tokens,
            "ratio": r3(view.ratio), "at_target_budget": fit,
            "must": len(must), "kept": sum(retained(i, view) for i in must),
        }  # fmt: skip
    return out


def _timing(res: Runtime, quick: bool) -> dict[str, Any]:
    """End-to-end ``compress_session`` (L0 read, STM read, compress) of a 300-turn session.

    The session: 270 agent steps with 3-25 line logs (about 450 tokens each, above the
    median real tool output), 27 user turns, the production STM session cap, budget
    raw/15.  *cold*: a fresh worker (every text cache cleared) using the token counts
    taken at ingest; *cold, recount*: a fresh worker that also recounts every message;
    *warm*: the same worker again (caches kept).
    """
    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)
    records = ingest(
        res, "timing", "t300", scripted_session("en", 270, lines=(3, 25)), activity=activity
    )
    raw = compress(records, [], budget_tokens=None).raw_tokens
    kw: dict[str, Any] = dict(
        transcript=res.transcript,
        stm=res.stm,
        user_id="timing",
        session_id="t300",
        budget_tokens=raw // 15,
    )
    runs: dict[str, list[float]] = {"cold": [], "recount": [], "warm": []}
    cpu: dict[str, list[float]] = {mode: [] for mode in runs}
    for _ in range(8 if quick else 30):
        for mode in ("cold", "warm", "recount"):
            if mode != "warm":
                default_counter().clear()
                clear_caches()
            t, c = time.perf_counter(), time.process_time()
            compress_session(**kw, activity=None if mode == "recount" else activity)
            runs[mode].append((time.perf_counter() - t) * 1000)
            cpu[mode].append((time.process_time() - c) * 1000)
    out: dict[str, Any] = {
        "turns": len({r.turn_id for r in records}), "messages": len(records), "raw_tokens": raw,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
    for mode, values in runs.items():
        out[f"{mode}_ms_p50"] = r3(median(values))
        out[f"{mode}_ms_p95"] = r3(percentile(values, 95))
        out[f"{mode}_cpu_ms_p95"] = r3(percentile(cpu[mode], 95))
    return out


# --------------------------------------------------------------------------- LoCoMo
_GOLD = re.compile(r"D:?(\d+):0*(\d+)")


def _locomo_turns(conv: dict[str, Any]) -> tuple[list[Turn], set[str]]:
    c = conv["conversation"]
    speaker_a = c.get("speaker_a")
    keys = sorted(
        (k for k in c if re.fullmatch(r"session_\d+", k) and isinstance(c[k], list)),
        key=lambda k: int(k.split("_")[1]),
    )
    turns: list[Turn] = []
    ids: set[str] = set()
    for k in keys:
        for t in c[k]:
            text = t["text"] + (f" [shares {t['blip_caption']}]" if t.get("blip_caption") else "")
            role = Role.USER if t["speaker"] == speaker_a else Role.ASSISTANT
            mid = t["dia_id"].replace(":", "_")
            ids.add(t["dia_id"])
            turns.append([MessageIn(role=role, content=f"{t['speaker']}: {text}", message_id=mid)])
    return turns, ids


def _gold(qa: dict[str, Any], known: set[str]) -> list[str]:
    found = []
    for part in re.split(r"[;,\s]+", " ".join(qa.get("evidence") or [])):
        m = _GOLD.search(part)
        if m and f"D{m.group(1)}:{m.group(2)}" in known:
            found.append(f"D{m.group(1)}:{m.group(2)}")
    return found


def _truncation_kept(records: Sequence[TranscriptRecord], budget: int) -> set[str]:
    """Baseline: the newest messages that fit the budget, as plain truncation would keep."""
    counter = default_counter()
    kept: set[str] = set()
    used = 0
    for r in reversed(records):
        used += counter.count(r.content) + 4
        if used > budget:
            break
        kept.add(r.message_id)
    return kept


def _locomo_figures(res: Runtime, quick: bool, path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    hits = {r: 0 for r in LOCOMO_RATIOS}
    base = {r: 0 for r in LOCOMO_RATIOS}
    total = 0
    for n, conv in enumerate(data[:2] if quick else data):
        turns, known = _locomo_turns(conv)
        user, session = f"l{n}", _safe(str(conv.get("sample_id", n)))
        records = ingest(res, user, session, turns)
        items = session_items(res.stm, user, session)
        golds = [
            g.replace(":", "_")
            for qa in conv["qa"]
            if qa.get("category") in (1, 2, 3, 4)
            for g in _gold(qa, known)
        ]
        total += len(golds)
        for ratio in LOCOMO_RATIOS:
            view, _ = _at_ratio(records, items, ratio)
            covered = view.covered_message_ids()
            hits[ratio] += sum(g in covered for g in golds)
            trunc = _truncation_kept(records, max(1, view.raw_tokens // ratio))
            base[ratio] += sum(g in trunc for g in golds)
    return {
        "conversations": 2 if quick else len(data),
        "gold_turns": total,
        "retention": {f"1/{r}": r3(hits[r] / total) if total else 0.0 for r in LOCOMO_RATIOS},
        "truncation_baseline": {
            f"1/{r}": r3(base[r] / total) if total else 0.0 for r in LOCOMO_RATIOS
        },
    }


# --------------------------------------------------------------------------- entry points
@contextlib.contextmanager
def _resources(session_cap: int = 100_000) -> Iterator[Runtime]:
    """Private namespace and transcript folder; the STM session cap is lifted by default so
    that every decision and constraint ever extracted counts against retention."""
    folder = Path(tempfile.mkdtemp(prefix="memstrata-bench-compress-"))
    settings = load_settings(
        redis_url=redis_url(), key_namespace=new_namespace("bcmp"), transcript_dir=folder,
        transcript_fsync=False, stm_session_cap=session_cap, max_message_chars=MAX_MESSAGE_CHARS,
        max_turn_messages=MAX_TURN_MESSAGES,
    )  # fmt: skip
    res = Runtime(settings)
    try:
        yield res
    finally:
        purge(res.redis, settings.key_namespace)
        res.close()
        shutil.rmtree(folder, ignore_errors=True)


def run(
    quick: bool = False, *, agent_dir: Path = AGENT_DIR, locomo: Path = LOCOMO
) -> dict[str, Any]:
    """Every figure of the compression benchmark (``--quick``: 3 sessions per source)."""
    for path in (agent_dir, locomo):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: set MEMSTRATA_BENCH_DIR to shared/bench")
    with _resources() as res:
        agent = _agent_figures(res, quick, agent_dir)
        scripted = _scripted_figures(res, quick)
        loco = _locomo_figures(res, quick, locomo)
    with _resources(session_cap=load_settings().stm_session_cap) as res:
        timing = _timing(res, quick)
    must = agent["must_total"] + sum(v["must"] for v in scripted.values())
    kept = agent["must_kept"] + sum(v["kept"] for v in scripted.values())
    return {
        "ratio_median": agent["all"]["median"],
        "ratio_p10": agent["all"]["p10"],
        "ratio_median_long_sessions": agent["long"]["median"],
        "constraints_decisions_retained": r3(kept / must) if must else 1.0,
        "compress_ms_p95": timing["cold_ms_p95"],
        "locomo_retention": loco["retention"],
        "agent_sessions": agent,
        "scripted_sessions": scripted,
        "timing_300_turns": timing,
        "locomo": loco,
        "tokenizer": default_counter().name,
        "quick": quick,
        "machine": machine(),
    }


def markdown(figures: dict[str, Any]) -> str:
    """The section of ``docs/BENCHMARKS.md`` for these figures."""
    a, t, loco = figures["agent_sessions"], figures["timing_300_turns"], figures["locomo"]
    lines = [
        "## Session compression (`memstrata bench compress`)",
        "",
        f"Tokenizer: {figures['tokenizer']}. Budget raw/15 per session (or the smallest "
        "budget that holds the near-field). System prompts left out of both sides. "
        f"Load average during the timing: {t['loadavg']} on {figures['machine'].get('cpus')} "
        "CPUs (a shared machine: wall-clock figures carry the contention).",
        "",
        "| figure | value | target |",
        "|---|---:|---:|",
        f"| ratio median, all {a['sessions']} agent sessions | {figures['ratio_median']} | ≥ 15 |",
        f"| ratio p10, all agent sessions | {figures['ratio_p10']} | |",
        f"| ratio median, sessions ≥ {LONG_SESSION_TOKENS} tokens ({a['long']['n']}) | "
        f"{figures['ratio_median_long_sessions']} | ≥ 15 |",
        f"| active constraints + decisions retained | {figures['constraints_decisions_retained']}"
        f" ({a['must_kept']}/{a['must_total']} agent) | 1.0 |",
        f"| same, recency truncation at the same budgets (baseline) | "
        f"{a['truncation_retained']} | |",
        f"| compress {t['turns']}-turn session p95 (ms): cold / warm | {t['cold_ms_p95']} / "
        f"{t['warm_ms_p95']} | ≤ 200 |",
        f"| same, cold and recounting every message (ms) | {t['recount_ms_p95']} | |",
        f"| same, CPU time of the compressing process, cold / warm (ms) | "
        f"{t['cold_cpu_ms_p95']} / {t['warm_cpu_ms_p95']} | |",
        f"| compress one agent session, cold, p95 / max (ms; up to {a['max_messages']} "
        f"messages) | {a['cold_ms_p95']} / {a['cold_ms_max']} | |",
        "",
        "| source | sessions | median ratio | p10 | min |",
        "|---|---:|---:|---:|---:|",
    ]
    for src, s in a["by_source"].items():
        lines.append(f"| {src} | {s['n']} | {s['median']} | {s['p10']} | {s['min']} |")
    lines += ["", "| scripted session | turns | raw tokens | ratio | decisions+constraints kept |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    for lang, s in figures["scripted_sessions"].items():
        lines.append(
            f"| {lang} | {s['turns']} | {s['raw']} | {s['ratio']} | {s['kept']}/{s['must']} |"
        )
    lines += [
        "",
        f"LoCoMo ({loco['conversations']} conversations, {loco['gold_turns']} gold evidence "
        "turns of categories 1-4): share of gold turns whose content survives in the view "
        "(verbatim, in a stub, or through a summary line sourced from them).",
        "",
        "| budget | retention | recency truncation (baseline) |",
        "|---|---:|---:|",
    ]
    for key, value in loco["retention"].items():
        lines.append(f"| {key} of raw | {value} | {loco['truncation_baseline'][key]} |")
    return "\n".join(lines) + "\n"
