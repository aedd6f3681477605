"""The near-field (seed 十六.4): the working scene kept verbatim whatever the budget.

It is the latest user message, the user message before it, the reply to that one, the
agent's last steps since the latest user message, and every recent tool result those
messages still lean on (quoted by them, or not yet read at all).  A digested result whose
STM items hold what the near-field quotes is not pinned: its stub carries those facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstrata.core.compress.deps import Dependency
from memstrata.core.compress.model import CompressionPolicy, DependencyClass
from memstrata.core.compress.session import SessionIndex
from memstrata.core.compress.text import overlap, quoted
from memstrata.core.models.transcript import Role


@dataclass(frozen=True)
class NearField:
    units: frozenset[int]  # unit indices kept whole
    needed_results: frozenset[int]  # tool-result record indices that must stay verbatim
    reasons: dict[int, str]  # record index → why it is in the near-field


def _reply_to(idx: SessionIndex, u0: int, u1: int) -> int | None:
    """The answer to the earlier user message: its last assistant text before ``u1``."""
    last = None
    for j in range(u1 - 1, u0, -1):
        rec = idx.records[j]
        if rec.role is Role.ASSISTANT:
            if rec.content.strip():
                return j
            last = last if last is not None else j
    return last


def _held(dep: Dependency | None, quotes: list[str], policy: CompressionPolicy) -> bool:
    """Digested, and STM holds (most of) what the near-field message quotes from it."""
    if dep is None or dep.dependency is not DependencyClass.DIGESTED or not dep.held:
        return False
    text = " ".join(i.summary for i in dep.held).casefold()
    covered = sum(1 for q in quotes if q in text)
    return covered >= policy.digest_coverage * len(quotes)


def near_field(
    idx: SessionIndex, deps: dict[str, Dependency], policy: CompressionPolicy
) -> NearField:
    users = idx.user_indices()
    reasons: dict[int, str] = {}
    if users:
        reasons[users[-1]] = "latest user message"
    if len(users) >= 2:
        reasons[users[-2]] = "the user message before the latest"
        reply = _reply_to(idx, users[-2], users[-1])
        if reply is not None:
            reasons[reply] = "reply to the previous user message"
    start = users[-1] + 1 if users else 0
    steps = [j for j in range(start, len(idx.records)) if idx.records[j].role is Role.ASSISTANT]
    for j in steps[-policy.tail_steps :]:
        reasons.setdefault(j, "agent step since the latest user message")
    needed: set[int] = set()
    for slot in idx.tools.values():
        dep = deps.get(slot.call_id)
        if dep is not None and dep.reply_index is None and dep.dependency is DependencyClass.STRONG:
            needed.add(slot.result_index)
            reasons[slot.result_index] = "pending tool result: not read yet"
    results = sorted(idx.result_slot)
    for a in [j for j in reasons if idx.records[j].role is Role.ASSISTANT]:
        text = idx.reply_text(a)
        explained: set[str] = set()  # a reply leans on the newest result holding what it quotes
        recent = [r for r in results if r < a][-policy.recent_tool_window :]
        for k, r in enumerate(reversed(recent)):
            slot = idx.result_slot[r]
            content = idx.records[r].content
            found = quoted(text, content, slot.arguments)
            fresh = [q for q in found if q not in explained]
            explained.update(found)
            share = overlap(text, content, slot.arguments) if k == 0 else 0.0
            if len(fresh) >= policy.strong_quotes or share >= policy.strong_overlap:
                if _held(deps.get(slot.call_id), fresh, policy):
                    continue  # digested: its stub carries what the reply quotes
                needed.add(r)
                reasons.setdefault(r, f"a near-field reply leans on it ({', '.join(fresh[:3])})")
    units = frozenset(idx.unit_of[j] for j in list(reasons) + list(needed))
    return NearField(units, frozenset(needed), reasons)
