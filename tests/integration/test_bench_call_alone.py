"""The ingest benchmark's "call alone" phase (issue 17): ``record_turn()`` with no workers
beside it, on real Redis and a real L0, and what waking the idle machine costs."""

from __future__ import annotations

from pathlib import Path

import redis

from memstrata.ops.bench.common.env import new_namespace, patched_env, purge
from memstrata.ops.bench.ingest.phases import call_alone
from memstrata.ops.bench.ingest.report import _alone_rows

URL = "redis://127.0.0.1:6379/0"


def test_the_call_alone_is_timed_back_to_back_and_after_idle_gaps_and_leaves_no_backlog(
    tmp_path: Path,
) -> None:
    from memstrata.core.runtime import close_runtime, reset_runtime

    ns = new_namespace("benchalone")
    client = redis.Redis.from_url(URL, decode_responses=True)
    env = {"MEMSTRATA_REDIS_URL": URL, "MEMSTRATA_KEY_NAMESPACE": ns,
           "MEMSTRATA_TRANSCRIPT_DIR": str(tmp_path / "l0")}  # fmt: skip
    try:
        with patched_env(env):
            res = reset_runtime()
            # When the phase runs (quick: 200 calls back to back, 60 with gaps)
            a = call_alone(client, quick=True)
            # Then every call reached L0 (100 warm-up calls too) ...
            recorded = sum(1 for p in (tmp_path / "l0").rglob("*") if p.is_file())
            assert recorded > 0
            # ... and nothing is left queued for a later phase's workers
            shards = range(res.queue.shards)
            assert all(client.xlen(res.queue.keys.ingest_stream(s)) == 0 for s in shards)
            assert not any(client.exists(res.queue.keys.ingest_kick(s)) for s in shards)
    finally:
        close_runtime()
        purge(client, ns)
        client.close()
    # And its figures are timings of the calls and of the machine's wake-ups
    assert a["calls"] == 200 and a["idle_gap_calls"] == 60
    assert a["cpu_p50_ms"] > 0 and 0 < a["p50_ms"] <= a["p95_ms"]
    assert a["idle_gap_p50_ms"] > 0 and a["idle_gap_cpu_p50_ms"] > 0
    assert 1 <= a["kicks"] <= 8  # each shard's first kick; its flag then stays taken
    for label in ("back_to_back", "after_idle"):
        assert a["wake"][label]["redis_ping_p50_ms"] > 0 and a["wake"][label]["fsync_p50_ms"] > 0
    # And the report shows them beside the target
    rows = "\n".join(_alone_rows(a))
    assert f"| {a['p50_ms']} / {a['p95_ms']} ms ({a['cpu_p50_ms']}) | p50 ≤ 0.5 ms |" in rows
    assert "after 20 ms idle" in rows
