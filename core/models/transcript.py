"""L0 raw-transcript records and the turn envelope handed to the ingest pipeline."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memstrata.core.errors import PayloadTooLarge
from memstrata.core.ids import SafeId
from memstrata.core.models.inputs import InputModel, Text

MAX_TOOL_CALLS = 64


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"  # system events (session start/end, compression, ...)


class ToolCall(InputModel):
    # extra fields are ignored, not refused: L0 records written by other clients keep them
    model_config = ConfigDict(frozen=True, extra="ignore")

    id: Text = Field(min_length=1, max_length=256)
    name: Text = Field(min_length=1, max_length=256)
    arguments: Text = ""


class MessageIn(InputModel):
    """One message of a turn as the agent hands it over (text is ``str``, never ``bytes``)."""

    role: Role
    content: Text = ""
    message_id: SafeId | None = None
    tool_call_id: Text | None = Field(None, min_length=1, max_length=256)
    tool_calls: list[ToolCall] = Field(default_factory=list, max_length=MAX_TOOL_CALLS)
    name: Text | None = Field(None, max_length=256)

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _count_first(cls, value: Any) -> Any:
        """Refuse a huge list by its length, before validating any element."""
        if isinstance(value, list | tuple) and len(value) > MAX_TOOL_CALLS:
            raise PayloadTooLarge(f"at most {MAX_TOOL_CALLS} tool calls, got {len(value)}")
        return value


class TranscriptRecord(BaseModel):
    """One line of the append-only L0 log: a message with its stable id and context."""

    model_config = ConfigDict(frozen=True)

    message_id: SafeId
    turn_id: SafeId
    # wall clock when the turn reached L0 (``at`` is the event time, which a replay sets):
    # the reconciler's horizon and lag.  None in records written before it existed.  Kept
    # third so a file's first bytes name its creation (``TranscriptStore.generation``).
    recorded_at: float | None = None
    user_id: SafeId
    tenant_id: SafeId | None = None
    session_id: SafeId
    task_id: SafeId | None = None
    role: Role
    content: str
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    name: str | None = None
    at: float


class TurnPointer(BaseModel):
    """Where one recorded turn sits in L0: what the ingest queue carries instead of the text."""

    model_config = ConfigDict(frozen=True)

    user_id: SafeId
    tenant_id: SafeId | None = None
    session_id: SafeId
    task_id: SafeId | None = None
    turn_id: SafeId
    at: float = Field(allow_inf_nan=False)
    offset: int = Field(ge=0)
    length: int = Field(ge=1)


class TurnReceipt(BaseModel):
    """What ``record_turn()`` returns: the turn id and the stable ids given to its messages.

    A receipt means the turn is durable in L0 *and* on the ingest stream (docs/RELIABILITY.md).
    ``already_recorded``: this call was a retry of a turn id already in the session's L0
    file; nothing was appended, and the turn was queued again only if it never had been.
    """

    turn_id: str
    message_ids: list[str]
    shard: int
    kicked: bool
    already_recorded: bool = False
