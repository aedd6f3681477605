"""What one record_turn() costs step by step (issue 17): the tool behind PERFORMANCE.md's
split of the call, run against the real Redis and a real L0 folder."""

from __future__ import annotations

import json

import pytest
import redis

from memstrata.ops.bench.common.env import redis_url
from memstrata.ops.bench.ingest.callsplit import main, split


def test_the_split_measures_every_step_and_leaves_nothing_behind() -> None:
    # When 120 bench turns go through each loop
    got = split(calls=120)
    # Then the whole call and each of its parts took CPU, and the parts add up
    assert got["calls"] == 120
    assert got["record_turn"]["cpu_mean_us"] > 0
    assert got["record_turn"]["wall_p50_us"] > 0
    steps = got["steps_cpu_mean_us"]
    assert all(steps[name] > 0 for name in ("parse", "append", "enqueue"))
    assert steps["total"] == pytest.approx(steps["parse"] + steps["append"] + steps["enqueue"],
                                           abs=0.2)  # fmt: skip
    # And the fsync's CPU is the difference of the two append loops, as reported
    alone = got["append_alone_cpu_mean_us"]
    assert alone["fsync"] > 0 and alone["no_fsync"] > 0
    assert got["fsync_cpu_us"] == pytest.approx(alone["fsync"] - alone["no_fsync"], abs=0.2)
    assert got["ping"]["wall_p50_us"] >= got["ping"]["cpu_mean_us"] * 0.5 > 0
    # And the scratch namespace is gone with every turn pointer the loops queued
    client = redis.Redis.from_url(redis_url(), decode_responses=True)
    try:
        assert list(client.scan_iter(match=f"{got['namespace']}:*", count=1000)) == []
    finally:
        client.close()


def test_the_command_prints_json_and_refuses_no_calls(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--calls", "5", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["calls"] == 5 and printed["steps_cpu_mean_us"]["append"] > 0
    with pytest.raises(SystemExit) as refused:
        main(["--calls", "0"])
    assert refused.value.code == 2
