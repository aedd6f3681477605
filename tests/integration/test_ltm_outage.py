"""Milvus down: the ledger keeps every card pending, nothing is lost, and the
reconciler converges once the server is back (a real stop and restart)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.errors import IndexUnavailable
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.indexer import plan_reconcile, reconcile
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.ltm.search import SearchMode
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
tenant = ltm_env.tenant


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[MilvusServer]:
    server = MilvusServer(tmp_path / "outage.db", f"127.0.0.1:{free_port()}")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def rt(own_server: MilvusServer, ltm_pg_url: str, embedder: CachedEmbedder) -> Iterator[LtmRuntime]:
    runtime = ltm_env.make_runtime(own_server.uri, ltm_pg_url, embedder).start()
    yield runtime
    if own_server.proc is None:
        own_server.start()
    ltm_env.teardown_runtime(runtime)


def test_an_outage_leaves_cards_pending_and_reconcile_converges_after_restart(
    own_server: MilvusServer, rt: LtmRuntime, tenant: str
) -> None:
    ids = ltm_env.seed_corpus(rt, tenant)
    own_server.stop()

    late = ltm_env.card_draft(
        tenant, "case.late", "ERR_CONN_RESET from the gateway", "written in the outage"
    )
    late_id = rt.ledger.write(late).memory_id
    report = rt.projector.project([late_id])
    assert report.retry and report.indexed == 0
    rows = rt.ledger.projections([late_id])
    assert {(p.state.value, p.attempts) for p in rows} == {("pending", 1)}
    assert all("milvus" in (p.last_error or "") for p in rows)
    with pytest.raises(IndexUnavailable):
        rt.search.search("ERR_CONN_RESET", CardFilter(tenant_id=tenant), mode=SearchMode.LEXICAL)

    plan = plan_reconcile(rt.ledger, now=time.time(), grace_s=0, max_attempts=8, limit=100)
    assert plan.memory_ids == (late_id,)
    assert reconcile(rt.projector, plan).retry  # still down: stays pending, nothing lost

    own_server.start()
    plan = plan_reconcile(rt.ledger, now=time.time(), grace_s=0, max_attempts=8, limit=100)
    converged = reconcile(rt.projector, plan)
    assert converged.indexed == 2 and not converged.retry
    assert rt.ledger.counts() == {"lexical": {"indexed": 6}, "vector": {"indexed": 6}}
    flt = CardFilter(tenant_id=tenant)
    assert (
        next(r.memory_id for r in rt.search.search("ERR_CONN_RESET", flt, mode=SearchMode.HYBRID))
        == late_id
    )
    assert (
        rt.search.search("ORA-00942", flt, mode=SearchMode.LEXICAL)[0].memory_id
        == ids["case.ora00942"]
    )
