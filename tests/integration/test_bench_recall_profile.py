"""Where a hybrid recall's time and CPU go (issue 17): the tool behind PERFORMANCE.md's
bound on the hybrid route, run on a small real stack (PostgreSQL, Redis, milvus-lite)."""

from __future__ import annotations

import pytest

from memstrata.ops.bench.recall import profile_hybrid

pytestmark = pytest.mark.integration

PROCESSES = ("recall process", "milvus-lite", "redis", "postgres")


def test_the_hybrid_profile_times_each_stage_and_counts_every_serving_process() -> None:
    # When 30 new queries, then the same 30 again, are recalled over 100 cards
    got = profile_hybrid(cards=100, queries=30, history=0)
    assert (got["cards"], got["queries"], got["history_messages"]) == (100, 30, 0)
    for run in ("new", "repeat"):
        # Then every stage of the route was timed
        stages = got[run]
        for stage in ("recall (wall)", "LTM vector search", "LTM lexical search",
                      "ledger read of the cards (PostgreSQL)"):  # fmt: skip
            assert stages[stage]["p95"] >= stages[stage]["p50"] > 0, stage
        # And the CPU of each serving process is counted, the sum being theirs
        cpu = stages["cpu_ms_per_recall"]
        assert set(cpu) == {*PROCESSES, "sum"}
        assert cpu["recall process"] > 0 and cpu["milvus-lite"] > 0  # both searched
        assert cpu["redis"] >= 0 and cpu["postgres"] >= 0
        assert cpu["sum"] == pytest.approx(sum(cpu[p] for p in PROCESSES), abs=0.01)
    # And the queries asked again were not embedded again: less CPU in recall's process
    assert got["repeat"]["cpu_ms_per_recall"]["recall process"] < (
        got["new"]["cpu_ms_per_recall"]["recall process"]
    )
