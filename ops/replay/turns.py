"""Messages grouped into turns the way an agent hands them to ``record_turn()``.

A user message starts a turn; an assistant message and its tool results belong to the
current one.  Turns over the configured limits are adapted: continued at assistant
boundaries, long texts cut (each cut is reported).
"""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.core.models.transcript import MessageIn, Role, ToolCall
from memstrata.ops.replay.formats import Raw

TRUNCATION = "\n…[cut by replay: {n} chars over the message limit]"


def _cut(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    marker = TRUNCATION.format(n=len(text) - keep)
    return text[: max(0, keep - len(marker))] + marker


def to_message(raw: Raw, max_chars: int) -> tuple[MessageIn, bool]:
    """Build a :class:`MessageIn`, cutting text that exceeds ``max_chars`` (reported)."""
    content = raw.get("content") or ""
    calls = [dict(c) for c in raw.get("tool_calls") or []]
    size = len(content) + sum(len(c["arguments"]) for c in calls)
    cut = size > max_chars
    if cut:
        args_total = sum(len(c["arguments"]) for c in calls)
        content = _cut(content, max(max_chars - args_total, max_chars // 2))
        share = (max_chars - len(content)) // max(1, len(calls))
        for c in calls:
            c["arguments"] = _cut(c["arguments"], share)
    role = Role(raw["role"])
    msg = MessageIn(
        role=role,
        content=content,
        tool_call_id=raw.get("tool_call_id") if role is Role.TOOL else None,
        tool_calls=[ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in calls],
    )
    return msg, cut


def group_turns(messages: Sequence[Raw], *, max_messages: int) -> list[list[Raw]]:
    """Split a session into turns; a turn longer than ``max_messages`` is continued.

    A user message starts a turn; an assistant message with its tool results stays in one
    turn (continuations split before an assistant message, never between call and result).
    System prompts are left out: they are per-deployment boilerplate, not turns.
    """
    turns: list[list[list[Raw]]] = []  # turn → units (a message plus its tool results)
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "user" or not turns:
            turns.append([[m]])
        elif m["role"] == "tool" and turns[-1][-1][0]["role"] == "assistant":
            turns[-1][-1].append(m)
        else:
            turns[-1].append([m])
    out: list[list[Raw]] = []
    for units in turns:
        chunk: list[Raw] = []
        for unit in units:
            if chunk and len(chunk) + len(unit) > max_messages:
                out.append(chunk)
                chunk = []
            while len(unit) > max_messages:  # one unit over the limit: split it anyway
                out.append(unit[:max_messages])
                unit = unit[max_messages:]
            chunk.extend(unit)
        if chunk:
            out.append(chunk)
    return out
