"""PostgreSQL stopped mid-load: ingest carries on, recall degrades, promotion resumes.

A throwaway, migrated cluster (never the shared 5432) is stopped while marker turns flow
through the real worker and Beat runs its promotion scan every second.  Ingest needs no
PostgreSQL, so nothing acknowledged is lost; a recall for a user whose profile was never
cached answers with ``degraded`` naming the authority layer instead of raising; after
the restart a recall is whole again and every acknowledged turn is in STM exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from memstrata.core.api import MemoryClient
from memstrata.core.authority.admin import create_tenant, create_user
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.recall.service import AUTHORITY, RecallRequest
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from tests.faults.conftest import Ledger, RedisServer, Workers, produce, wait_converged
from tests.integration.conftest import CeleryProcess
from tests.integration.pg_cluster import PgCluster, migrated_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SCAN_EVERY_S = {"MEMSTRATA_LIFECYCLE__SCAN_INTERVAL_S": "1"}


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    with migrated_cluster() as c:
        yield c


@pytest.fixture
def settings(redis_server: RedisServer, tmp_path: Path, cluster: PgCluster) -> Settings:
    return load_settings(
        redis_url=redis_server.url,
        key_namespace=f"f{uuid.uuid4().hex[:10]}",
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        postgres_url=cluster.url("memstrata"),
        postgres_timeout_s=1.0,
        ltm=LtmSettings(enabled=False, history_enabled=False),
    )


def test_postgres_stop_mid_load_degrades_recall_and_loses_nothing(
    res: Runtime,
    memory: MemoryClient,
    cluster: PgCluster,
    workers: Workers,
    start_beat: Callable[[Mapping[str, str]], CeleryProcess],
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    with res.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": tenant, "name": tenant})
        create_user(db=conn, user={"tenant_id": tenant, "id": "reader"})
    worker = workers.start()
    start_beat(SCAN_EVERY_S)
    ledger = Ledger()
    produce(memory, ledger, "before", 15)
    cluster.stop()
    recaller = res.recaller(ltm=False)
    try:
        produce(memory, ledger, "during", 15)
        ask = RecallRequest(tenant_id=tenant, user_id="reader", session_id="s", query="parrot")
        down = recaller.recall(ask)  # must not raise
        assert AUTHORITY in down.degraded, down.degraded
        wait_converged(ledger, res, worker=worker)  # ingest needs no PostgreSQL
        cluster.start()
        produce(memory, ledger, "after", 15)
        wait_converged(ledger, res, worker=worker)
        assert worker.proc.poll() is None, worker.log_tail()
    finally:
        recaller.close()
    counts = ledger.counts(res)
    assert counts["refused"] == 0 and counts["lost"] == 0 and counts["duplicated"] == 0, counts
    assert counts["in_l0"] == counts["acknowledged"] == 45, counts
