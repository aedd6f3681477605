"""Tool-result dependency classes by rule (seed 十六.5/6): strong, weak or digested.

For each tool result we look at its *reply* (the next assistant message: its text and
the arguments of its next call) and at the STM items sourced from the result or from
that reply.  In order:

1. the reply's conclusion is held in STM as a fact, decision or constraint → digested;
2. items extracted from the result itself hold most specifics the reply quoted → digested;
3. a later call with the same tool and arguments re-read it → digested (superseded);
4. the reply quotes several of its specifics, or borrows many of its words → strong;
5. no reply yet: the agent has not read it → strong (pending);
6. otherwise the result was background → weak.

Only digested results are candidates for light compression; the near-field decides
separately which strong results the current step still needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memstrata.core.compress.model import CompressionPolicy, DependencyClass
from memstrata.core.compress.session import SessionIndex, ToolSlot
from memstrata.core.compress.text import overlap, quoted
from memstrata.core.models.memory import MemoryItem, MemoryStatus, MemoryType

_CONCLUSION_TYPES = frozenset({MemoryType.FACT, MemoryType.DECISION, MemoryType.CONSTRAINT})
_NOT_DIGESTS = frozenset({"raw_output", "chit_chat"})


@dataclass(frozen=True)
class Dependency:
    slot: ToolSlot
    dependency: DependencyClass
    reason: str
    reply_index: int | None
    held: tuple[MemoryItem, ...] = field(default_factory=tuple)


def items_by_source(
    items: Sequence[MemoryItem],
) -> tuple[dict[str, list[MemoryItem]], dict[str, list[MemoryItem]]]:
    """Active items indexed by the tool call ids and by the message ids they came from."""
    by_call: dict[str, list[MemoryItem]] = {}
    by_msg: dict[str, list[MemoryItem]] = {}
    for item in items:
        if item.status is not MemoryStatus.ACTIVE or item.subtype in _NOT_DIGESTS:
            continue
        for cid in item.source.tool_call_ids:
            by_call.setdefault(cid, []).append(item)
        for mid in item.source.message_ids:
            by_msg.setdefault(mid, []).append(item)
        for h in item.history:
            for mid in h.message_ids:
                by_msg.setdefault(mid, []).append(item)
    return by_call, by_msg


def _clip(words: Sequence[str], n: int = 4) -> str:
    return ", ".join(words[:n]) + (" …" if len(words) > n else "")


def classify(
    idx: SessionIndex, items: Sequence[MemoryItem], policy: CompressionPolicy
) -> dict[str, Dependency]:
    """The dependency class of every tool result of the session, by tool call id."""
    by_call, by_msg = items_by_source(items)
    last_same_call: dict[tuple[str, str], str] = {}
    for cid, slot in idx.tools.items():
        last_same_call[(slot.name, slot.arguments)] = cid
    out: dict[str, Dependency] = {}
    for cid, slot in idx.tools.items():
        out[cid] = _classify_one(idx, slot, by_call, by_msg, last_same_call, policy)
    return out


def _classify_one(
    idx: SessionIndex,
    slot: ToolSlot,
    by_call: dict[str, list[MemoryItem]],
    by_msg: dict[str, list[MemoryItem]],
    last_same_call: dict[tuple[str, str], str],
    policy: CompressionPolicy,
) -> Dependency:
    result = idx.records[slot.result_index]
    reply_i = idx.next_assistant(slot.result_index)
    reply = idx.reply_text(reply_i) if reply_i is not None else ""
    quotes = quoted(reply, result.content, slot.arguments)
    share = overlap(reply, result.content, slot.arguments)
    held_result = tuple(
        {
            i.id: i for i in by_call.get(slot.call_id, []) + by_msg.get(result.message_id, [])
        }.values()
    )
    reply_items: tuple[MemoryItem, ...] = ()
    if reply_i is not None:
        mid = idx.records[reply_i].message_id
        reply_items = tuple(i for i in by_msg.get(mid, []) if i.memory_type in _CONCLUSION_TYPES)

    if reply_items and (quotes or share >= policy.strong_overlap / 2):
        first = reply_items[0]
        return Dependency(
            slot,
            DependencyClass.DIGESTED,
            f"the reply's conclusion is held as {first.memory_type.value} {first.id}: "
            f"{first.summary[:80]!r}",
            reply_i,
            reply_items + held_result,
        )
    if held_result:
        held_text = " ".join(i.summary for i in held_result).casefold()
        covered = [q for q in quotes if q in held_text]
        if not quotes or len(covered) >= policy.digest_coverage * len(quotes):
            why = (
                f"{len(covered)}/{len(quotes)} quoted specifics are held by STM"
                if quotes
                else "the reply quotes nothing the STM items lack"
            )
            return Dependency(
                slot,
                DependencyClass.DIGESTED,
                f"{len(held_result)} STM item(s) extracted from it ({held_result[0].id}); {why}",
                reply_i,
                held_result,
            )
    newer = last_same_call.get((slot.name, slot.arguments))
    if newer is not None and newer != slot.call_id and slot.arguments:
        return Dependency(
            slot,
            DependencyClass.DIGESTED,
            f"superseded: the same call was made again later ({newer})",
            reply_i,
            held_result,
        )
    if reply_i is None:
        return Dependency(
            slot, DependencyClass.STRONG, "pending: no assistant reply has read it yet", None
        )
    if len(quotes) >= policy.strong_quotes or share >= policy.strong_overlap:
        return Dependency(
            slot,
            DependencyClass.STRONG,
            f"the reply quotes {len(quotes)} specifics ({_clip(quotes)}); word overlap {share:.2f}",
            reply_i,
            held_result,
        )
    return Dependency(
        slot,
        DependencyClass.WEAK,
        f"the reply moves on: {len(quotes)} quoted specifics, word overlap {share:.2f}",
        reply_i,
        held_result,
    )
