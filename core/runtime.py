"""The composition root: every store and service of one process, built from ``Settings``.

This is the one module that wires stores together.  Celery workers build their
:class:`Runtime` after fork (``tasks/app.py``: ``worker_process_init``) and close it at
``worker_process_shutdown``; the CLI, ``memstrata up``, the demo, the benchmarks, the
quality harness and the test fixtures get their objects here too.

What is built when:

* at once, without opening a connection: the Redis client, **one** PostgreSQL engine
  (pool size and connect/statement timeouts from settings), STM, the lifecycle's Redis
  store, L0, the ingest queue and pipeline, the profile cache and the LTM ledger, all
  sharing those two clients (every Redis store gets :attr:`Runtime.redis` injected; none
  hands its client on), and recall's circuit breakers (one per layer, shared by every
  recaller of the process);
* on first use: :attr:`Runtime.ltm` (Milvus / Elasticsearch clients, the embedding model,
  the schema and dimension check), since loading an embedder costs ~0.5 s and most
  processes (agents that only record turns, ingest workers) never touch LTM;
* per call: :meth:`Runtime.recaller` and :meth:`Runtime.lifecycle`, thin views that own
  no clients (a Recaller starts a thread pool: build it after fork, close it when done).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import redis
from sqlalchemy import Engine

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.apikeys import ApiKeys
from memstrata.core.authority.cache import ProfileCache
from memstrata.core.authority.db import make_engine
from memstrata.core.authority.filters import RetrievalFilters
from memstrata.core.breaker import Breakers
from memstrata.core.errors import MemstrataError, StoreUnavailable
from memstrata.core.extract.rules import ExtractionBudget, Extractor, RuleExtractor
from memstrata.core.ingest.deadletters import Attempts, DeadLetters
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.ingest.queue import IngestQueue
from memstrata.core.lifecycle.consolidate import sources_of
from memstrata.core.lifecycle.episodes import EpisodeContext
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder, make_embedder
from memstrata.core.ltm.generations import GenerationStore, Names, RoutedLexical, RoutedVector
from memstrata.core.ltm.history import HistoryIndex
from memstrata.core.ltm.indexer import Projector
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.lexical_es import ElasticsearchLexicalIndex
from memstrata.core.ltm.lexical_es import connect as es_connect
from memstrata.core.ltm.lexical_milvus import MilvusLexicalIndex
from memstrata.core.ltm.milvus import MilvusConnection, collection_name
from memstrata.core.ltm.ports import IndexContext, LexicalIndex
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.ltm.search import LtmSearch
from memstrata.core.ltm.vector import MilvusVectorIndex
from memstrata.core.ltm.views import Contexts, ViewContext
from memstrata.core.owners import Owners
from memstrata.core.policy.write import WritePolicy
from memstrata.core.recall.ltm_adapter import HistoryBackedSearcher, LedgerBackedSearcher
from memstrata.core.recall.pool import PoolCandidate
from memstrata.core.recall.route import LtmMode
from memstrata.core.recall.service import HISTORY, LTM, Recaller, RecallSettings
from memstrata.core.recall.wordsim import StaticWordVectors, WordVectors
from memstrata.core.redact import redact
from memstrata.core.settings import Settings, load_settings
from memstrata.core.stm.lifecycle import LifecycleStore
from memstrata.core.stm.store import StmStore
from memstrata.core.transcript.store import TranscriptStore

log = logging.getLogger(__name__)

OnCards = Callable[[Sequence[str]], None]


def make_redis(settings: Settings) -> redis.Redis:
    """The process's Redis client (lazy: connects on first command); every call times out."""
    return redis.Redis.from_url(
        str(settings.redis_url),
        decode_responses=True,
        socket_timeout=settings.redis_socket_timeout_s,
        socket_connect_timeout=settings.redis_socket_timeout_s,
        health_check_interval=30,
    )


def make_postgres(settings: Settings) -> Engine:
    """The process's one PostgreSQL pool (lazy), with the settings' timeouts."""
    return make_engine(
        settings.postgres_url,
        connect_timeout_s=settings.postgres_timeout_s,
        pool_size=settings.postgres_pool_size,
    )


def extraction_budget(settings: Settings) -> ExtractionBudget:
    """How much of a turn extraction reads and proposes (``MEMSTRATA_EXTRACT_*``)."""
    return ExtractionBudget(
        window_chars=settings.extract_window_chars,
        message_chars=settings.extract_max_message_chars,
        turn_chars=settings.extract_max_turn_chars,
        message_candidates=settings.extract_max_message_candidates,
        turn_candidates=settings.extract_max_turn_candidates,
    )


def make_ledger(settings: Settings, engine: Engine) -> Ledger:
    return Ledger(engine, max_content_chars=settings.ltm.max_content_chars)


def build_ltm(
    settings: LtmSettings,
    *,
    ledger: Ledger,
    embedder: CachedEmbedder | None = None,
    context: IndexContext | None = None,
) -> LtmRuntime:
    """Indexes, embedder, projector and search of long-term memory, on ``ledger``'s pool.

    Not started: :meth:`LtmRuntime.start` checks both schemas and the embedding dimension.
    ``context`` is what the projector adds to cards from their source at index time
    (the composition root passes the episodes' L0 reader).
    """
    if embedder is None:
        inner = make_embedder(settings.embedding_provider, **settings.embedder_options())
        embedder = CachedEmbedder(
            inner, capacity=settings.embedding_cache_size, max_batch=settings.embedding_batch
        )
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else ""
    milvus = MilvusConnection(settings.milvus_uri, timeout_s=settings.milvus_timeout_s, token=token)
    dim = embedder.dim
    pointers = GenerationStore(ledger.engine)

    def vector_at(name: str) -> MilvusVectorIndex:
        return MilvusVectorIndex(milvus, collection=name, dim=dim,
                                 index_type=settings.milvus_index_type,
                                 timeout_s=settings.milvus_timeout_s)  # fmt: skip

    # card indexes are generations behind one pointer each, so `ltm reindex` can swap
    vector_names = Names(pointers, collection_name(settings.collection_prefix, "ltm_vectors"),
                         refresh_s=settings.generation_refresh_s)  # fmt: skip
    vector = RoutedVector(vector_names, vector_at, dim=dim)
    es: Any | None = None
    if settings.lexical_backend == "elasticsearch":
        if not settings.es_url:
            raise ValueError("MEMSTRATA_LTM__ES_URL is required for the elasticsearch backend")
        key = settings.es_api_key.get_secret_value() if settings.es_api_key else None
        es = es_connect(settings.es_url, timeout_s=settings.es_timeout_s, api_key=key)

    def lexical_name(name: str) -> str:
        if es is not None:
            suffix = "" if name == "ltm_lexical" else "-" + name.replace("_", "-")
            return settings.es_index + suffix
        return collection_name(settings.collection_prefix, name)

    def lexical_at(full_name: str) -> LexicalIndex:
        if es is not None:
            return ElasticsearchLexicalIndex(es, index=full_name, timeout_s=settings.es_timeout_s)
        return MilvusLexicalIndex(milvus, collection=full_name,
                                  timeout_s=settings.milvus_timeout_s)  # fmt: skip

    def lexical_index(name: str) -> LexicalIndex:
        return lexical_at(lexical_name(name))

    lexical_names = Names(pointers, lexical_name("ltm_lexical"),
                          refresh_s=settings.generation_refresh_s)  # fmt: skip
    lexical = RoutedLexical(lexical_names, lexical_at)
    history = None
    if settings.history_enabled:
        history = HistoryIndex(
            lexical=lexical_index("raw_lexical"),
            vector=MilvusVectorIndex(
                milvus,
                collection=collection_name(settings.collection_prefix, "raw_vectors"),
                dim=embedder.dim,
                index_type=settings.milvus_index_type,
                timeout_s=settings.milvus_timeout_s,
                with_text=True,  # a message found by its vector alone needs no second read
            ),
            embedder=embedder,
            max_chars=settings.history_max_chars,
        )
    projector = Projector(
        ledger=ledger,
        lexical=lexical,
        vector=vector,
        embedder=embedder,
        max_embed_chars=settings.max_embed_chars,
        context=context,
        versioned=settings.versioned_indexes(),
    )
    search = LtmSearch(lexical=lexical, vector=vector, embedder=embedder, policy=settings.search)
    return LtmRuntime(
        settings=settings,
        engine=ledger.engine,
        milvus=milvus,
        es=es,
        embedder=embedder,
        ledger=ledger,
        lexical=lexical,
        vector=vector,
        projector=projector,
        search=search,
        pid=os.getpid(),
        history=history,
    )


class _RuntimeLtm:
    """Recall's LTM port over the runtime: LTM is built on the first search that needs it.

    A failure to build (Milvus down, bad settings) surfaces as :class:`StoreUnavailable`,
    which recall reports as ``degraded["ltm"]`` and which opens the ``ltm`` breaker; the
    probe after the breaker's cool-down tries to build again.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def search(
        self, *, query: str, mode: LtmMode, filters: RetrievalFilters, k: int,
        as_of: float | None = None,
    ) -> list[PoolCandidate]:  # fmt: skip
        try:
            ltm = self._runtime.ltm
        except (OSError, ValueError) as exc:  # MemstrataError (typed already) passes through
            raise StoreUnavailable(f"long-term memory unavailable: {exc}") from exc
        searcher = LedgerBackedSearcher(ltm.search, ltm.ledger, merged_sources=self._sources)
        return searcher.search(query=query, mode=mode, filters=filters, k=k, as_of=as_of)

    def _sources(self, tenant: str, user: str, merged_ids: Sequence[str]) -> dict[str, list[str]]:
        """What each merged card hid (the consolidation's audit rows), for an as-of read."""
        with pg_errors("read consolidation"), self._runtime.engine.connect() as conn:
            return sources_of(conn, tenant, user, merged_ids)


class _RuntimeHistory:
    """Recall's raw-history port over the runtime (built with LTM, degraded like it)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def search(
        self, *, query: str, tenant_id: str, user_id: str, k: int, now: float,
        as_of: float | None = None,
    ) -> list[PoolCandidate]:  # fmt: skip
        try:
            ltm = self._runtime.ltm
        except (OSError, ValueError) as exc:
            raise StoreUnavailable(f"long-term memory unavailable: {exc}") from exc
        if ltm.history is None:
            return []
        return HistoryBackedSearcher(ltm.history, curated=ltm.ledger.curated).search(
            query=query, tenant_id=tenant_id, user_id=user_id, k=k, now=now, as_of=as_of
        )


class Runtime:
    """Every store and service of one process; see the module docstring for what is lazy."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: CachedEmbedder | None = None,
        extractor: Extractor | None = None,
    ) -> None:
        """``embedder`` and ``extractor`` replace the settings' choice (benchmarks, tests)."""
        self.settings = settings
        self.pid = os.getpid()
        self._embedder = embedder
        self._ltm_lock = threading.Lock()
        self.redis = make_redis(settings)
        self.engine = make_postgres(settings)
        self.stm = StmStore(
            self.redis,
            namespace=settings.key_namespace,
            session_cap=settings.stm_session_cap,
            user_cap=settings.stm_user_cap,
            tenant_cap=settings.stm_tenant_cap,
            max_summary_chars=settings.max_summary_chars,
            max_detail_chars=settings.max_detail_chars,
            durable_subtypes=settings.lifecycle.promotion.episode_subtypes,
        )
        self.lifecycle_store = LifecycleStore(self.redis, namespace=settings.key_namespace)
        self.transcript = TranscriptStore(
            settings.transcript_dir,
            fsync=settings.transcript_fsync,
            max_message_chars=settings.max_message_chars,
            max_turn_messages=settings.max_turn_messages,
            max_turn_chars=settings.max_turn_chars,
            dedup_window_bytes=settings.transcript_dedup_window_bytes,
        )
        self.queue = IngestQueue(
            self.redis,
            namespace=settings.key_namespace,
            shards=settings.ingest_shards,
            kick_ttl_ms=settings.ingest_kick_ttl_ms,
            claim_idle_ms=settings.ingest_claim_idle_ms,
            watermark_ttl_ms=int((settings.ingest_reconcile_horizon_s + 3600) * 1000),
        )
        self.attempts = Attempts(self.redis, namespace=settings.key_namespace)
        self.dead_letters = DeadLetters(self.redis, namespace=settings.key_namespace)
        self.pipeline = IngestPipeline(
            store=self.stm,
            extractor=extractor
            or RuleExtractor(
                conversation_facts=settings.extract_conversation_facts,
                budget=extraction_budget(settings),
            ),
            policy=WritePolicy(threshold=settings.write_threshold, ttl=settings.ttl),
            decision_ttl_s=settings.decision_ttl_s,
            max_refusals_per_message=settings.decision_max_refusals_per_message,
        )
        self.profile_cache = ProfileCache(
            self.redis,
            namespace=settings.key_namespace,
            entry_ttl_s=settings.profile_cache_ttl_s,
            version_ttl_s=settings.profile_cache_version_ttl_s,
        )
        self.ledger = make_ledger(settings, self.engine)
        self.owners = Owners(self.engine, policy=settings.unknown_owner)
        self.api_keys = ApiKeys(self.engine, cache_s=settings.api_key_cache_s)
        self.breakers = Breakers(
            cooldown_s=settings.recall_breaker_cooldown_s,
            failures=settings.recall_breaker_failures,
        )

    @cached_property
    def ltm(self) -> LtmRuntime:
        """Long-term memory on this runtime's ledger and pool, built and started on first use."""
        with self._ltm_lock:
            if "ltm" in self.__dict__:  # another thread built it while this one waited
                built: LtmRuntime = self.__dict__["ltm"]
                return built
            ltm = build_ltm(self.settings.ltm, ledger=self.ledger, embedder=self._embedder,
                            context=Contexts(EpisodeContext(self.transcript),
                                             ViewContext(self.ledger)))  # fmt: skip
            return ltm.start()

    @property
    def ltm_started(self) -> bool:
        return "ltm" in self.__dict__

    def warm_ltm(self) -> str | None:
        """Build LTM now, outside any recall's time budget; the reason if it cannot be.

        A one-shot process (the CLI) would otherwise spend its first recall's LTM budget
        loading the embedder, its weights and the Chinese analyzer's dictionary and checking
        four collections, and report LTM as degraded (:meth:`LtmRuntime.warm`).
        """
        if not self.settings.ltm.enabled:
            return None
        try:
            ltm = self.ltm
        except (MemstrataError, OSError, ValueError) as exc:
            why = redact(f"{type(exc).__name__}: {exc}")
            log.warning("long-term memory unavailable: %s", why)
            for layer in (LTM, HISTORY):  # recall then skips them instead of building again
                self.breakers[layer].failure(why)
            return why
        try:  # a remote embedder that fails its probe may answer later: recall will tell
            ltm.warm()
        except (MemstrataError, OSError, ValueError) as exc:
            log.warning("long-term memory not warmed: %s", redact(f"{type(exc).__name__}: {exc}"))
        return None

    def recaller(self, *, settings: RecallSettings | None = None, ltm: bool = True) -> Recaller:
        """A :class:`Recaller` on this runtime's stores; LTM unless ``ltm=False`` or disabled.
        ``settings``: the process's ``MEMSTRATA_RECALL__`` limits with the code's rules
        when None.

        It owns a thread pool: build it after fork and ``close()`` it when done.
        """
        if settings is None:
            settings = RecallSettings(**self.settings.recall.model_dump())
        on = ltm and self.settings.ltm.enabled
        return Recaller(
            stm=self.stm,
            profile_cache=self.profile_cache,
            engine=self.engine,
            ltm=_RuntimeLtm(self) if on else None,
            history=_RuntimeHistory(self) if on and self.settings.ltm.history_enabled else None,
            settings=settings,
            breakers=self.breakers,
            prepare_query=self._prepare_query if on else None,
            words=self.word_vectors if on else None,
        )

    @cached_property
    def word_vectors(self) -> WordVectors | None:
        """The static word vectors of recall's topic rank (``core.recall.wordsim``; 16 MB,
        read once per process), or None when they cannot be read: recall's topic rank
        then counts exact matches only, and says so in the log."""
        try:
            return StaticWordVectors.from_package()
        except (ImportError, OSError, ValueError) as exc:
            log.warning("recall's word vectors unavailable, topic rank on exact words: %s",
                        redact(f"{type(exc).__name__}: {exc}"))  # fmt: skip
            return None

    def _prepare_query(self, query: str) -> None:
        """Recall's early query embedding, into the query cache the long-term and
        raw-history searches share; only on a built LTM (building it is the search's
        job, under its breaker)."""
        if self.ltm_started:
            self.ltm.search.prepare(query)

    def lifecycle(self, *, on_cards: OnCards | None = None) -> Lifecycle:
        """The lifecycle operations' view of this runtime; ``on_cards`` reaches the indexes."""
        kw: dict[str, OnCards] = {} if on_cards is None else {"on_cards": on_cards}
        return Lifecycle(
            redis=self.redis,
            stm=self.stm,
            store=self.lifecycle_store,
            engine=self.engine,
            ledger=self.ledger,
            settings=self.settings.lifecycle,
            profile_cache=self.profile_cache,
            pipeline=self.pipeline,
            transcript=self.transcript,
            **kw,
        )

    def close(self) -> None:
        """Close what was built: LTM (if started), Redis, the PostgreSQL pool."""
        if self.ltm_started:
            self.ltm.close()
        self.redis.close()
        self.engine.dispose()


_current: Runtime | None = None


def get_runtime() -> Runtime:
    """This process's runtime, built from the environment on first use and after a fork."""
    global _current
    if _current is None or _current.pid != os.getpid():
        _current = Runtime(load_settings())
    return _current


def reset_runtime(settings: Settings | None = None) -> Runtime:
    """(Re)build this process's runtime; called after fork (Celery) and by tests."""
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = Runtime(settings or load_settings())
    return _current


def close_runtime() -> None:
    """Close this process's runtime (worker shutdown, end of a CLI command)."""
    global _current
    if _current is not None and _current.pid == os.getpid():
        _current.close()
    _current = None
