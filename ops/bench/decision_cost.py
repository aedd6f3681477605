"""What the write decisions cost per turn, in process: bytes per record and CPU of the path.

``python -m memstrata.ops.bench.decision_cost [--turns N] [--json]``.  The ingest
benchmark's turn mix (``fixtures.turn_messages``) goes through L0 and the real pipeline in
batches of 200 (the shipped ``ingest_batch``), 20 turns a session, on a scratch namespace
of the local Redis.  Reported: the pipeline's CPU per turn, the part of it spent in
``StmStore.record_decisions`` (encoding plus the round trip, client side: the Redis server
is shared on this machine, so its CPU is not attributed here), the Redis commands that
path sends per turn, and the bytes of the decision hashes (field + value) per record and
per turn.  Run it before and after a change in one sitting; the figures are medians of
``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from memstrata.core.extract.rules import RuleExtractor
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.models.transcript import MessageIn
from memstrata.core.policy.write import WritePolicy
from memstrata.core.stm.store import StmStore
from memstrata.core.transcript.store import TranscriptStore
from memstrata.ops.bench.common.env import new_namespace, purge
from memstrata.ops.bench.common.fixtures import turn_messages

BATCH = 200
TURNS_PER_SESSION = 20
USERS = 10


def _once(client: redis.Redis, turns: int) -> dict[str, float]:
    ns = new_namespace("benchdec")
    store = StmStore(client, namespace=ns)
    pipeline = IngestPipeline(
        store=store, extractor=RuleExtractor(conversation_facts=True), policy=WritePolicy()
    )
    spent = {"cpu": 0.0, "wall": 0.0, "commands": 0.0}
    record = store.record_decisions

    def timed(*args: Any, **kw: Any) -> None:
        c, w = time.process_time(), time.perf_counter()
        record(*args, **kw)
        spent["cpu"] += time.process_time() - c
        spent["wall"] += time.perf_counter() - w

    store.record_decisions = timed  # type: ignore[method-assign]
    execute = redis.client.Pipeline.execute

    def counted(self: redis.client.Pipeline, *a: Any, **kw: Any) -> Any:
        spent["commands"] += len(self.command_stack)
        return execute(self, *a, **kw)

    now = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="benchdec") as folder:
            l0 = TranscriptStore(Path(folder), fsync=False)
            batches = []
            for start in range(0, turns, BATCH):
                batch = []
                for n in range(start, min(turns, start + BATCH)):
                    u = n % USERS
                    s = (n // USERS) // TURNS_PER_SESSION
                    msgs = [MessageIn.model_validate(m) for m in turn_messages(n)]
                    turn = l0.append_turn(user_id=f"u{u}", session_id=f"u{u}s{s}",
                                          task_id=f"u{u}s{s}t", messages=msgs,
                                          at=now + n * 1e-3)  # fmt: skip
                    batch.append((turn.pointer, list(turn.records)))
                batches.append(batch)
            cpu0 = time.process_time()
            commands0 = spent["commands"]
            redis.client.Pipeline.execute = counted  # type: ignore[method-assign]
            try:
                for batch in batches:
                    pipeline.process(batch)
            finally:
                redis.client.Pipeline.execute = execute  # type: ignore[method-assign]
            cpu = time.process_time() - cpu0
        records = total = 0
        for key in client.scan_iter(match=f"{ns}:*:decisions:*", count=1000):
            raw: dict[str, str] = client.hgetall(key)  # type: ignore[assignment]
            records += len(raw)
            total += sum(len(k.encode()) + len(v.encode()) for k, v in raw.items())
        return {
            "pipeline_cpu_ms_per_turn": cpu * 1e3 / turns,
            "decision_cpu_ms_per_turn": spent["cpu"] * 1e3 / turns,
            "decision_wall_ms_per_turn": spent["wall"] * 1e3 / turns,
            "pipelined_commands_per_turn": (spent["commands"] - commands0) / turns,
            "records_per_turn": records / turns,
            "bytes_per_record": total / max(1, records),
            "decision_bytes_per_turn": total / turns,
        }
    finally:
        purge(client, ns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    client = redis.Redis(host="127.0.0.1", port=6379, decode_responses=True)
    runs = [_once(client, args.turns) for _ in range(args.repeat)]
    out: dict[str, Any] = {k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}
    out["turns"], out["repeat"] = args.turns, args.repeat
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
