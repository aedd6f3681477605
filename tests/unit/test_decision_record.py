"""The compact decision record's codec (core/models/decision_record.py): every reason,
message id and budget count comes back exactly; an old full-JSON record is read as is."""

from __future__ import annotations

import json

import pytest

from memstrata.core.models.candidate import Verdict, WriteDecision
from memstrata.core.models.decision_record import REASONS, DecisionRecord
from memstrata.core.models.memory import MemoryType


def record(**kw: object) -> DecisionRecord:
    base: dict[str, object] = dict(
        decision_id="t_1:003:user_constraint", verdict=Verdict.WRITTEN,
        reason="score 11 ≥ threshold 3", score=11.0, threshold=3.0,
        memory_type=MemoryType.CONSTRAINT, memory_id="m_0123456789abcdef0123",
        message_ids=("t_1.0", "t_1.12"), session_id="s_1", at=1_700_000_060.123456,
        novelty=1.0, mentions=1, check=123456789,
    )  # fmt: skip
    return DecisionRecord(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reason", "score", "memory_id", "stored"),
    [
        ("score 11 ≥ threshold 3", 11.0, "m_x", -1),
        ("score 2.5 below threshold 3", 2.5, None, -2),
        ("restated fact merged into m_x", 5.0, "m_x", -3),
        ("restated fact merged into m_other", 5.0, "m_x", "restated fact merged into m_other"),
        ("score 11 ≥ threshold 4", 11.0, "m_x", "score 11 ≥ threshold 4"),  # not this record's
        *[(text, 0.0, None, i) for i, text in enumerate(REASONS)],
        ("extraction budget: read 1 of 2 chars", 0.0, None, "extraction budget: read 1 of 2 chars"),
    ],
)
def test_every_reason_round_trips_and_known_ones_are_stored_as_codes(
    reason: str, score: float, memory_id: str | None, stored: int | str
) -> None:
    rec = record(reason=reason, score=score, memory_id=memory_id)
    raw = rec.encode()
    assert json.loads(raw)[2] == stored
    assert DecisionRecord.decode(rec.decision_id, raw, session_id="s_1") == rec


def test_message_ids_of_the_turn_are_stored_by_number_others_as_they_are() -> None:
    rec = record(message_ids=("t_1.0", "t_1.07", "m-client", "t_2.1", "t_1.x"))
    row = json.loads(rec.encode())
    assert row[7] == [0, "t_1.07", "m-client", "t_2.1", "t_1.x"]
    assert DecisionRecord.decode(rec.decision_id, rec.encode(), session_id="s_1") == rec


def test_a_budget_summary_keeps_its_counts_and_names_its_rule() -> None:
    rec = record(
        decision_id="t_1:~002:budget", verdict=Verdict.REFUSED, reason="extraction budget: x",
        score=0.0, memory_type=MemoryType.FACT, memory_id=None,
        omitted={"chars_not_read": 10, "refused:hypothesis": 3},
    )  # fmt: skip
    back = DecisionRecord.decode(rec.decision_id, rec.encode(), session_id="s_1")
    assert back == rec
    assert (back.is_budget, back.rule, back.ordinal, back.turn_id) == (
        True, "extraction_budget", 2, "t_1",
    )  # fmt: skip
    assert (record().is_budget, record().rule, record().ordinal) == (False, "user_constraint", 3)


def test_a_record_in_the_old_json_format_is_read_whole() -> None:
    full = WriteDecision.model_validate(
        {
            "decision_id": "t_1:000:chit_chat", "verdict": "refused",
            "reason": "chit-chat carries no task state", "score": -2.0, "threshold": 3.0,
            "breakdown": {"transient": -2.0},
            "profile": {"is_verified": False, "is_stable_for_current_task": False,
                        "is_user_constraint": False, "is_decision": False,
                        "is_preference": False, "novelty": 1.0, "confidence": 0.5,
                        "estimated_ttl_minutes": 60, "duplicate": False, "transient": True,
                        "raw_unstructured_blob": False},
            "importance": 0.4, "importance_breakdown": {"type_prior": 0.3},
            "memory_type": "fact", "subtype": "chit_chat", "summary": "ok thanks",
            "canonical_fact_key": "k", "rule": "chit_chat", "message_ids": ["t_1.0"],
            "session_id": "s_1", "at": 1.0,
        }
    )  # fmt: skip
    back = DecisionRecord.decode(full.decision_id, full.model_dump_json(), session_id="s_1")
    assert back.full == full
    assert (back.verdict, back.reason, back.rule) == (full.verdict, full.reason, full.rule)


def test_a_record_of_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        DecisionRecord.decode("t_1:000:x", "[2,1]", session_id="s_1")
