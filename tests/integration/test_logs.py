"""Worker log lines: one per task outcome and per ingested batch, naming the owner, in
``MEMSTRATA_LOG_FORMAT=json``; URL passwords never appear in a log line or CLI error."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from memstrata.core import logs
from memstrata.core.api import MemoryClient
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.runtime import Runtime
from memstrata.tasks._options import COMPRESS
from tests.integration.conftest import (
    REPO_ROOT,
    CeleryProcess,
    memory,
    process_env,
    producer,
    start_celery,
    wait_drained,
    wait_until,
)

pytestmark = pytest.mark.integration
__all__ = ["memory", "producer"]


@pytest.fixture
def json_worker(res: Runtime, tmp_path: Path) -> Iterator[CeleryProcess]:
    w = start_celery(
        "worker",
        ["-Q", "ingest,maintenance", "-P", "prefork", "-c", "1", "-n",
         f"j-{res.settings.key_namespace}@%h", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        settings=res.settings, log_path=tmp_path / "worker.log",
        env={"MEMSTRATA_LOG_FORMAT": "json"},
    )  # fmt: skip
    try:
        w.wait_for_log('"message"')  # the first JSON line
        w.wait_for_log(" ready.")
        yield w
    finally:
        w.stop()


def _records(worker: CeleryProcess) -> list[dict[str, Any]]:
    """The worker's JSON log lines (Celery's start-up banner is plain text on stdout)."""
    out = []
    for line in worker.log().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_task_outcomes_and_batches_are_json_lines_that_name_the_owner(
    res: Runtime, memory: MemoryClient, json_worker: CeleryProcess, producer: Celery,
) -> None:  # fmt: skip
    # Given a turn recorded for an owner, drained by a worker logging JSON
    receipt = memory.record_turn(
        user_id="alice", tenant_id="acme", session_id="s1", turn_id="turn-1",
        messages=[{"role": "user", "content": "Remember: I prefer answers in German."}],
    )  # fmt: skip
    wait_drained(res, receipt.shard, json_worker)
    # ... and a task called with the owner's ids (a session that does not exist)
    producer.send_task(COMPRESS, args=["alice", "nope"], kwargs={"tenant_id": "acme"})

    def compress_logged() -> bool:
        return any(r.get("task") == COMPRESS for r in _records(json_worker))

    wait_until(compress_logged, "the compress task's outcome line", worker=json_worker)
    records = _records(json_worker)
    # Then every line is JSON with a level and a logger
    assert records and all({"level", "logger", "message"} <= r.keys() for r in records)
    # ... the batch line names each turn's owner
    [batch] = [r for r in records if r.get("event") == "ingest_batch"]
    assert batch["turns"] == [{"tenant_id": "acme", "user_id": "alice", "session_id": "s1",
                               "turn_id": "turn-1"}]  # fmt: skip
    # ... and each task outcome is one line with its id, duration and owner fields
    [drain] = [r for r in records if r.get("event") == "task" and r["task"].endswith("drain")][:1]
    assert drain["outcome"] == "ok" and drain["shard"] == receipt.shard
    assert drain["duration_ms"] >= 0 and drain["celery_task_id"]
    [compress] = [r for r in records if r.get("task") == COMPRESS]
    assert (compress["outcome"], compress["user_id"], compress["session_id"],
            compress["tenant_id"]) == ("ok", "alice", "nope", "acme")  # fmt: skip
    assert compress["result"]["status"] == "not_found"


def test_a_password_in_a_redis_url_is_in_no_cli_error(res: Runtime) -> None:
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    env = process_env(res.settings, {"MEMSTRATA_REDIS_URL": url})
    for argv in (["status", "--json", "--timeout", "0.5"], ["inspect", "--user", "u"],
                 ["dead-letters", "list"]):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "memstrata.ops.cli", *argv], cwd=REPO_ROOT,
                             env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode != 0, argv
        assert "s3cret-pw" not in out.stdout + out.stderr, argv
        assert "Traceback" not in out.stderr, argv


def test_the_redact_filter_masks_a_password_in_message_args_and_traceback() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "cannot reach %s", (
        "redis://:hunter2@host:6379/0",), None)  # fmt: skip
    try:
        raise ConnectionError("Error 111 connecting to redis://u:hunter2@host")
    except ConnectionError:
        record.exc_info = sys.exc_info()
    handler = logging.StreamHandler()
    logs.apply([handler], "json")
    assert handler.filter(record)  # runs the RedactFilter logs.apply added
    line = handler.format(record)
    assert "hunter2" not in line and "redis://:***@host" in line and "u:***@host" in line
    assert json.loads(line)["level"] == "ERROR"
