"""The figures of the ingest benchmark: the headline summary and the markdown section."""

from __future__ import annotations

import math
import os
from typing import Any

from memstrata.ops.bench.common.stats import r3
from memstrata.ops.bench.ingest.phases import (
    TARGET_CPU_MS,
    TARGET_DRAIN_W2,
    TARGET_E2E_P95_MS,
    TARGET_RATE,
    TARGET_RECORD_TURN_P50_MS,
    TARGET_SUSTAINED,
)
from memstrata.ops.bench.ingest.profile import markdown as profile_lines

SCALING_FIELDS = ("workers", "pool", "concurrency", "batch", "drain_turns_per_s",
                  "cpu_ms_per_turn_workers", "cpu_ms_per_turn_redis")  # fmt: skip


def summary(out: dict[str, Any]) -> dict[str, Any]:
    keys = ("e2e_p50_ms", "e2e_p95_ms", "record_turn_p50_ms", "record_turn_p99_ms")
    best_steady = out.get("steady_w2") or dict.fromkeys(keys, math.nan) | {
        "offered_per_s": TARGET_RATE
    }
    rows = out["ladder_w2"] or [out.get("steady_w2") or {"sustained": False}]
    sustained = [r["offered_per_s"] for r in rows if r["sustained"]]
    drains = {k: v["drain_turns_per_s"] for k, v in out.items() if k.startswith("backlog_")}
    # CPU cost per turn is what contention does not change much: it gives the ceiling of a
    # 2-core machine that runs nothing else (producer + workers + Redis, perfectly parallel)
    drain = out.get("backlog_w1_solo1") or {}
    per_turn = [
        drain.get("cpu_ms_per_turn_workers", math.nan),
        drain.get("cpu_ms_per_turn_redis", math.nan),
        (out.get("steady_w1") or out.get("steady_w2") or {}).get(
            "cpu_ms_per_turn_producer", math.nan
        ),
    ]
    total_ms = sum(per_turn)
    ceiling = (os.cpu_count() or 1) * 1000.0 / total_ms if total_ms > 0 else math.nan
    return {
        "cpu_ms_per_turn": {
            "workers": per_turn[0],
            "redis": per_turn[1],
            "producer": per_turn[2],
            "total": r3(total_ms),
        },
        "cpu_ceiling_turns_per_s": round(ceiling) if not math.isnan(ceiling) else ceiling,
        "e2e_p50_ms": best_steady["e2e_p50_ms"],
        "e2e_p95_ms": best_steady["e2e_p95_ms"],
        "offered_turns_per_s": best_steady["offered_per_s"],
        "max_sustained_turns_per_s": max(sustained) if sustained else 0.0,
        "record_turn_p50_ms": best_steady["record_turn_p50_ms"],
        "record_turn_p99_ms": best_steady["record_turn_p99_ms"],
        "record_turn_alone_p50_ms": (out.get("record_turn_alone") or {}).get("p50_ms"),
        "workers_1_turns_per_s": drains.get("backlog_w1_solo1"),
        "workers_2_turns_per_s": drains.get("backlog_w2_solo1"),
        # issue 17's headline figures: the 2-worker backlog drain, workers + Redis CPU
        "drain_turns_per_s": drains.get("backlog_w2_solo1"),
        "cpu_ms_per_turn_workers_redis": r3(per_turn[0] + per_turn[1]),
        "drain_scaling": [
            {k: v.get(k) for k in SCALING_FIELDS}
            for name, v in out.items()
            if name.startswith("backlog_")
        ],
        "targets": {
            "e2e_p95_ms": TARGET_E2E_P95_MS,
            "offered_turns_per_s": TARGET_RATE,
            "max_sustained_turns_per_s": TARGET_SUSTAINED,
            "drain_turns_per_s": TARGET_DRAIN_W2,
            "cpu_ms_per_turn_workers_redis": TARGET_CPU_MS,
            "record_turn_p50_ms": TARGET_RECORD_TURN_P50_MS,
        },
        **out,
    }


def _alone_rows(a: dict[str, Any] | None) -> list[str]:
    """The call with no workers beside it, and what waking the idle machine costs."""
    if not a:
        return []
    wake = a["wake"]
    before, after = wake["back_to_back"], wake["after_idle"]
    gap = f"{a['idle_gap_s'] * 1000:g} ms"
    return [
        f"| record_turn() alone, no workers: p50 / p95 back to back (CPU p50) | "
        f"{a['p50_ms']} / {a['p95_ms']} ms ({a['cpu_p50_ms']}) | p50 ≤ "
        f"{TARGET_RECORD_TURN_P50_MS:g} ms |",
        f"| record_turn() alone, one call every {gap}: p50 (CPU p50) | "
        f"{a['idle_gap_p50_ms']} ms ({a['idle_gap_cpu_p50_ms']}) | |",
        f"| waking the idle machine: Redis PING / 300-byte fsync p50, back to back → "
        f"after {gap} idle | {before['redis_ping_p50_ms']} / {before['fsync_p50_ms']} → "
        f"{after['redis_ping_p50_ms']} / {after['fsync_p50_ms']} ms | |",
    ]


def markdown(figures: dict[str, Any]) -> str:
    f = figures
    cmd = "memstrata bench ingest" + (" --quick" if f.get("quick") else "")
    lines = [
        f"### Ingest end to end (`{cmd}`)",
        "",
        f"settings: {f.get('settings')}",
        "",
        "| figure | measured | target |",
        "|---|---|---|",
        f"| e2e p50 / p95 at {f['offered_turns_per_s']:g} turns/s (2 workers) | "
        f"{f['e2e_p50_ms']} / {f['e2e_p95_ms']} ms | p95 ≤ {TARGET_E2E_P95_MS:g} ms |",
        f"| record_turn() p50 / p99 in the steady phase | {f['record_turn_p50_ms']} / "
        f"{f['record_turn_p99_ms']} ms | "
        f"p50 ≤ {TARGET_RECORD_TURN_P50_MS:g} ms |",
        *_alone_rows(f.get("record_turn_alone")),
        f"| max sustained (open loop, producers on the same 2 cores) | "
        f"{f['max_sustained_turns_per_s']:g} turns/s | ≥ {TARGET_SUSTAINED:g} |",
        f"| backlog drain, 1 / 2 worker processes | {f['workers_1_turns_per_s']} / "
        f"{f['workers_2_turns_per_s']} turns/s | 2 workers ≥ {TARGET_DRAIN_W2:g} |",
        f"| CPU per turn: workers / Redis / producer | {f['cpu_ms_per_turn']['workers']} / "
        f"{f['cpu_ms_per_turn']['redis']} / {f['cpu_ms_per_turn']['producer']} ms → ceiling "
        f"{f['cpu_ceiling_turns_per_s']} turns/s on {os.cpu_count()} idle cores | "
        f"workers + Redis ≤ {TARGET_CPU_MS:g} ms |",
        "",
        "Steady load:",
        "",
        "| workers | offered | achieved | e2e p50 | p95 | p99 | max | seen/expected | "
        "record_turn p50 | p99 | kicked | CPU ms/turn workers / Redis / producer | "
        "other jobs (cores) | sustained |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in ("1", "2", "2_low"):
        s = f.get(f"steady_w{n}")
        if not s:
            continue
        lines.append(
            f"| {n[0]} | {s['offered_per_s']:g} | {s['achieved_per_s']} | {s['e2e_p50_ms']} | "
            f"{s['e2e_p95_ms']} | {s['e2e_p99_ms']} | {s['e2e_max_ms']} | "
            f"{s['e2e_samples']}/{s['e2e_expected']} | {s['record_turn_p50_ms']} | "
            f"{s['record_turn_p99_ms']} | {s['record_turn_kicked_share']} | "
            f"{s['cpu_ms_per_turn_workers']} / {s['cpu_ms_per_turn_redis']} / "
            f"{s['cpu_ms_per_turn_producer']} | {s['other_jobs_cores']} | {s['sustained']} |"
        )
    t = f.get("task_overhead_w2")
    if t:
        lines += [
            "",
            f"Fixed price of a kick (a drain task that finds nothing, {t['tasks']} tasks, "
            f"2 workers): {t['cpu_ms_per_task_workers']} ms CPU in the workers + "
            f"{t['cpu_ms_per_task_redis']} ms in Redis; idle workers use "
            f"{t['idle_cores_workers']} cores (Redis {t['idle_cores_redis']}).",
        ]
    lines += [
        "",
        "Backlog drain (turns queued first, then workers started):",
        "",
        "| workers × pool | batch | turns | drain turns/s | CPU ms/turn workers / Redis | "
        "machine busy | other jobs (cores) |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, v in f.items():
        if k.startswith("backlog_"):
            lines.append(
                f"| {v['workers']} × {v['pool']} -c {v['concurrency']} | {v.get('batch', '')} | "
                f"{v['turns']} | "
                f"{v['drain_turns_per_s']} | {v['cpu_ms_per_turn_workers']} / "
                f"{v['cpu_ms_per_turn_redis']} | {v['machine_busy_share']} | "
                f"{v['other_jobs_cores']} |"
            )
    if f.get("profile", {}).get("error"):
        lines += ["", f"Profile of the drain loop: FAILED in this run: `{f['profile']['error']}`"]
    elif f.get("profile"):
        lines += profile_lines(f["profile"])
    if not f["ladder_w2"]:
        lines += [
            "",
            "Offered-load ladder: not run with `--quick` (the steady phase stands in).",
            "",
        ]
        return "\n".join(lines)
    lines += [
        "",
        "Offered-load ladder (2 producer processes, 2 solo workers):",
        "",
        "| offered | achieved | e2e p50 | e2e p95 | s to drain after stop | machine busy | "
        "other jobs (cores) | sustained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in f["ladder_w2"]:
        lines.append(
            f"| {row['offered_per_s']:g} | {row['achieved_per_s']} | {row['e2e_p50_ms']} | "
            f"{row['e2e_p95_ms']} | {row['backlog_drain_after_stop_s']} | "
            f"{row['machine_busy_share']} | {row['other_jobs_cores']} | {row['sustained']} |"
        )
    lines.append("")
    return "\n".join(lines)
