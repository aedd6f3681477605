"""memstrata's own metrics after real work, scraped over HTTP from ``memstrata metrics``.

An agent process records turns in three sessions (``record_turn`` → L0 → stream → a real
prefork worker); Beat runs the lifecycle (a preference said twice goes to PostgreSQL, three
notes on one topic merge into an LTM card, which the worker embeds into a real milvus-lite);
``memstrata recall`` runs twice (once with Milvus unreachable, so LTM is a layer error); a
malformed stream entry is dead-lettered by the drain; and, with the worker stopped, one
turn waits on a shard.  Every process shares one ``PROMETHEUS_MULTIPROC_DIR``; the
exporter is then scraped and every metric must be non-zero where that work was done.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from memstrata.core.authority.facts import fact_history
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.tasks._options import DRAIN
from tests.conftest import REDIS_URL
from tests.integration import ltm_env
from tests.integration.conftest import (
    REPO_ROOT,
    CeleryProcess,
    process_env,
    producer,
    start_celery,
    wait_drained,
    wait_until,
)
from tests.integration.test_lifecycle_env import Tenant, lc_engine, lifecycle_pg, tenant, user_cards

pytestmark = pytest.mark.integration
milvus_server = ltm_env.milvus_server
__all__ = ["lc_engine", "lifecycle_pg", "producer", "tenant"]

FAST = {
    "MEMSTRATA_LIFECYCLE__SCAN_INTERVAL_S": "1",
    "MEMSTRATA_LIFECYCLE__BATCH_INTERVAL_S": "1",
    "MEMSTRATA_LTM__RECONCILE_INTERVAL_S": "2",
}
PREF = "我喜欢先说结论再讲细节。"
POOL = "这类 timeout 问题常见根因是线程池。"
STEP = "bug456 下一步先看线程池。"

AGENT = """
import json, sys
from memstrata.tasks.client import connect
memory = connect(background_kicks=False)
for session, text, at in json.loads(sys.argv[1]):
    memory.record_turn(user_id=sys.argv[2], tenant_id=sys.argv[3], session_id=session,
                       task_id="task-" + session,  # conclusions and next steps are task state
                       messages=[{"role": "user", "content": text}], at=at)
"""


@pytest.fixture
def settings(
    namespace: str, tmp_path: Path, lifecycle_pg: str, milvus_server: MilvusServer
) -> Settings:
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        postgres_url=lifecycle_pg,
        metrics_dir=tmp_path / "prometheus",
        ltm=LtmSettings(
            milvus_uri=milvus_server.uri,
            collection_prefix=f"m{uuid.uuid4().hex[:10]}",
            reconcile_grace_s=0.0,
            history_enabled=False,
        ),
    )


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    assert settings.metrics_dir is not None
    return process_env(settings, {"PROMETHEUS_MULTIPROC_DIR": str(settings.metrics_dir),
                                  **FAST, **extra})  # fmt: skip


def _cli(settings: Settings, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstrata.ops.cli", *args], cwd=REPO_ROOT,
        env=_env(settings, **extra), capture_output=True, text=True, timeout=90,
    )  # fmt: skip


@pytest.fixture
def worker(res: Runtime, tmp_path: Path) -> Iterator[CeleryProcess]:
    assert res.settings.metrics_dir is not None
    res.settings.metrics_dir.mkdir(parents=True)
    w = start_celery(
        "worker",
        ["-Q", "ingest,ltm,maintenance", "-P", "prefork", "-c", "1", "-n",
         f"m-{res.settings.key_namespace}@%h", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        settings=res.settings, log_path=tmp_path / "worker.log",
        env={"PROMETHEUS_MULTIPROC_DIR": str(res.settings.metrics_dir), **FAST},
    )  # fmt: skip
    try:
        w.wait_for_log(" ready.")
        yield w
    finally:
        w.stop()


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name → [(labels, value)] of one scrape."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
           **labels: str) -> float:  # fmt: skip
    rows = samples.get(name, [])
    return sum(v for lab, v in rows if all(lab.get(k) == want for k, want in labels.items()))


def test_every_metric_counts_the_work_of_real_processes(
    res: Runtime, worker: CeleryProcess, tenant: Tenant, lc_engine: Engine, producer: Celery,
    tmp_path: Path,
) -> None:  # fmt: skip
    u, t, cfg = tenant.user, tenant.id, res.settings
    now = time.time()
    turns = []
    for n, session in enumerate(("s1", "s2", "s3")):
        texts = [POOL] + ([PREF] if session != "s3" else []) + ([STEP] if session == "s1" else [])
        turns += [(session, text, now + n + k / 10) for k, text in enumerate(texts)]
    # Given an agent process that records turns, drained by the real worker
    agent = subprocess.run([sys.executable, "-c", AGENT, json.dumps(turns), u, t], cwd=REPO_ROOT,
                           env=_env(cfg), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert agent.returncode == 0, agent.stderr
    for shard in range(cfg.ingest_shards):
        wait_drained(res, shard, worker)
    # ... and Beat promoting, merging and indexing
    beat = start_celery("beat", ["-s", str(tmp_path / "beat-schedule"), "--pidfile", ""],
                        settings=cfg, log_path=tmp_path / "beat.log",
                        env={"PROMETHEUS_MULTIPROC_DIR": str(cfg.metrics_dir), **FAST})  # fmt: skip
    try:
        beat.wait_for_log("beat: Starting...")

        def promoted_and_indexed() -> bool:
            with lc_engine.connect() as conn:
                facts = fact_history(db=conn, tenant_id=t, user_id=u,
                                     canonical_fact_key="profile.answer_style")  # fmt: skip
            merged = any(c.memory_type == "experience" for c in user_cards(lc_engine, t, u))
            indexed = res.ledger.counts()["vector"].get("indexed", 0)
            return bool(facts) and merged and indexed > 0

        wait_until(promoted_and_indexed, "promotion, merge and LTM indexing", timeout_s=90,
                   interval_s=0.5, worker=worker)  # fmt: skip
    finally:
        beat.stop()
    # ... recalls: one with every layer, one with Milvus unreachable (an LTM layer error)
    ask = ["recall", "之前线程池 timeout 的问题是怎么查的？", "--tenant", t, "--user", u,
           "--session", "s3", "--json"]  # fmt: skip
    ok = _cli(cfg, *ask)
    assert ok.returncode == 0, ok.stderr
    down = _cli(cfg, *ask, MEMSTRATA_LTM__MILVUS_URI=f"http://127.0.0.1:{free_port()}",
                MEMSTRATA_LTM__MILVUS_TIMEOUT_S="1")  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert "ltm" in json.loads(down.stdout)["degraded"]
    # (a cold recall on a busy machine may also time LTM out: that is a layer error too)
    ltm_errors = sum("ltm" in json.loads(r.stdout)["degraded"] for r in (ok, down))
    # ... a malformed entry the drain dead-letters
    res.queue.ensure_group(0)
    res.redis.xadd(res.queue.keys.ingest_stream(0), {"p": "not a pointer"})
    producer.send_task(DRAIN, args=[0])
    wait_until(lambda: res.redis.xlen(res.queue.keys.dead_letters) == 1, "the dead letter",
               worker=worker)  # fmt: skip
    # ... and, with the worker gone, a turn waiting on shard 1
    worker.stop()
    res.queue.ensure_group(1)
    res.redis.xadd(res.queue.keys.ingest_stream(1), {"p": "{}"})
    time.sleep(1.1)
    # When the exporter is scraped
    port = free_port()
    with (tmp_path / "exporter.log").open("wb") as log:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "memstrata.ops.cli", "metrics", "--port", str(port)],
            cwd=REPO_ROOT, env=_env(cfg), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def up() -> bool:
            try:
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, "the exporter", timeout_s=30, interval_s=0.2)
        m = _scrape(url)
    finally:
        exporter.terminate()
        exporter.wait(10)
    # Then every metric shows the work
    assert _total(m, "memstrata_turns_recorded_total") == len(turns)
    assert _total(m, "memstrata_write_decisions_total", verdict="written") > 0
    assert _total(m, "memstrata_promotions_total", path="path_a") >= 1
    assert _total(m, "memstrata_promotions_total", path="batch") >= 3
    assert _total(m, "memstrata_promotions_total", path="merged") >= 1
    assert _total(m, "memstrata_recall_seconds_count") == 2
    assert _total(m, "memstrata_recall_seconds_sum") > 0
    assert _total(m, "memstrata_layer_errors_total", layer="ltm") == ltm_errors
    assert _total(m, "memstrata_embed_seconds_count", kind="document") > 0
    assert _total(m, "memstrata_embed_seconds_count", kind="query") > 0
    assert _total(m, "memstrata_task_runs_total", task="drain", outcome="ok") > 0
    assert _total(m, "memstrata_ingest_backlog_turns", shard="1") == 1
    assert _total(m, "memstrata_ingest_backlog_turns", shard="0") == 0
    assert _total(m, "memstrata_ingest_lag_seconds", shard="1") >= 1.0
    assert _total(m, "memstrata_dead_letters") == 1
    assert _total(m, "memstrata_stm_items") > 0
    assert _total(m, "memstrata_ltm_projection_state", index="vector", state="indexed") > 0
    assert _total(m, "memstrata_job_last_run_seconds") > now
    assert _total(m, "memstrata_state_up", source="redis") == 1
    assert _total(m, "memstrata_state_up", source="postgres") == 1
