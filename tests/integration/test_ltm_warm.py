"""Warming long-term memory loads what the first search would load inside its budget.

The quickstart demo's first Chinese long-term recall (a fresh CLI process) timed out at
2 s: the default embedder reads its weights on its first call (1.1 s here) and the
analyzer loads jieba's dictionary on its first Chinese text (0.6 s), both inside recall's
time budget although the process had called ``warm_ltm()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import jieba
import pytest

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder, Vectors, make_embedder
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from tests.conftest import REDIS_URL
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
ltm_pg_url = ltm_env.ltm_pg_url


class CountingEmbedder:
    """The real default model, counting the calls that reach it."""

    def __init__(self) -> None:
        self.model = make_embedder("use-multilingual")
        self.name, self.dim = self.model.name, self.model.dim
        self.queries: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.model.embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.queries.extend(texts)
        return self.model.embed_queries(texts)


def test_warming_ltm_calls_the_model_and_loads_the_chinese_analyzer(
    milvus_server: MilvusServer, ltm_pg_url: str, tmp_path: Path
) -> None:
    # Given a fresh runtime whose model has never been called
    model = CountingEmbedder()
    cached = CachedEmbedder(model, capacity=100)
    ns = f"t{uuid.uuid4().hex[:10]}"
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL, key_namespace=ns, transcript_dir=tmp_path / "l0",
            postgres_url=ltm_pg_url,
            ltm=LtmSettings(milvus_uri=milvus_server.uri, collection_prefix=ns,
                            milvus_timeout_s=3.0, history_enabled=False),
        ),
        embedder=cached,
    )  # fmt: skip
    try:
        assert model.queries == []
        # When LTM is warmed
        assert rt.warm_ltm() is None
        # Then the model ran once on a probe, which the query cache does not keep (the
        # first real query is embedded as asked), and jieba's dictionary is loaded
        assert len(model.queries) == 1
        query = "那个接口还是超时"
        cached.embed_query(query)
        assert model.queries[1:] == [query]
        assert jieba.dt.initialized
    finally:
        ltm = rt.ltm
        try:
            ltm.lexical.drop()
            ltm.vector.drop()
        finally:
            rt.close()
