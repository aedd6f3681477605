"""LTM tasks on a real Celery worker (prefork, ``ltm`` queue): index, delete, reconcile."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.ltm.search import SearchMode
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.tasks._options import LTM_DELETE, LTM_INDEX, LTM_RECONCILE
from tests.integration import ltm_env
from tests.integration.conftest import CeleryProcess, start_celery, wait_until

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
tenant = ltm_env.tenant


@pytest.fixture
def settings(namespace: str, tmp_path: Path, ltm_pg_url: str) -> Settings:
    """The shared ``settings`` fixture, pointed at the LTM test database."""
    from tests.conftest import REDIS_URL

    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        postgres_url=ltm_pg_url,
    )


@pytest.fixture
def ltm_settings(milvus_server: MilvusServer) -> LtmSettings:
    return LtmSettings(
        milvus_uri=milvus_server.uri,
        collection_prefix=f"c{uuid.uuid4().hex[:10]}",
        reconcile_grace_s=0.0,
    )


@pytest.fixture
def rt(
    ltm_settings: LtmSettings, ltm_pg_url: str, embedder: CachedEmbedder
) -> Iterator[LtmRuntime]:
    runtime = ltm_env.runtime_for(ltm_settings, ltm_pg_url, embedder).start()
    yield runtime
    ltm_env.teardown_runtime(runtime)


@pytest.fixture
def ltm_worker(
    res: Runtime, rt: LtmRuntime, ltm_settings: LtmSettings, tmp_path: Path
) -> Iterator[CeleryProcess]:
    worker = start_celery(
        "worker",
        ["-Q", "ltm", "-P", "prefork", "-c", "1", "-n", f"ltm-{res.settings.key_namespace}@%h",
         "--include", "memstrata.tasks.ltm", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        settings=res.settings,
        log_path=tmp_path / "worker.log",
        env={
            "MEMSTRATA_LTM__MILVUS_URI": ltm_settings.milvus_uri,
            "MEMSTRATA_LTM__COLLECTION_PREFIX": ltm_settings.collection_prefix,
            "MEMSTRATA_LTM__RECONCILE_GRACE_S": "0",
        },
    )  # fmt: skip
    try:
        worker.wait_for_log(" ready.")
        yield worker
    finally:
        worker.stop()


def states(rt: LtmRuntime, memory_id: str) -> set[str]:
    return {p.state.value for p in rt.ledger.projections([memory_id])}


def stale(rt: LtmRuntime, memory_id: str) -> int:
    return sum(1 for r in rt.ledger.stale_rows(100_000) if r.memory_id == memory_id)


def test_tasks_index_delete_and_reconcile_cards_on_a_real_worker(
    rt: LtmRuntime, ltm_worker: CeleryProcess, producer: Celery, tenant: str
) -> None:
    draft = ltm_env.card_draft(
        tenant, "case.504", "HTTP504 from payment-service", "gateway timeout"
    )
    memory_id = rt.ledger.write(draft).memory_id
    producer.send_task(LTM_INDEX, args=[[memory_id]])
    wait_until(lambda: states(rt, memory_id) == {"indexed"}, "index task", worker=ltm_worker)
    flt = CardFilter(tenant_id=tenant)
    assert rt.search.search("HTTP504", flt, mode=SearchMode.LEXICAL)[0].memory_id == memory_id

    forgotten = rt.ledger.write(
        ltm_env.card_draft(tenant, "case.x", "ERR_X", "never sent")
    ).memory_id
    producer.send_task(LTM_RECONCILE)
    wait_until(lambda: states(rt, forgotten) == {"indexed"}, "reconcile task", worker=ltm_worker)

    # an update inserts the new version's row; the reconciler purges the one it replaced
    rt.ledger.write(ltm_env.card_draft(tenant, "case.504", "HTTP504 from payment-service",
                                       "the gateway's read timeout was two seconds"))  # fmt: skip
    producer.send_task(LTM_INDEX, args=[[memory_id]])
    wait_until(lambda: stale(rt, memory_id) > 0, "update task", worker=ltm_worker)
    assert rt.vector.count_owner(tenant, "u_42") == 3  # two cards, one of them twice
    producer.send_task(LTM_RECONCILE)
    wait_until(lambda: stale(rt, memory_id) == 0, "purge by the reconciler", worker=ltm_worker)
    assert rt.vector.count_owner(tenant, "u_42") == 2
    assert rt.lexical.count_owner(tenant, "u_42") == 2

    producer.send_task(LTM_DELETE, args=[[memory_id]])
    wait_until(
        lambda: (
            rt.ledger.cards([memory_id])[memory_id].status.value == "deleted"
            and states(rt, memory_id) == {"indexed"}
        ),
        "delete task",
        worker=ltm_worker,
    )
    hits = rt.search.search("HTTP504 payment-service", flt, mode=SearchMode.HYBRID)
    assert memory_id not in {r.memory_id for r in hits}


def test_invalid_ids_fail_without_retry(
    rt: LtmRuntime, ltm_worker: CeleryProcess, producer: Celery
) -> None:
    producer.send_task(LTM_INDEX, args=[["bad id!"]])
    wait_until(lambda: "InvalidId" in ltm_worker.log(), "task failure", worker=ltm_worker)
    assert "Retry in" not in ltm_worker.log()
