"""Per-process LTM resources: engine, Milvus/ES clients, embedder, indexes, services.

Built lazily on first use in each process (so after a Celery fork, never at import)
and rebuilt when the pid changes.  :meth:`LtmRuntime.start` is the explicit start-up
step: it creates or checks both index schemas and fails clearly when the embedder's
dimension differs from the vector collection's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine

from core.ltm.config import LtmSettings
from core.ltm.embedding import CachedEmbedder, check_dimension, make_embedder
from core.ltm.indexer import Projector
from core.ltm.ledger import Ledger
from core.ltm.lexical_es import ElasticsearchLexicalIndex
from core.ltm.lexical_es import connect as es_connect
from core.ltm.lexical_milvus import MilvusLexicalIndex
from core.ltm.milvus import MilvusConnection, collection_name
from core.ltm.ports import LexicalIndex
from core.ltm.search import LtmSearch
from core.ltm.vector import MilvusVectorIndex


@dataclass
class LtmRuntime:
    settings: LtmSettings
    engine: Engine
    milvus: MilvusConnection
    es: Any | None
    embedder: CachedEmbedder
    ledger: Ledger
    lexical: LexicalIndex
    vector: MilvusVectorIndex
    projector: Projector
    search: LtmSearch
    pid: int

    def start(self) -> LtmRuntime:
        """Ensure both schemas and check the embedding dimension (fails loudly)."""
        self.vector.ensure_schema()
        check_dimension(
            self.embedder, self.vector.collection_dim(), collection=self.vector.collection
        )
        self.lexical.ensure_schema()
        return self

    def close(self) -> None:
        self.search.close()
        self.projector.close()
        self.engine.dispose()
        self.milvus.close()
        if self.es is not None:
            self.es.close()


def build_runtime(
    settings: LtmSettings, *, postgres_url: str, embedder: CachedEmbedder | None = None
) -> LtmRuntime:
    engine = create_engine(
        postgres_url,
        pool_size=2,
        max_overflow=2,
        pool_pre_ping=True,
        connect_args={"connect_timeout": 5, "options": "-c statement_timeout=10000"},
    )
    if embedder is None:
        inner = make_embedder(settings.embedding_provider, **settings.embedder_options())
        embedder = CachedEmbedder(
            inner, capacity=settings.embedding_cache_size, max_batch=settings.embedding_batch
        )
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else ""
    milvus = MilvusConnection(settings.milvus_uri, timeout_s=settings.milvus_timeout_s, token=token)
    prefix = settings.collection_prefix
    vector = MilvusVectorIndex(
        milvus,
        collection=collection_name(prefix, "ltm_vectors"),
        dim=embedder.dim,
        index_type=settings.milvus_index_type,
        timeout_s=settings.milvus_timeout_s,
    )
    es = None
    lexical: LexicalIndex
    if settings.lexical_backend == "elasticsearch":
        if not settings.es_url:
            raise ValueError("MEMSTRATA_LTM__ES_URL is required for the elasticsearch backend")
        key = settings.es_api_key.get_secret_value() if settings.es_api_key else None
        es = es_connect(settings.es_url, timeout_s=settings.es_timeout_s, api_key=key)
        lexical = ElasticsearchLexicalIndex(
            es, index=settings.es_index, timeout_s=settings.es_timeout_s
        )
    else:
        lexical = MilvusLexicalIndex(
            milvus,
            collection=collection_name(prefix, "ltm_lexical"),
            timeout_s=settings.milvus_timeout_s,
        )
    ledger = Ledger(engine, max_content_chars=settings.max_content_chars)
    projector = Projector(
        ledger=ledger, lexical=lexical, vector=vector, embedder=embedder,
        max_embed_chars=settings.max_embed_chars,
    )  # fmt: skip
    search = LtmSearch(lexical=lexical, vector=vector, embedder=embedder, policy=settings.search)
    return LtmRuntime(
        settings,
        engine,
        milvus,
        es,
        embedder,
        ledger,
        lexical,
        vector,
        projector,
        search,
        os.getpid(),
    )


_current: LtmRuntime | None = None


def get_runtime(settings: LtmSettings, *, postgres_url: str) -> LtmRuntime:
    """This process's runtime, built (and started) on first use after fork."""
    global _current
    if _current is None or _current.pid != os.getpid():
        _current = build_runtime(settings, postgres_url=postgres_url).start()
    return _current


def close_runtime() -> None:
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = None
