"""Turn recorded turns into STM writes and recorded decisions (seed 十七.2).

One batch costs three Redis round trips whatever its size: a pipelined dedup lookup,
a pipeline of Lua upserts, a pipeline of decision records (one script call per session).
Candidates of one batch that share a canonical key see each other (an in-batch overlay),
so the recorded verdicts are the same as if the turns had been processed one by one.

**Bounded decisions.**  Every written candidate's decision is recorded; of the refused
ones, at most ``max_refusals_per_message`` per message.  A message that the extraction
budget cut, or whose refusals were not all recorded, gets one summary record (rule
``extraction_budget``) counting what was left out.  Each record's text is clipped
(summary 160, reason 200 characters, 8 message ids), so one message's records stay under
``(message_candidates + 1) × DECISION_MAX_BYTES`` whatever its length.

**Compact records.**  What is stored is a :class:`DecisionRecord` (about 120 bytes): the
verdict, reason, score, threshold and the two facts of the moment (novelty, mentions).
:func:`read_decisions` gives back the full :class:`WriteDecision` by re-running the
extractor on the turn in L0 and the policy's profile, score terms and importance on the
candidate (:meth:`IngestPipeline.expand`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from memstrata.core.errors import NotFound
from memstrata.core.extract.rules import BudgetNote, ExtractionContext, Extractor, clip
from memstrata.core.keys import user_scope
from memstrata.core.metrics import count_decisions
from memstrata.core.models.candidate import Candidate, Verdict, WriteDecision, WriteProfile
from memstrata.core.models.decision_record import BUDGET_RULE, DecisionRecord, check_of
from memstrata.core.models.identity import fingerprint
from memstrata.core.models.memory import MemoryItem, MemoryStatus, MemoryType
from memstrata.core.models.transcript import TranscriptRecord, TurnPointer
from memstrata.core.models.trusted import trusted
from memstrata.core.policy.write import (
    Existing,
    WritePolicy,
    build_write_profile,
    importance,
    judge,
    ttl_seconds,
    write_score,
)
from memstrata.core.stm.store import DecisionRow, StmStore, UpsertResult
from memstrata.core.transcript.store import TranscriptStore

log = logging.getLogger(__name__)

DECISION_PREVIEW_CHARS = 160
DECISION_REASON_CHARS = 200
DECISION_MESSAGE_IDS = 8
DECISION_MAX_BYTES = 2048  # one record's JSON at most (tests/integration/test_poison_turn.py)
UNRECOVERABLE = "(details not recoverable: the turn is not in L0 as it was extracted)"
_NO_PROFILE = WriteProfile(
    is_verified=False,
    is_stable_for_current_task=False,
    is_user_constraint=False,
    is_decision=False,
    is_preference=False,
    novelty=0.0,
    confidence=0.0,
    estimated_ttl_minutes=1,
    duplicate=False,
    transient=False,
    raw_unstructured_blob=False,
)


def memory_id_for(user_id: str, canonical_fact_key: str, tenant_id: str | None = None) -> str:
    """Deterministic item id: a redelivered turn re-creates the same id, never a twin.

    Hashed over the owner's scope, so no tenant and the default tenant give one id."""
    scope = user_scope(user_id, tenant_id)
    return "m_" + hashlib.sha1(f"{scope}|{canonical_fact_key}".encode()).hexdigest()[:20]


@dataclass
class TurnOutcome:
    turn_id: str
    session_id: str
    user_id: str
    tenant_id: str | None = None
    decisions: list[WriteDecision] = field(default_factory=list)
    upserts: list[UpsertResult] = field(default_factory=list)
    # one per message the budget cut or whose refusals were not all recorded
    summaries: list[WriteDecision] = field(default_factory=list)

    @property
    def written(self) -> list[WriteDecision]:
        return [d for d in self.decisions if d.verdict is Verdict.WRITTEN]

    @property
    def refused(self) -> list[WriteDecision]:
        return [d for d in self.decisions if d.verdict is Verdict.REFUSED]


@dataclass(frozen=True)
class _Planned:
    turn: int
    cand: Candidate
    fp: str
    decision: WriteDecision
    item: MemoryItem | None
    mentions: int


class IngestPipeline:
    """Extract, judge and write a batch of recorded turns."""

    def __init__(
        self,
        *,
        store: StmStore,
        extractor: Extractor,
        policy: WritePolicy,
        decision_ttl_s: int = 7 * 24 * 3600,
        max_refusals_per_message: int = 16,
    ) -> None:
        self.store = store
        self.extractor = extractor
        self.policy = policy
        self.decision_ttl_s = decision_ttl_s
        self.max_refusals_per_message = max_refusals_per_message

    def process(
        self, turns: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]]
    ) -> list[TurnOutcome]:
        """Process turns in order; returns one outcome per turn."""
        outcomes = [TurnOutcome(p.turn_id, p.session_id, p.user_id, p.tenant_id) for p, _ in turns]
        cands: list[tuple[int, Candidate, str]] = []
        self._ordinal: list[int] = []
        notes: list[list[BudgetNote]] = []
        for i, (ptr, records) in enumerate(turns):
            ctx = ExtractionContext(
                user_id=ptr.user_id, session_id=ptr.session_id, task_id=ptr.task_id
            )
            scope = ptr.task_id or ptr.session_id
            extraction = self.extractor.extract_turn(records, ctx)
            notes.append(extraction.notes)
            for k, cand in enumerate(extraction.candidates):
                cands.append((i, cand, fingerprint(ptr.user_id, scope, cand.subtype, cand.summary)))
                self._ordinal.append(k)
        existing = self._lookup(turns, cands)
        planned = self._judge(turns, cands, existing)
        self._write(turns, planned, outcomes, notes)
        return outcomes

    # ------------------------------------------------------------------ steps
    def _lookup(
        self,
        turns: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]],
        cands: list[tuple[int, Candidate, str]],
    ) -> list[Existing | None]:
        by_user: dict[tuple[str, str | None], list[int]] = {}
        for n, (i, _c, _fp) in enumerate(cands):
            ptr = turns[i][0]
            by_user.setdefault((ptr.user_id, ptr.tenant_id), []).append(n)
        out: list[Existing | None] = [None] * len(cands)
        for (user_id, tenant_id), idxs in by_user.items():
            hits = self.store.lookup(
                user_id,
                [(cands[n][1].canonical_fact_key, cands[n][2]) for n in idxs],
                tenant_id=tenant_id,
            )
            for n, hit in zip(idxs, hits, strict=True):
                if hit is not None:
                    out[n] = Existing(
                        hit.memory_id, hit.fingerprint, hit.message_ids, hit.mention_count
                    )
        return out

    def _judge(
        self,
        turns: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]],
        cands: list[tuple[int, Candidate, str]],
        existing: list[Existing | None],
    ) -> list[_Planned]:
        overlay: dict[tuple[str, str], Existing] = {}  # (scope, canon or fp) → written in batch
        planned = []
        scopes: dict[tuple[str, str | None], str] = {}  # owner → scope, built once a batch
        threshold = self.policy.threshold
        for n, (i, cand, fp) in enumerate(cands):
            ptr = turns[i][0]
            owner = (ptr.user_id, ptr.tenant_id)
            scope = scopes.get(owner)
            if scope is None:
                scope = scopes[owner] = self.store.keys(ptr.user_id, ptr.tenant_id).scope
            in_batch = overlay.get((scope, "c:" + cand.canonical_fact_key)) or overlay.get(
                (scope, "f:" + fp)
            )
            prior = in_batch or existing[n]
            j = judge(cand, existing=prior, fp=fp, policy=self.policy)
            if (
                in_batch is not None
                and j.verdict is Verdict.WRITTEN
                and set(cand.source.message_ids) & set(in_batch.message_ids)
            ):
                # one message saying the same thing twice: the first clause already wrote it
                j = replace(j, reason="restated in the same message; already stored")
            item = None
            memory_id = None
            if j.verdict is Verdict.WRITTEN:
                memory_id = (
                    prior.memory_id
                    if prior
                    else memory_id_for(ptr.user_id, cand.canonical_fact_key, ptr.tenant_id)
                )
                item = self._item(ptr, cand, fp, memory_id, j.importance, j.ttl_s)
                msgs = tuple(cand.source.message_ids) + (prior.message_ids if prior else ())
                mentions = (prior.mention_count + 1) if prior else 1
                seen = Existing(memory_id, fp, msgs, mentions)
                overlay[(scope, "c:" + cand.canonical_fact_key)] = seen
                overlay[(scope, "f:" + fp)] = seen
            # every part is valid already (pointer, candidate, judgement): no re-validation
            decision = candidate_decision(
                cand, decision_id=f"{ptr.turn_id}:{self._ordinal[n]:03d}:{cand.rule}",
                verdict=j.verdict, reason=j.reason[:DECISION_REASON_CHARS], score=j.score,
                threshold=threshold, breakdown=j.breakdown, profile=j.profile,
                importance=j.importance, importance_breakdown=j.importance_breakdown,
                memory_type=cand.memory_type, rule=cand.rule, memory_id=memory_id,
                message_ids=list(cand.source.message_ids[:DECISION_MESSAGE_IDS]),
                session_id=ptr.session_id, at=ptr.at,
            )  # fmt: skip
            planned.append(_Planned(i, cand, fp, decision, item, j.mentions))
        return planned

    def _item(
        self,
        ptr: TurnPointer,
        cand: Candidate,
        fp: str,
        memory_id: str,
        importance: float,
        ttl_s: int,
    ) -> MemoryItem:
        # every part was validated already (pointer, candidate): construct, don't re-validate
        return trusted(MemoryItem, dict(
            id=memory_id,
            user_id=ptr.user_id,
            tenant_id=ptr.tenant_id,
            session_id=ptr.session_id,
            task_id=ptr.task_id,
            memory_type=cand.memory_type,
            subtype=cand.subtype,
            # the store's limit is a setting: clip rather than fail the whole batch
            summary=clip(cand.summary, self.store.max_summary_chars),
            detail=cand.detail,
            entities=cand.entities,
            tags=cand.tags,
            source=cand.source,
            confidence=cand.confidence,
            importance=importance,
            created_at=ptr.at,
            updated_at=ptr.at,
            last_access_at=ptr.at,
            expires_at=ptr.at + ttl_s,
            fingerprint=fp,
            canonical_fact_key=cand.canonical_fact_key,
            # every field given, in the model's order (``trusted`` then keeps this dict)
            version=1,
            status=MemoryStatus.ACTIVE,
            mention_count=1,
            seen_sessions=[ptr.session_id],
            history=[],
            agent_id=None,
            owner_agent=None,
            shared_scope=None,
        ))  # fmt: skip

    def _write(
        self,
        turns: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]],
        planned: list[_Planned],
        outcomes: list[TurnOutcome],
        notes: list[list[BudgetNote]],
    ) -> None:
        to_write = [p for p in planned if p.item is not None]
        # one script call per owner of the batch, not one per item (issue 17)
        results = self.store.upsert_batch([p.item for p in to_write if p.item is not None])
        by_plan = {id(p): r for p, r in zip(to_write, results, strict=True)}
        rows: list[DecisionRow] = []
        refusals: Counter[tuple[int, str]] = Counter()
        unrecorded: dict[tuple[int, str], Counter[str]] = {}
        for p in planned:
            out = outcomes[p.turn]
            res = by_plan.get(id(p))
            decision = p.decision
            if res is not None:
                out.upserts.append(res)
                update: dict[str, object] = {"memory_id": res.memory_id}
                if res.op == "stale":
                    update["reason"] = "older than the stored version; kept as history"
                decision = trusted(WriteDecision, {**decision.__dict__, **update})
            out.decisions.append(decision)
            if decision.verdict is Verdict.REFUSED:
                where = (p.turn, decision.message_ids[0] if decision.message_ids else "")
                refusals[where] += 1
                if refusals[where] > self.max_refusals_per_message:
                    unrecorded.setdefault(where, Counter())[f"refused:{decision.rule}"] += 1
                    continue
            record = DecisionRecord.of(decision, mentions=p.mentions)
            rows.append((out.user_id, out.tenant_id, out.session_id, record))
        for i, (ptr, records) in enumerate(turns):
            for summary in _summaries(ptr, records, notes[i], unrecorded, i, self.policy.threshold):
                outcomes[i].summaries.append(summary)
                record = DecisionRecord.of(summary, mentions=1)
                rows.append((ptr.user_id, ptr.tenant_id, ptr.session_id, record))
        # write-once: a redelivery must not rewrite why the turn was (not) stored
        self.store.record_decisions(rows, ttl_s=self.decision_ttl_s)
        count_decisions(d for out in outcomes for d in (*out.decisions, *out.summaries))

    # ------------------------------------------------------------------ explain
    def expand(
        self,
        records: Sequence[DecisionRecord],
        transcript: TranscriptStore,
        *,
        user_id: str,
        session_id: str,
        tenant_id: str | None = None,
    ) -> list[WriteDecision]:
        """The full decisions behind compact records, re-derived from the turns in L0.

        The extractor is deterministic on a turn's records, so re-running it gives the
        candidate each record was made for (found by ordinal and checked by its CRC);
        the write_profile, score terms and importance follow from the candidate and the
        recorded novelty and mentions.  Verdict, reason, score and threshold are the
        recorded ones.  Records of the old format come back as they were stored."""
        wanted = {r.turn_id for r in records if r.full is None and not r.is_budget}
        extracted = self._re_extract(transcript, wanted, user_id, session_id, tenant_id)
        out = []
        for r in records:
            if r.full is not None:
                out.append(r.full)
            elif r.is_budget:
                out.append(_budget_decision(r))
            else:
                cands = extracted.get(r.turn_id, [])
                cand = cands[r.ordinal] if r.ordinal < len(cands) else None
                if cand is not None and (
                    cand.rule != r.rule
                    or r.check != check_of(cand.canonical_fact_key,
                                           cand.summary[:DECISION_PREVIEW_CHARS])
                ):  # fmt: skip
                    cand = None
                if cand is None:
                    log.warning("decision %s: candidate not re-derived from L0", r.decision_id)
                out.append(self._full_decision(r, cand))
        return out

    def _re_extract(
        self,
        transcript: TranscriptStore,
        turn_ids: set[str],
        user_id: str,
        session_id: str,
        tenant_id: str | None,
    ) -> dict[str, list[Candidate]]:
        if not turn_ids:
            return {}
        turns: dict[str, list[TranscriptRecord]] = {}
        seen: set[str] = set()
        try:
            for rec in transcript.read_session(
                user_id=user_id, session_id=session_id, tenant_id=tenant_id
            ):
                # a later copy of a turn (a retry past the dedup window) is not extracted twice
                if rec.turn_id in turn_ids and rec.message_id not in seen:
                    seen.add(rec.message_id)
                    turns.setdefault(rec.turn_id, []).append(rec)
        except NotFound:
            return {}
        out = {}
        for turn_id, recs in turns.items():
            first = recs[0]
            # the context the pipeline gave it (``process``)
            ctx = ExtractionContext(
                user_id=first.user_id, session_id=first.session_id, task_id=first.task_id
            )
            out[turn_id] = self.extractor.extract_turn(recs, ctx).candidates
        return out

    def _full_decision(self, r: DecisionRecord, cand: Candidate | None) -> WriteDecision:
        if cand is None:
            return WriteDecision(
                decision_id=r.decision_id, verdict=r.verdict, reason=r.reason, score=r.score,
                threshold=r.threshold, breakdown={}, profile=_NO_PROFILE, importance=0.0,
                importance_breakdown={}, memory_type=r.memory_type, subtype="",
                summary=UNRECOVERABLE, canonical_fact_key="", rule=r.rule,
                memory_id=r.memory_id, message_ids=list(r.message_ids),
                session_id=r.session_id, at=r.at,
            )  # fmt: skip
        ttl = ttl_seconds(cand, self.policy)
        profile = build_write_profile(cand, novelty_value=r.novelty, ttl_s=ttl, policy=self.policy)
        _, breakdown = write_score(profile, self.policy)
        imp, imp_breakdown = importance(cand, mentions=r.mentions)
        return candidate_decision(
            cand, decision_id=r.decision_id, verdict=r.verdict, reason=r.reason, score=r.score,
            threshold=r.threshold, breakdown=breakdown, profile=profile, importance=imp,
            importance_breakdown=imp_breakdown, memory_type=r.memory_type, rule=r.rule,
            memory_id=r.memory_id, message_ids=list(r.message_ids), session_id=r.session_id,
            at=r.at,
        )  # fmt: skip


def candidate_decision(
    cand: Candidate,
    *,
    decision_id: str,
    verdict: Verdict,
    reason: str,
    score: float,
    threshold: float,
    breakdown: dict[str, float],
    profile: WriteProfile,
    importance: float,
    importance_breakdown: dict[str, float],
    memory_type: MemoryType,
    rule: str,
    memory_id: str | None,
    message_ids: list[str],
    session_id: str,
    at: float,
) -> WriteDecision:
    """One candidate's write decision.  The write path and its expansion from L0
    (:meth:`IngestPipeline._full_decision`) both build it here, so they agree field by
    field; every part is valid already, so nothing is re-validated."""
    return trusted(WriteDecision, dict(
        decision_id=decision_id, verdict=verdict, reason=reason, score=score,
        threshold=threshold, breakdown=breakdown, profile=profile, importance=importance,
        importance_breakdown=importance_breakdown, memory_type=memory_type,
        subtype=cand.subtype, summary=cand.summary[:DECISION_PREVIEW_CHARS],
        canonical_fact_key=cand.canonical_fact_key, rule=rule, memory_id=memory_id,
        message_ids=message_ids, session_id=session_id, at=at, omitted={},
    ))  # fmt: skip


def budget_decision(
    *,
    decision_id: str,
    verdict: Verdict,
    reason: str,
    threshold: float,
    message_id: str,
    memory_id: str | None,
    session_id: str,
    at: float,
    omitted: dict[str, int],
) -> WriteDecision:
    """A budget summary's decision: what one message's extraction left out, counted.  Its
    compact record holds every part, so :func:`_summaries` and the read back agree."""
    return WriteDecision(
        decision_id=decision_id, verdict=verdict, reason=reason, score=0.0,
        threshold=threshold, breakdown={}, profile=_NO_PROFILE, importance=0.0,
        importance_breakdown={}, memory_type=MemoryType.FACT, subtype="budget",
        summary=f"message {message_id}"[:DECISION_PREVIEW_CHARS],
        canonical_fact_key=f"budget:{message_id}", rule=BUDGET_RULE, memory_id=memory_id,
        message_ids=[message_id] if message_id else [], session_id=session_id, at=at,
        omitted=omitted,
    )  # fmt: skip


def _budget_decision(r: DecisionRecord) -> WriteDecision:
    """A budget summary read back from its record alone."""
    return budget_decision(
        decision_id=r.decision_id, verdict=r.verdict, reason=r.reason, threshold=r.threshold,
        message_id=r.message_ids[0] if r.message_ids else "", memory_id=r.memory_id,
        session_id=r.session_id, at=r.at, omitted=r.omitted,
    )  # fmt: skip


def _summaries(
    ptr: TurnPointer,
    records: Sequence[TranscriptRecord],
    notes: list[BudgetNote],
    unrecorded: dict[tuple[int, str], Counter[str]],
    turn: int,
    threshold: float,
) -> list[WriteDecision]:
    """One record per message of the turn that the budget cut or whose refusals were not
    all recorded: what was left out, counted (no candidate is dropped silently)."""
    by_message = {n.message_id: n for n in notes}
    out = []
    for index, rec in enumerate(records):
        note = by_message.get(rec.message_id)
        refused = unrecorded.get((turn, rec.message_id), Counter())
        if note is None and not refused:
            continue
        omitted: dict[str, int] = dict(sorted(refused.items()))
        parts = []
        if note is not None and note.chars > note.read_chars:
            omitted["chars_not_read"] = note.chars - note.read_chars
            parts.append(
                f"read {note.read_chars:,} of {note.chars:,} chars ({note.windows} windows)"
            )
        if note is not None and note.clauses_skipped:
            omitted["clauses_not_classified"] = note.clauses_skipped
            parts.append(
                f"{note.clauses_skipped:,} clauses past the {note.candidate_cap}-candidate cap "
                "not classified"
            )
        if refused:
            parts.append(f"{sum(refused.values()):,} more refusals not recorded one by one")
        reason = ("extraction budget: " + "; ".join(parts))[:DECISION_REASON_CHARS]
        out.append(budget_decision(
            decision_id=f"{ptr.turn_id}:~{index:03d}:budget", verdict=Verdict.REFUSED,
            reason=reason, threshold=threshold, message_id=rec.message_id, memory_id=None,
            session_id=ptr.session_id, at=ptr.at, omitted=omitted,
        ))  # fmt: skip
    return out


class DecisionSource(Protocol):
    """What reading decisions back needs: the records, L0 and the extractor and policy
    that made them (the runtime is one)."""

    stm: StmStore
    transcript: TranscriptStore
    pipeline: IngestPipeline


def read_decisions(
    source: DecisionSource, user_id: str, session_id: str, *, tenant_id: str | None = None
) -> list[WriteDecision]:
    """Every recorded write decision of a session, in turn order ("why was X (not) stored?"),
    expanded to the full decision from L0 (:meth:`IngestPipeline.expand`)."""
    records = source.stm.decisions(user_id, session_id, tenant_id=tenant_id)
    return source.pipeline.expand(
        records, source.transcript, user_id=user_id, session_id=session_id, tenant_id=tenant_id
    )


def read_decision_records(
    store: StmStore, user_id: str, session_id: str, *, tenant_id: str | None = None
) -> list[DecisionRecord]:
    """The compact records alone (verdict, rule, reason, score, memory and message ids):
    enough for stage-loss accounting, without touching L0."""
    return store.decisions(user_id, session_id, tenant_id=tenant_id)
