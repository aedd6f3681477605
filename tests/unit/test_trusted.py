"""``core.models.trusted`` builds what validation would have built (issue 17 hot path)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from memstrata.core.models.candidate import (
    Candidate,
    CandidateSignals,
    Verdict,
    WriteDecision,
    WriteProfile,
)
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryStatus, MemoryType
from memstrata.core.models.transcript import Role, ToolCall, TranscriptRecord, TurnPointer
from memstrata.core.models.trusted import trusted

SOURCE: dict[str, Any] = {"kind": "conversation", "message_ids": ["t1.0"], "tool_call_ids": []}
PROFILE = WriteProfile(
    is_verified=True, is_stable_for_current_task=True, is_user_constraint=False,
    is_decision=False, is_preference=False, novelty=1.0, confidence=0.9,
    estimated_ttl_minutes=60, duplicate=False, transient=False, raw_unstructured_blob=False,
)  # fmt: skip
CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (MemorySource, SOURCE),
    (WriteProfile, PROFILE.model_dump()),
    (
        Candidate,
        dict(
            memory_type=MemoryType.FACT, subtype="conclusion", summary="db is fine",
            detail={"role": "assistant"}, entities=["db"], tags=["conclusion"],
            canonical_fact_key="s:conclusion:db", source=MemorySource(**SOURCE),
            confidence=0.85, signals=CandidateSignals(is_verified=True), rule="conclusion",
            turn_count=1,
        ),
    ),
    (
        WriteDecision,
        dict(
            decision_id="t1:000:conclusion", verdict=Verdict.WRITTEN, reason="score 8 ≥ 3",
            score=8.0, threshold=3.0, breakdown={"is_verified": 3.0}, profile=PROFILE,
            importance=0.5, importance_breakdown={"seed2": 0.1}, memory_type=MemoryType.FACT,
            subtype="conclusion", summary="db is fine", canonical_fact_key="k", rule="conclusion",
            memory_id="m_1", message_ids=["t1.0"], session_id="s", at=1.0, omitted={},
        ),
    ),
    (
        MemoryItem,
        dict(
            id="m_abc", user_id="u", tenant_id=None, session_id="s", task_id="t",
            memory_type=MemoryType.FACT, subtype="conclusion", summary="db is fine",
            detail={"role": "assistant"}, entities=["db"], tags=["conclusion"],
            source=MemorySource(**SOURCE), confidence=0.9, importance=0.5, created_at=1.0,
            updated_at=1.0, last_access_at=1.0, expires_at=100.0, fingerprint="f" * 24,
            canonical_fact_key="k", seen_sessions=["s"], version=1, status=MemoryStatus.ACTIVE,
            mention_count=1, history=[], agent_id=None, owner_agent=None, shared_scope=None,
        ),
    ),
    (  # the L0 record and the stream's pointer, as TranscriptStore.append_turn builds them
        TranscriptRecord,
        dict(
            message_id="t1.0", turn_id="t1", recorded_at=2.0, user_id="u", tenant_id="default",
            session_id="s", task_id=None, role=Role.ASSISTANT, content="db is fine",
            tool_call_id=None, tool_calls=[ToolCall(id="c1", name="sql", arguments="{}")],
            name=None, at=1.0,
        ),
    ),
    (
        TurnPointer,
        dict(
            user_id="u", tenant_id="default", session_id="s", task_id="bug7", turn_id="t1",
            at=1.0, offset=0, length=321,
        ),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("cls", "fields"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_trusted_equals_the_validated_model(cls: type[BaseModel], fields: dict[str, Any]) -> None:
    assert set(fields) == set(cls.model_fields)  # every field given, as the hot path does
    built, validated = trusted(cls, dict(fields)), cls(**fields)
    assert built == validated
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_copy(update={}) == validated
    with pytest.raises(Exception):  # noqa: B017 - frozen models stay frozen
        if cls.model_config.get("frozen"):
            built.__setattr__(next(iter(fields)), None)
        else:
            raise TypeError


def test_hot_path_items_give_every_field() -> None:
    """The pipeline's item and decision name every field (a new field needs adding there)."""
    import inspect

    from memstrata.core.ingest import pipeline

    src = inspect.getsource(pipeline.IngestPipeline._item)
    assert all(f"{name}=" in src for name in MemoryItem.model_fields)
    src = inspect.getsource(pipeline.candidate_decision)  # what _judge builds its decision with
    assert all(f"{name}=" in src for name in WriteDecision.model_fields)
