"""Where memstrata lost each gold turn it did not return (per question, per turn).

For every gold turn outside the top-k turn budget, the furthest stage the turn reached
on the way from ``record_turn()`` to the injected memory:

    not_recorded     ``record_turn()`` raised on the turn (the run records the error)
    never_proposed   the extractor proposed no candidate from the turn
    refused          candidates were proposed, the write policy refused them all
                     (the recorded reason is kept: ``read_decision_records``)
    evicted          written, then evicted by the per-session STM cap
    expired          written, then past its TTL at query time (or swept)
    superseded       written, but a newer version of the same fact now holds the item
                     (the turn survives only in the item's history)
    not_fetched      alive in STM or held by an active LTM card, but recall never pooled
                     it (STM reads a fixed number of items per index; the LTM search did
                     not return the card)
    dropped_in_pool  pooled, then dropped as a duplicate or overridden by authority
    ranked_below_k   ranked by recall, but past the turn budget k (or past recall's own
                     top-k / token budget)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from memstrata.core.models.candidate import Verdict
from memstrata.core.models.decision_record import DecisionRecord
from memstrata.core.models.memory import MemoryItem
from memstrata.ops.bench.quality.datasets import Question
from memstrata.ops.bench.quality.metrics import turn_budget
from memstrata.ops.bench.quality.systems.memstrata import (
    TENANT,
    MemstrataSystem,
    SpaceState,
    message_id,
)

STAGES: tuple[str, ...] = (
    "retrieved",
    "not_recorded",
    "never_proposed",
    "refused",
    "evicted",
    "expired",
    "superseded",
    "not_fetched",
    "dropped_in_pool",
    "ranked_below_k",
)
# the further down the path, the higher: a turn is charged to the furthest stage it reached
_ORDER = {s: i for i, s in enumerate(STAGES[1:])}
_RANKED = ("below_top_k", "over_token_budget")  # pooled and ranked, cut by recall's limits


@dataclass
class TurnFate:
    turn: str
    stage: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"turn": self.turn, "stage": self.stage, "detail": self.detail}


@dataclass
class SpaceLedger:
    """What the write path did with every message of one space."""

    decisions: dict[str, list[DecisionRecord]]  # message id → its decisions
    items: dict[str, MemoryItem]  # memory id → item as stored now (expired included)
    evicted: set[str]
    now: float
    cards: dict[str, list[str]] = field(default_factory=dict)  # message id → active LTM cards
    failed: dict[str, str] = field(default_factory=dict)  # message id → record_turn's error


def build_ledger(system: MemstrataSystem, space_id: str) -> SpaceLedger:
    st: SpaceState = system.spaces[space_id]
    by_msg: dict[str, list[DecisionRecord]] = {}
    for d in system.decisions(space_id):
        for m in d.message_ids:
            by_msg.setdefault(m, []).append(d)
    ids = sorted({d.memory_id for ds in by_msg.values() for d in ds if d.memory_id})
    items = system.res.stm.get_many(st.user_id, ids, include_expired=True, tenant_id=TENANT)
    return SpaceLedger(
        by_msg, {i.id: i for i in items}, set(st.evicted), st.query_now, _cards(system, st),
        dict(st.failed),
    )  # fmt: skip


def _cards(system: MemstrataSystem, st: SpaceState) -> dict[str, list[str]]:
    """message id → the active LTM cards that cite it (the ledger is the truth)."""
    if system.ltm_runtime is None:
        return {}
    from sqlalchemy import select

    from memstrata.core.ltm.tables import cards

    out: dict[str, list[str]] = {}
    q = select(cards.c.memory_id, cards.c.source_message_ids).where(
        cards.c.tenant_id == TENANT, cards.c.user_id == st.user_id, cards.c.status == "active"
    )
    with system.ltm_runtime.engine.connect() as conn:
        for memory_id, mids in conn.execute(q):
            for m in mids or []:
                out.setdefault(str(m), []).append(str(memory_id))
    return out


def _write_fate(mid: str, ledger: SpaceLedger) -> tuple[str, str, list[str]]:
    """(stage, detail, alive memory ids) after the write path, before recall."""
    if mid in ledger.failed:
        return "not_recorded", ledger.failed[mid], []
    decisions = ledger.decisions.get(mid, [])
    if not decisions:
        return "never_proposed", "", []
    held = ledger.cards.get(mid)
    if held:  # promoted: whatever happened in STM since, long-term memory has it
        return "not_fetched", f"in LTM card {held[0]}, not returned by the LTM search", held
    written = [d for d in decisions if d.verdict is Verdict.WRITTEN and d.memory_id]
    if not written:
        reasons = Counter(f"{d.rule}: {d.reason}" for d in decisions)
        return "refused", "; ".join(r for r, _ in reasons.most_common(2)), []
    best, detail, alive = "evicted", "", []
    for d in written:
        mem = d.memory_id or ""
        item = ledger.items.get(mem)
        if item is None:
            stage = "evicted" if mem in ledger.evicted else "expired"
            detail = detail or ("session cap" if stage == "evicted" else "swept after its TTL")
        elif item.expires_at <= ledger.now:
            stage = "expired"
            days = (ledger.now - item.expires_at) / 86400
            detail = f"{d.memory_type.value} TTL ended {days:.1f} d before the query"
        elif mid not in item.source.message_ids:
            stage = "superseded"
            detail = f"{mem} now holds a newer version"
        else:
            stage = "not_fetched"
            alive.append(mem)
        if _ORDER[stage] > _ORDER[best]:
            best = stage
    return best, detail, alive


def attribute(
    system: MemstrataSystem,
    space_id: str,
    ledger: SpaceLedger,
    question: Question,
    k: int,
) -> list[TurnFate]:
    """The fate of every gold turn of one question at turn budget ``k``."""
    st = system.spaces[space_id]
    cands = st.explained.get(question.id, [])
    kept = [c.turns for c in cands if c.verdict == "kept"]
    top = set(turn_budget(kept, k))
    pooled: dict[str, str] = {}  # turn → best verdict in the pool
    for c in cands:
        for t in c.turns:
            if pooled.get(t) != "kept":
                pooled[t] = c.verdict
    fates = []
    for turn in question.gold:
        if turn in top:
            fates.append(TurnFate(turn, "retrieved"))
            continue
        verdict = pooled.get(turn)
        if verdict == "kept":
            fates.append(TurnFate(turn, "ranked_below_k", f"outside the {k}-turn budget"))
            continue
        if verdict in _RANKED:
            fates.append(TurnFate(turn, "ranked_below_k", f"recall verdict {verdict}"))
            continue
        if verdict is not None:
            fates.append(TurnFate(turn, "dropped_in_pool", verdict))
            continue
        stage, detail, _alive = _write_fate(message_id(turn), ledger)
        fates.append(TurnFate(turn, stage, detail))
    return fates


def summarise(fates: Iterable[TurnFate]) -> dict[str, int]:
    counts = Counter(f.stage for f in fates)
    return {s: counts.get(s, 0) for s in STAGES}


def write_stage(turn: str, ledger: SpaceLedger) -> str:
    """Where the write path left one turn: never_proposed / refused / written-and-alive
    (``stored``) / evicted / expired / superseded."""
    stage, _detail, _alive = _write_fate(message_id(turn), ledger)
    return "stored" if stage == "not_fetched" else stage
