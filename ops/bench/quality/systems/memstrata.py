"""memstrata itself, through its real write and read paths, on a simulated clock.

Write: ``MemoryClient.record_turn(at=<dataset time>)`` → L0 transcript → ingest stream →
``core.ingest.drain.drain_shard`` run in this process right after each turn (the same
function the Celery ``ingest`` task calls; running it in-process keeps the benchmark
deterministic and fast, and skips only the broker hop) → rule extractor → write policy →
Redis STM.  At each session start the STM expiry sweep runs at that session's time, as
Celery Beat would.  Read: ``Recaller.recall()`` after the whole space is in, at the
time of the last turn plus one minute, with ``explain=True``; the kept memories, in
rank order, are expanded into their ``source.message_ids`` (turn budget).

Every store is real: Redis (a fresh key namespace per run, deleted at the end),
PostgreSQL (the tenant and one user per space are registered: recall is authority
scoped), a temporary L0 folder.  Long-term memory is used when a searcher is given
(``core.ltm``); promotion STM→LTM does not exist yet, so today recall reads STM only.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from core.api import MemoryClient
from core.errors import InvalidInput
from core.extract.rules import Extractor
from core.ingest.drain import drain_shard
from core.ingest.pipeline import IngestPipeline, TurnOutcome
from core.models.candidate import WriteDecision
from core.models.memory import MemoryItem
from core.recall.service import LtmSearcher, Recaller, RecallRequest, RecallSettings
from core.resources import Resources, build_resources
from core.settings import Settings, TtlPolicy, load_settings
from ops.bench.quality.datasets import Question, Space, Turn
from ops.bench.quality.systems.base import Hit, System, SystemStats

TENANT = "bench-quality"
QUERY_DELAY_S = 60.0
# quality, not latency: a layer timing out on a loaded shared machine must not count as a
# miss (answers that still degrade are counted in ``stats.degraded``)
BENCH_TIMEOUTS = {"stm_timeout_s": 30.0, "ltm_timeout_s": 30.0}
RECALL_TOP_K = 100  # the turn budget is cut by the harness, not by recall's top-k
RECALL_TOKEN_BUDGET = 32_000


def message_id(turn_id: str) -> str:
    """Dataset turn id → a safe message id (``D1:3`` → ``D1_3``)."""
    return turn_id.replace(":", "_").replace("/", "_")[:128]


@dataclass
class Candidate:
    """What explain mode said about one pooled candidate."""

    memory_id: str
    verdict: str
    turns: tuple[str, ...]
    summary: str


@dataclass
class SpaceState:
    user_id: str
    sessions: list[str]
    turn_of: dict[str, str]  # message id → dataset turn id
    query_now: float
    evicted: set[str] = field(default_factory=set)
    item_turns: dict[str, tuple[str, ...]] = field(default_factory=dict)  # memory id → turns
    written: dict[str, MemoryItem] = field(default_factory=dict)  # snapshots (ltmsim)
    explained: dict[str, list[Candidate]] = field(default_factory=dict)  # question id →


class MemstrataSystem:
    name = "memstrata"

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        extractor: Extractor | None = None,
        ltm: LtmSearcher | None = None,
        recall_settings: RecallSettings | None = None,
        ttl_days: float | None = None,
        item_ranker: System | None = None,
        name: str = "memstrata",
        migrate_db: bool = True,
    ) -> None:
        self.name = name
        self.stats = SystemStats()
        self.item_ranker = item_ranker  # diagnostic: rank written items instead of recall
        self._tmp = Path(tempfile.mkdtemp(prefix="qb-l0-"))
        extra: dict[str, object] = {}
        if ttl_days is not None:  # diagnostic: every STM lifetime set to ttl_days
            s = int(ttl_days * 86400)
            extra["ttl"] = TtlPolicy(fact_s=s, decision_s=s, hypothesis_s=s, observation_s=s,
                                     constraint_s=s, preference_s=s)  # fmt: skip
        self.settings = settings or load_settings(
            key_namespace=f"qb{uuid.uuid4().hex[:10]}",
            transcript_dir=self._tmp,
            transcript_fsync=False,
            **extra,
        )
        self.res: Resources = build_resources(self.settings)
        if extractor is not None:
            p = self.res.pipeline
            self.res.pipeline = IngestPipeline(
                store=p.store, extractor=extractor, policy=p.policy, decision_ttl_s=p.decision_ttl_s
            )
        self._kicked: set[int] = set()
        self.client = MemoryClient(
            transcript=self.res.transcript, queue=self.res.queue, kicker=self._kick
        )
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="qb-recall")
        self.recaller = Recaller(
            stm=self.res.stm,
            profile_cache=self.res.profile_cache,
            engine=self.res.authority,
            ltm=ltm,
            settings=recall_settings or RecallSettings(**BENCH_TIMEOUTS),
            executor=self._executor,
        )
        self.spaces: dict[str, SpaceState] = {}
        self._last_outcomes: list[TurnOutcome] = []
        self.stats.notes.append(
            "in-process drain (core.ingest.drain.drain_shard) after every turn; "
            + ("LTM searcher attached" if ltm else "no LTM searcher: recall reads STM only")
        )
        self._ensure_tenant(migrate_db)

    def _kick(self, shard: int) -> None:
        self._kicked.add(shard)  # drained right after the turn, in this process

    # ------------------------------------------------------------------ authority
    def _ensure_tenant(self, migrate_db: bool) -> None:
        from core.authority import create_tenant, migrate

        if migrate_db:
            migrate.upgrade(self.settings.postgres_url)
        try:
            with self.res.authority.begin() as conn:
                create_tenant(db=conn, tenant={"id": TENANT, "name": "quality benchmark"})
        except InvalidInput:
            pass  # registered by an earlier run

    def _ensure_user(self, user_id: str) -> None:
        from core.authority import create_user

        try:
            with self.res.authority.begin() as conn:
                create_user(db=conn, user={"tenant_id": TENANT, "id": user_id})
        except InvalidInput:
            pass

    # ------------------------------------------------------------------ write path
    def _drain(self) -> None:
        while self._kicked:
            shard = self._kicked.pop()
            report = drain_shard(
                shard,
                queue=self.res.queue,
                transcript=self.res.transcript,
                pipeline=self.res.pipeline,
                consumer="quality-bench",
                batch=self.settings.ingest_batch,
                max_run_s=self.settings.ingest_max_run_s,
                keep_outcomes=True,
            )
            if report.continued:
                self._kicked.add(shard)
            self._last_outcomes.extend(report.outcomes)

    def ingest(self, space: Space) -> None:
        user = message_id(space.id)[:100]
        self._ensure_user(user)
        state = SpaceState(user, [], {}, 0.0)
        self._last_outcomes = []
        current = None
        for t in space.turns:
            session = "s" + message_id(t.session)
            if session != current:
                current = session
                state.sessions.append(session)
                if self.item_ranker is not None:
                    self._snapshot(user, state)  # before the sweep removes expired items
                self.res.stm.sweep(now=t.at, max_items=self.settings.sweep_batch)
            mid = message_id(t.id)
            state.turn_of[mid] = t.id
            t0 = time.perf_counter()
            self.client.record_turn(
                user_id=user,
                tenant_id=TENANT,
                session_id=session,
                turn_id="t-" + mid,
                messages=[{"role": "user", "content": t.text, "message_id": mid,
                           "name": t.speaker[:256]}],
                at=t.at,
            )  # fmt: skip
            self._drain()
            self.stats.add_seconds.append(time.perf_counter() - t0)
        for outcome in self._last_outcomes:
            for up in outcome.upserts:
                state.evicted.update(up.evicted)
        state.query_now = max((t.at for t in space.turns), default=0.0) + QUERY_DELAY_S
        self.spaces[space.id] = state
        if self.item_ranker is not None:
            self._snapshot(user, state)
        self.stats.ingested_turns += len(space.turns)
        if self.item_ranker is None:
            self.stats.stored_items += self.alive_items(space.id)
        else:  # what a promote-everything LTM would hold
            items = self.written_items_space(space)
            self.stats.stored_items += len(items.turns)
            self.item_ranker.ingest(items)

    # ------------------------------------------------------------------ inspection
    def alive_items(self, space_id: str) -> int:
        st = self.spaces[space_id]
        keys = self.res.stm.keys(st.user_id, TENANT)
        ids = [str(m) for m in self.res.redis.zrange(keys.recent, 0, -1)]
        return len(self.res.stm.get_many(st.user_id, ids, now=st.query_now, tenant_id=TENANT))

    def decisions(self, space_id: str) -> list[WriteDecision]:
        from core.ingest.pipeline import read_decisions

        st = self.spaces[space_id]
        out: list[WriteDecision] = []
        for s in st.sessions:
            out.extend(read_decisions(self.res.stm, st.user_id, s, tenant_id=TENANT))
        return out

    def _snapshot(self, user: str, state: SpaceState) -> None:
        keys = self.res.stm.keys(user, TENANT)
        ids = [str(m) for m in self.res.redis.zrange(keys.recent, 0, -1)]
        for item in self.res.stm.get_many(user, ids, include_expired=True, tenant_id=TENANT):
            state.written[item.id] = item

    def written_items_space(self, space: Space) -> Space:
        """Every item the write path wrote for the space (latest version, expired or swept
        ones included), as a space of "turns" (id = memory id): what a promote-everything
        policy would have carried to LTM before the items expired."""
        st = self.spaces[space.id]
        items = list(st.written.values())
        turns = [Turn(i.id, "", i.summary, i.updated_at, i.session_id) for i in items]
        st.item_turns = {
            i.id: tuple(st.turn_of.get(m, m) for m in i.source.message_ids) for i in items
        }
        return Space(space.id, turns, space.questions)

    # ------------------------------------------------------------------ read path
    def search(self, space: Space, question: Question, depth: int) -> list[Hit]:
        st = self.spaces[space.id]
        if self.item_ranker is not None:
            t0 = time.perf_counter()
            # the whole ranking, so the attribution can tell "ranked low" from "never written"
            ranked = self.item_ranker.search(space, question, max(depth, len(st.written)))
            self.stats.search_seconds.append(time.perf_counter() - t0)
            found = [Hit(h.text, st.item_turns.get(h.turns[0], ())) for h in ranked if h.turns]
            seen = [
                Candidate(h.turns[0], "kept", st.item_turns.get(h.turns[0], ()), h.text)
                for h in ranked
                if h.turns
            ]
            ranked_ids = {c.memory_id for c in seen}
            # items past the search's candidate depth: written, never ranked
            seen += [
                Candidate(mid, "below_top_k", st.item_turns.get(mid, ()), item.summary)
                for mid, item in st.written.items()
                if mid not in ranked_ids
            ]
            st.explained[question.id] = seen
            return found
        req = RecallRequest(
            tenant_id=TENANT,
            user_id=st.user_id,
            session_id="q-" + message_id(question.id)[-60:],
            query=question.text[:4000],
            top_k=RECALL_TOP_K,
            token_budget=RECALL_TOKEN_BUDGET,
            explain=True,
            now=st.query_now,
        )
        t0 = time.perf_counter()
        result = self.recaller.recall(req)
        self.stats.search_seconds.append(time.perf_counter() - t0)
        for layer, why in result.degraded.items():
            self.stats.degraded[f"{layer}: {why}"] += 1
        cands: list[Candidate] = []
        hits: list[Hit] = []
        for s in result.explain.candidates if result.explain else []:
            c = s.candidate
            turns = tuple(st.turn_of.get(m, m) for m in c.message_ids)
            cands.append(Candidate(c.memory_id, s.verdict.value, turns, c.summary))
            if s.verdict.value == "kept":
                hits.append(Hit(c.summary, turns))
        st.explained[question.id] = cands
        return hits

    def close(self) -> None:
        if self.item_ranker is not None:
            self.item_ranker.close()
        closer = getattr(self.recaller, "close", None)
        if closer is not None:
            closer()  # flushes recall bookkeeping, stops its helper threads
        self._executor.shutdown(wait=True)
        ns = self.settings.key_namespace
        for key in self.res.redis.scan_iter(match=f"{ns}:*", count=1000):
            self.res.redis.delete(key)
        self.res.close()
        shutil.rmtree(self._tmp, ignore_errors=True)
