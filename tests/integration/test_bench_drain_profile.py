"""The drain-loop profile of ``memstrata bench ingest`` (issue 17): real Redis, real pipeline."""

from __future__ import annotations

import redis

from memstrata.ops.bench.ingest.profile import _command_deltas, drain_profile, markdown


def test_command_deltas_are_per_turn_and_leave_out_what_did_not_run() -> None:
    # Given commandstats before and after 10 turns (one command unused meanwhile)
    before = {"cmdstat_zadd": {"calls": 100, "usec": 400}, "cmdstat_get": {"calls": 5, "usec": 5}}
    after = {"cmdstat_zadd": {"calls": 160, "usec": 700}, "cmdstat_get": {"calls": 5, "usec": 5},
             "cmdstat_evalsha": {"calls": 2, "usec": 1000}}  # fmt: skip
    # When the deltas are taken
    rows = _command_deltas(before, after, turns=10)
    # Then each command that ran is one row, costliest first, per turn and per call
    assert rows == [
        {"command": "evalsha", "calls_per_turn": 0.2, "us_per_call": 500.0, "us_per_turn": 100.0},
        {"command": "zadd", "calls_per_turn": 6.0, "us_per_call": 5.0, "us_per_turn": 30.0},
    ]


def test_the_profile_splits_the_drain_loops_cpu_by_stage_command_and_function() -> None:
    client = redis.Redis(host="127.0.0.1", port=6379, decode_responses=True)
    try:
        # When 60 bench turns are drained in process, in batches of 20
        p = drain_profile(client, turns=60, batch=20)
    finally:
        client.close()
    # Then the stages add up to the loop's CPU (``other`` is the rest, never negative
    # by more than the timers' rounding)
    stages = p["stages_ms_per_turn"]
    assert {"extraction", "judging (policy, items, decisions)", "item encoding", "upserts",
            "decision records", "other"} <= set(stages)  # fmt: skip
    assert stages["extraction"] > 0 and stages["item encoding"] > 0
    assert abs(sum(stages.values()) - p["cpu_ms_per_turn"]) < 0.01
    # And Redis shows the upsert script and the index writes it makes
    commands = {r["command"]: r for r in p["redis_commands"]}
    assert commands["evalsha"]["calls_per_turn"] > 0 and "zadd" in commands
    # And the functions are the pipeline's, with shares
    assert any("core/extract" in r["function"] for r in p["functions"])
    assert all(0 <= r["self_share"] <= 1 for r in p["functions"])
    # And the shipped sorted-set encoding is measured beside smaller ones, on scratch
    # servers with ops/redis.conf
    enc = p["redis_cpu_by_zset_encoding"]
    assert [r["shipped"] for r in enc].count(True) == 1
    assert {r["zset_max_listpack_entries"] for r in enc} >= {0, 128}
    assert all(r["redis_cpu_ms_per_turn"] > 0 for r in enc)
    # And the markdown names the three views
    text = "\n".join(markdown(p))
    assert "by stage" in text and "`evalsha`" in text and "self share" in text
    assert "(shipped)" in text
