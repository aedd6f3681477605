"""The compressed view of a session, its policy, and the explain records.

The view is derived data: it is rebuilt from L0 and STM at any time and never written
back into the transcript.  Every part of it names the L0 message ids it stands for, so
audits, re-extraction and retention measurements can trace it to the source.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DependencyClass(StrEnum):
    """How much the work still leans on a raw tool result (seed 十六.6)."""

    STRONG = "strong"  # the reply consumes it directly; without it the reply fails
    WEAK = "weak"  # background only; the reply moves the task on by itself
    DIGESTED = "digested"  # its core now lives in STM as a fact, decision, constraint or plan


class Level(StrEnum):
    NONE = "none"  # the raw session fits the budget
    LIGHT = "light"  # digested large tool outputs replaced by stubs (seed 十六.2, first layer)
    FORMAL = "formal"  # older process folded into the structured summary (second layer)


class Part(StrEnum):
    VERBATIM = "verbatim"
    STUB = "stub"
    SUMMARY = "summary"


class CompressionPolicy(BaseModel):
    """Every knob of the compressor; sizes in tokens of the configured tokenizer."""

    model_config = ConfigDict(frozen=True)

    light_min_tokens: int = Field(120, ge=1, description="tool results below this are not stubbed")
    stub_facts: int = Field(3, ge=0, le=20, description="STM facts quoted in a stub")
    stub_arg_chars: int = Field(80, ge=10, le=1000)
    tail_steps: int = Field(1, ge=1, le=50, description="agent steps after the latest user message")
    recent_tool_window: int = Field(
        4, ge=1, le=50, description="tool results a near-field reply may lean on"
    )
    strong_quotes: int = Field(
        2, ge=1, description="quoted specifics that make a reply depend on a result"
    )
    strong_overlap: float = Field(
        0.35, gt=0, le=1, description="share of reply words taken from a result"
    )
    digest_coverage: float = Field(
        0.5, ge=0, le=1, description="share of quoted specifics STM must hold"
    )
    goal_chars: int = Field(400, ge=40)
    line_chars: int = Field(200, ge=40)
    section_lines: int = Field(
        6, ge=1, le=100, description="optional lines per section before verbatim history"
    )
    work_done_calls: int = Field(8, ge=0, le=200)
    risk_lines: int = Field(3, ge=0, le=50)
    risk_scan: int = Field(
        30, ge=0, le=1000, description="latest tool results searched for error lines"
    )
    include_system: bool = False  # system prompts are fixed boilerplate the agent re-adds


class ToolResultExplain(BaseModel):
    """Explain mode: the class of one tool result, the rule that decided it, what was done."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    message_id: str
    tool: str
    tokens: int
    dependency: DependencyClass
    reason: str
    near_field: bool = False
    action: Part | None = None  # None: folded into the summary
    held_by: list[str] = Field(default_factory=list)


class SummaryLine(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    message_ids: list[str] = Field(default_factory=list)
    memory_id: str | None = None
    mandatory: bool = False


class SummarySection(BaseModel):
    key: str  # goal | requirements | done | decisions | risks | state | next
    title: str
    lines: list[SummaryLine] = Field(default_factory=list)


class ViewMessage(BaseModel):
    """One message of the compressed prompt, with the L0 messages it stands for."""

    role: str
    content: str
    part: Part
    message_ids: list[str] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_calls: list[dict[str, str]] = Field(default_factory=list)
    tokens: int = 0


class CompressedView(BaseModel):
    """What an agent puts in its next prompt instead of the raw session."""

    user_id: str
    tenant_id: str | None = None
    session_id: str
    last_message_id: str
    level: Level
    budget_tokens: int | None
    raw_tokens: int
    view_tokens: int
    near_field_tokens: int
    tokenizer: str
    language: str
    messages: list[ViewMessage]
    sections: list[SummarySection] = Field(default_factory=list)
    tool_results: list[ToolResultExplain] = Field(default_factory=list)
    near_field_ids: list[str] = Field(default_factory=list)
    folded_message_ids: list[str] = Field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.raw_tokens / self.view_tokens if self.view_tokens else 0.0

    def as_messages(self) -> list[dict[str, Any]]:
        """Chat-format messages (role, content, tool_call_id, tool_calls) for the next prompt."""
        out: list[dict[str, Any]] = []
        for m in self.messages:
            msg: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_call_id:
                msg["tool_call_id"] = m.tool_call_id
            if m.tool_calls:
                msg["tool_calls"] = m.tool_calls
            out.append(msg)
        return out

    def covered_message_ids(self) -> set[str]:
        """L0 messages whose content survives: verbatim, in a stub, or via a summary line."""
        out: set[str] = set()
        for m in self.messages:
            if m.part is not Part.SUMMARY:
                out.update(m.message_ids)
        for section in self.sections:
            for line in section.lines:
                out.update(line.message_ids)
        return out

    def text(self) -> str:
        """The view as plain text (what the token count is taken over)."""
        return "\n\n".join(f"[{m.role}] {m.content}" for m in self.messages)
