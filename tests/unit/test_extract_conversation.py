"""Extraction on ordinary conversations and clause-safe splitting (issue 13.2, review D5).

Pure: the rule extractor on scripted messages.  Each test states a general rule: a
sentence is kept whole across its commas, every user statement ends up in some
candidate (so the policy stores or refuses it with a reason), task-state rules need a
task, and a fact stated inside a request is still a fact.
"""

from __future__ import annotations

from memstrata.core.extract.rules import ExtractionContext, RuleExtractor
from memstrata.core.models.candidate import Candidate
from memstrata.core.models.transcript import Role, TranscriptRecord

EXTRACTOR = RuleExtractor()
TASK = ExtractionContext(user_id="u", session_id="s", task_id="INC-1", turn_index=2)
CHAT = ExtractionContext(user_id="u", session_id="s", task_id=None, turn_index=2)


def run(ctx: ExtractionContext, *messages: tuple[Role, str]) -> list[Candidate]:
    recs = [
        TranscriptRecord(
            message_id=f"m{i}", turn_id="t", user_id="u", session_id="s",
            task_id=ctx.task_id, role=role, content=text, at=1_700_000_000.0,
        )
        for i, (role, text) in enumerate(messages)
    ]  # fmt: skip
    return EXTRACTOR.extract(recs, ctx)


def summaries(cands: list[Candidate]) -> str:
    return " | ".join(c.summary for c in cands)


def test_a_chinese_sentence_is_kept_whole_across_its_commas() -> None:
    cands = run(TASK, (Role.USER, "数据库排除了：CPU 15%，连接数 60/800，没有慢查询。"))
    (excluded,) = [c for c in cands if c.rule == "excluded_cause"]
    assert "连接数 60/800" in excluded.summary and "没有慢查询" in excluded.summary


def test_a_confirmed_finding_keeps_its_figures() -> None:
    text = "确认：inventory-service 的 Redis 连接池被打满了，活跃连接 50/50，等待 912 个。"
    cands = run(TASK, (Role.ASSISTANT, text))
    assert any("等待 912 个" in c.summary and c.rule == "conclusion" for c in cands)


def test_a_second_claim_in_one_sentence_is_still_its_own_candidate() -> None:
    cands = run(TASK, (Role.USER, "我们改用热更新把连接池调回 200，下一步看告警。"))
    rules = {c.rule for c in cands}
    assert {"decision", "next_step"} <= rules


def test_every_user_statement_reaches_some_candidate() -> None:
    # the demo's turn 6: two statements no rule claimed used to vanish without a decision
    text = (
        "我们改用热更新把 inventory-service 的连接池调回 200，版本回退要走变更审批。"
        "必须在今晚 22 点前恢复。我更喜欢简洁的回答，用要点列出来。"
    )
    joined = summaries(run(TASK, (Role.USER, text)))
    for statement in ("版本回退要走变更审批", "必须在今晚 22 点前恢复", "用要点列出来"):
        assert statement in joined, statement


def test_an_english_remainder_statement_is_a_conversation_fact() -> None:
    cands = run(CHAT, (Role.USER, "I prefer short answers. We moved to Lisbon in March 2023."))
    assert any(c.rule == "user_preference" for c in cands)
    facts = [c for c in cands if c.rule == "conversation_fact"]
    assert facts and "Lisbon in March 2023" in facts[0].summary
    assert "short answers" not in facts[0].summary  # what a rule claimed is not repeated


def test_task_state_rules_need_a_task() -> None:
    text = "We decided to go camping at Lake Tahoe next weekend."
    in_task = run(TASK, (Role.USER, text))
    in_chat = run(CHAT, (Role.USER, text))
    assert [c.rule for c in in_task] == ["decision"]
    assert [c.rule for c in in_chat] == ["conversation_fact"]
    assert "Lake Tahoe" in in_chat[0].summary


def test_a_guess_outside_a_task_is_what_the_person_said() -> None:
    text = "Maybe we will visit Kyoto with my sister in the spring."
    assert [c.rule for c in run(TASK, (Role.USER, text))] == ["hypothesis"]
    assert [c.rule for c in run(CHAT, (Role.USER, text))] == ["conversation_fact"]


def test_a_turn_with_tool_results_is_a_task_even_without_a_task_id() -> None:
    cands = run(
        CHAT,
        (Role.USER, "Next, check the connection pool of the payments service."),
        (Role.TOOL, "pool size 50, active 50, waiting 912"),
    )
    assert "next_step" in {c.rule for c in cands}


def test_a_fact_stated_inside_a_request_is_kept() -> None:
    text = "Can you help me cancel my $12.99/month Canva Pro subscription before Friday?"
    (fact,) = run(CHAT, (Role.USER, text))
    assert fact.rule == "conversation_fact"
    assert "$12.99/month Canva Pro subscription" in fact.summary


def test_a_question_without_a_fact_about_the_speaker_proposes_nothing() -> None:
    assert run(CHAT, (Role.USER, "What is the capital of Australia?")) == []
    assert run(CHAT, (Role.USER, "你觉得这个方案怎么样？")) == []
