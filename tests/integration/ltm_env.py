"""Fixtures of the LTM tests: a real milvus-lite server, a real PostgreSQL database.

* ``milvus_server`` (session): the bundled milvus-lite 2.5.1 binary on a free port in a
  temp folder, through our launcher; stopped at the end.
* ``ltm_pg_url`` (session): a fresh database, migrated with the LTM Alembic branch alone
  (``ltm@head``, so the branch migrates on its own), dropped at the end.
* ``ltm``: a started :class:`LtmRuntime` with its own collection prefix; collections
  dropped and ledger rows deleted afterwards.
Test modules bind the fixtures by assignment (``ltm = ltm_env.ltm``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.core import migrations
from memstrata.core.ltm.card import CardDraft
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder, make_embedder
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.runtime import build_ltm, make_ledger, make_postgres
from memstrata.core.settings import load_settings
from tests.integration.authority_db import scratch_database

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    folder = tmp_path_factory.mktemp("milvus")
    server = MilvusServer(folder / "ltm.db", f"127.0.0.1:{free_port()}")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ltm_pg_url() -> Iterator[str]:
    with scratch_database("memstrata_ltm_test_") as url:
        migrations.upgrade(url, "ltm@head")
        yield url


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    return CachedEmbedder(make_embedder("use-multilingual"), capacity=1000)


def make_runtime(uri: str, pg_url: str, embedder: CachedEmbedder, **over: object) -> LtmRuntime:
    values: dict[str, object] = {
        "milvus_uri": uri,
        "milvus_timeout_s": 3.0,
        "collection_prefix": f"t{uuid.uuid4().hex[:10]}",
        "reconcile_grace_s": 0.0,
        "generation_refresh_s": 0.2,  # a reindex waits 2x this between its steps
    }
    settings = LtmSettings(**(values | over))  # type: ignore[arg-type]
    return runtime_for(settings, pg_url, embedder)


def runtime_for(settings: LtmSettings, pg_url: str, embedder: CachedEmbedder) -> LtmRuntime:
    """The composition root's LTM on a pool of its own (``teardown_runtime`` disposes it)."""
    app = load_settings(postgres_url=pg_url, ltm=settings)
    return build_ltm(settings, ledger=make_ledger(app, make_postgres(app)), embedder=embedder)


def teardown_runtime(rt: LtmRuntime) -> None:
    try:
        rt.lexical.drop()
        rt.vector.drop()
    finally:
        with rt.engine.begin() as conn:
            conn.execute(text("DELETE FROM ltm_cards"))
        rt.close()
        rt.engine.dispose()  # the pool is the runtime's; this one was made for the test


@pytest.fixture
def ltm(
    milvus_server: MilvusServer, ltm_pg_url: str, embedder: CachedEmbedder
) -> Iterator[LtmRuntime]:
    rt = make_runtime(milvus_server.uri, ltm_pg_url, embedder).start()
    yield rt
    teardown_runtime(rt)


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def card_draft(tenant: str, key: str, title: str, summary: str, **over: object) -> CardDraft:
    values: dict[str, object] = {
        "tenant_id": tenant,
        "user_id": "u_42",
        "project_id": "p_payment",
        "canonical_key": key,
        "title": title,
        "summary": summary,
    }
    values.update(over)
    return CardDraft.model_validate(values)


CORPUS: list[tuple[str, str, str]] = [
    (
        "case.createorder.timeout",
        "createOrder timeout 常见排查经验",
        "历史上多次出现 createOrder timeout，数据库正常时常见根因是线程池饱和",
    ),
    (
        "case.ora00942",
        "ORA-00942 on the reporting job",
        "The reporting job failed with ORA-00942 because the view was dropped in a migration.",
    ),
    (
        "pref.mango",
        "Favourite dessert",
        "The user loves mango ice cream from the shop near the office.",
    ),
    (
        "case.payment.deploy",
        "payment-service deploy rollback",
        "A payment-service deploy was rolled back after the health check on port 8443 failed.",
    ),
    (
        "case.redis.oom",
        "缓存内存不足",
        "Redis 内存打满导致写入失败，后来把淘汰策略改成了 noeviction 并扩容。",
    ),
]


def seed_corpus(
    rt: LtmRuntime, tenant: str, make: Callable[..., CardDraft] = card_draft
) -> dict[str, str]:
    """Write the corpus to the ledger and project it; returns canonical key -> id."""
    ids = {}
    for key, title, summary in CORPUS:
        ids[key] = rt.ledger.write(make(tenant, key, title, summary)).memory_id
    report = rt.projector.project(list(ids.values()))
    assert report.indexed == 2 * len(CORPUS), report
    rt.lexical.refresh()
    return ids


def data_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "milvus"
    folder.mkdir()
    return folder
