"""Where one ``record_turn()``'s time goes, step by step (issue 17: what bounds p50 ≤ 0.5 ms).

``python -m memstrata.ops.bench.ingest.callsplit [--calls N] [--json]``.  The ingest
benchmark's turn mix (``fixtures.turn_messages``) recorded on a scratch namespace of the
configured Redis and a temporary L0 folder, in loops of ``calls`` calls each (after a
warm-up), one after the other:

- ``record_turn``: the whole call (``MemoryClient.record_turn``, ``fsync`` on as shipped,
  a kicker that only counts), its CPU and wall time;
- ``steps``: the call's three parts done by hand in one loop — parsing the messages,
  the L0 append, the enqueue script — each one's CPU;
- ``append_alone``: the append in a loop of its own, with ``fsync`` and without, so the
  difference is what the ``fsync`` costs the caller in CPU (its kernel work is the
  caller's system time: ``time.process_time`` counts it);
- ``ping``: a bare redis-py ``PING``, the round trip under every Redis call.

CPU figures are means (the CPU clock's resolution is coarse next to one call), wall
figures medians, all in microseconds.  docs/PERFORMANCE.md (2026-12-07) reads them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from memstrata.core.api import MemoryClient, parse_messages
from memstrata.core.ingest.queue import IngestQueue
from memstrata.core.transcript.store import TranscriptStore
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url
from memstrata.ops.bench.common.fixtures import turn_messages

WARM_CALLS = 200
USERS = 10
TURNS_PER_SESSION = 200
TENANT = "bench"


def _us(ns: float) -> float:
    return round(ns / 1000, 1)


def _loop(calls: int, one: Callable[[int], object]) -> tuple[list[int], list[int]]:
    """CPU and wall nanoseconds of ``one(i)`` for ``calls`` calls, after a warm-up."""
    for i in range(WARM_CALLS):
        one(-1 - i)
    cpu: list[int] = []
    wall: list[int] = []
    for i in range(calls):
        w0, c0 = time.perf_counter_ns(), time.process_time_ns()
        one(i)
        cpu.append(time.process_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
    return cpu, wall


def split(calls: int = 3000) -> dict[str, Any]:
    """The loops on a scratch namespace and folder, both removed afterwards."""
    if calls < 1:
        raise ValueError("calls must be at least 1")
    client = redis.Redis.from_url(redis_url(), decode_responses=True)
    ns = new_namespace("benchsplit")
    queue = IngestQueue(client, namespace=ns)
    messages = [turn_messages(n) for n in range(50)]
    kicks: list[int] = []

    def count_kick(shard: int) -> None:  # no drain runs: a kick is only counted
        kicks.append(shard)

    try:
        with tempfile.TemporaryDirectory(prefix="benchsplit") as folder:
            synced = TranscriptStore(Path(folder) / "synced", fsync=True)
            unsynced = TranscriptStore(Path(folder) / "unsynced", fsync=False)
            memory = MemoryClient(transcript=synced, queue=queue, kicker=count_kick)

            def session(prefix: str, i: int) -> tuple[str, str]:
                return f"u{i % USERS}", f"{prefix}{i // TURNS_PER_SESSION}"

            def whole(i: int) -> None:
                user, sess = session("whole", i)
                memory.record_turn(user_id=user, session_id=sess, tenant_id=TENANT,
                                   messages=messages[i % len(messages)])  # fmt: skip

            call_cpu, call_wall = _loop(calls, whole)

            parts: dict[str, list[int]] = {"parse": [], "append": [], "enqueue": []}

            def steps(i: int) -> None:
                user, sess = session("steps", i)
                c0 = time.process_time_ns()
                parsed = parse_messages(messages[i % len(messages)],
                                        limit=synced.max_turn_messages)  # fmt: skip
                c1 = time.process_time_ns()
                turn = synced.append_turn(user_id=user, session_id=sess, messages=parsed,
                                          tenant_id=TENANT)  # fmt: skip
                c2 = time.process_time_ns()
                queue.enqueue_once(turn.pointer, generation=turn.generation)
                c3 = time.process_time_ns()
                if i >= 0:
                    parts["parse"].append(c1 - c0)
                    parts["append"].append(c2 - c1)
                    parts["enqueue"].append(c3 - c2)

            _loop(calls, steps)
            parsed_turns = [parse_messages(m, limit=unsynced.max_turn_messages) for m in messages]

            def appending(store: TranscriptStore, prefix: str) -> Callable[[int], object]:
                def append(i: int) -> object:
                    user, sess = session(prefix, i)
                    turn = parsed_turns[i % len(parsed_turns)]
                    return store.append_turn(user_id=user, session_id=sess, tenant_id=TENANT,
                                             messages=turn)  # fmt: skip

                return append

            synced_cpu, _ = _loop(calls, appending(synced, "synced"))
            unsynced_cpu, _ = _loop(calls, appending(unsynced, "unsynced"))
            ping_cpu, ping_wall = _loop(calls, lambda _i: client.ping())
    finally:
        purge(client, ns)
        client.close()
    step_us = {name: _us(statistics.mean(ns_)) for name, ns_ in parts.items()}
    return {
        "calls": calls,
        "namespace": ns,  # removed with its keys: a run leaves nothing behind
        "record_turn": {"cpu_mean_us": _us(statistics.mean(call_cpu)),
                        "wall_p50_us": _us(statistics.median(call_wall))},
        "steps_cpu_mean_us": {**step_us, "total": round(sum(step_us.values()), 1)},
        "append_alone_cpu_mean_us": {
            "fsync": _us(statistics.mean(synced_cpu)),
            "no_fsync": _us(statistics.mean(unsynced_cpu)),
        },
        "fsync_cpu_us": _us(statistics.mean(synced_cpu) - statistics.mean(unsynced_cpu)),
        "ping": {"cpu_mean_us": _us(statistics.mean(ping_cpu)),
                 "wall_p50_us": _us(statistics.median(ping_wall))},
        "kicks": len(kicks),
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    got = split(args.calls)
    print(json.dumps(got) if args.json else "\n".join(f"{k}: {v}" for k, v in got.items()))


if __name__ == "__main__":
    main()
