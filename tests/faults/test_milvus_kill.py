"""milvus-lite SIGKILLed while cards are being indexed: the ledger keeps the rest pending
and the reconciler converges after the restart, with no card missing or doubled.

Its own milvus-lite server (free port, its own file) and its own collections; the card
ledger is the session's scratch PostgreSQL database (``tests/integration/ltm_env.py``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.indexer import plan_reconcile, reconcile
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.ltm.runtime import LtmRuntime
from tests.integration import ltm_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
tenant = ltm_env.tenant

CARDS = 30
BATCH = 5
KILL_AFTER = 2  # batches indexed before the SIGKILL
ROUNDS = 20  # bounded reconcile rounds after the restart


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[MilvusServer]:
    server = MilvusServer(tmp_path / "kill.db", f"127.0.0.1:{free_port()}")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def rt(own_server: MilvusServer, ltm_pg_url: str, embedder: CachedEmbedder) -> Iterator[LtmRuntime]:
    runtime = ltm_env.make_runtime(own_server.uri, ltm_pg_url, embedder).start()
    yield runtime
    if own_server.proc is None or own_server.proc.poll() is not None:
        own_server.stop()
        own_server.start()
    ltm_env.teardown_runtime(runtime)


def test_milvus_sigkill_mid_indexing_converges_after_restart(
    own_server: MilvusServer, rt: LtmRuntime, tenant: str
) -> None:
    ids = []
    for n in range(CARDS // BATCH):
        if n == KILL_AFTER:  # mid-indexing: the server dies without a clean shutdown
            assert own_server.proc is not None
            own_server.proc.send_signal(signal.SIGKILL)
            own_server.proc.wait(15)
        batch = [
            rt.ledger.write(ltm_env.card_draft(tenant, f"case.k{n}x{k}", f"card {n}/{k}",
                                               f"kill test card {n} {k}")).memory_id
            for k in range(BATCH)
        ]  # fmt: skip
        ids += batch
        rt.projector.project(batch)  # after the kill: stays pending, never raises
    pending = rt.ledger.counts()
    assert pending["vector"].get("indexed", 0) < CARDS, pending  # the kill left work

    own_server.stop()  # releases the lock of the killed server
    t0 = time.monotonic()
    own_server.start()
    for _ in range(ROUNDS):
        plan = plan_reconcile(rt.ledger, now=time.time(), grace_s=0, max_attempts=50, limit=100)
        if not plan.memory_ids:
            break
        reconcile(rt.projector, plan)
        time.sleep(0.2)
    converge_s = time.monotonic() - t0
    counts = rt.ledger.counts()
    assert counts == {"lexical": {"indexed": CARDS}, "vector": {"indexed": CARDS}}, (
        counts,
        converge_s,
    )
    assert rt.vector.count() == CARDS  # none lost, none doubled in the collection
