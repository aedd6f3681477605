"""``memstrata status --json`` against a real worker and Beat: healthy, then a dead letter
and a stopped worker, each reported at once with a non-zero exit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.core.stm.index_order import negate_legacy_scores
from memstrata.tasks._options import DRAIN
from tests.conftest import REDIS_URL
from tests.integration.conftest import (
    REPO_ROOT,
    CeleryProcess,
    celery_worker,
    process_env,
    producer,
    start_beat,
    wait_until,
)
from tests.integration.test_lifecycle_env import lifecycle_pg
from tests.integration.test_stm_index_order import to_earlier_order
from tests.integration.test_stm_store import item

pytestmark = pytest.mark.integration
__all__ = ["celery_worker", "lifecycle_pg", "producer", "start_beat"]

BEAT_S = "1"


@pytest.fixture
def settings(namespace: str, tmp_path: Path, lifecycle_pg: str) -> Settings:
    """A migrated database, no LTM (no Milvus here: status would rightly flag it)."""
    return load_settings(
        redis_url=REDIS_URL, key_namespace=namespace, transcript_dir=tmp_path / "transcripts",
        postgres_url=lifecycle_pg, sweep_interval_s=float(BEAT_S),
        ltm=LtmSettings(enabled=False, history_enabled=False),
    )  # fmt: skip


def status(settings: Settings) -> tuple[int, dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "memstrata.ops.cli", "status", "--json", "--timeout", "1"],
        cwd=REPO_ROOT, env=process_env(settings), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout)


def test_status_reports_a_dead_letter_and_a_stopped_worker(
    res: Runtime, celery_worker: CeleryProcess, start_beat: Any, producer: Celery,
) -> None:  # fmt: skip
    cfg = res.settings
    # Given a worker on every queue and Beat running the sweep every second
    start_beat({"MEMSTRATA_SWEEP_INTERVAL_S": BEAT_S})

    def swept() -> bool:  # the run is recorded by the worker's task signal handler
        return res.redis.hget(res.queue.keys.job_run("sweep-expired-stm"), "outcome") == "ok"

    wait_until(swept, "the sweep's recorded run", timeout_s=30, worker=celery_worker)
    code, report = status(cfg)
    assert (code, report["attention"]) == (0, []), report
    assert all(report["queues"][q] for q in ("ingest", "ltm", "maintenance"))
    [sweep] = [j for j in report["jobs"] if j["job"] == "sweep-expired-stm"]
    assert sweep["outcome"] == "ok" and sweep["age_s"] < 30 and not sweep["stale"]
    assert report["stores"]["redis"]["reachable"] and report["stores"]["postgres"]["reachable"]
    assert report["schema_revision"] == report["schema_heads"]
    # When the drain dead-letters a malformed entry
    res.queue.ensure_group(0)
    res.redis.xadd(res.queue.keys.ingest_stream(0), {"p": "not a pointer"})
    producer.send_task(DRAIN, args=[0])
    wait_until(lambda: res.redis.xlen(res.queue.keys.dead_letters) == 1, "the dead letter",
               worker=celery_worker)  # fmt: skip
    code, report = status(cfg)
    # Then status says so and exits non-zero
    assert code == 3 and report["dead_letters"] == 1
    assert report["attention"] == ["1 dead letters: memstrata dead-letters list"]
    # When the worker stops
    celery_worker.stop()
    stopped = time.monotonic()
    code, report = status(cfg)
    # Then the next status (workers are pinged live, not read from Beat's record) names every
    # queue left without a worker, well within the ingest reclaim's 30-s Beat interval
    assert time.monotonic() - stopped < 30
    assert code == 3 and report["workers"] == {}
    assert [a for a in report["attention"] if a.startswith("no worker")] == [
        f"no worker consumes the {q} queue" for q in ("ingest", "ltm", "maintenance")
    ]


def test_status_names_stm_indexes_of_the_earlier_order_until_migrate(res: Runtime) -> None:
    # Given an owner whose indexes an older version wrote (scores = times, not negated)
    res.stm.upsert(item("m_1"))
    to_earlier_order(res, "u_1")
    line = ("STM indexes of the order before 2026-12-07 (the sweep skips them): "
            "run memstrata migrate")  # fmt: skip
    # Then status asks for the migration and exits non-zero
    code, report = status(res.settings)
    assert code == 3 and line in report["attention"]
    # And once they are turned, it no longer does
    negate_legacy_scores(res.redis, res.settings.key_namespace)
    code, report = status(res.settings)
    assert line not in report["attention"]
