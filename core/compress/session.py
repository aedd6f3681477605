"""An indexed, read-only picture of one session's L0 records for the compressor.

Built once per compression: token counts, which assistant message made which tool
call, and the *units* the view keeps or folds whole (a user message; an assistant
message with the tool results answering it), so a kept tool call always keeps a
result message with its id and the prompt stays well-formed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memstrata.core.compress.tokens import TokenCounter, message_tokens, prime
from memstrata.core.models.transcript import Role, TranscriptRecord


@dataclass(frozen=True)
class ToolSlot:
    """One tool result with its call."""

    call_id: str
    result_index: int
    call_index: int | None  # the assistant message that made the call, if any
    name: str
    arguments: str


@dataclass
class Unit:
    """Records kept or folded together, in transcript order."""

    index: int
    records: list[int] = field(default_factory=list)

    @property
    def head(self) -> int:
        return self.records[0]


@dataclass
class SessionIndex:
    records: list[TranscriptRecord]
    tokens: list[int]
    tools: dict[str, ToolSlot]  # by tool_call_id
    result_slot: dict[int, ToolSlot]  # by record index
    units: list[Unit]
    unit_of: list[int]  # record index → unit index

    @property
    def raw_tokens(self) -> int:
        return sum(self.tokens)

    def user_indices(self) -> list[int]:
        return [i for i, r in enumerate(self.records) if r.role is Role.USER]

    def next_assistant(self, after: int) -> int | None:
        """The first assistant message after ``after``: the one that read a tool result.

        A user message in between does not end the search: the agent reads both.
        """
        for j in range(after + 1, len(self.records)):
            if self.records[j].role is Role.ASSISTANT:
                return j
        return None

    def reply_text(self, index: int) -> str:
        """An assistant message as a reader of tool results: its text and its next calls."""
        rec = self.records[index]
        return "\n".join([rec.content, *(c.arguments for c in rec.tool_calls)])


def index_session(
    records: Sequence[TranscriptRecord],
    counter: TokenCounter,
    *,
    include_system: bool = False,
    known_tokens: Mapping[str, int] | None = None,
) -> SessionIndex:
    """Index records; ``known_tokens`` (message id → tokens, counted at ingest) skips
    re-counting, which is most of the cost of a first compression in a fresh worker."""
    recs = [r for r in records if include_system or r.role is not Role.SYSTEM]
    known = known_tokens or {}
    prime(counter, [r.content for r in recs if r.message_id not in known])
    tokens = [known.get(r.message_id) or message_tokens(counter, r) for r in recs]
    calls: dict[str, tuple[int, str, str]] = {}
    tools: dict[str, ToolSlot] = {}
    result_slot: dict[int, ToolSlot] = {}
    units: list[Unit] = []
    unit_of: list[int] = []
    for i, rec in enumerate(recs):
        for c in rec.tool_calls:
            calls[c.id] = (i, c.name, c.arguments)
        answers_open_call = (
            rec.role is Role.TOOL
            and rec.tool_call_id in calls
            and units
            and calls[rec.tool_call_id][0] in units[-1].records
        )
        if rec.role is Role.TOOL and rec.tool_call_id:
            ci, name, args = calls.get(rec.tool_call_id, (None, rec.name or "tool", ""))
            slot = ToolSlot(rec.tool_call_id, i, ci, name, args)
            tools[rec.tool_call_id] = slot
            result_slot[i] = slot
        if answers_open_call:
            units[-1].records.append(i)
        else:
            units.append(Unit(len(units), [i]))
        unit_of.append(len(units) - 1)
    return SessionIndex(recs, tokens, tools, result_slot, units, unit_of)
