"""Load generation of the ingest benchmark: the open-loop producer (in this process or
spawned), and the watcher process that notes when each turn became visible in STM."""

from __future__ import annotations

import bisect
import contextlib
import math
import multiprocessing as mp
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from memstrata.core.keys import UserKeys
from memstrata.core.stm.index_order import score_of, time_of
from memstrata.ops.bench.common.cpu import cpu_seconds
from memstrata.ops.bench.common.fixtures import turn_messages

# Latency phases: 6 turns a session (~40 items) stay under the per-session cap (50), so no
# item is evicted before the watcher sees it.
TURNS_PER_SESSION = 6
# Many users spread turns evenly over the shards (a user's turns all go to one shard); the
# watcher follows every WATCH_EVERY-th user, a quarter of the turns, to stay cheap.
USERS_PER_PRODUCER = 64
WATCH_EVERY = 4


@dataclass
class ProduceResult:
    sent: int = 0
    call_ms: list[float] = field(default_factory=list)
    kicked: int = 0
    kicked_ms: list[float] = field(default_factory=list)
    sent_at: list[tuple[str, float]] = field(default_factory=list)  # (user, at) per turn
    max_lag_ms: float = 0.0
    elapsed_s: float = 0.0
    end_wall: float = 0.0
    cpu_s: float = 0.0


def producer_users(tag: str, n: int = USERS_PER_PRODUCER) -> list[str]:
    return [f"{tag}u{i}" for i in range(n)]


def produce(
    tag: str, rate: float, duration_s: float, start_at: float, first_turn: int = 0
) -> ProduceResult:
    """Offer ``rate`` turns/s for ``duration_s`` from ``start_at`` (wall clock), open loop.

    Turns go round-robin over this producer's users; each user starts a new session every
    ``TURNS_PER_SESSION`` turns.  Expects the process's resources to be built already.
    """
    from memstrata.tasks.client import connect

    client = connect()
    users = producer_users(tag)
    out = ProduceResult()
    n_total = int(rate * duration_s)
    cpu0 = cpu_seconds(os.getpid())
    while time.time() < start_at:
        time.sleep(min(0.01, max(0.0, start_at - time.time())))
    t0 = time.perf_counter()
    for i in range(n_total):
        due = t0 + i / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        else:
            out.max_lag_ms = max(out.max_lag_ms, (now - due) * 1e3)
        u = i % len(users)
        k = i // len(users)
        session = f"s{k // TURNS_PER_SESSION}"
        messages = turn_messages(first_turn + i)
        t = time.perf_counter()
        at = time.time()
        receipt = client.record_turn(
            user_id=users[u],
            session_id=f"{users[u]}{session}",
            task_id=f"{users[u]}{session}t",
            messages=messages,
            at=at,
        )
        ms = (time.perf_counter() - t) * 1e3
        out.call_ms.append(ms)
        if receipt.kicked:
            out.kicked += 1
            out.kicked_ms.append(ms)
        out.sent += 1
        out.sent_at.append((users[u], at))
    out.elapsed_s = time.perf_counter() - t0
    out.end_wall = time.time()
    out.cpu_s = cpu_seconds(os.getpid()) - cpu0
    return out


def produce_child(
    env: dict[str, str], tag: str, rate: float, duration_s: float, start_at: float,
    first_turn: int, results: Any,
) -> None:  # fmt: skip
    """Entry point of a spawned producer process."""
    os.environ.update(env)
    from memstrata.core.runtime import reset_runtime

    reset_runtime()
    results.put((tag, produce(tag, rate, duration_s, start_at, first_turn)))


def _watch_child(env: dict[str, str], users: list[str], stop: Any, results: Any) -> None:
    """Poll every user's ``recent`` index; report, per user, when its newest time rose.

    A later turn of a user can overwrite the items of an earlier one in the same batch
    (same slot: next step, the same constraint restated), so a turn's own score may never
    be observed.  A user's turns are processed in order, though, so once a score ``S`` is
    visible, every turn of that user with ``at <= S`` has been written: that is the turn's
    visibility time (:func:`visibility`).
    """
    client = redis.Redis.from_url(env["MEMSTRATA_REDIS_URL"], decode_responses=True)
    ns = env["MEMSTRATA_KEY_NAMESPACE"]
    keys = [UserKeys(ns, u).recent for u in users]  # the product's key builder, not a copy
    last = [0.0] * len(keys)
    hist: dict[str, list[tuple[float, float]]] = {u: [] for u in users}
    polls = 0
    cpu0 = time.process_time()
    while not stop.is_set():
        pipe = client.pipeline(transaction=False)
        for key, lo in zip(keys, last, strict=True):
            # the entries newer than `lo`; the scores are negated times (core.stm.index_order)
            pipe.zrangebyscore(key, "-inf", f"({score_of(lo)!r}", withscores=True)
        replies = pipe.execute()
        now = time.time()
        polls += 1
        for j, rows in enumerate(replies):
            top = max((time_of(score) for _member, score in rows), default=0.0)
            if top > last[j]:
                last[j] = top
                hist[users[j]].append((top, now))
        time.sleep(0.001)
    results.put((hist, polls, time.process_time() - cpu0))
    client.close()


@contextlib.contextmanager
def watcher(env: dict[str, str], users: list[str]) -> Iterator[dict[str, Any]]:
    """Run the watcher process for the duration of the block; fills ``out['hist']``."""
    ctx = mp.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_watch_child, args=(env, users, stop, results), daemon=True)
    proc.start()
    out: dict[str, Any] = {"hist": {}, "polls": 0, "cpu_s": math.nan}
    try:
        time.sleep(0.3)  # let it import and connect before turns start
        yield out
    finally:
        stop.set()
        try:
            hist, polls, cpu_s = results.get(timeout=20)
            out["hist"], out["polls"], out["cpu_s"] = hist, polls, cpu_s
        finally:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()


def visibility(
    hist: dict[str, list[tuple[float, float]]], sent: Sequence[tuple[str, float]]
) -> dict[float, float]:
    """Turn time → wall time its user's newest visible score first reached it."""
    out: dict[float, float] = {}
    for user, at in sent:
        rows = hist.get(user) or []
        k = bisect.bisect_left(rows, (at, -math.inf))
        if k < len(rows):
            out[at] = rows[k][1]
    return out


def e2e_ms(vis: dict[float, float], since: float, until: float) -> list[float]:
    return [(t_seen - at) * 1e3 for at, t_seen in vis.items() if since <= at <= until]
