"""Builders of transcript records and STM items for the compression tests (no tests here)."""

from __future__ import annotations

from typing import Any

from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType
from memstrata.core.models.transcript import Role, ToolCall, TranscriptRecord


class Script:
    """Appends records with sequential ids (``m0``, ``m1`` …) to one session."""

    def __init__(self, session_id: str = "s1", user_id: str = "u1") -> None:
        self.records: list[TranscriptRecord] = []
        self.session_id = session_id
        self.user_id = user_id

    def _add(self, role: Role, content: str, **kw: Any) -> str:
        mid = f"m{len(self.records)}"
        self.records.append(
            TranscriptRecord(
                message_id=mid,
                turn_id=f"t{len(self.records)}",
                user_id=self.user_id,
                session_id=self.session_id,
                role=role,
                content=content,
                at=1.7e9 + len(self.records),
                **kw,
            )
        )
        return mid

    def user(self, text: str) -> str:
        return self._add(Role.USER, text)

    def assistant(self, text: str, call: tuple[str, str, str] | None = None) -> str:
        calls = [ToolCall(id=call[0], name=call[1], arguments=call[2])] if call else []
        return self._add(Role.ASSISTANT, text, tool_calls=calls)

    def tool(self, call_id: str, output: str) -> str:
        return self._add(Role.TOOL, output, tool_call_id=call_id)

    def step(self, thought: str, call_id: str, name: str, args: str, output: str) -> str:
        """An assistant tool call and its result; returns the result's message id."""
        self.assistant(thought, (call_id, name, args))
        return self.tool(call_id, output)


def item(
    memory_id: str,
    memory_type: MemoryType,
    summary: str,
    *,
    message_ids: list[str],
    tool_call_ids: list[str] | None = None,
    subtype: str = "general",
    session_id: str = "s1",
) -> MemoryItem:
    return MemoryItem(
        id=memory_id,
        user_id="u1",
        session_id=session_id,
        memory_type=memory_type,
        subtype=subtype,
        summary=summary,
        source=MemorySource(message_ids=message_ids, tool_call_ids=tool_call_ids or []),
        confidence=0.9,
        importance=0.8,
        created_at=1.7e9,
        updated_at=1.7e9,
        last_access_at=1.7e9,
        expires_at=1.8e9,
        fingerprint=f"fp{memory_id}xxxxxxxx",
        canonical_fact_key=f"k:{memory_id}",
    )


def log_lines(n: int, marker: str = "") -> str:
    """A big, boring log with an optional distinctive line in the middle."""
    rows = [
        f"2026-11-30T08:{i % 60:02d}:00Z INFO worker request_id=r{i:05d} took={i % 90}ms"
        for i in range(n)
    ]
    if marker:
        rows.insert(n // 2, marker)
    return "\n".join(rows)
