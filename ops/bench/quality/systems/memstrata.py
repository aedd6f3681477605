"""memstrata itself, through its real write and read paths, on a simulated clock.

Write: ``MemoryClient.record_turn(at=<dataset time>)`` → L0 transcript → ingest stream →
``core.ingest.drain.drain_shard`` run in this process right after each turn (the same
function the Celery ``ingest`` task calls; running it in-process keeps the benchmark
deterministic and fast, and skips only the broker hop) → rule extractor → write policy →
Redis STM.  Read: ``Recaller.recall()`` after the whole space is in, at the
time of the last turn plus one minute, with ``explain=True``; the kept memories, in
rank order, are expanded into their ``source.message_ids`` (turn budget).

Beat on the same clock: whenever the next turn comes more than ``session_idle_s`` +
``idle_check_s`` after the previous one, the idle-session job runs at the time Beat
would (``core.lifecycle.finalise.finalise_idle``): the quiet sessions' items get the
promotion pass, episodic statements become LTM cards, the session summary card is
written; new cards are projected into Milvus right away (what the
``memstrata.ltm.index`` task does).  The consolidation job
(``core.lifecycle.consolidate``) runs for the space's owner whenever its Beat interval
has passed on that clock, and once more before the questions.  Then the STM expiry sweep
runs at the next turn's time.  Recall reads PostgreSQL, STM and LTM as in production.

Every store is real: Redis (a fresh key namespace per run, deleted at the end), a
scratch PostgreSQL database (authority, LTM ledger, lifecycle audit; dropped at the
end), a milvus-lite server started for the run (its own folder), a temporary L0 folder.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memstrata.core.api import MemoryClient
from memstrata.core.compress.cache import SessionActivity
from memstrata.core.compress.tokens import EstimateCounter
from memstrata.core.errors import InvalidInput
from memstrata.core.extract.rules import Extractor
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.pipeline import TurnOutcome
from memstrata.core.models.decision_record import DecisionRecord
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import TranscriptRecord
from memstrata.core.policy.write import TtlPolicy
from memstrata.core.recall.service import RecallRequest, RecallSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.ops.bench.common.db import scratch_postgres
from memstrata.ops.bench.quality.datasets import Question, Space, Turn
from memstrata.ops.bench.quality.embed import SharedEmbedder, Vector, shared_embedder
from memstrata.ops.bench.quality.systems.base import (
    INDEX_CONTEXT,
    RAW_HISTORY,
    UNCURATED,
    Hit,
    Injection,
    SystemStats,
    count_tokens,
)

if TYPE_CHECKING:
    from memstrata.core.lifecycle.runtime import Lifecycle
    from memstrata.core.ltm.embedding import CachedEmbedder
    from memstrata.core.ltm.runtime import LtmRuntime

TENANT = "bench-quality"
QUERY_DELAY_S = 60.0
# quality, not latency: a layer timing out on a loaded shared machine must not count as a
# miss (answers that still degrade are counted in ``stats.degraded``)
BENCH_TIMEOUTS = {"ltm_timeout_s": 30.0}
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
    failed: dict[str, str] = field(default_factory=dict)  # message id → why record_turn failed
    explained: dict[str, list[Candidate]] = field(default_factory=dict)  # question id →


class DiskCachedProvider:
    """memstrata.core.ltm's embedder protocol over the harness's shared, disk-cached embedder: the
    same model and vectors as the baselines, and a rerun embeds only new texts."""

    def __init__(self, shared: SharedEmbedder) -> None:
        self.shared = shared
        self.name = shared.name
        self.dim = shared.dim

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        return self.shared.passages(list(texts))

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        return np.stack([self.shared.query(t) for t in texts]).astype(np.float32)


class MemstrataSystem:
    name = "memstrata"

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        extractor: Extractor | None = None,
        recall_settings: RecallSettings | None = None,
        ttl_days: float | None = None,
        name: str = "memstrata",
        migrate_db: bool = True,
        long_term: bool = True,
    ) -> None:
        self.name = name
        self.stats = SystemStats()
        self._tmp = Path(tempfile.mkdtemp(prefix="qb-l0-"))
        extra: dict[str, object] = {}
        self._stack = contextlib.ExitStack()
        if settings is None and long_term:  # cards and audit rows of this run only
            extra["postgres_url"] = self._stack.enter_context(scratch_postgres("memstrata_qb_"))
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
        self.lifecycle: Lifecycle | None = None
        self.ltm_runtime: LtmRuntime | None = None
        embedder = None
        if long_term:  # a milvus-lite server of this run, and the bench's cached embeddings
            embedder = self._start_milvus()
        self.res: Runtime = Runtime(self.settings, embedder=embedder, extractor=extractor)
        self._kicked: set[int] = set()
        self._owner: str | None = None  # the user being ingested (consolidation's owner)
        self._consolidated_at = float("-inf")
        # the session activity the ingest task records and the idle-session job reads
        self._activity = SessionActivity(self.res.redis, namespace=self.settings.key_namespace)
        self._counter = EstimateCounter()
        self.client = MemoryClient(
            transcript=self.res.transcript, queue=self.res.queue, kicker=self._kick
        )
        self._ensure_tenant(migrate_db)
        if long_term:
            self.ltm_runtime = self.res.ltm
            self.lifecycle = self.res.lifecycle(on_cards=self._index)
        self.recaller = self.res.recaller(
            settings=recall_settings or RecallSettings(**BENCH_TIMEOUTS), ltm=long_term
        )
        self.spaces: dict[str, SpaceState] = {}
        self._last_outcomes: list[TurnOutcome] = []
        self.stats.notes.append(
            "in-process drain (core.ingest.drain.drain_shard) after every turn; "
            + ("lifecycle + LTM attached" if long_term else "no LTM: recall reads STM only")
        )

    # ------------------------------------------------------------------ long-term memory
    def _start_milvus(self) -> CachedEmbedder:
        """A milvus-lite server for this run, pointed at by the settings' LTM part."""
        from memstrata.core.ltm.embedding import CachedEmbedder
        from memstrata.core.ltm.milvus_server import MilvusServer, free_port

        server = MilvusServer(self._tmp / "ltm.db", f"127.0.0.1:{free_port()}")
        server.start()
        self._stack.callback(server.stop)
        ltm_settings = self.settings.ltm.model_copy(
            update={"milvus_uri": server.uri, "collection_prefix": self.settings.key_namespace}
        )
        self.settings = self.settings.model_copy(update={"ltm": ltm_settings})
        return CachedEmbedder(DiskCachedProvider(shared_embedder()), capacity=100_000)

    def _index(self, card_ids: Sequence[str]) -> None:
        """What the ``memstrata.ltm.index`` task does, in this process."""
        assert self.ltm_runtime is not None
        report = self.ltm_runtime.projector.project(list(card_ids))
        if report.retry:
            self.stats.degraded[f"ltm index: {report}"[:120]] += 1

    def _note_activity(self, user: str, session: str, mid: str, t: Turn) -> None:
        """What the ingest task does after a drain (``tasks.compress.track_turns``): count
        the turn into its session's activity, which the idle-session job reads."""
        from memstrata.core.models.transcript import Role, TranscriptRecord

        rec = TranscriptRecord(message_id=mid, turn_id="t-" + mid, user_id=user,
                               tenant_id=TENANT, session_id=session, role=Role(t.role),
                               content=t.text, name=t.speaker[:256] or None, at=t.at)  # fmt: skip
        self._activity.note_turn([rec], self._counter)

    def _finalise_idle(self, now: float) -> None:
        """Celery Beat's idle-session job at simulated time ``now``."""
        if self.lifecycle is None:
            return
        from memstrata.core.lifecycle.finalise import finalise_idle

        while finalise_idle(self.lifecycle, now=now, limit=100, max_s=600.0):
            pass
        if now - self._consolidated_at >= self.settings.lifecycle.consolidate.interval_s:
            self._consolidate(now)
        self._purge()

    def _purge(self) -> None:
        """The reconciler's purge (Beat, every minute): the index rows that card updates
        replaced (core/ltm/rows.py) are gone before the next session, as in a deployment."""
        if self.ltm_runtime is not None:
            while self.ltm_runtime.projector.purge_stale(self.settings.ltm.stale_purge_batch):
                pass

    def _consolidate(self, now: float) -> None:
        """Celery Beat's consolidation job for the owner being ingested, at time ``now``."""
        if self.lifecycle is None or not self.settings.lifecycle.consolidate.enabled:
            return
        from memstrata.core.lifecycle.consolidate import consolidate_owner

        assert self._owner is not None
        consolidate_owner(self.lifecycle, tenant_id=TENANT, user_id=self._owner, now=now)
        self._consolidated_at = now

    def _index_history(self, turns: Sequence[tuple[object, Sequence[TranscriptRecord]]]) -> None:
        """What ``memstrata.ltm.index_history`` does after a drain, in this process."""
        history = self.ltm_runtime.history if self.ltm_runtime is not None else None
        if history is not None:
            history.project([rec for _pointer, records in turns for rec in records])

    def _kick(self, shard: int) -> None:
        self._kicked.add(shard)  # drained right after the turn, in this process

    # ------------------------------------------------------------------ authority
    def _ensure_tenant(self, migrate_db: bool) -> None:
        from memstrata.core import migrations
        from memstrata.core.authority.admin import create_tenant

        if migrate_db:
            migrations.upgrade(self.settings.postgres_url)
        try:
            with self.res.engine.begin() as conn:
                create_tenant(db=conn, tenant={"id": TENANT, "name": "quality benchmark"})
        except InvalidInput:
            pass  # registered by an earlier run

    def _ensure_user(self, user_id: str) -> None:
        from memstrata.core.authority.admin import create_user

        try:
            with self.res.engine.begin() as conn:
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
                on_batch=self._index_history,
            )
            if report.continued:
                self._kicked.add(shard)
            self._last_outcomes.extend(report.outcomes)

    def _record(self, user: str, session: str, mid: str, t: Turn) -> None:
        """One turn through the write path: L0 + stream, the drain, the session activity."""
        self.client.record_turn(
            user_id=user,
            tenant_id=TENANT,
            session_id=session,
            turn_id="t-" + mid,
            messages=[{"role": t.role, "content": t.text, "message_id": mid,
                       "name": t.speaker[:256]}],
            at=t.at,
        )  # fmt: skip
        self._drain()
        self._note_activity(user, session, mid, t)

    def ingest(self, space: Space) -> None:
        user = message_id(space.id)[:100]
        self._ensure_user(user)
        state = SpaceState(user, [], {}, 0.0)
        self._owner, self._consolidated_at = user, float("-inf")
        self._last_outcomes = []
        current = None
        last_at: float | None = None
        lcs = self.settings.lifecycle
        quiet_s = lcs.session_idle_s + lcs.idle_check_s
        for t in space.turns:
            session = "s" + message_id(t.session)
            new_session = session != current
            if new_session:
                current = session
                if session not in state.sessions:
                    state.sessions.append(session)
            # Beat, by the clock: after a quiet period the idle job finalises whatever
            # went quiet (a session, or the part of one that was followed by a long gap),
            # then the sweep removes what expired meanwhile
            quiet = last_at is not None and t.at - last_at > quiet_s
            if new_session or quiet:
                if quiet and last_at is not None:
                    self._finalise_idle(last_at + quiet_s)
                self.res.stm.sweep(now=t.at, max_items=self.settings.sweep_batch)
            mid = message_id(t.id)
            state.turn_of[mid] = t.id
            t0 = time.perf_counter()
            try:
                self._record(user, session, mid, t)
            except Exception as exc:  # recorded, and the run fails at the end; the rest
                # of the space still goes in (one refused message must not lose a run)
                state.failed[mid] = f"{type(exc).__name__}: {exc}"[:300]
                self.stats.error("ingest", space.id, t.id, exc)
                continue
            self.stats.add_seconds.append(time.perf_counter() - t0)
            last_at = t.at
        for outcome in self._last_outcomes:
            for up in outcome.upserts:
                state.evicted.update(up.evicted)
        state.query_now = max((t.at for t in space.turns), default=0.0) + QUERY_DELAY_S
        if last_at is not None:  # Beat has run since the last turn, before any question
            self._consolidate(last_at + QUERY_DELAY_S / 2)
            self._purge()
        self.spaces[space.id] = state
        self.stats.ingested_turns += len(space.turns)
        held = self.inventory(space.id)
        self.stats.stored_items += self.stored(held)
        for layer, texts in held.items():
            self.stats.stored_layers[layer] += count_tokens(texts)

    # ------------------------------------------------------------------ inspection
    def alive(self, space_id: str) -> list[MemoryItem]:
        st = self.spaces[space_id]
        keys = self.res.stm.keys(st.user_id, TENANT)
        ids = [str(m) for m in self.res.redis.zrange(keys.recent, 0, -1)]
        return self.res.stm.get_many(st.user_id, ids, now=st.query_now, tenant_id=TENANT)

    @staticmethod
    def stored(inventory: dict[str, list[str]]) -> int:
        """Distinct curated memories of an :meth:`inventory` (raw history not counted)."""
        return sum(len(v) for k, v in inventory.items() if k not in UNCURATED)

    def inventory(self, space_id: str) -> dict[str, list[str]]:
        """The text of every distinct memory held at query time, by layer: active LTM cards
        (summary and content), STM items alive that no episode card or PG fact holds yet
        (an item finalised into a card lives on in STM until its TTL: counted once), PG
        facts (key and value).  Cards that keep raw history are reported apart."""
        from memstrata.core.models.identity import EPISODE

        cards = self._cards(space_id)
        held = {key for _, key, _, _ in cards} | self._absorbed_keys(space_id)
        facts = self._facts(space_id)
        promoted = {m for _, _, sources in facts for m in sources}
        stm = [i.summary for i in self.alive(space_id)
               if f"{EPISODE}:{i.canonical_fact_key}"[:256] not in held
               and i.id not in promoted]  # fmt: skip
        out: dict[str, list[str]] = {"stm": stm, "pg facts": [t for _, t, _ in facts],
                                     "ltm cards": [], RAW_HISTORY: []}  # fmt: skip
        for _mid, _key, source_type, text in cards:
            out[RAW_HISTORY if source_type == RAW_HISTORY else "ltm cards"].append(text)
        out[INDEX_CONTEXT] = self._index_context([mid for mid, _, _, _ in cards])
        return out

    def _index_context(self, card_ids: list[str]) -> list[str]:
        """The L0 text the projector indexes with these cards (the episodes' neighbours,
        ``IndexContext``): held by the indexes, not by the memories."""
        rt = self.ltm_runtime
        if rt is None or rt.projector.context is None:
            return []
        held = rt.ledger.cards(card_ids)
        return list(rt.projector.context(list(held.values())).texts.values())

    def _cards(self, space_id: str) -> list[tuple[str, str, str, str]]:
        """(memory id, canonical key, source type, stored text) of the user's active LTM
        cards."""
        if self.ltm_runtime is None:
            return []
        from sqlalchemy import select

        from memstrata.core.ltm.tables import cards

        q = select(cards.c.memory_id, cards.c.canonical_key, cards.c.source_type,
                   cards.c.summary, cards.c.content).where(
            cards.c.tenant_id == TENANT,
            cards.c.user_id == self.spaces[space_id].user_id,
            cards.c.status == "active",
        )  # fmt: skip
        with self.ltm_runtime.engine.connect() as conn:
            return [(str(m), str(k), str(src), "\n".join(t for t in (summary, content) if t))
                    for m, k, src, summary, content in conn.execute(q)]  # fmt: skip

    def _absorbed_keys(self, space_id: str) -> set[str]:
        """Canonical keys of the cards a merged card holds (hidden by consolidation): the
        STM items they came from are held by the merged card."""
        if self.lifecycle is None:
            return set()
        from sqlalchemy import select

        from memstrata.core.lifecycle.consolidate import absorbed
        from memstrata.core.ltm.tables import cards

        ids = list(
            absorbed(self.lifecycle, tenant_id=TENANT, user_id=self.spaces[space_id].user_id)
        )
        if not ids:
            return set()
        q = select(cards.c.canonical_key).where(cards.c.memory_id.in_(ids))
        with self.lifecycle.engine.connect() as conn:
            return {str(k) for (k,) in conn.execute(q)}

    def _facts(self, space_id: str) -> list[tuple[str, str, tuple[str, ...]]]:
        """(key, "key: value" text, source memory ids) of the user's current PG facts."""
        import json

        from memstrata.core.authority.read import read_snapshot

        with self.res.engine.connect() as conn:
            snap = read_snapshot(db=conn, tenant_id=TENANT, user_id=self.spaces[space_id].user_id)
        return [(key, f"{key}: {json.dumps(f.value, ensure_ascii=False)}", f.source_memory_ids)
                for key, f in snap.facts.items()]  # fmt: skip

    def decisions(self, space_id: str) -> list[DecisionRecord]:
        """The compact records: stage-loss accounting reads no detail that needs L0."""
        from memstrata.core.ingest.pipeline import read_decision_records

        st = self.spaces[space_id]
        out: list[DecisionRecord] = []
        for s in st.sessions:
            out.extend(read_decision_records(self.res.stm, st.user_id, s, tenant_id=TENANT))
        return out

    # ------------------------------------------------------------------ read path
    def search(self, space: Space, question: Question, depth: int) -> list[Hit]:
        st = self.spaces[space.id]
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

    def inject(self, space: Space, question: Question, budget: int) -> Injection:
        """What recall renders within ``token_budget=budget`` (its own session, so the
        question's main recall and its flags are untouched), with the kept memories'
        source turns."""
        st = self.spaces[space.id]
        req = RecallRequest(
            tenant_id=TENANT,
            user_id=st.user_id,
            session_id=f"b{budget}-" + message_id(question.id)[-56:],
            query=question.text[:4000],
            top_k=RECALL_TOP_K,
            token_budget=budget,
            now=st.query_now,
        )
        result = self.recaller.recall(req)
        for layer, why in result.degraded.items():
            self.stats.degraded[f"budget recall, {layer}: {why}"] += 1
        turns: list[str] = []
        memory = result.memory  # every rendered line, the raw-history floor's included
        for line in (*memory.short_term, *memory.long_term, *memory.history):
            for m in line.message_ids:
                t = st.turn_of.get(m, m)
                if t not in turns:
                    turns.append(t)
        return Injection(result.text, tuple(turns))

    def close(self) -> None:
        self.recaller.close()  # flushes recall bookkeeping, stops its helper threads
        ns = self.settings.key_namespace
        for key in self.res.redis.scan_iter(match=f"{ns}:*", count=1000):
            self.res.redis.delete(key)
        self.res.close()
        self._stack.close()  # milvus-lite server, scratch database
        shutil.rmtree(self._tmp, ignore_errors=True)
