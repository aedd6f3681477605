"""Bounded Redis memory (review D9): the shipped configuration, a full Redis, bytes per item.

Every server here is a throwaway ``redis-server`` on a free port started with the shipped
``ops/redis.conf`` (``ops.bench.common.scratch_redis``): ``maxmemory`` is never set on
the shared server.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memstrata.core.api import MemoryClient
from memstrata.core.errors import StoreFull, TransientError
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.models.transcript import MessageIn
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench import stm_memory
from memstrata.ops.bench.common.env import REPO
from memstrata.ops.bench.common.scratch_redis import SHIPPED_CONF, scratch_redis

pytestmark = pytest.mark.integration


def _conf() -> dict[str, str]:
    out = {}
    for line in SHIPPED_CONF.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.strip().partition(" ")
            out[name] = value.strip()
    return out


def test_the_shipped_configurations_bound_memory_and_refuse_writes_when_full() -> None:
    conf = _conf()
    assert conf["maxmemory-policy"] == "noeviction"
    assert conf["maxmemory"] == "1gb"
    assert conf["appendonly"] == "yes"
    # both local set-ups start redis-server with this file and keep a limit
    setup = (REPO / "ops" / "setup_env.sh").read_text()
    assert re.search(r'redis-server "\$ROOT/ops/redis.conf".*--maxmemory "\$maxmemory"', setup,
                     re.S)  # fmt: skip
    for name in ("docker-compose.yml", "docker-compose.embedded.yml"):
        compose = (REPO / name).read_text()
        assert "./ops/redis.conf:/usr/local/etc/redis/redis.conf:ro" in compose, name
        assert "--maxmemory \\\"$$MAXMEMORY\\\"" in compose, name
        assert "MAXMEMORY: ${MEMSTRATA_REDIS_MAXMEMORY:-1gb}" in compose, name


@pytest.fixture
def full_redis() -> Iterator[redis.Redis]:
    with scratch_redis(conf=SHIPPED_CONF) as client:
        yield client


def _runtime(client: redis.Redis, tmp_path: Path) -> Runtime:
    port = client.connection_pool.connection_kwargs["port"]
    return Runtime(
        load_settings(
            redis_url=f"redis://127.0.0.1:{port}/0",
            key_namespace=f"t{uuid.uuid4().hex[:8]}",
            transcript_dir=tmp_path / "l0",
            transcript_fsync=False,
            ingest_shards=1,
        )
    )


def _turn(n: int) -> list[MessageIn]:
    # the review's marker turn: one fact/conversation_fact item per distinct name
    return [MessageIn(role="user", content=stm_memory.marker_statement(n))]


def test_a_full_redis_raises_store_full_to_record_turn_and_to_the_drain(
    full_redis: redis.Redis, tmp_path: Path
) -> None:
    rt = _runtime(full_redis, tmp_path)
    client = MemoryClient(transcript=rt.transcript, queue=rt.queue, kicker=lambda shard: None)
    rt.queue.ensure_group(0)
    # Given a Redis whose limit is 200 KB above what it uses once the write path's
    # scripts are loaded (one turn recorded first)
    client.record_turn(user_id="u1", session_id="warm", messages=_turn(10**6))
    used = int(full_redis.info("memory")["used_memory"])
    full_redis.config_set("maxmemory", used + 200_000)
    # When turns are recorded (and not drained) until the stream fills it
    acknowledged = 0
    with pytest.raises(StoreFull) as full:
        for n in range(50_000):
            client.record_turn(user_id="u1", session_id=f"s{n // 20}", messages=_turn(n))
            acknowledged += 1
    # Then record_turn's caller gets a StoreFull saying what happened and what to do
    err = full.value
    assert isinstance(err, TransientError)
    assert isinstance(err.__cause__, redis.exceptions.OutOfMemoryError)
    assert "Redis is full (maxmemory reached" in str(err) and "raise maxmemory" in str(err)
    assert acknowledged > 100

    def drain() -> int:
        report = drain_shard(0, queue=rt.queue, transcript=rt.transcript, pipeline=rt.pipeline,
                             consumer="c1", batch=200, max_run_s=60)  # fmt: skip
        return report.turns

    # And a drain of the full Redis stops with StoreFull (transient: its task retries)
    with pytest.raises(StoreFull):
        while drain():
            pass
    # When room is made, the retried drain stores every acknowledged turn
    full_redis.config_set("maxmemory", 0)
    while drain():
        pass
    stored = rt.redis.zcard(rt.stm.keys("u1").recent)
    assert stored == acknowledged + 1  # and the warm-up turn
    assert rt.queue.backlog(0) == (0, 0)
    rt.close()


def test_a_typical_item_costs_at_most_1200_bytes_with_the_shipped_configuration() -> None:
    # the review's load (one casual statement per turn through the real write path) and
    # the STM benchmark's richer debugging items, 40 items per user: item hash + index
    with scratch_redis(conf=SHIPPED_CONF) as client:
        marker = stm_memory.measure_marker(client, users=3, per_user=40)
        mix = stm_memory.measure_mix(client, users=3, per_user=40)
        mix_400 = stm_memory.measure_mix(client, users=3, per_user=400)
    assert marker["items"] == 120
    assert marker["bytes_per_item"] <= stm_memory.TARGET_BYTES_PER_ITEM, marker
    assert marker["item_encodings"] == {"listpack": 120}
    # the richer mix at a few hundred items per user (the headline of docs/BENCHMARKS.md)
    # meets it too; with 40 items per user the owner's fixed keys weigh more
    assert mix_400["bytes_per_item"] <= stm_memory.TARGET_BYTES_PER_ITEM, mix_400
    assert mix["bytes_per_item"] <= 1300, mix
