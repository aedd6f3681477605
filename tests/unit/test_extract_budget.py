"""Extraction reads a turn within a budget: clause-safe windows, capped candidates."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.core.extract.lexicon import default_lexicon
from memstrata.core.extract.rules import (
    ExtractionBudget,
    ExtractionContext,
    RuleExtractor,
    strip_reasoning,
)
from memstrata.core.extract.windows import read_windows
from memstrata.core.models.transcript import Role, TranscriptRecord
from memstrata.core.textcut import cut_middle, fair_shares

CTX = ExtractionContext(user_id="u", session_id="s")
CJK = "我们决定回滚支付服务，不要重启生产环境。"
FACT = "I moved to Lisbon in March and I work as a nurse there."


def rec(content: str, mid: str = "m0", role: Role = Role.USER) -> TranscriptRecord:
    return TranscriptRecord(
        message_id=mid, turn_id="t1", user_id="u", session_id="s", role=role,
        content=content, at=1.0, tool_call_id="c1" if role is Role.TOOL else None,
    )  # fmt: skip


# ------------------------------------------------------------------ fair shares
def test_fair_shares_keep_short_items_whole_and_never_exceed_the_total() -> None:
    assert fair_shares([10, 20], each=100, total=1000) == [10, 20]
    assert fair_shares([10, 900, 900], each=1000, total=1000) == [10, 495, 495]
    assert fair_shares([5000, 5], each=1000, total=10_000) == [1000, 5]
    assert sum(fair_shares([7] * 64, each=100, total=100)) <= 100


# ------------------------------------------------------------------ windows
def test_a_text_within_the_limit_is_read_whole_in_windows_cut_at_clause_ends() -> None:
    text = CJK * 1000  # 20,000 chars
    reading = read_windows(text, limit=65_536, window=4096)
    assert "".join(reading.windows) == text
    assert reading.skipped == 0
    assert all(len(w) <= 4096 for w in reading.windows)
    assert all(w.endswith("。") or w.endswith("，") for w in reading.windows)


def test_a_longer_text_is_read_as_its_head_and_its_last_window() -> None:
    text = "Opening statement. " + "filler words here. " * 30_000 + "Closing conclusion."
    reading = read_windows(text, limit=16_384, window=4096)
    assert reading.read <= 16_384
    assert reading.skipped == len(text) - reading.read
    assert len(reading.windows) == 4
    assert reading.windows[0].startswith("Opening statement.")
    assert reading.windows[-1].endswith("Closing conclusion.")
    assert reading.windows[-1].startswith("filler") or reading.windows[-1].startswith(" ")


def test_text_without_any_boundary_is_cut_hard_at_the_window() -> None:
    reading = read_windows("x" * 10_000, limit=100_000, window=4096)
    assert [len(w) for w in reading.windows] == [4096, 4096, 1808]


def test_the_l0_cut_marker_is_not_read() -> None:
    text = cut_middle(FACT + " " + "y" * 5000 + " " + FACT, 200, limit=200)
    assert "memstrata:" in text
    assert "memstrata:" not in read_windows(text, limit=65_536, window=4096).text


# ------------------------------------------------------------------ reasoning, linear
_OLD_REASONING = re.compile(
    r"<(thought|think|thinking)>.*?</\1>|_Thinking:_.*?(?:\n\s*\n|$)", re.IGNORECASE | re.DOTALL
)
TOKENS = ["<think>", "</think>", "<THOUGHT>", "</thought>", "<thinking>", "</Thinking>",
          "_Thinking:_", "\n\n", "\n", " ", "a", "b.", "<", ">"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=30))
def test_stripping_reasoning_in_one_pass_matches_the_regex_it_replaces(parts: list[str]) -> None:
    text = "".join(parts)
    lexicon = default_lexicon()
    expected = _OLD_REASONING.sub(" ", text)
    assert strip_reasoning(text, lexicon) == strip_reasoning_old(expected, lexicon)


def strip_reasoning_old(stripped_blocks: str, lexicon: object) -> str:
    """The rest of strip_reasoning (code fences, markers) applied to the regex's output."""
    from memstrata.core.extract import rules

    out = rules._CODE_FENCE.sub(" ", stripped_blocks)
    for marker in default_lexicon().reasoning_markers:
        if out.lstrip().startswith(marker):
            return ""
    return out


def test_unclosed_reasoning_tags_are_left_in_place() -> None:
    text = "a" + "<think>" * 10_000  # quadratic for the old regex: 5 s; one pass now
    assert strip_reasoning(text, default_lexicon()) == text


# ------------------------------------------------------------------ the extractor's budget
def test_a_long_message_is_read_within_its_budget_and_the_cut_is_reported() -> None:
    ex = RuleExtractor()
    message = FACT + " " + CJK * 20_000  # 400,056 chars
    out = ex.extract_turn([rec(message)], CTX)
    assert len(out.candidates) <= 64
    (note,) = out.notes
    assert note.chars == len(message)
    assert note.read_chars <= 64 * 1024
    assert note.windows <= 16
    assert note.candidate_cap == 64


def test_the_review_turn_of_64_cjk_messages_stays_within_the_turn_budget() -> None:
    ex = RuleExtractor()
    turn = [rec((CJK * 3300)[:65_536], f"m{k}") for k in range(64)]
    out = ex.extract_turn(turn, CTX)
    assert len(out.candidates) <= 256
    assert sum(n.read_chars for n in out.notes) <= 256 * 1024
    assert len(out.notes) == 64


def test_the_other_messages_of_a_turn_are_read_as_if_alone() -> None:
    ex = RuleExtractor()
    short = [
        rec("Please answer in Chinese, conclusion first.", "m0"),
        rec("Don't restart the prod database.", "m2"),
        rec(FACT, "m3"),
    ]
    alone = ex.extract_turn(short, CTX).candidates
    huge = rec("lorem ipsum dolor sit amet, " * 20_000, "m1", role=Role.ASSISTANT)
    together = ex.extract_turn([short[0], huge, *short[1:]], CTX).candidates
    assert [c for c in together if c.source.message_ids != ["m1"]] == alone


def test_a_budget_from_settings_is_applied() -> None:
    tight = RuleExtractor(budget=ExtractionBudget(window_chars=256, message_chars=512))
    out = tight.extract_turn([rec(FACT + " " + "word " * 2000)], CTX)
    assert out.notes[0].read_chars <= 512
