"""Long-term memory's parts, as the composition root (:mod:`core.runtime`) assembles them.

The ledger's engine is the process's one PostgreSQL pool, owned by the runtime, so
:meth:`LtmRuntime.close` leaves it open.  :meth:`LtmRuntime.start` is the explicit
start-up step: it creates or checks both index schemas and fails clearly when the
embedder's dimension differs from the vector collection's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder, check_dimension
from memstrata.core.ltm.generations import RoutedLexical, RoutedVector
from memstrata.core.ltm.history import HistoryIndex
from memstrata.core.ltm.indexer import Projector
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.milvus import MilvusConnection
from memstrata.core.ltm.search import LtmSearch
from memstrata.core.ltm.text import warm as warm_analyzer

WARM_UP_QUERY = "warm-up 预热"


@dataclass
class LtmRuntime:
    settings: LtmSettings
    engine: Engine
    milvus: MilvusConnection
    es: Any | None
    embedder: CachedEmbedder
    ledger: Ledger
    lexical: RoutedLexical
    vector: RoutedVector
    projector: Projector
    search: LtmSearch
    pid: int
    history: HistoryIndex | None = None

    def start(self) -> LtmRuntime:
        """Ensure both schemas and check the embedding dimension (fails loudly)."""
        self.vector.ensure_schema()
        check_dimension(
            self.embedder, self.vector.collection_dim(), collection=self.vector.collection
        )
        self.lexical.ensure_schema()
        if self.history is not None:
            self.history.ensure_schema()
        return self

    def warm(self) -> None:
        """Load now what the first search would load inside recall's time budget.

        Every local embedder reads its weights on its first call (1.1 s for the default
        model on this machine) and the analyzer loads jieba's dictionary on its first
        Chinese query (0.6 s): together they overran the 2 s budget of a fresh process's
        first long-term recall.  The probe goes to the model, not the query cache.
        """
        warm_analyzer()
        self.embedder.inner.embed_queries([WARM_UP_QUERY])

    def close(self) -> None:
        """Close the index clients and worker threads; the PostgreSQL pool is the runtime's."""
        self.search.close()
        self.projector.close()
        if self.history is not None:
            self.history.close()
        self.milvus.close()
        if self.es is not None:
            self.es.close()
