"""Candidate facts proposed by an extractor, and the policy's verdict on each (seed 十二/十三)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memstrata.core.models.memory import MemorySource, MemoryType


class CandidateSignals(BaseModel):
    """What the extractor observed; the policy turns these into a write_profile."""

    model_config = ConfigDict(frozen=True)

    is_verified: bool = False
    is_user_constraint: bool = False
    is_decision: bool = False
    is_preference: bool = False
    is_stable_for_current_task: bool = False
    explicit_remember: bool = False
    transient: bool = False
    raw_unstructured_blob: bool = False
    chit_chat: bool = False
    off_task: bool = False


class Candidate(BaseModel):
    """A proposed memory: the extractor proposes, the policy decides (seed 十二)."""

    model_config = ConfigDict(frozen=True)

    memory_type: MemoryType
    subtype: str = Field(max_length=64)
    summary: str
    detail: dict[str, Any] = Field(default_factory=dict)
    entities: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    canonical_fact_key: str
    source: MemorySource
    confidence: float = Field(ge=0.0, le=1.0)
    signals: CandidateSignals = CandidateSignals()
    rule: str = Field(description="name of the extraction rule that fired")
    turn_count: int = Field(1, ge=1, description="turns of this session so far (seed 2 weighting)")


class WriteProfile(BaseModel):
    """Seed 十三's write_profile, every field."""

    model_config = ConfigDict(frozen=True)

    is_verified: bool
    is_stable_for_current_task: bool
    is_user_constraint: bool
    is_decision: bool
    is_preference: bool
    novelty: float = Field(ge=0.0, le=1.0)
    confidence: float = Field(ge=0.0, le=1.0)
    estimated_ttl_minutes: int = Field(ge=1)
    duplicate: bool
    transient: bool
    raw_unstructured_blob: bool


class Verdict(StrEnum):
    WRITTEN = "written"
    REFUSED = "refused"


class WriteDecision(BaseModel):
    """The recorded answer to "why was this stored / not stored?"."""

    decision_id: str
    verdict: Verdict
    reason: str
    score: float
    threshold: float
    breakdown: dict[str, float]
    profile: WriteProfile
    importance: float
    importance_breakdown: dict[str, float]
    memory_type: MemoryType
    subtype: str
    summary: str
    canonical_fact_key: str
    rule: str
    memory_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    session_id: str
    at: float
    # only on a budget summary (rule ``extraction_budget``): what was not recorded one by one,
    # ``chars_not_read``, ``clauses_not_classified`` and refusals per rule (``refused:<rule>``)
    omitted: dict[str, int] = Field(default_factory=dict)
