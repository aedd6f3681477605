"""Compress one session into a view within a token budget (pure: no I/O).

Order of work (seed 十六.2/3): if the raw session fits, it is returned as is.  Else
*light*: digested large tool results become stubs, biggest and oldest first, until the
view fits.  Else *formal*: the near-field and the mandatory summary lines (goal, every
active decision, plan and constraint) are placed first; then the early lines of each
section; then older units verbatim, chosen by dependency (digested last), content type
(conversation before tool steps), size and age; then any remaining summary lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memstrata.core.compress.deps import Dependency, classify
from memstrata.core.compress.errors import BudgetTooSmall
from memstrata.core.compress.model import (
    CompressedView,
    CompressionPolicy,
    DependencyClass,
    Level,
    Part,
    SummaryLine,
    SummarySection,
    ToolResultExplain,
    ViewMessage,
)
from memstrata.core.compress.nearfield import NearField, near_field
from memstrata.core.compress.session import SessionIndex, Unit, index_session
from memstrata.core.compress.stub import stub_text
from memstrata.core.compress.summary import (
    SECTIONS,
    TITLES,
    Line,
    header,
    item_lines,
    promote,
    render,
    rule_lines,
)
from memstrata.core.compress.text import cjk_share
from memstrata.core.compress.tokens import MESSAGE_OVERHEAD, TokenCounter, default_counter
from memstrata.core.errors import InvalidInput, NotFound
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import Role, TranscriptRecord

_TIER1_ORDER = {"next": 0, "requirements": 1, "state": 2, "risks": 3, "done": 4}
SIZE_BUCKET_TOKENS = 500


class _Plan:
    """Mutable working state of one formal compression: what is kept, what is left."""

    def __init__(self, remaining: int) -> None:
        self.remaining = remaining
        self.kept_units: set[int] = set()
        self.lines: list[Line] = []
        self.titles: dict[str, int] = {}
        self.opened: set[str] = set()

    def charge(self, ln: Line, *, optional: bool = False) -> None:
        """Keep a line, paying for its section title the first time (optional: if it fits)."""
        cost = ln.tokens + (0 if ln.section in self.opened else self.titles[ln.section])
        if optional and cost > self.remaining:
            return
        ln.kept = True
        self.opened.add(ln.section)
        self.remaining -= cost


def compress(
    records: Sequence[TranscriptRecord],
    items: Sequence[MemoryItem],
    *,
    budget_tokens: int | None,
    policy: CompressionPolicy | None = None,
    counter: TokenCounter | None = None,
    known_tokens: Mapping[str, int] | None = None,
) -> CompressedView:
    """The compressed view of a session's records, given its active STM items.

    ``known_tokens`` maps message ids to token counts taken at ingest (optional).
    """
    policy = policy or CompressionPolicy()
    counter = counter or default_counter()
    if budget_tokens is not None and budget_tokens < 1:
        raise InvalidInput("budget_tokens must be a positive number of tokens")
    idx = index_session(
        records, counter, include_system=policy.include_system, known_tokens=known_tokens
    )
    if not idx.records:
        raise NotFound("the session has no messages to compress")
    deps = classify(idx, items, policy)
    nf = near_field(idx, deps, policy)
    lang = _language(idx)
    stubbable = {
        d.slot.result_index: d
        for d in deps.values()
        if d.dependency is DependencyClass.DIGESTED
        and d.slot.result_index not in nf.needed_results
        and idx.tokens[d.slot.result_index] >= policy.light_min_tokens
    }
    stubs = {
        ri: stub_text(d, content=idx.records[ri].content, policy=policy, lang=lang)
        for ri, d in stubbable.items()
    }
    stub_cost = {ri: counter.count(t) + MESSAGE_OVERHEAD for ri, t in stubs.items()}
    all_units = set(range(len(idx.units)))
    if budget_tokens is None or idx.raw_tokens <= budget_tokens:
        return _view(idx, deps, nf, lang, Level.NONE, budget_tokens, all_units, {}, [], counter)
    total = idx.raw_tokens
    chosen: dict[int, str] = {}
    for ri in sorted(stubbable, key=lambda r: (-idx.tokens[r], r)):
        if total <= budget_tokens:
            break
        total -= idx.tokens[ri] - stub_cost[ri]
        chosen[ri] = stubs[ri]
    if total <= budget_tokens:
        return _view(
            idx, deps, nf, lang, Level.LIGHT, budget_tokens, all_units, chosen, [], counter
        )
    plan = _formal_plan(idx, items, deps, nf, policy, counter, stub_cost, budget_tokens, lang)
    kept = nf.units | plan.kept_units
    view = _view(
        idx, deps, nf, lang, Level.FORMAL, budget_tokens, set(kept), stubs, plan.lines, counter
    )
    while view.view_tokens > budget_tokens and _drop_one(plan.lines):
        view = _view(
            idx, deps, nf, lang, Level.FORMAL, budget_tokens, set(kept), stubs, plan.lines, counter
        )
    return view


def _language(idx: SessionIndex) -> str:
    sample = " ".join(r.content[:400] for r in idx.records if r.role is Role.USER)
    return "zh" if cjk_share(sample) >= 0.2 else "en"


def _unit_cost(unit: Unit, idx: SessionIndex, stub_cost: dict[int, int]) -> int:
    return sum(stub_cost.get(r, idx.tokens[r]) for r in unit.records)


def _formal_plan(
    idx: SessionIndex,
    items: Sequence[MemoryItem],
    deps: dict[str, Dependency],
    nf: NearField,
    policy: CompressionPolicy,
    counter: TokenCounter,
    stub_cost: dict[int, int],
    budget: int,
    lang: str,
) -> _Plan:
    near_users = {i for i in nf.reasons if idx.records[i].role is Role.USER}
    lines = item_lines(items, policy) + rule_lines(
        idx, deps, policy, near_users=near_users, lang=lang
    )
    lines = _place(lines, idx, nf, counter, stubbed=set(stub_cost))
    promote(lines, policy)
    near_tokens = sum(_unit_cost(idx.units[u], idx, stub_cost) for u in nf.units)
    plan = _Plan(budget - near_tokens - MESSAGE_OVERHEAD - counter.count(header(lang, 99999)))
    plan.titles = {k: counter.count(f"## {t}") + 1 for k, t in TITLES[lang].items()}
    for ln in lines:
        if ln.tier == 0:
            plan.charge(ln)
    if plan.remaining < 0:
        needed = budget - plan.remaining
        raise BudgetTooSmall(budget=budget, needed=needed, near_field=near_tokens)
    tier1 = sorted(
        (ln for ln in lines if ln.tier == 1), key=lambda ln: (_TIER1_ORDER[ln.section], -ln.order)
    )
    for ln in tier1:
        plan.charge(ln, optional=True)
    _keep_units(idx, deps, nf, lines, stub_cost, plan)
    for ln in sorted((ln for ln in lines if ln.tier == 2), key=lambda ln: -ln.order):
        if ln.unit not in plan.kept_units:
            plan.charge(ln, optional=True)
    plan.lines = [ln for ln in lines if ln.kept and ln.unit not in plan.kept_units]
    return plan


def _place(
    lines: list[Line], idx: SessionIndex, nf: NearField, counter: TokenCounter, *, stubbed: set[int]
) -> list[Line]:
    """Order item lines by their source messages, tie lines to units, drop what the
    near-field already shows verbatim (a decision said in a near-field message is there)."""
    pos = {r.message_id: i for i, r in enumerate(idx.records)}
    near_ids = {
        idx.records[r].message_id
        for u in nf.units
        for r in idx.units[u].records
        if r not in stubbed
    }
    out = []
    for ln in lines:
        if ln.memory_id is not None:
            if ln.message_ids and set(ln.message_ids) <= near_ids:
                continue
            ln.order = max((pos[m] + 0.1 for m in ln.message_ids if m in pos), default=-1.0)
            units = {idx.unit_of[pos[m]] for m in ln.message_ids if m in pos}
            if ln.tier > 0 and len(units) == 1:
                ln.unit = units.pop()
        if ln.tier > 0 and ln.unit in nf.units:
            continue
        ln.tokens = counter.count(f"- {ln.text}") + 1
        out.append(ln)
    return out


def _keep_units(
    idx: SessionIndex,
    deps: dict[str, Dependency],
    nf: NearField,
    lines: list[Line],
    stub_cost: dict[int, int],
    plan: _Plan,
) -> None:
    """Older units kept verbatim: not digested first, then conversation before tool steps,
    then small before big, then new before old (seed 十六.3)."""
    by_unit: dict[int, list[Line]] = {}
    for ln in lines:
        if ln.unit is not None and ln.kept and ln.tier > 0:
            by_unit.setdefault(ln.unit, []).append(ln)

    def key(unit: Unit) -> tuple[int, int, int, int]:
        head = idx.records[unit.head]
        slots = [idx.result_slot[r] for r in unit.records if r in idx.result_slot]
        digested = any(deps[s.call_id].dependency is DependencyClass.DIGESTED for s in slots)
        kind = 1 if slots or head.tool_calls else 0  # conversation before raw tool work
        size = _unit_cost(unit, idx, stub_cost) // SIZE_BUCKET_TOKENS
        return (int(digested), kind, size, -unit.index)

    for unit in sorted((u for u in idx.units if u.index not in nf.units), key=key):
        refund = sum(ln.tokens for ln in by_unit.get(unit.index, []))
        cost = _unit_cost(unit, idx, stub_cost) - refund
        if cost <= plan.remaining:
            plan.kept_units.add(unit.index)
            plan.remaining -= cost
            for ln in by_unit.get(unit.index, []):
                ln.kept = False


def _drop_one(lines: list[Line]) -> bool:
    """Drop the least important optional line (exact counts can exceed the estimate)."""
    optional = [ln for ln in lines if ln.tier > 0]
    if not optional:
        return False
    lines.remove(max(optional, key=lambda ln: (ln.tier, -ln.order)))
    return True


def _view(
    idx: SessionIndex,
    deps: dict[str, Dependency],
    nf: NearField,
    lang: str,
    level: Level,
    budget: int | None,
    kept_units: set[int],
    stubs: dict[int, str],
    lines: list[Line],
    counter: TokenCounter,
) -> CompressedView:
    messages: list[ViewMessage] = []
    sections: list[SummarySection] = []
    kept = {r for u in kept_units for r in idx.units[u].records}
    folded = [r.message_id for i, r in enumerate(idx.records) if i not in kept]
    if level is Level.FORMAL:
        text = render(lines, lang, len(folded))
        ids = sorted({m for ln in lines for m in ln.message_ids})
        messages.append(
            ViewMessage(
                role="system",
                content=text,
                part=Part.SUMMARY,
                message_ids=ids,
                tokens=counter.count(text) + MESSAGE_OVERHEAD,
            )
        )
        sections = _sections(lines, lang)
    for i, rec in enumerate(idx.records):
        if i not in kept:
            continue
        if i in stubs:
            messages.append(
                ViewMessage(
                    role=rec.role.value,
                    content=stubs[i],
                    part=Part.STUB,
                    message_ids=[rec.message_id],
                    tool_call_id=rec.tool_call_id,
                    tokens=counter.count(stubs[i]) + MESSAGE_OVERHEAD,
                )
            )
            continue
        messages.append(
            ViewMessage(
                role=rec.role.value,
                content=rec.content,
                part=Part.VERBATIM,
                message_ids=[rec.message_id],
                tool_call_id=rec.tool_call_id,
                tool_calls=[
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in rec.tool_calls
                ],
                tokens=idx.tokens[i],
            )
        )
    first = idx.records[0]
    near_records = {r for u in nf.units for r in idx.units[u].records}
    near_ids = {idx.records[r].message_id for r in near_records}
    return CompressedView(
        user_id=first.user_id,
        tenant_id=first.tenant_id,
        session_id=first.session_id,
        last_message_id=idx.records[-1].message_id,
        level=level,
        budget_tokens=budget,
        raw_tokens=idx.raw_tokens,
        view_tokens=sum(m.tokens for m in messages),
        near_field_tokens=sum(
            m.tokens
            for m in messages
            if m.part is not Part.SUMMARY and m.message_ids[0] in near_ids
        ),
        tokenizer=counter.name,
        language=lang,
        messages=messages,
        sections=sections,
        tool_results=_explain(idx, deps, near_records, kept, stubs),
        near_field_ids=[idx.records[r].message_id for r in sorted(near_records)],
        folded_message_ids=folded,
    )


def _sections(lines: list[Line], lang: str) -> list[SummarySection]:
    out = []
    for key in SECTIONS:
        group = sorted((ln for ln in lines if ln.section == key), key=lambda ln: ln.order)
        out.append(
            SummarySection(
                key=key,
                title=TITLES[lang][key],
                lines=[
                    SummaryLine(
                        text=ln.text,
                        message_ids=ln.message_ids,
                        memory_id=ln.memory_id,
                        mandatory=ln.tier == 0,
                    )
                    for ln in group
                ],
            )
        )
    return out


def _explain(
    idx: SessionIndex,
    deps: dict[str, Dependency],
    near_records: set[int],
    kept: set[int],
    stubs: dict[int, str],
) -> list[ToolResultExplain]:
    out = []
    for slot in sorted(idx.tools.values(), key=lambda s: s.result_index):
        d = deps[slot.call_id]
        ri = slot.result_index
        action = None if ri not in kept else (Part.STUB if ri in stubs else Part.VERBATIM)
        out.append(
            ToolResultExplain(
                tool_call_id=slot.call_id,
                message_id=idx.records[ri].message_id,
                tool=slot.name,
                tokens=idx.tokens[ri],
                dependency=d.dependency,
                reason=d.reason,
                near_field=ri in near_records,
                action=action,
                held_by=[i.id for i in d.held],
            )
        )
    return out
