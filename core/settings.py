"""Typed settings (pydantic-settings v2, env prefix ``MEMSTRATA_``).

Built by :func:`load_settings` at process start, never at import, so a worker, the CLI
and each test can hold different settings.  Nested policies use ``__`` in env names,
e.g. ``MEMSTRATA_TTL__FACT_S=3600``.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RedisDsn,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from memstrata.core.ids import validate_id
from memstrata.core.lifecycle.config import LifecycleSettings
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.policy.write import TtlPolicy
from memstrata.core.recall.config import RecallLimits

# passwords that ship in images, docs and tutorials (Milvus' root:Milvus, MinIO's
# minioadmin, the old compose file's memstrata, ...): refused outside profile "dev"
KNOWN_DEFAULT_PASSWORDS = frozenset({
    "memstrata", "postgres", "password", "admin", "root", "milvus", "minioadmin",
    "changeme", "change-me", "secret", "elastic", "redis", "123456", "test", "default",
})  # fmt: skip


def embedded_milvus_uri(namespace: str) -> str:
    """The local milvus-lite address of a namespace: 19530 for ``memory``, else a port of
    its own (19531-19930), so two deployments on one machine never share one by default."""
    if namespace == "memory":
        return "http://127.0.0.1:19530"
    return f"http://127.0.0.1:{19530 + 1 + zlib.crc32(namespace.encode()) % 400}"


# ports of services often run beside memstrata that the derived Flower ports skip:
# Kibana (beside Elasticsearch), AMQP and AMQPS (RabbitMQ, a Celery broker), VNC
_FLOWER_PORTS_TAKEN = frozenset({5601, 5671, 5672, 5900})


def derived_flower_port(namespace: str) -> int:
    """Flower's port for a namespace other than ``memory`` (5555): one of 5556-5955 from
    the namespace's crc32, the next one up where that is a well-known service's port."""
    slot = zlib.crc32(namespace.encode()) % 400
    while 5556 + slot in _FLOWER_PORTS_TAKEN:
        slot = (slot + 1) % 400
    return 5556 + slot


class McpSettings(BaseModel):
    """``memstrata mcp`` (``MEMSTRATA_MCP__*``): the MCP server's defaults and limits."""

    model_config = ConfigDict(frozen=True)

    tenant: str = "default"  # stdio's tenant; over HTTP each API key's tenant is used
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    max_request_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    max_fact_chars: int = Field(8000, ge=16, le=1024 * 1024)  # `remember` of one fact
    stm_resource_limit: int = Field(50, ge=1, le=1000)  # items (cards) an STM (LTM) resource lists

    @field_validator("tenant")
    @classmethod
    def _tenant_is_safe(cls, value: str) -> str:
        return validate_id(value, kind="MEMSTRATA_MCP__TENANT")


class Settings(BaseSettings):
    """Every knob of one memstrata process; ranges are checked at start-up."""

    model_config = SettingsConfigDict(
        env_prefix="MEMSTRATA_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    # stores
    redis_url: RedisDsn = RedisDsn("redis://127.0.0.1:6379/0")  # STM store (and broker)
    broker_url: RedisDsn | None = None  # defaults to redis_url
    key_namespace: str = "memory"  # prefix of every Redis key and Celery queue
    redis_socket_timeout_s: float = Field(5.0, gt=0, le=60)
    postgres_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/memstrata"  # L1 authority
    postgres_timeout_s: float = Field(5.0, gt=0, le=60)  # connect and statement timeout
    postgres_pool_size: int = Field(5, ge=1, le=100)
    transcript_dir: Path = Path("var/transcripts")  # L0 folder (agents and workers share it)
    transcript_fsync: bool = True  # fsync every L0 append (a receipt means durable)
    # how far back from a session file's end a caller-named turn_id is looked for before
    # appending (docs/RELIABILITY.md); only calls that name their turn_id pay for the read
    transcript_dedup_window_bytes: int = Field(256 * 1024, ge=4096, le=64 * 1024 * 1024)

    # input limits (characters).  A message (content + tool-call arguments) is kept whole in
    # L0 up to max_message_chars and a turn up to max_turn_chars; longer texts keep their
    # head and tail around a marker, and the turn is accepted (docs/WRITE_PATH.md §1)
    max_message_chars: int = Field(1024 * 1024, ge=256, le=16 * 1024 * 1024)
    max_turn_chars: int = Field(4 * 1024 * 1024, ge=256, le=64 * 1024 * 1024)
    max_turn_messages: int = Field(64, ge=1, le=10_000)
    max_summary_chars: int = Field(400, ge=40, le=4000)
    max_detail_chars: int = Field(4000, ge=200, le=64 * 1024)

    # owners (docs/AGENTS.md "Tenants and users"): the tenant the CLI and the client use
    # when none is given, and what record_turn() does with a (tenant, user) that PostgreSQL
    # does not know: "provision" creates the tenant and the user with defaults (so a turn
    # recorded can be recalled at once), "refuse" raises UnknownTenant / UnknownUser
    tenant: str = "default"  # the tenant of calls that name none
    unknown_owner: Literal["provision", "refuse"] = "provision"  # record_turn on an unknown owner

    # the REST service (`memstrata api`, docs/AGENTS.md)
    api_host: str = "127.0.0.1"  # address memstrata api listens on
    api_port: int = Field(8300, ge=1, le=65535)  # its port
    api_workers: int = Field(1, ge=1, le=64)  # uvicorn worker processes
    # bigger request bodies are refused with 413
    api_max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    # how long a process trusts a verified API key before asking PostgreSQL again (so a
    # revoked key stops working within this many seconds; 0: every request asks)
    api_key_cache_s: float = Field(30.0, ge=0, le=3600)
    # the deployment's admin key: `Authorization: Bearer <it>` may create and list every
    # tenant and make tenants' API keys over REST (POST/GET /v1/tenants); unset, tenants are
    # made on the CLI only.  Compared by SHA-256 in constant time; at least 32 characters
    admin_api_key: SecretStr | None = Field(None, min_length=32, max_length=200)

    # authority layer (PostgreSQL L1) and its Redis profile cache
    profile_cache_ttl_s: int = Field(600, ge=1, le=24 * 3600)
    profile_cache_version_ttl_s: int = Field(7 * 24 * 3600, ge=3600, le=90 * 24 * 3600)
    max_fact_value_bytes: int = Field(16 * 1024, ge=64, le=1024 * 1024)

    # recall's circuit breakers, one per layer (authority, stm, ltm, history): a layer
    # that failed this many times in a row is skipped, at no cost, for the cool-down
    # (seconds); then one probe call decides whether it is back (docs/OPERATIONS.md)
    recall_breaker_failures: int = Field(1, ge=1, le=100)
    recall_breaker_cooldown_s: float = Field(5.0, gt=0, le=3600)
    # what recall reads per layer and how long it waits for long-term memory
    recall: RecallLimits = Field(default_factory=RecallLimits)

    # write policy
    write_threshold: float = 3.0
    ttl: TtlPolicy = TtlPolicy()
    stm_session_cap: int = Field(50, ge=1, le=100_000)
    # memory bounds (docs/OPERATIONS.md "Memory bounds"); 0 turns a cap off
    stm_user_cap: int = Field(2000, ge=0, le=10_000_000)  # live items per owner
    stm_tenant_cap: int = Field(500_000, ge=0, le=1_000_000_000)  # live items per tenant
    decision_ttl_s: int = Field(7 * 24 * 3600, ge=60)
    # the conversation_fact rule: one fact per casual user statement no other rule claims
    extract_conversation_facts: bool = True
    # extraction budget (docs/WRITE_PATH.md §3): a message is read in clause-safe windows of
    # extract_window_chars, at most extract_max_message_chars of it (head windows and the
    # last one) and extract_max_turn_chars of the whole turn (shared fairly); at most
    # extract_max_message_candidates candidates per message, extract_max_turn_candidates
    # per turn
    extract_window_chars: int = Field(4096, ge=256, le=1024 * 1024)
    extract_max_message_chars: int = Field(64 * 1024, ge=256, le=16 * 1024 * 1024)
    extract_max_turn_chars: int = Field(256 * 1024, ge=256, le=64 * 1024 * 1024)
    extract_max_message_candidates: int = Field(64, ge=1, le=100_000)
    extract_max_turn_candidates: int = Field(256, ge=1, le=1_000_000)
    # refusals recorded one by one per message; one summary record counts the rest
    decision_max_refusals_per_message: int = Field(16, ge=0, le=100_000)

    # ingest pipeline
    ingest_shards: int = Field(4, ge=1, le=256)
    ingest_batch: int = Field(200, ge=1, le=10_000)
    ingest_kick_ttl_ms: int = Field(30_000, ge=1000)
    ingest_claim_idle_ms: int = Field(60_000, ge=1000)
    ingest_max_run_s: float = Field(5.0, gt=0, le=300)
    # how long an idle drain waits for new turns before releasing its shard (0 = not at all;
    # ~20 under steady load); keep ingest_shards <= worker processes when > 0, or a
    # lingering drain holds a worker that another shard's drain is waiting for
    ingest_linger_ms: int = Field(0, ge=0, le=5000)
    # a batch is processed and acknowledged in chunks of at most this many L0 bytes
    ingest_chunk_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    # a turn processed alone (after its batch failed or its drain died) this many times
    # without completing is dead-lettered with its last error (docs/WRITE_PATH.md §2)
    ingest_max_attempts: int = Field(3, ge=1, le=100)
    # a worker or REST-service process collects Python's generation 0 every this many net
    # allocations (CPython: 700) and freezes what it built at start-up (core/collector.py);
    # 0 = as is
    gc_threshold: int = Field(50_000, ge=0, le=10_000_000)
    # the reconciler (docs/RELIABILITY.md): turns in L0 but never queued are queued by Beat
    # every interval; files written within the horizon are looked at, at most max_turns
    # turns queued per run; a session's watermark lives horizon + 1 h after its last turn
    ingest_reconcile_interval_s: float = Field(60.0, gt=0)
    ingest_reconcile_horizon_s: float = Field(24 * 3600.0, ge=60, le=90 * 24 * 3600)
    ingest_reconcile_max_turns: int = Field(1000, ge=1, le=1_000_000)

    # maintenance
    sweep_batch: int = Field(1000, ge=1, le=1_000_000)
    sweep_interval_s: float = Field(60.0, gt=0)

    # session compression (docs/COMPRESSION.md); sizes in cl100k tokens
    compress_threshold_tokens: int = Field(32_000, ge=1000)
    compress_step_tokens: int = Field(16_000, ge=1000)
    compress_budget_tokens: int = Field(8_000, ge=256)
    compress_idle_s: float = Field(900.0, gt=0)
    compress_idle_check_s: float = Field(300.0, gt=0)
    compress_idle_batch: int = Field(50, ge=1, le=10_000)
    compress_view_ttl_s: int = Field(24 * 3600, ge=60)

    # long-term memory: Milvus / Elasticsearch, embeddings, search policy (MEMSTRATA_LTM__*)
    ltm: LtmSettings = Field(default_factory=LtmSettings)
    # promotion, batch queue, sessions, LTM maintenance (docs/LIFECYCLE.md)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)

    # the MCP server (MEMSTRATA_MCP__*)
    mcp: McpSettings = Field(default_factory=McpSettings)

    # celery
    task_soft_time_limit_s: int = Field(60, ge=1)
    task_time_limit_s: int = Field(90, ge=2)
    broker_visibility_timeout_s: int = Field(3600, ge=60)

    # flower
    flower_port: int = Field(5555, ge=1, le=65535)
    flower_user: str = "admin"
    flower_password: SecretStr | None = None

    # operations (docs/OPERATIONS.md): "production" refuses well-known default passwords in
    # every URL and secret; "dev" (explicit) accepts them, for a laptop's throwaway stack
    profile: Literal["production", "dev"] = "production"
    # multiprocess metric files (core.metrics); default var/<namespace>/prometheus
    metrics_dir: Path | None = None
    # a worker's own /metrics exporter (its main process serves its pool's counters)
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_address: str = "127.0.0.1"
    # log lines: "text" (Celery's format) or "json" (one object a line, ids as fields)
    log_format: Literal["text", "json"] = "text"

    @model_validator(mode="before")
    @classmethod
    def _per_namespace_defaults(cls, data: Any) -> Any:
        """Defaults that must not cross deployments derive from the namespace: L0's folder,
        Flower's port and the embedded Milvus address (docs/OPERATIONS.md "Isolation").
        The default namespace ``memory`` keeps the historical values."""
        if not isinstance(data, dict):
            return data
        ns = data.get("key_namespace", "memory")
        if not isinstance(ns, str) or ns == "memory":
            return data
        validate_id(ns, kind="key namespace")
        data = dict(data)
        data.setdefault("transcript_dir", Path("var") / ns / "transcripts")
        data.setdefault("flower_port", derived_flower_port(ns))
        ltm = data.get("ltm")
        if isinstance(ltm, LtmSettings):
            if "milvus_uri" not in ltm.model_fields_set:
                data["ltm"] = ltm.model_copy(update={"milvus_uri": embedded_milvus_uri(ns)})
        elif isinstance(ltm, dict):
            data["ltm"] = {"milvus_uri": embedded_milvus_uri(ns), **ltm}
        elif ltm is None:
            data["ltm"] = {"milvus_uri": embedded_milvus_uri(ns)}
        return data

    @field_validator("key_namespace")
    @classmethod
    def _namespace_is_safe(cls, value: str) -> str:
        return validate_id(value, kind="key namespace")

    @field_validator("tenant")
    @classmethod
    def _tenant_is_safe(cls, value: str) -> str:
        return validate_id(value, kind="tenant")

    @model_validator(mode="after")
    def _version_outlives_entry(self) -> Settings:
        if self.profile_cache_ttl_s >= self.profile_cache_version_ttl_s:
            raise ValueError("profile_cache_version_ttl_s must exceed profile_cache_ttl_s")
        return self

    @model_validator(mode="after")
    def _no_default_passwords(self) -> Settings:
        if self.profile == "dev":
            return self
        for name, secret in self._secrets():
            if secret.lower() in KNOWN_DEFAULT_PASSWORDS:
                raise ValueError(
                    f"{name} uses a well-known default password; set a real one, or "
                    "MEMSTRATA_PROFILE=dev for a throwaway development stack"
                )
        return self

    def _secrets(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        urls = {"redis_url": str(self.redis_url), "postgres_url": self.postgres_url,
                "ltm.es_url": self.ltm.es_url or "", "ltm.milvus_uri": self.ltm.milvus_uri}
        if self.broker_url is not None:
            urls["broker_url"] = str(self.broker_url)
        for name, url in urls.items():
            password = urlsplit(url).password if "@" in url else None
            if password is not None:
                out.append((name, password))
        for name, value in (("flower_password", self.flower_password),
                            ("ltm.milvus_token", self.ltm.milvus_token)):
            if value is not None and value.get_secret_value():
                token = value.get_secret_value()
                out.append((name, token.rpartition(":")[2] if name.endswith("token") else token))
        return out

    @property
    def effective_broker_url(self) -> str:
        return str(self.broker_url or self.redis_url)


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)
