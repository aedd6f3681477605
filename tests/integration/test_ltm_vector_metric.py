"""The vector index searches unit vectors by inner product, which ranks as cosine does.

New collections get an IP index (milvus-lite's FLAT scan costs less CPU with it than with
COSINE: docs/PERFORMANCE.md); a collection made before with COSINE keeps its metric,
read from its index, and is searched with it.  Both must return the same cards in the
same order with the same scores, whatever the length of the vectors an embedder hands
over: the index normalises what it writes and what it asks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm import admin
from memstrata.core.ltm import vector as vector_module
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.milvus import MilvusConnection
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.ltm.search import SearchMode
from memstrata.core.ltm.vector import MilvusVectorIndex
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
tenant = ltm_env.tenant
OWNER = CardFilter(tenant_id="t_1", user_id="u_42")
DIM = 16


@pytest.fixture
def conn(milvus_server: MilvusServer) -> Iterator[MilvusConnection]:
    c = MilvusConnection(milvus_server.uri, timeout_s=5.0)
    yield c
    c.close()


def _index(
    conn: MilvusConnection, monkeypatch: pytest.MonkeyPatch, metric: str | None = None
) -> MilvusVectorIndex:
    """A new collection; ``metric`` overrides the default as an earlier version made it."""
    name = f"metric_{uuid.uuid4().hex[:10]}"
    index = MilvusVectorIndex(conn, collection=name, dim=DIM)
    with monkeypatch.context() as m:
        if metric is not None:
            m.setattr(vector_module, "METRIC", metric)
        index.ensure_schema()
    return index


def _cards_and_vectors(n: int) -> tuple[list[LtmCard], np.ndarray]:
    rng = np.random.default_rng(7)
    cards = [
        LtmCard.from_draft(
            ltm_env.card_draft("t_1", f"case.m{i}", f"case {i}", f"summary {i}"), now=time.time()
        )
        for i in range(n)
    ]
    # lengths far from 1: what a provider that forgot to normalise would hand over
    vectors = rng.standard_normal((n, DIM)).astype(np.float32) * rng.uniform(0.1, 9, (n, 1))
    return cards, vectors


def test_a_new_collection_is_indexed_by_inner_product(
    conn: MilvusConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = _index(conn, monkeypatch)
    try:
        assert index.metric == "IP"
        [name] = conn.client.list_indexes(index.collection, field_name="vector")
        assert conn.client.describe_index(index.collection, name)["metric_type"] == "IP"
        # a second process opening the collection reads the metric from its index
        again = MilvusVectorIndex(conn, collection=index.collection, dim=DIM)
        again.ensure_schema()
        assert again.metric == "IP"
    finally:
        index.drop()


def test_inner_product_and_cosine_collections_rank_and_score_alike(
    conn: MilvusConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    ip, cosine = _index(conn, monkeypatch), _index(conn, monkeypatch, metric="COSINE")
    try:
        # an existing COSINE collection, opened by this version: searched as COSINE
        opened = MilvusVectorIndex(conn, collection=cosine.collection, dim=DIM)
        opened.ensure_schema()
        assert opened.metric == "COSINE"
        cards, vectors = _cards_and_vectors(40)
        ip.insert(cards, vectors)
        opened.insert(cards, vectors)
        # an adapter made without ensure_schema (a routed index's generation made by
        # another process) reads the metric before its first search
        lazy = MilvusVectorIndex(conn, collection=cosine.collection, dim=DIM)
        assert lazy.metric is None
        query = np.ones(DIM, dtype=np.float32)
        assert lazy.search(query, OWNER, 5) == opened.search(query, OWNER, 5)
        assert lazy.metric == "COSINE"
        units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        rng = np.random.default_rng(11)
        for _ in range(10):
            query = rng.standard_normal(DIM).astype(np.float32) * 5  # not unit either
            by_ip, by_cosine = ip.search(query, OWNER, 10), opened.search(query, OWNER, 10)
            assert [h.memory_id for h in by_ip] == [h.memory_id for h in by_cosine]
            expected = units @ (query / np.linalg.norm(query))  # the true cosines
            best = np.argsort(-expected)[:10]
            assert [h.memory_id for h in by_ip] == [cards[i].memory_id for i in best]
            for hit, i in zip(by_ip, best, strict=True):
                assert hit.score == pytest.approx(float(expected[i]), abs=1e-5)
            for a, b in zip(by_ip, by_cosine, strict=True):
                assert a.score == pytest.approx(b.score, abs=1e-5)
    finally:
        ip.drop()
        cosine.drop()


def test_a_collection_with_another_metric_is_refused_at_start(
    conn: MilvusConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    l2 = _index(conn, monkeypatch, metric="L2")
    try:
        with pytest.raises(InvalidInput, match="metric is L2"):
            MilvusVectorIndex(conn, collection=l2.collection, dim=DIM).ensure_schema()
    finally:
        l2.drop()


def test_a_cosine_deployment_keeps_answering_and_a_reindex_moves_it_to_inner_product(
    milvus_server: MilvusServer,
    ltm_pg_url: str,
    embedder: CachedEmbedder,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upgrade in place: the card collection an earlier version made (COSINE) is read
    with its own metric; ``ltm reindex`` builds the next generation with IP and swaps
    it in, and the vector search finds the same cards in the same order."""
    with monkeypatch.context() as m:  # the earlier version's runtime made the collection
        m.setattr(vector_module, "METRIC", "COSINE")
        made = ltm_env.make_runtime(milvus_server.uri, ltm_pg_url, embedder).start()
    rt = ltm_env.runtime_for(made.settings, ltm_pg_url, embedder).start()  # this version's
    try:
        ltm_env.seed_corpus(rt, tenant)
        flt = CardFilter(tenant_id=tenant)

        def found() -> list[str]:
            hits = rt.search.search("ORA-00942 reporting job", flt, mode=SearchMode.VECTOR)
            return [h.memory_id for h in hits]

        old = rt.vector.serving
        assert old.metric == "COSINE"
        before = found()
        assert before
        admin.reindex(rt)
        assert rt.vector.serving.collection != old.collection
        assert rt.vector.serving.metric == "IP"
        assert found() == before
    finally:
        ltm_env.teardown_runtime(rt)
        made.close()
        made.engine.dispose()
