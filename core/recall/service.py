"""``recall()``: the synchronous read path an agent calls before each model call.

    profile (rules) → route (rules) → [PG snapshot] + [STM] ∥ [LTM] → one pool → render

The authority snapshot is always read (cache first): it supplies the tenant / project
filters that scope every other read, so no query can cross a scope whatever its text.
Layers needed together run concurrently, each under its own timeout; a layer that times
out or is down is skipped and flagged (``degraded``) while the others still answer.
Access bookkeeping happens after the answer is built, on a background thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from core.authority.blocks import AuthorityBlocks, build_blocks
from core.authority.cache import CacheLookup, ProfileCache
from core.authority.db import autocommit_reader
from core.authority.domain_authority import (
    Action,
    AuthorityCandidate,
    AuthorityDecision,
    arbitrate,
    authority_key,
)
from core.authority.filters import RetrievalFilters, filters_for
from core.authority.read import read_snapshot
from core.authority.snapshot import AuthoritySnapshot
from core.errors import MemstrataError
from core.ids import SafeId
from core.models.memory import MemoryItem
from core.recall.pool import PoolCandidate, PoolPolicy, Scored, SourceType, Verdict, build_pool
from core.recall.profile import QueryProfile, RuntimeState, build_query_profile
from core.recall.render import Lang, RenderedMemory, language_for, render
from core.recall.route import LtmMode, Route, RoutingPolicy, decide_route, with_ltm_fallback
from core.recall.text import coverage, terms
from core.stm.store import StmStore, redis_errors

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4000


class LtmSearcher(Protocol):
    """The long-term layer as recall sees it (implemented by core.ltm)."""

    def search(
        self, *, query: str, mode: LtmMode, filters: RetrievalFilters, k: int
    ) -> list[PoolCandidate]:
        """Up to ``k`` cards within ``filters``, best first, similarity in [0, 1]."""
        ...


class RecallRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: SafeId
    user_id: SafeId
    session_id: SafeId
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    task_id: SafeId | None = None
    project_id: SafeId | None = None
    workspace_id: SafeId | None = None
    agent_id: SafeId = "default"
    top_k: int = Field(8, ge=1, le=100)
    token_budget: int = Field(600, ge=32, le=32_000)
    explain: bool = False
    now: float | None = None


class RecallSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    routing: RoutingPolicy = RoutingPolicy()
    stm_per_index: int = Field(20, ge=1, le=1000)
    ltm_candidates: int = Field(20, ge=1, le=200)
    stm_timeout_s: float = Field(0.5, gt=0)
    ltm_timeout_s: float = Field(2.0, gt=0)
    session_recent_s: float = Field(1800.0, gt=0)


class Explain(BaseModel):
    profile: QueryProfile
    route: Route
    cache: str
    candidates: list[Scored]
    authority: list[AuthorityDecision]
    timings_ms: dict[str, float]


class RecallResult(BaseModel):
    """The typed answer; ``text`` is the block to inject as-is."""

    text: str
    language: Lang
    blocks: AuthorityBlocks | None
    memory: RenderedMemory
    route: Route
    degraded: dict[str, str] = Field(default_factory=dict)
    explain: Explain | None = None


def _stm_candidate(item: MemoryItem, q_terms: set[str]) -> PoolCandidate:
    doc = terms(item.summary + " " + " ".join(item.entities))
    return PoolCandidate(
        memory_id=item.id,
        source_type=SourceType.REDIS_STM,
        summary=item.summary,
        canonical_fact_key=item.canonical_fact_key,
        fingerprint=item.fingerprint,
        memory_type=item.memory_type.value,
        similarity=coverage(q_terms, doc),
        importance=item.importance,
        updated_at=item.updated_at,
        entities=tuple(item.entities),
        message_ids=tuple(item.source.message_ids),
        task_id=item.task_id,
    )


class Recaller:
    """Holds the per-process clients; one instance serves every recall of the process."""

    def __init__(
        self,
        *,
        stm: StmStore,
        profile_cache: ProfileCache,
        engine: Engine,
        ltm: LtmSearcher | None = None,
        settings: RecallSettings | None = None,
        executor: ThreadPoolExecutor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stm = stm
        self.cache = profile_cache
        self.engine = autocommit_reader(engine)  # one-statement reads need no transaction
        self.ltm = ltm
        self.settings = settings or RecallSettings()
        self.pool = executor or ThreadPoolExecutor(max_workers=4, thread_name_prefix="recall")
        self.clock = clock

    # ------------------------------------------------------------------ public
    def recall(self, req: RecallRequest) -> RecallResult:
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        now = req.now if req.now is not None else self.clock()
        degraded: dict[str, str] = {}

        who = {"tenant_id": req.tenant_id, "user_id": req.user_id}
        with self.engine.connect() as conn:  # a pool checkout; PG is only hit on a cache miss
            snapshot, lookup = self.cache.load(db=conn, **who)
            filters = filters_for(
                snapshot, project_id=req.project_id, workspace_id=req.workspace_id
            )
            timings["authority"] = _ms(t0)
            state = self._runtime_state(req, lookup, snapshot, now)
            profile = build_query_profile(req.query, state)
            route = decide_route(profile, self.settings.routing)
            exact = route.need_pg and profile.needs_exact_metadata
            if exact and self.cache.verify(db=conn, **who).profile_cache_stale:
                # an invalidation never reached Redis: exact answers come from PG itself
                snapshot = read_snapshot(db=conn, **who)
                self.cache.put(snapshot)
        q_terms = terms(req.query)

        ltm_future: Future[list[PoolCandidate]] | None = None
        if route.need_ltm:
            ltm_future = self._start_ltm(req, route, filters)
        stm_cands: list[PoolCandidate] = []
        # STM when routed there, or as the default layer of a query no rule claimed
        stm_needed = route.need_redis or not (route.need_pg or route.need_ltm)
        if stm_needed:
            stm_cands = self._stm(req, profile, q_terms, now, degraded)
            timings["stm"] = _ms(t0)
            route = with_ltm_fallback(route, profile, len(stm_cands), self.settings.routing)
            if route.need_ltm and ltm_future is None:
                ltm_future = self._start_ltm(req, route, filters)
        if route.need_ltm and self.ltm is None:
            degraded["ltm"] = "no long-term memory backend configured"
        ltm_cands = self._collect_ltm(ltm_future, degraded)
        if ltm_future is not None:
            timings["ltm"] = _ms(t0)

        all_cands = stm_cands + [c for c in ltm_cands if _in_scope(c, filters)]
        outcome, overridden = self._authority(all_cands, snapshot, filters)
        scored = build_pool(
            all_cands,
            query_entities=profile.entities,
            now=now,
            policy=PoolPolicy(top_k=req.top_k, token_budget=req.token_budget),
            authority=lambda c: overridden.get(c.memory_id),
        )
        kept = [s.candidate for s in scored if s.verdict is Verdict.KEPT]
        lang = language_for(snapshot.profile_value("language"), req.query)
        blocks = None
        if route.need_pg or lookup.profile_cache_missing:
            blocks = build_blocks(
                snapshot, project_id=filters.project_id, workspace_id=filters.workspace_id,
                agent_id=req.agent_id,
            )  # fmt: skip
        memory = RenderedMemory.from_candidates(kept, task_id=req.task_id)
        text = render(blocks, memory, lang)
        timings["total"] = _ms(t0)
        self._bookkeeping(req, kept, stm_count=len(stm_cands), now=now)
        explain = None
        if req.explain:
            explain = Explain(
                profile=profile, route=route, cache=lookup.status.value, candidates=scored,
                authority=list(outcome), timings_ms=timings,
            )  # fmt: skip
        return RecallResult(
            text=text, language=lang, blocks=blocks, memory=memory, route=route,
            degraded=degraded, explain=explain,
        )  # fmt: skip

    # ------------------------------------------------------------------ layers
    def _runtime_state(
        self, req: RecallRequest, lookup: CacheLookup, snapshot: AuthoritySnapshot, now: float
    ) -> RuntimeState:
        recent_entities: list[str] = []
        last_turn_at = None
        insufficient = False
        try:
            recent = self.stm.by_session(
                req.user_id, req.session_id, limit=20, now=now, tenant_id=req.tenant_id
            )
            for item in recent:
                recent_entities.extend(item.entities)
            last_turn_at = max((i.updated_at for i in recent), default=None)
            with redis_errors():
                insufficient = bool(self.stm.r.get(self._last_recall_key(req)) == "insufficient")
        except MemstrataError as exc:
            log.warning("runtime state unavailable for %s/%s: %s", req.user_id, req.session_id, exc)
        known = tuple(p.project_id for p in snapshot.projects) if snapshot.projects else ()
        return RuntimeState(
            active_task_id=req.task_id,
            now=now,
            last_turn_at=last_turn_at,
            recent_entities=tuple(dict.fromkeys(recent_entities)),
            known_entities=known,
            profile_cache_missing=lookup.profile_cache_missing,
            profile_cache_stale=lookup.profile_cache_stale,
            last_recall_insufficient=insufficient,
            session_recent_s=self.settings.session_recent_s,
        )

    def _stm(
        self,
        req: RecallRequest,
        profile: QueryProfile,
        q_terms: set[str],
        now: float,
        degraded: dict[str, str],
    ) -> list[PoolCandidate]:
        n = self.settings.stm_per_index
        fut = self.pool.submit(self._stm_items, req, profile.entities, n, now)
        try:
            items = fut.result(timeout=self.settings.stm_timeout_s)
        except FutureTimeout:
            degraded["stm"] = f"timed out after {self.settings.stm_timeout_s:g} s"
            return []
        except MemstrataError as exc:
            degraded["stm"] = f"{type(exc).__name__}: {exc}"
            return []
        return [_stm_candidate(i, q_terms) for i in items]

    def _stm_items(
        self, req: RecallRequest, entities: list[str], n: int, now: float
    ) -> list[MemoryItem]:
        seen: dict[str, MemoryItem] = {}
        kw: dict[str, Any] = {"limit": n, "now": now, "tenant_id": req.tenant_id}
        batches = [self.stm.by_session(req.user_id, req.session_id, **kw)]
        if req.task_id:
            batches.append(self.stm.by_task(req.user_id, req.task_id, **kw))
        for entity in entities[:5]:
            batches.append(self.stm.by_entity(req.user_id, entity, **kw))
        if not any(batches):
            batches.append(self.stm.recent(req.user_id, **kw))
        for batch in batches:
            for item in batch:
                seen.setdefault(item.id, item)
        return list(seen.values())

    def _start_ltm(
        self, req: RecallRequest, route: Route, filters: RetrievalFilters
    ) -> Future[list[PoolCandidate]] | None:
        if self.ltm is None:
            return None  # flagged by _collect_ltm's caller
        ltm = self.ltm
        mode = route.ltm_mode or LtmMode.HYBRID
        k = self.settings.ltm_candidates
        return self.pool.submit(
            lambda: ltm.search(query=req.query, mode=mode, filters=filters, k=k)
        )

    def _collect_ltm(
        self, fut: Future[list[PoolCandidate]] | None, degraded: dict[str, str]
    ) -> list[PoolCandidate]:
        if fut is None:
            return []
        try:
            return fut.result(timeout=self.settings.ltm_timeout_s)
        except FutureTimeout:
            degraded["ltm"] = f"timed out after {self.settings.ltm_timeout_s:g} s"
        except MemstrataError as exc:
            degraded["ltm"] = f"{type(exc).__name__}: {exc}"
        return []

    def _authority(
        self, cands: list[PoolCandidate], snapshot: AuthoritySnapshot, filters: RetrievalFilters
    ) -> tuple[tuple[AuthorityDecision, ...], dict[str, str]]:
        auth = [
            AuthorityCandidate(
                id=c.memory_id,
                source_type=c.source_type.value,
                canonical_fact_key=authority_key(
                    c.canonical_fact_key, project_id=filters.project_id
                ),
                summary=c.summary,
            )
            for c in cands
        ]
        outcome = arbitrate(auth, snapshot)
        reasons = {
            d.candidate_id: f"{d.action.value}: {d.reason.value} ({d.canonical_fact_key})"
            for d in outcome.decisions
            if d.action is not Action.KEPT
        }
        return outcome.decisions, reasons

    # ------------------------------------------------------------------ bookkeeping
    def _last_recall_key(self, req: RecallRequest) -> str:
        return self.stm.keys(req.user_id, req.tenant_id).prefix + f"lastrecall:{req.session_id}"

    def _bookkeeping(
        self, req: RecallRequest, kept: list[PoolCandidate], *, stm_count: int, now: float
    ) -> None:
        """Record access counts and recall sufficiency after the answer (off the hot path)."""
        key = self._last_recall_key(req)
        access = self.stm.keys(req.user_id, req.tenant_id).prefix + "access"
        enough = stm_count >= self.settings.routing.min_redis_results

        def write() -> None:
            try:
                with redis_errors():
                    pipe = self.stm.r.pipeline(transaction=False)
                    pipe.set(key, "ok" if enough else "insufficient", ex=3600)
                    for c in kept:
                        pipe.zincrby(access, 1, f"{c.source_type.value}:{c.memory_id}")
                    pipe.expire(access, 30 * 24 * 3600)
                    pipe.execute()
            except MemstrataError as exc:
                log.warning("recall bookkeeping skipped: %s", exc)

        self.pool.submit(write)


def _in_scope(c: PoolCandidate, filters: RetrievalFilters) -> bool:
    """Defence in depth: LTM adapters filter server-side; re-check the tenant here too."""
    return c.tenant_id is None or filters.allows(tenant_id=c.tenant_id, project_id=c.project_id)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)
