"""Candidate lines of the formal summary, by the seed's sections (十六.2, second layer).

Built from STM items and plain rules over L0, no model call.  Every line knows the L0
messages it stands for and how much it matters:

* *mandatory*: the task goal and every active decision, plan and constraint;
* *tier 1*: the first few lines of each section (user requirements, state, risks,
  next actions, the latest work done), kept before any older verbatim message;
* *tier 2*: everything else, to fill what budget is left after verbatim history.

A line that only describes a unit (a folded user message, a folded tool call) names the
unit, so it is dropped when that unit is kept verbatim instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from memstrata.core.compress.deps import Dependency
from memstrata.core.compress.model import CompressionPolicy, DependencyClass
from memstrata.core.compress.session import SessionIndex
from memstrata.core.models.memory import MemoryItem, MemoryStatus, MemoryType
from memstrata.core.models.transcript import Role

SECTIONS = ("goal", "requirements", "done", "decisions", "risks", "state", "next")
TITLES = {
    "en": {
        "goal": "Current task goal",
        "requirements": "Latest user requirements",
        "done": "Work done",
        "decisions": "Key decisions and constraints",
        "risks": "Known problems and risks",
        "state": "Current state",
        "next": "Next actions",
    },
    "zh": {
        "goal": "当前任务目标",
        "requirements": "用户最新要求",
        "done": "已完成工作",
        "decisions": "关键决定和约束",
        "risks": "已知问题和风险",
        "state": "当前状态",
        "next": "下一步动作",
    },
}
GOAL_BELOW = {
    "en": "as stated in the user's message kept verbatim below",
    "zh": "见下方原文保留的用户消息",
}
ERROR_LINE = re.compile(
    r"(Traceback|Error\b|\bERROR\b|\bFATAL\b|Exception\b|FAILED|\bfailed\b|fatal:|panic:"
    r"|报错|失败|异常|错误)"
)
_WS = re.compile(r"\s+")


@dataclass
class Line:
    section: str
    text: str
    message_ids: list[str]
    tier: int  # 0 mandatory, 1 early, 2 filler
    order: float  # larger = newer; lines of a section render oldest first
    memory_id: str | None = None
    unit: int | None = None  # only useful while this unit is folded
    tokens: int = 0
    kept: bool = field(default=False, compare=False)


def clip(text: str, limit: int) -> str:
    text = _WS.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _item_line(section: str, item: MemoryItem, tier: int, limit: int) -> Line:
    return Line(
        section,
        clip(item.summary, limit),
        list(item.source.message_ids),
        tier,
        item.updated_at,
        memory_id=item.id,
    )


def item_lines(items: Sequence[MemoryItem], policy: CompressionPolicy) -> list[Line]:
    """Lines for STM items: decisions, plans and constraints are mandatory."""
    out = []
    n = policy.line_chars
    for it in items:
        if it.status is not MemoryStatus.ACTIVE or it.subtype in {"raw_output", "chit_chat"}:
            continue
        t = it.memory_type
        if t is MemoryType.CONSTRAINT or (t is MemoryType.DECISION and it.subtype != "next_step"):
            out.append(_item_line("decisions", it, 0, n))
        elif t is MemoryType.DECISION:
            out.append(_item_line("next", it, 0, n))
        elif t is MemoryType.PREFERENCE:
            out.append(_item_line("requirements", it, 1, n))
        elif t is MemoryType.HYPOTHESIS or it.subtype == "excluded_cause":
            out.append(_item_line("risks", it, 1, n))
        elif t is MemoryType.OBSERVATION:
            out.append(_item_line("done", it, 2, n))
        else:
            out.append(_item_line("state", it, 1, n))
    return out


def rule_lines(
    idx: SessionIndex,
    deps: dict[str, Dependency],
    policy: CompressionPolicy,
    *,
    near_users: set[int],
    lang: str,
) -> list[Line]:
    """Lines from L0 by rule: goal, earlier user requests, tool calls made, errors seen."""
    out: list[Line] = []
    users = idx.user_indices()
    goal_i = users[0] if users else (0 if idx.records else None)
    if goal_i is not None:
        rec = idx.records[goal_i]
        text = GOAL_BELOW[lang] if goal_i in near_users else clip(rec.content, policy.goal_chars)
        out.append(Line("goal", text, [rec.message_id], 0, 0))
    for i in users[1:]:
        if i in near_users:
            continue
        rec = idx.records[i]
        out.append(
            Line(
                "requirements",
                clip(rec.content, policy.line_chars),
                [rec.message_id],
                1,
                i,
                unit=idx.unit_of[i],
            )
        )
    results = sorted(idx.result_slot)
    recent = set(results[len(results) - policy.risk_scan :]) if policy.risk_scan else set()
    for slot in idx.tools.values():
        result = idx.records[slot.result_index]
        args = clip(slot.arguments, policy.stub_arg_chars)
        dep = deps.get(slot.call_id)
        ids = [result.message_id]
        if slot.call_index is not None:
            ids.insert(0, idx.records[slot.call_index].message_id)
        text = f"{slot.name}({args})" if args else slot.name
        if dep is not None and dep.dependency is DependencyClass.DIGESTED and dep.held:
            text += " → " + clip(dep.held[0].summary, policy.line_chars // 2)
        out.append(
            Line("done", text, ids, 2, slot.result_index, unit=idx.unit_of[slot.result_index])
        )
        err = ERROR_LINE.search(result.content) if slot.result_index in recent else None
        if err is not None:
            start = result.content.rfind("\n", 0, err.start()) + 1
            end = result.content.find("\n", err.end())
            line = result.content[start : end if end >= 0 else None]
            out.append(
                Line(
                    "risks",
                    f"{slot.name}: {clip(line, policy.line_chars)}",
                    [result.message_id],
                    2,
                    slot.result_index,
                    unit=idx.unit_of[slot.result_index],
                )
            )
    last_asst = [i for i, r in enumerate(idx.records) if r.role is Role.ASSISTANT and r.content]
    if last_asst:
        i = last_asst[-1]
        rec = idx.records[i]
        out.append(
            Line(
                "state",
                clip(rec.content, policy.line_chars),
                [rec.message_id],
                1,
                i + 0.5,
                unit=idx.unit_of[i],
            )
        )
    return out


def promote(lines: list[Line], policy: CompressionPolicy) -> None:
    """Raise the newest lines of each section to tier 1, within the per-section caps."""
    caps = {
        "done": policy.work_done_calls,
        "risks": policy.risk_lines,
    }
    by_section: dict[str, list[Line]] = {}
    for line in lines:
        if line.tier > 0:
            by_section.setdefault(line.section, []).append(line)
    for section, group in by_section.items():
        group.sort(key=lambda ln: -ln.order)
        cap = caps.get(section, policy.section_lines)
        for k, line in enumerate(group):
            line.tier = 1 if k < cap else 2


def header(lang: str, folded: int) -> str:
    if lang == "zh":
        return f"[会话摘要] 已折叠 {folded} 条较早的消息；近场上下文在下方原文保留。"
    return f"[Session summary] {folded} earlier messages folded; the near-field follows verbatim."


def render(lines: Sequence[Line], lang: str, folded: int) -> str:
    """The summary message text: a header, then each non-empty section in seed order."""
    titles = TITLES[lang]
    parts = [header(lang, folded)]
    for key in SECTIONS:
        group = sorted((ln for ln in lines if ln.section == key), key=lambda ln: ln.order)
        if group:
            parts.append(f"## {titles[key]}")
            parts.extend(f"- {ln.text}" for ln in group)
    return "\n".join(parts)
