"""The prototype conversation-fact rule of the quality harness (pure: records → candidates)."""

from __future__ import annotations

from core.extract.rules import ExtractionContext
from core.models.transcript import Role, TranscriptRecord
from ops.bench.quality.proto_extract import ConversationFactExtractor


def _rec(text: str, mid: str = "D1_3", role: Role = Role.USER) -> TranscriptRecord:
    return TranscriptRecord(
        message_id=mid, turn_id="t-" + mid, user_id="u", session_id="s1", role=role,
        content=text, at=1.0,
    )  # fmt: skip


CTX = ExtractionContext(user_id="u", session_id="s1")


def test_a_casual_statement_becomes_one_fact_with_its_own_provenance() -> None:
    text = "Caroline: I went to a LGBTQ support group yesterday. How about you?"
    (cand,) = ConversationFactExtractor().extract([_rec(text)], CTX)
    assert cand.rule == "conversation_fact"
    assert cand.source.message_ids == ["D1_3"]
    assert cand.summary.startswith("Caroline: I went to a LGBTQ support group yesterday")
    assert "How about you" not in cand.summary
    assert cand.signals.is_verified


def _facts(text: str, role: Role = Role.USER) -> list[str]:
    cands = ConversationFactExtractor().extract([_rec(text, role=role)], CTX)
    return [c.summary for c in cands if c.rule == "conversation_fact"]


def test_questions_chit_chat_and_assistant_text_add_no_fact() -> None:
    assert _facts("Melanie: How have you been?") == []
    assert _facts("thanks") == []
    assert _facts("I went hiking last week.", role=Role.ASSISTANT) == []


def test_the_same_statement_maps_to_one_canonical_key() -> None:
    ex = ConversationFactExtractor()
    a = ex.extract([_rec("Ann: I adopted a cat named Tom.", "D1_1")], CTX)[0]
    b = ex.extract([_rec("Ann: I adopted a cat named Tom.", "D2_1")], CTX)[0]
    assert a.canonical_fact_key == b.canonical_fact_key
