"""Per-process resources: clients and stores built from settings, after fork.

Celery calls :func:`reset_resources` in ``worker_process_init``; everything else calls
:func:`get_resources`, which also rebuilds if it finds itself in a forked child (a Redis
connection pool must never cross a fork).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from core.authority.cache import ProfileCache
from core.authority.db import make_engine
from core.extract.rules import RuleExtractor
from core.ingest.pipeline import IngestPipeline
from core.ingest.queue import IngestQueue
from core.policy.write import WritePolicy
from core.settings import Settings, load_settings
from core.stm.store import StmStore
from core.transcript.store import TranscriptStore


@dataclass
class Resources:
    settings: Settings
    redis: redis.Redis
    stm: StmStore
    transcript: TranscriptStore
    queue: IngestQueue
    pipeline: IngestPipeline
    pid: int
    authority: Engine
    profile_cache: ProfileCache

    def close(self) -> None:
        self.redis.close()
        self.authority.dispose()


def build_resources(settings: Settings) -> Resources:
    client = redis.Redis.from_url(
        str(settings.redis_url),
        decode_responses=True,
        socket_timeout=settings.redis_socket_timeout_s,
        socket_connect_timeout=settings.redis_socket_timeout_s,
        health_check_interval=30,
    )
    stm = StmStore(
        client,
        namespace=settings.key_namespace,
        session_cap=settings.stm_session_cap,
        max_summary_chars=settings.max_summary_chars,
        max_detail_chars=settings.max_detail_chars,
    )
    transcript = TranscriptStore(
        settings.transcript_dir,
        fsync=settings.transcript_fsync,
        max_message_chars=settings.max_message_chars,
        max_turn_messages=settings.max_turn_messages,
    )
    queue = IngestQueue(
        client,
        namespace=settings.key_namespace,
        shards=settings.ingest_shards,
        kick_ttl_ms=settings.ingest_kick_ttl_ms,
        claim_idle_ms=settings.ingest_claim_idle_ms,
    )
    policy = WritePolicy(threshold=settings.write_threshold, ttl=settings.ttl)
    pipeline = IngestPipeline(
        store=stm,
        extractor=RuleExtractor(conversation_facts=settings.extract_conversation_facts),
        policy=policy,
        decision_ttl_s=settings.decision_ttl_s,
    )
    # lazy: no connection is opened until the first authority read or write
    authority = make_engine(
        settings.postgres_url,
        connect_timeout_s=settings.postgres_timeout_s,
        pool_size=settings.postgres_pool_size,
    )
    profile_cache = ProfileCache(
        client,
        namespace=settings.key_namespace,
        entry_ttl_s=settings.profile_cache_ttl_s,
        version_ttl_s=settings.profile_cache_version_ttl_s,
    )
    return Resources(
        settings, client, stm, transcript, queue, pipeline, os.getpid(), authority, profile_cache
    )


_current: Resources | None = None


def get_resources() -> Resources:
    global _current
    if _current is None or _current.pid != os.getpid():
        _current = build_resources(load_settings())
    return _current


def reset_resources(settings: Settings | None = None) -> Resources:
    """(Re)build this process's resources; called after fork and by tests."""
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = build_resources(settings or load_settings())
    return _current


def close_resources() -> None:
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = None
