"""The lifecycle run by a real worker and Beat (short intervals, wall clock).

An agent records turns in three sessions through ``record_turn`` (the real ingest path);
then Beat alone must: promote the preference said in two sessions to PostgreSQL, merge
the three same-topic notes into one card, finalise the idle sessions into summary cards
and clean their STM, and sweep an expired item from every index, while the next step
never leaves STM.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memstrata.core.api import MemoryClient
from memstrata.core.authority.facts import fact_history
from memstrata.core.runtime import Runtime, close_runtime, reset_runtime
from tests.integration.conftest import (
    CeleryProcess,
    memory,
    producer,
    start_celery,
    wait_drained,
    wait_until,
)
from tests.integration.test_lifecycle_env import (
    Tenant,
    item,
    lc_engine,
    lifecycle_pg,
    settings,
    tenant,
    user_cards,
)

pytestmark = pytest.mark.integration
__all__ = ["lc_engine", "lifecycle_pg", "memory", "producer", "settings", "tenant"]

FAST = {
    "MEMSTRATA_SWEEP_INTERVAL_S": "1",
    "MEMSTRATA_LIFECYCLE__SCAN_INTERVAL_S": "1",
    "MEMSTRATA_LIFECYCLE__BATCH_INTERVAL_S": "1",
    "MEMSTRATA_LIFECYCLE__IDLE_CHECK_S": "1",
    "MEMSTRATA_LIFECYCLE__SESSION_IDLE_S": "3",
}
PREF = "我喜欢先说结论再讲细节。"
POOL = "这类 timeout 问题常见根因是线程池。"
STEP = "bug456 下一步先看线程池。"


def start_app(role: str, args: list[str], res: Runtime, log_path: Path) -> CeleryProcess:
    """The conftest's ``start_celery`` with short Beat intervals."""
    return start_celery(role, args, settings=res.settings, log_path=log_path, env=FAST)


@pytest.fixture
def lifecycle_worker(res: Runtime, tmp_path: Path) -> Iterator[CeleryProcess]:
    """A worker on ingest and maintenance (not ltm: no Milvus in this test)."""
    w = start_app(
        "worker",
        ["-Q", "ingest,maintenance", "-P", "prefork", "-c", "1", "-n",
         f"lc-{res.settings.key_namespace}@%h", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        res, tmp_path / "worker.log",
    )  # fmt: skip
    try:
        w.wait_for_log(" ready.")
        yield w
    finally:
        w.stop()


def _keys_holding(res: Runtime, memory_id: str) -> list[str]:
    out = []
    for key in res.redis.scan_iter(match=f"{res.settings.key_namespace}:user:*", count=1000):
        kind = res.redis.type(key)
        in_zset = kind == "zset" and res.redis.zscore(key, memory_id) is not None
        in_hash = kind == "hash" and memory_id in res.redis.hvals(key)
        if memory_id in key or in_zset or in_hash:
            out.append(key)
    return out


def test_beat_promotes_merges_finalises_and_sweeps(
    res: Runtime, memory: MemoryClient, lifecycle_worker: CeleryProcess, tenant: Tenant,
    lc_engine: Engine, tmp_path: Path,
) -> None:  # fmt: skip
    u, t = tenant.user, tenant.id
    now = time.time()
    # Given three sessions recorded by an agent and drained by the worker
    for n, session in enumerate(("s1", "s2", "s3")):
        texts = [POOL] + ([PREF] if session != "s3" else []) + ([STEP] if session == "s1" else [])
        for k, text in enumerate(texts):
            # one task per session (next steps and conclusions are task state)
            r = memory.record_turn(user_id=u, tenant_id=t, session_id=session,
                                   task_id=f"task-{session}",
                                   messages=[{"role": "user", "content": text}],
                                   at=now + n + k / 10)  # fmt: skip
        wait_drained(res, r.shard, lifecycle_worker)
    step_id = next(i.id for i in res.stm.by_session(u, "s1", tenant_id=t, limit=50)
                   if i.subtype == "next_step")  # fmt: skip
    # ... and an item that expires in a second
    gone = res.stm.upsert(item(u, t, "s0", "短命的观察", "s0:obs", at=now - 5, ttl_s=6)).memory_id
    # When Beat runs the lifecycle with short intervals
    beat = start_app("beat", ["-s", str(tmp_path / "beat-schedule"), "--pidfile", ""], res,
                     tmp_path / "beat.log")  # fmt: skip
    try:
        beat.wait_for_log("beat: Starting...")

        def done() -> bool:
            with lc_engine.connect() as conn:
                facts = fact_history(db=conn, tenant_id=t, user_id=u,
                                     canonical_fact_key="profile.answer_style")  # fmt: skip
            kinds = [c.memory_type for c in user_cards(lc_engine, t, u)]
            return bool(facts) and "experience" in kinds and kinds.count("session_summary") == 3

        wait_until(done, "promotion, merge and finalisation", timeout_s=60, interval_s=0.5,
                   worker=lifecycle_worker)  # fmt: skip
        wait_until(lambda: not _keys_holding(res, gone), "the sweep", timeout_s=20,
                   worker=lifecycle_worker)  # fmt: skip
    finally:
        beat.stop()
    # Then the merged card holds the three notes; the next step is in no card
    cards = user_cards(lc_engine, t, u)
    [merged] = [c for c in cards if c.memory_type == "experience"]
    assert merged.content.count(POOL) == 3
    assert all(STEP not in c.content and STEP not in c.summary for c in cards)
    # ... and the finalised sessions' STM indexes are gone
    for session in ("s1", "s2", "s3"):
        assert not res.redis.exists(res.stm.keys(u, t).session(session))
    assert res.stm.get(u, step_id, tenant_id=t) is None
    assert "memstrata.maintenance.lifecycle_batch" in lifecycle_worker.log()


def test_a_periodic_job_started_twice_at_once_runs_once(res: Runtime) -> None:
    import memstrata.tasks.lifecycle as lifecycle_tasks

    reset_runtime(res.settings)
    lock = res.redis.lock(f"{res.settings.key_namespace}:lock:lifecycle-batch", timeout=30)
    try:
        # Given another copy of the batch job holds its lock
        assert lock.acquire(blocking=False)
        # When a second copy starts, Then it returns at once without touching the queue
        assert lifecycle_tasks.batch_queue.run() == {"skipped": 1}
        lock.release()
        # and once the first is done, the next run does its work
        assert "merged_groups" in lifecycle_tasks.batch_queue.run()
    finally:
        close_runtime()
