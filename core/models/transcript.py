"""L0 raw-transcript records and the turn envelope handed to the ingest pipeline."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from core.ids import SafeId


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"  # system events (session start/end, compression, ...)


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    arguments: str = ""


class MessageIn(BaseModel):
    """One message of a turn as the agent hands it over."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str = ""
    message_id: SafeId | None = None
    tool_call_id: str | None = Field(None, min_length=1, max_length=256)
    tool_calls: list[ToolCall] = Field(default_factory=list, max_length=64)
    name: str | None = Field(None, max_length=256)


class TranscriptRecord(BaseModel):
    """One line of the append-only L0 log: a message with its stable id and context."""

    model_config = ConfigDict(frozen=True)

    message_id: SafeId
    turn_id: SafeId
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
    at: float
    offset: int = Field(ge=0)
    length: int = Field(ge=1)


class TurnReceipt(BaseModel):
    """What ``record_turn()`` returns: the turn id and the stable ids given to its messages."""

    turn_id: str
    message_ids: list[str]
    shard: int
    kicked: bool
