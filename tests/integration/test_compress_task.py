"""The compression task on a real Celery worker: idempotent by last message id."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from memstrata.core.compress.cache import SessionActivity, ViewCache
from memstrata.core.keys import CompressKeys
from memstrata.core.models.transcript import MessageIn, Role
from memstrata.core.runtime import Runtime
from memstrata.ops.bench.compress import ingest, scripted_session
from memstrata.tasks._options import COMPRESS, COMPRESS_IDLE
from tests.integration.conftest import CeleryProcess, start_celery, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def compress_worker(res: Runtime, tmp_path: Path) -> Iterator[CeleryProcess]:
    """A real worker on the maintenance queue with the compression tasks loaded.

    ``-I tasks.compress`` loads the module even before it joins the app's include list.
    """
    worker = start_celery(
        "worker",
        ["-Q", "maintenance", "-P", "prefork", "-c", "1", "-I", "memstrata.tasks.compress",
         "-n", f"wc-{res.settings.key_namespace}@%h",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        settings=res.settings,
        log_path=tmp_path / "worker.log",
    )  # fmt: skip
    worker.wait_for_log(" ready.")
    yield worker
    worker.stop()


def _views(res: Runtime) -> list[str]:
    prefix = CompressKeys(res.settings.key_namespace, "u1").prefix
    return sorted(res.redis.scan_iter(match=f"{prefix}view:*", count=1000))


def test_compression_task_caches_one_view_per_transcript_version(
    res: Runtime, producer: Celery, compress_worker: CeleryProcess
) -> None:
    # Given a stored session
    ingest(res, "u1", "s1", scripted_session("en", cycles=30))
    # When the task runs twice for the same transcript
    producer.send_task(COMPRESS, args=["u1", "s1", 6000])
    wait_until(lambda: len(_views(res)) == 1, "the first view", worker=compress_worker)
    producer.send_task(COMPRESS, args=["u1", "s1", 6000])
    wait_until(lambda: compress_worker.log().count("cached=True") == 1, "a cache hit",
               worker=compress_worker)  # fmt: skip
    # Then there is still one view, and it is the one for the last message
    views = _views(res)
    assert len(views) == 1
    cache = ViewCache(res.redis, namespace=res.settings.key_namespace)
    last = list(res.transcript.read_session(user_id="u1", session_id="s1"))[-1].message_id
    view = cache.get("u1", "s1", last, 6000)
    assert view is not None and view.view_tokens <= 6000
    # And a new turn makes a new version
    ingest(res, "u1", "s1", [[MessageIn(role=Role.USER, content="Roll back now, please.")]])
    producer.send_task(COMPRESS, args=["u1", "s1", 6000])
    wait_until(lambda: len(_views(res)) == 2, "a second version", worker=compress_worker)


def test_missing_session_and_tiny_budget_are_reported_not_retried(
    res: Runtime, producer: Celery, compress_worker: CeleryProcess
) -> None:
    ingest(res, "u1", "s1", scripted_session("en", cycles=10))
    producer.send_task(COMPRESS, args=["u1", "nope", 6000])
    producer.send_task(COMPRESS, args=["u1", "s1", 10])
    wait_until(
        lambda: "session gone" in compress_worker.log()
        and "budget too small" in compress_worker.log(),
        "both tasks to finish", worker=compress_worker,
    )  # fmt: skip
    assert "Retry in" not in compress_worker.log()
    assert _views(res) == []


def test_beat_job_compresses_long_idle_sessions(
    res: Runtime, producer: Celery, compress_worker: CeleryProcess
) -> None:
    from memstrata.core.compress.tokens import default_counter

    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)
    turns = scripted_session("en", cycles=30)
    records = ingest(res, "u1", "s1", turns, t0=time.time() - 3600)  # quiet for an hour
    activity.note_turn(records, default_counter())
    producer.send_task(COMPRESS_IDLE)
    wait_until(lambda: len(_views(res)) == 1, "the idle session's view", worker=compress_worker)


def test_recording_past_the_threshold_compresses_the_session(
    res: Runtime, memory: Any, tmp_path: Path
) -> None:
    # Given a worker whose threshold is low
    worker = start_celery(
        "worker",
        ["-Q", "ingest,maintenance", "-P", "prefork", "-c", "1",
         "-n", f"wt-{res.settings.key_namespace}@%h",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        settings=res.settings,
        log_path=tmp_path / "worker.log",
        env={"MEMSTRATA_COMPRESS_THRESHOLD_TOKENS": "5000",
             "MEMSTRATA_COMPRESS_BUDGET_TOKENS": "4000"},
    )  # fmt: skip
    try:
        worker.wait_for_log(" ready.")
        # When an agent records a long session through record_turn()
        for turn in scripted_session("en", cycles=12):
            memory.record_turn(
                user_id="u1", session_id="s1", messages=[m.model_dump() for m in turn]
            )
        # Then the worker counts it and builds a view once it passes the threshold
        wait_until(lambda: len(_views(res)) >= 1, "an automatic view", worker=worker)
    finally:
        worker.stop()
