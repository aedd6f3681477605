"""The phases of the ingest benchmark: steady offered load, the fixed price of a kick, the
drain rate of a backlog, the offered-rate ladder with producer processes, and the call
alone (``record_turn()`` with no workers beside it, back to back and after idle gaps)."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from memstrata.core.keys import GlobalKeys
from memstrata.ops.bench.common.cpu import (
    busy_share,
    children_cpu_seconds,
    machine_busy,
    redis_cpu_seconds,
)
from memstrata.ops.bench.common.fixtures import turn_messages
from memstrata.ops.bench.common.stats import percentile, r3
from memstrata.ops.bench.common.workers import WorkerGroup
from memstrata.ops.bench.ingest.load import (
    WATCH_EVERY,
    e2e_ms,
    produce,
    produce_child,
    producer_users,
    visibility,
    watcher,
)
from memstrata.ops.bench.ingest.profile import drain_profile

TARGET_E2E_P95_MS = 50.0
TARGET_RATE = 200.0
LOW_RATE = 50.0
TARGET_SUSTAINED = 1000.0
TARGET_DRAIN_W2 = 1500.0  # backlog drain with 2 worker processes (issue 17)
TARGET_CPU_MS = 1.0  # workers + Redis CPU per drained turn (issue 17)
TARGET_RECORD_TURN_P50_MS = 0.5
DEFAULT_BATCH = 200
# Scaling of the backlog drain: worker processes at the default batch, then batch sizes
# at 2 worker processes (issue 17 asks for both).
SCALE_WORKERS = (1, 2, 4)
SCALE_BATCHES = (50, 500)
# Capacity phase: 30 turns a session, so the cap's eviction path (the most expensive
# branch of the upsert script) is part of the cost.
TURNS_PER_SESSION_BACKLOG = 30
# The call alone: calls back to back, then one every IDLE_GAP_S (an open-loop producer's
# pace at 50 turns/s), after WARM_CALLS unmeasured ones.
ALONE_CALLS = 1_000
GAP_CALLS = 300
IDLE_GAP_S = 0.02
WARM_CALLS = 100


def _backlog(client: redis.Redis, ns: str, shards: int) -> int:
    pipe = client.pipeline(transaction=False)
    for s in range(shards):
        pipe.xlen(GlobalKeys(ns).ingest_stream(s))
    return int(sum(pipe.execute()))


def _wait_drained(client: redis.Redis, ns: str, shards: int, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    t0 = time.perf_counter()
    while time.monotonic() < deadline:
        if _backlog(client, ns, shards) == 0:
            return time.perf_counter() - t0
        time.sleep(0.02)
    return math.nan


def steady(
    env: dict[str, str], client: redis.Redis, group: WorkerGroup, tag: str, rate: float,
    duration_s: float, first_turn: int,
) -> dict[str, Any]:  # fmt: skip
    """(a) e2e latency and (b) record_turn latency at an open-loop offered rate, in-process."""
    users = producer_users(tag)[::WATCH_EVERY]
    ns, shards = env["MEMSTRATA_KEY_NAMESPACE"], int(env.get("MEMSTRATA_INGEST_SHARDS", "4"))
    cpu_w0, cpu_r0, busy0 = group.cpu_seconds(), redis_cpu_seconds(client), machine_busy()
    t_wall0 = time.perf_counter()
    with watcher(env, users) as seen:
        start = time.time() + 0.05
        res = produce(tag, rate, duration_s, start, first_turn)
        _wait_drained(client, ns, shards, 60)
        drain_after_s = time.time() - res.end_wall  # backlog left when the producer stopped
        time.sleep(0.1)
        busy1 = machine_busy()
    cpu_w, cpu_r = group.cpu_seconds() - cpu_w0, redis_cpu_seconds(client) - cpu_r0
    ours = cpu_w + cpu_r + res.cpu_s + seen["cpu_s"]
    wall = max(1e-9, time.perf_counter() - t_wall0)
    warm = start + min(1.0, duration_s / 5)  # skip the first second (imports, first kicks)
    vis = visibility(seen["hist"], res.sent_at)
    e2e = e2e_ms(vis, warm, math.inf)
    watched = set(users)
    expected = sum(1 for u, at in res.sent_at if at >= warm and u in watched)
    windows = _window_p95(vis, warm, start + duration_s, 5.0)
    return {
        "offered_per_s": rate,
        "achieved_per_s": round(res.sent / res.elapsed_s, 1),
        "turns": res.sent,
        "e2e_p50_ms": r3(percentile(e2e, 50)),
        "e2e_p95_ms": r3(percentile(e2e, 95)),
        "e2e_p99_ms": r3(percentile(e2e, 99)),
        "e2e_max_ms": r3(max(e2e) if e2e else math.nan),
        "e2e_p95_ms_per_5s_window": windows,
        "e2e_samples": len(e2e),
        "e2e_expected": expected,
        "record_turn_p50_ms": r3(percentile(res.call_ms, 50)),
        "record_turn_p99_ms": r3(percentile(res.call_ms, 99)),
        "record_turn_kicked_share": round(res.kicked / max(1, res.sent), 3),
        "record_turn_kicked_p50_ms": r3(percentile(res.kicked_ms, 50)),
        "producer_max_lag_ms": r3(res.max_lag_ms),
        "watcher_polls_per_s": round(seen["polls"] / max(1e-9, res.elapsed_s)),
        "watcher_cpu_share": r3(seen["cpu_s"] / max(1e-9, res.elapsed_s)),
        "cpu_ms_per_turn_workers": r3(cpu_w / max(1, res.sent) * 1e3),
        "cpu_ms_per_turn_redis": r3(cpu_r / max(1, res.sent) * 1e3),
        "cpu_ms_per_turn_producer": r3(res.cpu_s / max(1, res.sent) * 1e3),
        "backlog_drain_after_stop_s": r3(drain_after_s),
        "sustained": _sustained(res.sent / res.elapsed_s, rate, percentile(e2e, 95), drain_after_s),
        "machine_busy_share": busy_share(busy0, busy1),
        # cores used by everything else on the shared machine meanwhile (noise indicator)
        "other_jobs_cores": r3((busy1[0] - busy0[0] - ours) / wall),
    }


def _window_p95(seen: dict[float, float], since: float, until: float, width: float) -> list[float]:
    """p95 of each ``width``-second window: shows whether a tail is steady or one hiccup."""
    out = []
    t = since
    while t + width <= until + 1e-9:
        out.append(r3(percentile(e2e_ms(seen, t, t + width), 95)))
        t += width
    return out


def task_overhead(
    env: dict[str, str], client: redis.Redis, group: WorkerGroup, tasks: int, idle_s: float
) -> dict[str, Any]:
    """CPU of one drain task that finds nothing: the fixed price of every kick.

    Idle workers also cost CPU (broker polling), so the idle rate is measured first and
    subtracted.
    """
    from memstrata.tasks._options import DRAIN
    from memstrata.tasks.app import app

    ns = env["MEMSTRATA_KEY_NAMESPACE"]
    w0, r0, t0 = group.cpu_seconds(), redis_cpu_seconds(client), time.perf_counter()
    time.sleep(idle_s)
    idle_s = time.perf_counter() - t0
    idle_w, idle_r = (group.cpu_seconds() - w0) / idle_s, (redis_cpu_seconds(client) - r0) / idle_s
    w0, r0, t0 = group.cpu_seconds(), redis_cpu_seconds(client), time.perf_counter()
    for _ in range(tasks):
        app.send_task(DRAIN, args=[0])
    while client.llen(GlobalKeys(ns).celery_prefix + "ingest") > 0:  # the Celery queue
        time.sleep(0.01)
    time.sleep(0.3)  # the last ones finish
    wall = time.perf_counter() - t0
    cpu_w = group.cpu_seconds() - w0 - idle_w * wall
    cpu_r = redis_cpu_seconds(client) - r0 - idle_r * wall
    return {
        "tasks": tasks,
        "idle_cores_workers": r3(idle_w),
        "idle_cores_redis": r3(idle_r),
        "cpu_ms_per_task_workers": r3(cpu_w / tasks * 1e3),
        # NaN when other jobs kept the shared Redis busier than the drains did
        "cpu_ms_per_task_redis": r3(cpu_r / tasks * 1e3) if cpu_r >= 0 else math.nan,
        "tasks_per_s": round(tasks / wall),
    }


def backlog_drain(
    env: dict[str, str], client: redis.Redis, tag: str, turns: int, workers: int, pool: str,
    concurrency: int, log_dir: Path, first_turn: int, batch: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """(c) capacity: queue ``turns`` with no worker running, then time the workers' drain
    (with ``batch`` pointers read at a time, else the configured ``MEMSTRATA_INGEST_BATCH``)."""
    from memstrata.tasks.client import connect

    batch = batch or int(env.get("MEMSTRATA_INGEST_BATCH", DEFAULT_BATCH))
    env = {**env, "MEMSTRATA_INGEST_BATCH": str(batch)}  # the workers' setting only

    ns, shards = env["MEMSTRATA_KEY_NAMESPACE"], int(env.get("MEMSTRATA_INGEST_SHARDS", "4"))
    mc = connect()
    users = producer_users(tag, 64)
    t0 = time.perf_counter()
    for i in range(turns):
        u = i % len(users)
        session = f"s{(i // len(users)) // TURNS_PER_SESSION_BACKLOG}"
        mc.record_turn(
            user_id=users[u], session_id=f"{users[u]}{session}", task_id=f"{users[u]}{session}t",
            messages=turn_messages(first_turn + i), at=time.time(),
        )  # fmt: skip
    fill_s = time.perf_counter() - t0
    group = WorkerGroup(env=env, count=workers, pool=pool, concurrency=concurrency, log_dir=log_dir)
    try:
        group.start(wait=False)  # the drain rate is taken between 90 % and 10 % left
        samples: list[tuple[float, int]] = []
        marks: dict[str, tuple[float, float, tuple[float, float], float]] = {}
        deadline = time.monotonic() + max(60.0, turns / 50)
        while time.monotonic() < deadline:
            left = _backlog(client, ns, shards)
            samples.append((time.perf_counter(), left))
            for name, frac in (("hi", 0.9), ("lo", 0.1)):
                if name not in marks and left <= frac * turns:
                    cpu_w = sum(children_cpu_seconds(pid) for pid in group.pids)
                    marks[name] = (
                        cpu_w, redis_cpu_seconds(client), machine_busy(), time.perf_counter()
                    )
            if left == 0:
                break
            time.sleep(0.02)
    finally:
        group.stop()
    rate = _rate_between(samples, turns, hi=0.9, lo=0.1)
    if math.isnan(rate) or len(marks) < 2:
        raise RuntimeError(f"backlog of {turns} turns not drained: {samples[-3:]}")
    window_turns = 0.8 * turns
    cpu_w = marks["lo"][0] - marks["hi"][0]
    cpu_r = marks["lo"][1] - marks["hi"][1]
    return {
        "turns": turns,
        "workers": workers,
        "pool": pool,
        "concurrency": concurrency,
        "batch": batch,
        "fill_turns_per_s": round(turns / fill_s),
        "drain_turns_per_s": round(rate),
        "drain_total_s": r3(samples[-1][0] - samples[0][0]) if samples else math.nan,
        "drained": bool(samples and samples[-1][1] == 0),
        # CPU between the 90 % and 10 % marks only: no start-up or tail in it
        "cpu_ms_per_turn_workers": r3(cpu_w / window_turns * 1e3),
        "cpu_ms_per_turn_redis": r3(cpu_r / window_turns * 1e3),
        "machine_busy_share": busy_share(marks["hi"][2], marks["lo"][2]),
        "other_jobs_cores": r3(
            (marks["lo"][2][0] - marks["hi"][2][0] - cpu_w - cpu_r)
            / max(1e-9, marks["lo"][3] - marks["hi"][3])
        ),
    }


def _sustained(achieved: float, offered: float, p95_ms: float, drain_after_s: float) -> bool:
    """The producers kept pace, latency did not build up, no backlog was left behind."""
    return bool(achieved >= 0.95 * offered and p95_ms <= 1000 and drain_after_s <= 1.0)


def _rate_between(samples: Sequence[tuple[float, int]], total: int, hi: float, lo: float) -> float:
    """Turns/s while the backlog fell from ``hi`` to ``lo`` of its size (no start/stop edges)."""
    t_hi = next((t for t, left in samples if left <= hi * total), None)
    t_lo = next((t for t, left in samples if left <= lo * total), None)
    if t_hi is None or t_lo is None or t_lo <= t_hi:
        return math.nan
    return (hi - lo) * total / (t_lo - t_hi)


def ladder(
    env: dict[str, str], client: redis.Redis, group: WorkerGroup, rates: Sequence[float],
    duration_s: float, producers: int, first_turn: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """(c) offered load from ``producers`` spawned processes; sustained = e2e stays bounded."""
    ctx = mp.get_context("spawn")
    ns, shards = env["MEMSTRATA_KEY_NAMESPACE"], int(env.get("MEMSTRATA_INGEST_SHARDS", "4"))
    out = []
    for step, rate in enumerate(rates):
        tags = [f"L{step}p{j}" for j in range(producers)]
        users = [u for tag in tags for u in producer_users(tag)[::WATCH_EVERY]]
        results = ctx.Queue()
        with watcher(env, users) as seen:
            start = time.time() + 2.0  # spawned producers import first
            procs = [
                ctx.Process(
                    target=produce_child,
                    args=(
                        env,
                        tag,
                        rate / producers,
                        duration_s,
                        start,
                        first_turn + step * 1_000_000 + j * 100_000,
                        results,
                    ),
                    daemon=True,
                )
                for j, tag in enumerate(tags)
            ]
            for p in procs:
                p.start()
            while time.time() < start:
                time.sleep(0.005)
            cpu_w0, cpu_r0, busy0, t0 = (
                group.cpu_seconds(), redis_cpu_seconds(client), machine_busy(), time.perf_counter()
            )  # fmt: skip
            got = [results.get(timeout=duration_s + 60)[1] for _ in procs]
            _wait_drained(client, ns, shards, 60)
            end = max(g.end_wall for g in got)
            drain_after_s = time.time() - end  # backlog left when the producers stopped
            cpu_w, cpu_r, busy1 = (
                group.cpu_seconds() - cpu_w0, redis_cpu_seconds(client) - cpu_r0, machine_busy()
            )  # fmt: skip
            wall = time.perf_counter() - t0
            for p in procs:
                p.join(timeout=10)
            time.sleep(0.1)
        sent = sum(g.sent for g in got)
        achieved = sent / max(g.elapsed_s for g in got)
        vis = visibility(seen["hist"], [x for g in got for x in g.sent_at])
        e2e = e2e_ms(vis, start + duration_s / 2, math.inf)
        p95 = percentile(e2e, 95)
        row = {
            "offered_per_s": rate,
            "achieved_per_s": round(achieved),
            "e2e_p50_ms": r3(percentile(e2e, 50)),
            "e2e_p95_ms": r3(p95),
            "backlog_drain_after_stop_s": r3(drain_after_s),
            "visible_turns": len(vis),
            "watched_turns": sum(1 for g in got for u, _at in g.sent_at if u in set(users)),
            "sent_turns": sent,
            "record_turn_p50_ms": r3(statistics.median([x for g in got for x in g.call_ms])),
            "cpu_ms_per_turn_producers": r3(sum(g.cpu_s for g in got) / max(1, sent) * 1e3),
            "cpu_ms_per_turn_workers": r3(cpu_w / max(1, sent) * 1e3),
            "cpu_ms_per_turn_redis": r3(cpu_r / max(1, sent) * 1e3),
            "machine_busy_share": busy_share(busy0, busy1),
            "other_jobs_cores": r3(
                (busy1[0] - busy0[0] - cpu_w - cpu_r - sum(g.cpu_s for g in got) - seen["cpu_s"])
                / wall
            ),
            "wall_s": r3(end - start),
        }
        row["sustained"] = _sustained(achieved, rate, p95, drain_after_s)
        out.append(row)
        if not row["sustained"]:
            break
    return out


def _timed_calls(fn: Any, n: int, gap_s: float) -> tuple[list[float], list[float]]:
    """Wall and CPU ms of ``fn(i)`` for ``n`` calls, sleeping ``gap_s`` after each."""
    wall, cpu = [], []
    for i in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(i)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        if gap_s:
            time.sleep(gap_s)
    return wall, cpu


def _wake_costs(client: redis.Redis, n: int) -> dict[str, Any]:
    """What waking an idle machine costs, apart from memstrata: a Redis ``PING`` and the
    ``fsync`` of a 300-byte append (what L0 does per turn), back to back and after
    ``IDLE_GAP_S`` of sleep each."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="memstrata-bench-fsync-") as folder:
        fd = os.open(os.path.join(folder, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for label, gap in (("back_to_back", 0.0), ("after_idle", IDLE_GAP_S)):
                ping, sync = [], []
                for _ in range(n):
                    t0 = time.perf_counter()
                    client.ping()
                    ping.append((time.perf_counter() - t0) * 1000)
                    os.write(fd, b"x" * 300)
                    t0 = time.perf_counter()
                    os.fsync(fd)
                    sync.append((time.perf_counter() - t0) * 1000)
                    time.sleep(gap)
                out[label] = {"redis_ping_p50_ms": r3(statistics.median(ping)),
                              "fsync_p50_ms": r3(statistics.median(sync))}  # fmt: skip
        finally:
            os.close(fd)
    return out


def call_alone(client: redis.Redis, quick: bool) -> dict[str, Any]:
    """``record_turn()`` with no workers and no producers beside it: the call's own cost
    (back to back), the same call at an open-loop pace (one every ``IDLE_GAP_S``), and
    what the machine charges to wake Redis and the disk after such a gap.

    The client is the runtime's L0 and ingest queue (the settings under test: fsync on by
    default) with a kicker that only counts: with no drain running, a shard's kick flag
    stays taken after its first kick, so a publish would happen a handful of times per
    phase and the measured calls do not kick at all (``kicks`` says how many did)."""
    from memstrata.core.api import MemoryClient
    from memstrata.core.runtime import get_runtime

    res = get_runtime()
    kicks: list[int] = []

    def count_kick(shard: int) -> None:
        kicks.append(shard)

    memory = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=count_kick)
    messages = [turn_messages(n) for n in range(50)]

    def call(prefix: str) -> Any:
        def one(i: int) -> None:
            memory.record_turn(user_id=f"alone{i % 10}", session_id=f"{prefix}{i // 200}",
                               messages=messages[i % len(messages)], tenant_id="bench")  # fmt: skip

        return one

    n_alone, n_gap = (200, 60) if quick else (ALONE_CALLS, GAP_CALLS)
    _timed_calls(call("warm"), WARM_CALLS, 0.0)
    wall, cpu = _timed_calls(call("alone"), n_alone, 0.0)
    gap_wall, gap_cpu = _timed_calls(call("gap"), n_gap, IDLE_GAP_S)
    for shard in range(res.queue.shards):  # no later phase drains these turns
        client.xtrim(res.queue.keys.ingest_stream(shard), maxlen=0, approximate=False)
        client.delete(res.queue.keys.ingest_kick(shard))
    return {
        "calls": n_alone,
        "p50_ms": r3(statistics.median(wall)),
        "p95_ms": r3(percentile(wall, 95)),
        "cpu_p50_ms": r3(statistics.median(cpu)),
        "idle_gap_s": IDLE_GAP_S,
        "idle_gap_calls": n_gap,
        "idle_gap_p50_ms": r3(statistics.median(gap_wall)),
        "idle_gap_cpu_p50_ms": r3(statistics.median(gap_cpu)),
        "kicks": len(kicks),
        "wake": _wake_costs(client, n_gap),
    }


def run_phases(env: dict[str, str], client: redis.Redis, logs: Path, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    took: dict[str, float] = {}
    phases = os.environ.get("MEMSTRATA_BENCH_PHASES",
                            "alone,steady,backlog,ladder,profile").split(",")  # fmt: skip
    steady_s = 4.0 if quick else 20.0
    backlog_turns = int(os.environ.get("MEMSTRATA_BENCH_BACKLOG_TURNS", 400 if quick else 10_000))
    # the call alone, first: no worker has started, so none competes with it; its turns
    # are taken off the ingest streams after it, so no later phase drains them
    if "alone" in phases:
        t0 = time.perf_counter()
        out["record_turn_alone"] = call_alone(client, quick)
        took["alone"] = r3(time.perf_counter() - t0)
    # (a) + (b): steady 200 turns/s with 1 and 2 worker processes
    rate = float(os.environ.get("MEMSTRATA_BENCH_RATE", TARGET_RATE))
    for n in ((2,) if quick else (1, 2)) if "steady" in phases else ():
        t0 = time.perf_counter()
        group = WorkerGroup(env=env, count=n, pool="solo", log_dir=logs)
        try:
            group.start()
            first = n * 10_000_000
            out[f"steady_w{n}"] = steady(env, client, group, f"S{n}", rate, steady_s, first)
            if not quick and n == 2:  # the latency floor: the same path, far from saturation
                out["steady_w2_low"] = steady(
                    env, client, group, "S2low", LOW_RATE, steady_s / 2, first + 5_000_000
                )
            if n == 2:
                n_tasks, idle_s = (100, 1.0) if quick else (500, 2.0)
                out["task_overhead_w2"] = task_overhead(env, client, group, n_tasks, idle_s)
        finally:
            group.stop()
        took[f"steady_w{n}"] = r3(time.perf_counter() - t0)
    # (c) drain capacity of a backlog: 1, 2 and 4 worker processes (and one prefork -c 2),
    # then other batch sizes with 2 worker processes
    configs: list[tuple[int, str, int, int | None]] = [(n, "solo", 1, None) for n in SCALE_WORKERS]
    configs += [] if quick else [(1, "prefork", 2, None)]
    configs += [(2, "solo", 1, b) for b in SCALE_BATCHES]
    if "backlog" not in phases:
        configs = []
    for k, (n, pool, conc, batch) in enumerate(configs):
        t0 = time.perf_counter()
        name = f"backlog_w{n}_{pool}{conc}" + (f"_b{batch}" if batch else "")
        first = (3 + k) * 10_000_000
        out[name] = backlog_drain(
            env, client, f"B{k}", backlog_turns, n, pool, conc, logs, first, batch
        )
        took[name] = r3(time.perf_counter() - t0)
    # (c) open-loop offered-rate ladder with producer processes and 2 worker processes
    # (--quick has no ladder: the steady phase's verdict at 200 turns/s stands in for it)
    rates = [100.0, 200.0, 300.0, 400.0, 600.0, 800.0, 1000.0]
    out["ladder_w2"] = []
    if "ladder" in phases and not quick:
        t0 = time.perf_counter()
        group = WorkerGroup(env=env, count=2, pool="solo", log_dir=logs)
        try:
            group.start()
            out["ladder_w2"] = ladder(
                env, client, group, rates, 3.0 if quick else 8.0, 2, first_turn=90_000_000
            )
        finally:
            group.stop()
        took["ladder_w2"] = r3(time.perf_counter() - t0)
    # (d) where the CPU of a drained turn goes: the drain loop in process, no Celery
    if "profile" in phases:
        t0 = time.perf_counter()
        from memstrata.core.runtime import get_runtime  # the settings under test

        batch = get_runtime().settings.ingest_batch
        try:
            out["profile"] = drain_profile(client, turns=400 if quick else 2_000, batch=batch)
        except Exception as exc:  # the phases measured above are kept
            out["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
        took["profile"] = r3(time.perf_counter() - t0)
    out["phase_seconds"] = took
    return out
