"""``recall()``: the synchronous read path an agent calls before each model call.

    profile (rules) → route (rules) → [PG snapshot] + [STM] ∥ [LTM] → one pool → render

The authority snapshot is always read (cache first): it supplies the tenant / project
filters that scope every other read, so no query can cross a scope whatever its text.
STM is read in one round trip before routing (the runtime state of the query profile
comes from it; its timeout is the Redis socket timeout); LTM then runs on a worker thread
concurrently with STM ranking and the PG blocks, under its own timeout.  A layer that
times out or is down is skipped and flagged (``degraded``) while the others answer.
Access bookkeeping happens after the answer is built, on a background thread.

**Degradation.**  ``recall()`` never raises for a store outage (a :class:`TransientError`):

* ``authority`` (PostgreSQL) down and the snapshot not cached: recall goes on with the
  owner-only snapshot (:func:`owner_only`: no project, role, fact or setting), so every
  read stays inside the requesting tenant and user and admits no project-scoped record;
  a requested project or workspace cannot be verified and is dropped, never trusted;
* ``stm`` (Redis) down: no STM candidates and no profile cache (the snapshot comes from
  PostgreSQL); the profile cache shares the ``stm`` breaker, being the same server;
* ``ltm`` / ``history`` (Milvus or Elasticsearch) down or over the time budget: no
  candidates from that layer.

Each layer has a :class:`~core.breaker.CircuitBreaker` (shared by the process through
:class:`~core.breaker.Breakers`): after a failure the layer is skipped at no cost, and
reported as ``"circuit open since …"``, until one probe call per cool-down finds it back.
Permanent errors (an unknown user, a scope the user does not hold) still raise.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Protocol

from pydantic import Field, field_validator
from sqlalchemy import Engine

from memstrata.core.authority.blocks import build_blocks
from memstrata.core.authority.cache import CacheLookup, CacheStatus, ProfileCache, lookup_of
from memstrata.core.authority.db import autocommit_reader, translated
from memstrata.core.authority.domain import AUTHORITATIVE_DOMAINS, domain_of_key
from memstrata.core.authority.domain_authority import (
    Action,
    AuthorityCandidate,
    AuthorityDecision,
    arbitrate,
    authority_key,
)
from memstrata.core.authority.filters import RetrievalFilters, filters_for
from memstrata.core.authority.read import read_snapshot, read_version
from memstrata.core.authority.snapshot import AuthoritySnapshot, owner_only
from memstrata.core.breaker import Breakers, BreakerState, describe, tripping
from memstrata.core.compress.tokens import TokenCounter, default_counter
from memstrata.core.errors import InvalidInput, MemstrataError, TransientError
from memstrata.core.extract.entities import extract_entities
from memstrata.core.extract.lexicon import default_lexicon
from memstrata.core.ids import DEFAULT_TENANT, SafeId
from memstrata.core.ltm.text import ENGLISH_STOP_WORDS
from memstrata.core.metrics import metrics, route_label
from memstrata.core.models.inputs import EventTime, InputModel, StrictBool, StrictInt, Text
from memstrata.core.recall.access import AccessLog
from memstrata.core.recall.config import RecallLimits
from memstrata.core.recall.pool import (
    PoolCandidate,
    PoolPolicy,
    RescoreWeights,
    SourceType,
    Verdict,
    build_pool,
    trusted,
)
from memstrata.core.recall.profile import QueryProfile, RuntimeState, build_query_profile
from memstrata.core.recall.render import RenderCost, RenderedMemory, language_for, render
from memstrata.core.recall.result import BudgetSplit, Explain, RecallResult
from memstrata.core.recall.route import (
    LtmMode,
    Route,
    RoutingPolicy,
    decide_route,
    expects_ltm,
    ltm_searches_vectors,
    with_ltm_fallback,
    with_pg_fallback,
)
from memstrata.core.recall.text import coverage, line_terms, query_terms, terms, topic_terms
from memstrata.core.recall.wordsim import WordVectors
from memstrata.core.stm.store import RecallMark, RecallRead, StmHit, StmStore
from memstrata.core.tracing import span

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4000

# the layers as ``RecallResult.degraded`` and the breakers name them
AUTHORITY = "authority"  # PostgreSQL: the snapshot and the exact-metadata check
STM = "stm"  # Redis: STM reads and the profile cache
LTM = "ltm"  # Milvus / Elasticsearch: curated cards
HISTORY = "history"  # Milvus / Elasticsearch: the raw-history fallback
LAYERS = (AUTHORITY, STM, LTM, HISTORY)


class LtmSearcher(Protocol):
    """The long-term layer as recall sees it (implemented by core.ltm)."""

    def search(
        self, *, query: str, mode: LtmMode, filters: RetrievalFilters, k: int,
        as_of: float | None = None,
    ) -> list[PoolCandidate]:  # fmt: skip
        """Up to ``k`` cards within ``filters``, best first, similarity in [0, 1]; with
        ``as_of``, each as it read at that moment, and none written after it."""
        ...


class HistorySearcher(Protocol):
    """The raw-history fallback as recall sees it (implemented on core.ltm.history)."""

    def search(
        self, *, query: str, tenant_id: str, user_id: str, k: int, now: float,
        as_of: float | None = None,
    ) -> list[PoolCandidate]:  # fmt: skip
        """Up to ``k`` raw messages of the owner, best first, similarity in [0, 1]; with
        ``as_of``, among those said by then."""
        ...


class RecallRequest(InputModel):
    """What one recall asks; bad values raise ``InvalidInput`` naming the field."""

    tenant_id: SafeId = DEFAULT_TENANT  # no tenant (None) is the default tenant, as in every layer
    user_id: SafeId
    session_id: SafeId
    query: Text = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    task_id: SafeId | None = None
    project_id: SafeId | None = None
    workspace_id: SafeId | None = None
    agent_id: SafeId = "default"
    top_k: StrictInt = Field(8, ge=1, le=100)  # strict: "8" and True are not 8
    token_budget: StrictInt = Field(600, ge=32, le=32_000)
    explain: StrictBool = False
    now: EventTime | None = None
    # memory as it stood at this moment (seconds since the epoch) instead of now: what was
    # written by then, each statement as it read then (``core.ltm.asof``)
    as_of: EventTime | None = None

    @field_validator("tenant_id", mode="before")
    @classmethod
    def _owner_tenant(cls, value: object) -> object:
        return DEFAULT_TENANT if value is None else value


class RecallSettings(RecallLimits):
    """Everything a :class:`Recaller` follows: the operator's limits (``MEMSTRATA_RECALL__``,
    :class:`~core.recall.config.RecallLimits`) and the rules and weights of the code."""

    routing: RoutingPolicy = RoutingPolicy()
    weights: RescoreWeights = RescoreWeights()  # the pool's rescoring blend
    session_recent_s: float = Field(1800.0, gt=0)


def _lines(memory: RenderedMemory) -> int:
    return len(memory.short_term) + len(memory.long_term) + len(memory.history)


@lru_cache(maxsize=16_384)
def _doc_terms(summary: str, entities: tuple[str, ...]) -> frozenset[str]:
    """An STM item's terms; cached, as a session's recalls rank the same items again."""
    return frozenset(line_terms(summary, entities))


def _stm_candidate(hit: StmHit, q_terms: set[str]) -> PoolCandidate:
    return _hit_candidate(hit, coverage(q_terms, _doc_terms(hit.summary, hit.entities)))


@lru_cache(maxsize=4_096)  # ~2 KB an entry: at most ~8 MB a process
def _hit_candidate(hit: StmHit, similarity: float) -> PoolCandidate:
    """The candidate of a hit at a similarity; cached, as a session's recalls find the
    same items at the same few term coverages (candidates are frozen: sharing is safe;
    ~60 sessions' worth of hits at ~70 a recall)."""
    # typed fields straight from the store, every one given: no re-validation (trusted)
    return trusted(PoolCandidate, {
        "memory_id": hit.memory_id,
        "source_type": SourceType.REDIS_STM,
        "summary": hit.summary,
        "canonical_fact_key": hit.canonical_fact_key,
        "fingerprint": hit.fingerprint,
        "memory_type": hit.memory_type,
        "similarity": similarity,
        "importance": hit.importance,
        "updated_at": hit.updated_at,
        "entities": hit.entities,
        "message_ids": hit.message_ids,
        "task_id": hit.task_id,
        "layer_rank": None,
        "tenant_id": None,
        "project_id": None,
        "said_at": None,  # this session's state: its lines are not dated
        "uncurated": False,
    })  # fmt: skip


_QUESTION_WORDS = frozenset({
    "what", "when", "where", "which", "who", "whom", "whose", "why", "how", "have", "has",
    "had", "did", "does", "do", "can", "could", "would", "should", "my", "mine", "me",
    "your", "yours", "you",
    # the kind of question, not its subject: "what is my favorite dance?" asks about dance
    "favorite", "favourite", "prefer", "preferred",
})  # fmt: skip
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")


def facts_matching(snapshot: AuthoritySnapshot, query: str) -> int:
    """How many of the snapshot's facts share a content word (key or value) with the
    query: zero means PG holds nothing that answers it.  Content words: latin words of
    three letters or more that are neither stop words nor question words, and CJK
    bigrams (single characters match too much)."""
    wanted = {
        t
        for t in terms(query)
        if (len(t) == 2 and _CJK_CHAR.match(t))
        or (len(t) > 2 and t not in ENGLISH_STOP_WORDS and t not in _QUESTION_WORDS)
    }
    if not wanted:
        return len(snapshot.facts)  # nothing to match on: PG's blocks are the answer
    return sum(
        1
        for key, fact in snapshot.facts.items()
        if wanted & terms(f"{key.replace('_', ' ')} {fact.value}")  # dance_style: 2 words
    )


def _pg_fallback(
    route: Route,
    profile: QueryProfile,
    snapshot: AuthoritySnapshot,
    query: str,
    *,
    ltm_available: bool,
) -> Route:
    """:func:`with_pg_fallback` for a PG-only route (the facts are matched only then).

    Permission and configuration questions fall back too: their rules fire on ordinary
    chat ("how many user roles and security features …"), and the raw-history floor is
    the lowest-priority part of the answer, rendered after PG's blocks (BEAM dev R@10
    0.734 with them, 0.710 without, docs/QUALITY.md third wave)."""
    if ltm_available and route.need_pg and not (route.need_ltm or route.need_redis):
        return with_pg_fallback(route, profile, facts_matching(snapshot, query))
    return route


@lru_cache(maxsize=16_384)
def _authoritative_key(canonical_fact_key: str, project_id: str | None) -> str | None:
    """The candidate's authority key when it falls in an authoritative PG domain, else None."""
    key = authority_key(canonical_fact_key, project_id=project_id)
    return key if domain_of_key(key) in AUTHORITATIVE_DOMAINS else None


def _report_prepare(done: Future[None]) -> None:
    """An early embedding that failed is logged: the search embeds again and reports a
    store's failure itself, so only an unexpected error is a warning."""
    exc = done.exception()
    if exc is None:
        return
    level = logging.DEBUG if isinstance(exc, MemstrataError) else logging.WARNING
    log.log(level, "early query embedding failed: %s", describe(exc))


class Recaller:
    """Holds the per-process clients; one instance serves every recall of the process."""

    def __init__(
        self,
        *,
        stm: StmStore,
        profile_cache: ProfileCache,
        engine: Engine,
        ltm: LtmSearcher | None = None,
        history: HistorySearcher | None = None,
        settings: RecallSettings | None = None,
        executor: ThreadPoolExecutor | None = None,
        clock: Callable[[], float] = time.time,
        breakers: Breakers | None = None,
        counter: TokenCounter | None = None,
        prepare_query: Callable[[str], None] | None = None,
        words: WordVectors | None = None,
    ) -> None:
        """``breakers``: the process's layer breakers (the runtime's); a private set if None.
        ``counter``: the tokenizer ``token_budget`` is counted in (cl100k by default).
        ``prepare_query``: the work on a query's text alone that a long-term search will
        need (its embedding), started on the pool as soon as the text routes to LTM.
        ``words``: the word vectors of the pool's topic rank
        (``core.recall.pool.topic_ranks``); None: exact matches only."""
        self.stm = stm
        self.cache = profile_cache
        self.engine = autocommit_reader(engine)  # one-statement reads need no transaction
        self.ltm = ltm
        self.history = history
        self.settings = settings or RecallSettings()
        # a recall routed to LTM runs three tasks (early embedding, card and raw-history
        # searches): room for two such recalls of the REST thread pool at once
        self.pool = executor or ThreadPoolExecutor(max_workers=6, thread_name_prefix="recall")
        self.clock = clock
        self.breakers = breakers or Breakers()
        self.counter = counter or default_counter()
        self.prepare_query = prepare_query
        self.words = words
        self.access_log = AccessLog(stm)
        # owner -> project ids of its last snapshot: the query entities of the first read
        self._known_guess: dict[tuple[str, str], tuple[str, ...]] = {}
        self._guess_lock = threading.Lock()  # one Recaller serves the REST thread pool

    def close(self) -> None:
        """Flush pending bookkeeping and stop the helper threads."""
        self.access_log.close()
        self.pool.shutdown(wait=True)

    # ------------------------------------------------------------------ public
    def recall(self, req: RecallRequest) -> RecallResult:
        """One recall; timed, counted (``memstrata_recall_seconds``, layer errors) and
        logged as one line with the owner, session and route."""
        _require_request(req)
        t0 = time.perf_counter()
        try:
            with span("recall", tenant_id=req.tenant_id, user_id=req.user_id,
                      session_id=req.session_id):  # fmt: skip
                result = self._recall(req)
        except Exception as exc:
            elapsed = time.perf_counter() - t0
            log.warning(
                "recall failed tenant=%s user=%s session=%s ms=%.1f error=%s",
                req.tenant_id, req.user_id, req.session_id, elapsed * 1000, type(exc).__name__,
                extra={"event": "recall", "tenant_id": req.tenant_id, "user_id": req.user_id,
                       "session_id": req.session_id, "duration_ms": round(elapsed * 1000, 1),
                       "outcome": "error", "error": type(exc).__name__},
            )  # fmt: skip
            raise
        elapsed = time.perf_counter() - t0
        r = result.route
        route = route_label(pg=r.need_pg, stm=r.need_redis, ltm=r.need_ltm)
        m = metrics()
        m.recall_seconds.labels(route=route).observe(elapsed)
        for layer in result.degraded:
            m.layer_errors.labels(layer=layer).inc()
        if not log.isEnabledFor(logging.INFO):  # the line's fields cost more than the check
            return result
        log.info(
            "recall tenant=%s user=%s session=%s route=%s lines=%s degraded=%s ms=%.1f",
            req.tenant_id, req.user_id, req.session_id, route, _lines(result.memory),
            ",".join(sorted(result.degraded)) or "-", elapsed * 1000,
            extra={"event": "recall", "tenant_id": req.tenant_id, "user_id": req.user_id,
                   "session_id": req.session_id, "task_id": req.task_id, "route": route,
                   "degraded": sorted(result.degraded), "duration_ms": round(elapsed * 1000, 1),
                   "outcome": "ok"},
        )  # fmt: skip
        return result

    def _recall(self, req: RecallRequest) -> RecallResult:
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        now = req.now if req.now is not None else self.clock()
        degraded: dict[str, str] = {}
        self._prepare(req)

        # one Redis round trip: STM indexes, last-recall flag and the profile cache's keys
        first, cached = self._stm_read(req, self._known_guess.get(_owner(req), ()), now, degraded)
        snapshot, lookup, verified = self._snapshot(req, degraded, cached)
        if verified:
            filters = filters_for(
                snapshot, project_id=req.project_id, workspace_id=req.workspace_id
            )
        else:  # a scope PG cannot confirm is not trusted: the owner's own memories only
            filters = filters_for(snapshot)
            if req.project_id or req.workspace_id:
                degraded[AUTHORITY] += "; project/workspace scope not verified, not applied"
        timings["authority"] = _ms(t0)
        known = tuple(p.project_id for p in snapshot.projects)
        stm_read = self._stm_reread(req, known, now, degraded, first)
        stm_read = _written_by(stm_read, req.as_of)
        timings["stm"] = _ms(t0)

        state = self._runtime_state(req, lookup, known, stm_read, now)
        profile = build_query_profile(req.query, state)
        route = decide_route(profile, self.settings.routing, ltm_available=self.ltm is not None)
        if verified and route.need_pg and profile.needs_exact_metadata:
            snapshot = self._exact_snapshot(req, snapshot, degraded)
        route = _pg_fallback(
            route, profile, snapshot, req.query, ltm_available=self.ltm is not None
        )
        # LTM runs on a worker thread, concurrently with STM ranking and the PG blocks
        ltm_future = self._start_ltm(req, route, filters, degraded) if route.need_ltm else None
        # what the question asks about the entities it names: relevance beyond the name
        q_terms = topic_terms(query_terms(req.query), profile.entities)

        # STM when routed there, or as the default layer of a query no rule claimed
        stm_needed = route.need_redis or not (route.need_pg or route.need_ltm)
        pol = self.settings.routing
        stm_cands = _stm_candidates(stm_read.hits, q_terms, routed=stm_needed, policy=pol)
        # sufficiency by relevance: items that merely share the session do not count; the
        # state of the task the question is asked in does (seed 九: active task → Redis)
        relevant = sum(
            1
            for c in stm_cands
            if c.similarity >= pol.min_relevance or (req.task_id and c.task_id == req.task_id)
        )
        if stm_needed and STM not in degraded:
            route = with_ltm_fallback(route, profile, relevant, pol)
            if route.need_ltm and ltm_future is None:
                ltm_future = self._start_ltm(req, route, filters, degraded)
        if route.need_ltm and self.ltm is None:
            degraded[LTM] = "no long-term memory backend configured"
        # the raw-history floor: wherever the curated long-term layer is asked (seed 十五.4)
        history_future = self._start_history(req, now, degraded) if route.need_ltm else None
        # one time budget for both concurrent layers, counted from here
        deadline = time.monotonic() + self.settings.ltm_timeout_s
        ltm_cands = self._collect(ltm_future, degraded, LTM, deadline)
        if ltm_future is not None:
            timings["ltm"] = _ms(t0)
        history_cands = self._collect(history_future, degraded, HISTORY, deadline)
        if history_future is not None:
            timings["history"] = _ms(t0)

        all_cands = stm_cands + [c for c in ltm_cands + history_cands if _in_scope(c, filters)]
        decisions, overridden = self._authority(all_cands, snapshot, filters)
        lang = language_for(snapshot.profile_value("language"), req.query)
        blocks = None
        # PG's blocks when PG was asked, or when PG's word replaced a recalled item (a warm
        # profile cache answers without a PG read; the item must not vanish unreplaced)
        if verified and (route.need_pg or overridden):  # owner-only snapshots have none
            blocks = build_blocks(
                snapshot, project_id=filters.project_id, workspace_id=filters.workspace_id,
                agent_id=req.agent_id,
            )  # fmt: skip
        # the budget holds the whole block as printed: the profile first, then the lines
        cost = RenderCost(self.counter, lang, req.task_id)
        profile_text = blocks.render(lang) if blocks is not None else ""
        profile_tokens = cost.profile(profile_text)
        left = max(0, req.token_budget - profile_tokens)
        scored = build_pool(
            all_cands,
            query_entities=profile.entities,
            now=now,
            policy=PoolPolicy(top_k=req.top_k, token_budget=left, weights=self.settings.weights),
            authority=(lambda c: overridden.get(c.memory_id)) if overridden else None,
            query=req.query,
            cost=cost,
            report=req.explain,  # every verdict only when someone reads them
            words=self.words,
        )
        kept = [s.candidate for s in scored if s.verdict is Verdict.KEPT]
        memory = RenderedMemory.from_candidates(kept, task_id=req.task_id)
        text = render(profile_text, memory, lang)
        timings["total"] = _ms(t0)
        if stm_needed and STM not in degraded and req.as_of is None:  # a look back is no use
            self._bookkeeping(req, kept, stm_count=relevant)
        explain = None
        if req.explain:
            explain = Explain(
                profile=profile, route=route, cache=lookup.status.value, candidates=scored,
                authority=list(decisions), timings_ms=timings,
                budget=BudgetSplit(requested=req.token_budget, profile=profile_tokens,
                                   lines=left),
            )  # fmt: skip
        return RecallResult(
            text=text, language=lang, blocks=blocks, memory=memory, route=route,
            degraded=degraded, explain=explain,
        )  # fmt: skip

    # ------------------------------------------------------------------ layers
    def _prepare(self, req: RecallRequest) -> None:
        """The query's embedding, started while STM and PG are read, when the text alone
        routes to LTM: on the critical path it came after them (~2-4 ms, docs/PERFORMANCE.md).
        Its failure is the search's to report (it embeds again); an open breaker or a
        route the state adds later (an insufficient STM pass) simply waits for the search."""
        if self.prepare_query is None or self.ltm is None:
            return
        if self.breakers[LTM].state is not BreakerState.CLOSED:
            return
        if not expects_ltm(req.query, active_task=req.task_id is not None,
                           policy=self.settings.routing):  # fmt: skip
            return
        # a lexical-only card search needs no vector; the raw-history search always does
        if self.history is None and not ltm_searches_vectors(req.query):
            return
        self.pool.submit(self.prepare_query, req.query).add_done_callback(_report_prepare)

    def _snapshot(
        self, req: RecallRequest, degraded: dict[str, str], cached: CacheLookup | None
    ) -> tuple[AuthoritySnapshot, CacheLookup, bool]:
        """The cached snapshot, or PG's (then cached); no PG connection on a cache hit.
        With ``req.as_of``, PG's facts valid then, never from or into the cache.

        ``cached``: the profile cache's answer when the STM read carried it (else it is
        asked here).  The flag says whether the snapshot is the user's real one; False: PG
        could not be read and the snapshot is :func:`owner_only` (``degraded["authority"]``
        says why).
        """
        # as of a moment: the cache holds the current facts, PG also the past ones
        past = req.as_of is not None
        if past:
            lookup = CacheLookup(CacheStatus.MISSING)
        else:
            lookup = cached if cached is not None else self._cached(req)
        if lookup.status is CacheStatus.HIT and lookup.snapshot is not None:
            return lookup.snapshot, lookup, True
        breaker = self.breakers[AUTHORITY]
        if not breaker.allow():
            degraded[AUTHORITY] = breaker.status()
            return owner_only(req.tenant_id, req.user_id), lookup, False
        try:
            with tripping(breaker), translated("read snapshot"), self.engine.connect() as conn:
                snapshot = read_snapshot(
                    db=conn, tenant_id=req.tenant_id, user_id=req.user_id, as_of=req.as_of
                )
        except TransientError as exc:
            degraded[AUTHORITY] = describe(exc)
            return owner_only(req.tenant_id, req.user_id), lookup, False
        if not past:  # a past snapshot is never cached
            self._fill(snapshot)
        return snapshot, lookup, True

    def _cached(self, req: RecallRequest) -> CacheLookup:
        """The profile cache's answer; a miss when Redis is down (PG is asked instead)."""
        breaker = self.breakers[STM]
        if not breaker.allow():
            return CacheLookup(CacheStatus.MISSING)
        try:
            with tripping(breaker):
                return self.cache.get(req.tenant_id, req.user_id)
        except MemstrataError as exc:
            log.warning("profile cache not read: %s", describe(exc))
            return CacheLookup(CacheStatus.MISSING)

    def _fill(self, snapshot: AuthoritySnapshot) -> None:
        """Cache a snapshot read from PG; skipped while Redis is down (the next miss refills)."""
        breaker = self.breakers[STM]
        if not breaker.allow():
            return
        try:
            with tripping(breaker):
                self.cache.put(snapshot)
        except MemstrataError as exc:
            log.warning("profile cache not filled: %s", describe(exc))

    def _exact_snapshot(
        self, req: RecallRequest, snapshot: AuthoritySnapshot, degraded: dict[str, str]
    ) -> AuthoritySnapshot:
        """For exact metadata, check the cached version against PG itself.

        PG down: the cached snapshot is used unchecked, and ``degraded["authority"]`` says so.
        """
        if req.as_of is not None:  # read from PG itself just now, as of then
            return snapshot
        breaker = self.breakers[AUTHORITY]
        if not breaker.allow():
            degraded[AUTHORITY] = "exact check skipped: " + breaker.status()
            return snapshot
        who = {"tenant_id": req.tenant_id, "user_id": req.user_id}
        try:
            with tripping(breaker), translated("read version"), self.engine.connect() as conn:
                if read_version(db=conn, **who) <= snapshot.version:
                    return snapshot
                # an invalidation never reached Redis
                fresh = read_snapshot(db=conn, tenant_id=req.tenant_id, user_id=req.user_id)
        except TransientError as exc:
            degraded[AUTHORITY] = "exact check skipped: " + describe(exc)
            return snapshot
        self._fill(fresh)
        return fresh

    def _stm_read(
        self, req: RecallRequest, known: tuple[str, ...], now: float, degraded: dict[str, str]
    ) -> tuple[_FirstRead, CacheLookup | None]:
        """Session + task + query-entity indexes, the last-recall flag and the profile
        cache's two keys, one round trip (the cache's keys share the owner's hash tag).

        ``known``: the project ids the owner's snapshot named last time in this process
        (the query's entities depend on them); :meth:`_stm_reread` reads again in the rare
        case the snapshot says otherwise and the entities differ.  The second value is the
        cache's answer, None when it was not read here (Redis down: a miss; a cache of
        another namespace: asked on its own).  Its timeout is the Redis client's socket
        timeout (``MEMSTRATA_REDIS_SOCKET_TIMEOUT_S``).
        """
        entities = tuple(extract_entities(req.query, default_lexicon(), extra=known)[:5])
        ck = self.cache.keys(req.tenant_id, req.user_id)
        cache_keys = [ck.snapshot, ck.version]
        if not ck.prefix.startswith(self.stm.keys(req.user_id, req.tenant_id).prefix):
            cache_keys = []
        # a cache this read would not have covered (another namespace) is asked on its own
        unread = CacheLookup(CacheStatus.MISSING) if cache_keys else None
        breaker = self.breakers[STM]
        if not breaker.allow():
            degraded[STM] = breaker.status()
            return _FirstRead(RecallRead(flag=None, hits=[]), entities, known), unread
        try:
            with tripping(breaker):
                read = self._read_stm(req, entities, now, also_get=cache_keys)
        except MemstrataError as exc:
            degraded[STM] = describe(exc)
            log.warning("short-term memory and profile cache not read: %s", describe(exc))
            empty = RecallRead(flag=None, hits=[])
            return _FirstRead(empty, entities, known), unread
        cached = lookup_of(*read.values) if cache_keys else None
        return _FirstRead(read, entities, known), cached

    def _read_stm(
        self,
        req: RecallRequest,
        entities: Sequence[str],
        now: float,
        *,
        also_get: Sequence[str] = (),
    ) -> RecallRead:
        return self.stm.read_for_recall(
            req.user_id,
            tenant_id=req.tenant_id,
            session_id=req.session_id,
            task_id=req.task_id,
            entities=entities,
            limit=self.settings.stm_per_index,
            now=now,
            with_flag=True,
            also_get=also_get,
        )

    def _stm_reread(
        self,
        req: RecallRequest,
        known: tuple[str, ...],
        now: float,
        degraded: dict[str, str],
        first: _FirstRead,
    ) -> RecallRead:
        """The first read, unless the snapshot's projects change the query's entities."""
        owner = _owner(req)
        if self._known_guess.get(owner) != known:
            with self._guess_lock:
                self._known_guess[owner] = known
                while len(self._known_guess) > _GUESSES:
                    self._known_guess.pop(next(iter(self._known_guess)), None)
        entities = (
            first.entities
            if known == first.known  # the usual case: no second entity extraction
            else tuple(extract_entities(req.query, default_lexicon(), extra=known)[:5])
        )
        if entities == first.entities or STM in degraded:
            return first.read
        breaker = self.breakers[STM]
        if not breaker.allow():
            degraded[STM] = breaker.status()
            return RecallRead(flag=None, hits=[])
        try:
            with tripping(breaker):
                return self._read_stm(req, entities, now)
        except MemstrataError as exc:
            degraded[STM] = describe(exc)
            return RecallRead(flag=None, hits=[])

    def _runtime_state(
        self,
        req: RecallRequest,
        lookup: CacheLookup,
        known: tuple[str, ...],
        read: RecallRead,
        now: float,
    ) -> RuntimeState:
        recent: list[str] = []
        for hit in read.hits:
            recent.extend(hit.entities)
        return RuntimeState(
            active_task_id=req.task_id,
            now=now,
            last_turn_at=max((h.updated_at for h in read.hits), default=None),
            recent_entities=tuple(dict.fromkeys(recent)),
            known_entities=known,
            profile_cache_missing=lookup.profile_cache_missing,
            profile_cache_stale=lookup.profile_cache_stale,
            last_recall_insufficient=read.flag == "insufficient",
            session_recent_s=self.settings.session_recent_s,
        )

    def _start_ltm(
        self, req: RecallRequest, route: Route, filters: RetrievalFilters,
        degraded: dict[str, str],
    ) -> Future[list[PoolCandidate]] | None:  # fmt: skip
        if self.ltm is None:
            return None  # flagged by the caller
        breaker = self.breakers[LTM]
        if not breaker.allow():
            degraded[LTM] = breaker.status()
            return None
        ltm = self.ltm
        mode = route.ltm_mode or LtmMode.HYBRID
        # a caller asking for many memories gets as many LTM candidates to choose from
        k = max(self.settings.ltm_candidates, req.top_k)
        return self.pool.submit(
            lambda: ltm.search(query=req.query, mode=mode, filters=filters, k=k, as_of=req.as_of)
        )

    def _start_history(
        self, req: RecallRequest, now: float, degraded: dict[str, str]
    ) -> Future[list[PoolCandidate]] | None:
        if self.history is None:
            return None
        breaker = self.breakers[HISTORY]
        if not breaker.allow():
            degraded[HISTORY] = breaker.status()
            return None
        history = self.history
        k = max(self.settings.history_candidates, req.top_k)
        return self.pool.submit(
            lambda: history.search(
                query=req.query, tenant_id=req.tenant_id, user_id=req.user_id, k=k, now=now,
                as_of=req.as_of,
            )
        )

    def _collect(
        self,
        fut: Future[list[PoolCandidate]] | None,
        degraded: dict[str, str],
        layer: str,
        deadline: float,
    ) -> list[PoolCandidate]:
        """A concurrent layer's candidates by ``deadline`` (monotonic), else ``degraded``."""
        if fut is None:
            return []
        breaker = self.breakers[layer]
        try:
            with tripping(breaker):
                try:
                    return fut.result(timeout=max(0.0, deadline - time.monotonic()))
                except FutureTimeout as exc:
                    budget = self.settings.ltm_timeout_s
                    raise TimedOut(f"timed out after {budget:g} s") from exc
        except TimedOut as exc:
            degraded[layer] = str(exc)
        except MemstrataError as exc:
            degraded[layer] = describe(exc)
        return []

    def _authority(
        self, cands: list[PoolCandidate], snapshot: AuthoritySnapshot, filters: RetrievalFilters
    ) -> tuple[tuple[AuthorityDecision, ...], dict[str, str]]:
        """Seed 十五.3 on the candidates whose key falls in an authoritative PG domain."""
        auth = []
        for c in cands:
            key = _authoritative_key(c.canonical_fact_key, filters.project_id)
            if key is not None:
                auth.append(
                    AuthorityCandidate(
                        id=c.memory_id,
                        source_type=c.source_type.value,
                        canonical_fact_key=key,
                        summary=c.summary,
                    )
                )
        if not auth:
            return (), {}
        outcome = arbitrate(auth, snapshot)
        reasons = {
            d.candidate_id: f"{d.action.value}: {d.reason.value} ({d.canonical_fact_key})"
            for d in outcome.decisions
            if d.action is not Action.KEPT
        }
        return outcome.decisions, reasons

    # ------------------------------------------------------------------ bookkeeping
    def _bookkeeping(
        self, req: RecallRequest, kept: list[PoolCandidate], *, stm_count: int
    ) -> None:
        """Queue access counts and the recall-sufficiency flag (written by a timer thread)."""
        enough = stm_count >= self.settings.routing.min_redis_results
        self.access_log.add(
            RecallMark(
                user_id=req.user_id,
                tenant_id=req.tenant_id,
                session_id=req.session_id,
                flag="ok" if enough else "insufficient",
                members=tuple(f"{c.source_type.value}:{c.memory_id}" for c in kept),
            )
        )


@dataclass(frozen=True)
class _FirstRead:
    read: RecallRead
    entities: tuple[str, ...]  # the query entities it was read with
    known: tuple[str, ...]  # the project ids those entities were extracted with


_GUESSES = 10_000  # owners whose last known project ids recall remembers


def _owner(req: RecallRequest) -> tuple[str, str]:
    return req.tenant_id, req.user_id


class TimedOut(TransientError):
    """A concurrent layer did not answer within recall's time budget."""


def _stm_candidates(
    hits: Sequence[StmHit], q_terms: set[str], *, routed: bool, policy: RoutingPolicy
) -> list[PoolCandidate]:
    """Every STM hit when STM was routed; otherwise the hits that cover the question's
    words (they were read anyway, for the runtime state), so "when is the standup?"
    outside a task finds this week's decision beside the long-term history."""
    cands = [_stm_candidate(h, q_terms) for h in hits]
    return cands if routed else [c for c in cands if c.similarity >= policy.min_relevance]


def _written_by(read: RecallRead, as_of: float | None) -> RecallRead:
    """The STM hits written by ``as_of`` (all without it): an item written again since
    then does not keep its state of then, so it is left out."""
    if as_of is None:
        return read
    return replace(read, hits=[h for h in read.hits if h.updated_at <= as_of])


def _require_request(req: object) -> None:
    if not isinstance(req, RecallRequest):  # a dict or None: nothing is read
        raise InvalidInput(f"recall expects a RecallRequest, got {type(req).__name__}")


def _in_scope(c: PoolCandidate, filters: RetrievalFilters) -> bool:
    """Defence in depth: LTM adapters filter server-side; re-check the tenant here too."""
    return c.tenant_id is None or filters.allows(tenant_id=c.tenant_id, project_id=c.project_id)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)
