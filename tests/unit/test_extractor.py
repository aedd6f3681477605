"""The rule extractor on scripted debugging sessions, English and Chinese (pure, no Redis).

The extractor proposes; the policy decides.  So chit-chat, guesses and raw tool dumps
come out as flagged candidates, while questions and model reasoning produce nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.core.extract.entities import extract_entities, topic_of
from memstrata.core.extract.lexicon import default_lexicon
from memstrata.core.extract.rules import (
    ExtractionContext,
    RuleExtractor,
    clip,
    normalise_fact,
    split_clauses,
    strip_reasoning,
)
from memstrata.core.models.candidate import Candidate
from memstrata.core.models.memory import MemoryType
from memstrata.core.models.transcript import Role, ToolCall, TranscriptRecord

U, A, T = Role.USER, Role.ASSISTANT, Role.TOOL
CTX = ExtractionContext(user_id="u_42", session_id="s_1", task_id="bug456", turn_index=3)
LEX = default_lexicon()
EXTRACTOR = RuleExtractor()

Msg = tuple[Role, str, dict[str, Any]]

# Constraint slots used by the scripted sessions, one name per distinct constraint.
NO_RESTART_PROD_DB = "bug456:constraint:no_restart:prod"  # "Don't restart the prod database."
NO_RESTART_DB_ZH = "bug456:constraint:no_restart:database"  # "不要重启生产数据库。"
PERMISSION_STAGING = "bug456:constraint:permission:staging"  # "... read-only access to staging."
ENVIRONMENT_PROD_DB = "bug456:constraint:environment:prod"  # "You must not touch the prod database"
NO_RESTART_PROD_DB_NO_TASK = "s_1:constraint:no_restart:prod"


def records(
    turn_id: str, messages: list[Msg], *, task_id: str | None = "bug456"
) -> list[TranscriptRecord]:
    return [
        TranscriptRecord(
            message_id=f"{turn_id}.{i}",
            turn_id=turn_id,
            user_id="u_42",
            session_id="s_1",
            task_id=task_id,
            role=role,
            content=content,
            at=1_700_000_000.0,
            **extra,
        )
        for i, (role, content, extra) in enumerate(messages)
    ]


def extract(turn_id: str, messages: list[Msg], ctx: ExtractionContext = CTX) -> list[Candidate]:
    return EXTRACTOR.extract(records(turn_id, messages, task_id=ctx.task_id), ctx)


def view(cands: list[Candidate]) -> list[tuple[object, ...]]:
    """What a reviewer checks: rule, type, subtype, key, entities, summary, source message."""
    return [
        (
            c.rule,
            c.memory_type.value,
            c.subtype,
            c.canonical_fact_key,
            c.entities,
            c.summary,
            c.source.message_ids,
        )
        for c in cands
    ]


def flags(c: Candidate) -> set[str]:
    return {k for k, v in c.signals.model_dump().items() if v}


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"tool_calls": [ToolCall(id=call_id, name=name)]}


def result(call_id: str) -> dict[str, Any]:
    return {"tool_call_id": call_id}


# ---------------------------------------------------------------- English session

LOG_BLOB = (
    "\n".join(
        f"2024-05-01T10:00:{i:02d}Z level=info pool=payment worker-{i % 4} handled request {i}"
        for i in range(40)
    )
    + "\n2024-05-01T10:00:41Z level=error createOrder HTTP 504 upstream timed out after 3000 ms"
)

EN_TURN_1: list[Msg] = [
    (
        U,
        "createOrder on payment-service keeps timing out (BUG-456). "
        "Please answer in Chinese, conclusion first. Don't restart the prod database.",
        {},
    ),
    (A, "Let me check the database metrics first.", call("c1", "query_metrics")),
    (
        T,
        "db.cpu 12%\nslow queries: 0\ncreateOrder p99 latency 2300ms\nactive_threads 200/200",
        result("c1"),
    ),
    (
        A,
        "The database looks fine, so it is not the cause. Maybe the thread pool is saturated. "
        "Next, check the thread pool and the downstream calls.",
        {},
    ),
]


def test_english_turn_with_constraint_preference_tool_result_and_next_step() -> None:
    # When the first turn of an English debugging session is extracted
    cands = extract("t1", EN_TURN_1)
    # Then exactly these candidates are proposed, in message order
    assert view(cands) == [
        ("user_symptom", "fact", "symptom", "bug456:symptom:createorder",
         ["createOrder", "payment-service", "BUG-456"],
         "createOrder on payment-service keeps timing out (BUG-456)", ["t1.0"]),
        ("user_preference", "preference", "user_preference", "user:pref:language", [],
         "Please answer in Chinese, conclusion first", ["t1.0"]),
        ("user_constraint", "constraint", "user_constraint", NO_RESTART_PROD_DB,
         ["prod", "database"], "Don't restart the prod database.", ["t1.0"]),
        ("tool_observation", "observation", "tool_result",
         "bug456:obs:query_metrics:createorder:47e140e7", ["createOrder"],
         "[query_metrics] createOrder p99 latency 2300ms", ["t1.2"]),
        ("tool_observation", "observation", "tool_result",
         "bug456:obs:query_metrics:238a689e99", [],
         "[query_metrics] active_threads 200/200", ["t1.2"]),
        ("excluded_cause", "fact", "excluded_cause", "bug456:excluded:database", ["database"],
         "The database looks fine, so it is not the cause", ["t1.3"]),
        ("hypothesis", "hypothesis", "hypothesis", "bug456:hypothesis:80776bf7a1",
         ["thread_pool"], "Maybe the thread pool is saturated", ["t1.3"]),
        ("next_step", "decision", "next_step", "bug456:next_step", ["thread_pool", "downstream"],
         "Next, check the thread pool and the downstream calls.", ["t1.3"]),
    ]  # fmt: skip
    # And the signals are what the write policy needs
    symptom, pref, constraint, obs, _obs2, excluded, guess, nxt = cands
    # the user's own report of what they see is the fact the task is about
    assert flags(symptom) == {"is_verified", "is_stable_for_current_task"}
    assert flags(pref) == {"is_verified", "is_preference", "is_stable_for_current_task"}
    assert flags(constraint) == {"is_verified", "is_user_constraint", "is_stable_for_current_task"}
    assert flags(obs) == {"is_verified", "is_stable_for_current_task"}
    assert obs.source.kind == "tool"
    assert obs.source.tool_call_ids == ["c1"]
    assert obs.detail == {
        "role": "tool",
        "tool": "query_metrics",
        "line": "createOrder p99 latency 2300ms",
    }
    # the assistant's claim is verified because a tool result is part of the same turn
    assert flags(excluded) == {"is_verified", "is_stable_for_current_task"}
    assert excluded.detail["excluded_root_causes"] == ["database"]
    assert flags(guess) == {"transient"}
    assert guess.confidence == 0.4
    assert flags(nxt) == {"is_decision", "is_stable_for_current_task"}
    assert nxt.detail["next_focus"] == ["thread_pool", "downstream"]
    assert {c.turn_count for c in cands} == {3}


def test_english_follow_up_drops_questions_and_reasoning_and_keeps_the_decision() -> None:
    cands = extract(
        "t2",
        [
            (U, "thanks", {}),
            (U, "Why is the thread pool so small?", {}),
            (
                A,
                "<thought>maybe we should restart prod</thought>"
                "We decided to increase the thread pool size to 400 on payment-service.",
                {},
            ),
        ],
    )
    assert view(cands) == [
        ("chit_chat", "fact", "chit_chat", "bug456:chat:6e3f5ad7c1", [], "thanks", ["t2.0"]),
        ("decision", "decision", "current_decision", "bug456:decision:thread_pool",
         ["thread_pool", "payment-service"],
         "We decided to increase the thread pool size to 400 on payment-service.", ["t2.2"]),
    ]  # fmt: skip
    chat, decision = cands
    assert flags(chat) == {"chit_chat", "transient"}
    assert flags(decision) == {"is_decision", "is_stable_for_current_task"}
    # nothing of the reasoning block survives, not even the "restart prod" idea
    assert not any("restart" in c.summary for c in cands)


def test_english_log_blob_yields_at_most_its_salient_line_and_a_flagged_raw_dump() -> None:
    cands = extract(
        "t3",
        [
            (A, "Pulling the logs.", call("c2", "kubectl_logs")),
            (T, LOG_BLOB, result("c2")),
            (
                A,
                "_Thinking:_ could be GC, I guess\n\n"
                "It turns out the root cause is connection pool exhaustion in payment-service.",
                {},
            ),
        ],
    )
    assert view(cands) == [
        ("tool_observation", "observation", "tool_result",
         "bug456:obs:kubectl_logs:createorder:fd4ffa72", ["createOrder", "HTTP504"],
         "[kubectl_logs] 2024-05-01T10:00:41Z level=error createOrder HTTP 504 upstream "
         "timed out after 3000 ms", ["t3.1"]),
        ("raw_tool_output", "observation", "raw_output", "bug456:raw:t3.1", [],
         f"raw output of kubectl_logs ({len(LOG_BLOB)} chars)", ["t3.1"]),
        ("conclusion", "fact", "conclusion", "bug456:conclusion:connection_pool",
         ["connection_pool", "payment-service"],
         "It turns out the root cause is connection pool exhaustion in payment-service.",
         ["t3.2"]),
    ]  # fmt: skip
    _obs, raw, conclusion = cands
    assert flags(raw) == {"is_verified", "raw_unstructured_blob", "transient"}
    assert raw.detail == {"role": "tool", "tool": "kubectl_logs", "chars": len(LOG_BLOB)}
    assert flags(conclusion) == {"is_verified", "is_stable_for_current_task"}
    assert conclusion.confidence == 0.85
    assert not any("GC" in c.summary or "guess" in c.summary for c in cands)


def test_english_remember_this_makes_a_constraint_explicit() -> None:
    cands = extract(
        "t4",
        [(U, "Remember that I only have read-only access to staging.", {}), (U, "ok", {})],
    )
    assert view(cands) == [
        ("explicit_remember", "constraint", "user_constraint", PERMISSION_STAGING,
         ["staging"], "Remember that I only have read-only access to staging.", ["t4.0"]),
        ("chit_chat", "fact", "chit_chat", "bug456:chat:7a85f4764b", [], "ok", ["t4.1"]),
    ]  # fmt: skip
    assert flags(cands[0]) == {
        "is_verified",
        "is_user_constraint",
        "explicit_remember",
        "is_stable_for_current_task",
    }
    assert cands[0].confidence == 0.95


def test_english_explicit_remember_of_a_plain_fact_and_of_a_preference() -> None:
    cands = extract(
        "t5",
        [
            (U, "Remember this: payment-service owns the createOrder API.", {}),
            (U, "Please remember: I prefer concise bullet answers.", {}),
        ],
    )
    assert view(cands) == [
        ("explicit_remember", "fact", "user_stated", "user:fact:payment-service:f5c3c6",
         ["payment-service", "createOrder"],
         "Remember this: payment-service owns the createOrder API.", ["t5.0"]),
        ("explicit_remember", "preference", "user_preference", "user:pref:answer_style", [],
         "Please remember: I prefer concise bullet answers.", ["t5.1"]),
    ]  # fmt: skip
    assert all(c.signals.explicit_remember for c in cands)
    assert cands[1].signals.is_preference


def test_english_decisions_exclusions_and_conclusions_from_the_assistant() -> None:
    cands = extract(
        "t6",
        [
            (A, "Let's switch createOrder to the async queue. I'll restart the worker later", {}),
            (
                A,
                "Redis is not the bottleneck. "
                "The issue was a missing index on orders.user_id, fixed by adding it.",
                {},
            ),
        ],
    )
    assert view(cands) == [
        ("decision", "decision", "current_decision", "bug456:decision:createorder",
         ["createOrder"], "Let's switch createOrder to the async queue", ["t6.0"]),
        ("decision", "decision", "current_decision", "bug456:decision:285e8c732a", [],
         "I'll restart the worker later", ["t6.0"]),
        ("excluded_cause", "fact", "excluded_cause", "bug456:excluded:redis", ["redis"],
         "Redis is not the bottleneck", ["t6.1"]),
        ("conclusion", "fact", "conclusion", "bug456:conclusion:index", ["index"],
         "The issue was a missing index on orders.user_id, fixed by adding it.", ["t6.1"]),
    ]  # fmt: skip
    excluded, conclusion = cands[2], cands[3]
    # no tool result in this turn: the assistant's claims are proposed unverified
    assert not excluded.signals.is_verified
    assert excluded.confidence == 0.75
    assert not conclusion.signals.is_verified
    assert conclusion.confidence == 0.7


def test_english_constraints_get_one_slot_per_topic() -> None:
    cands = extract(
        "t7",
        [(U, "You must not touch the prod database. Never run migrations on Fridays", {})],
    )
    assert view(cands) == [
        ("user_constraint", "constraint", "user_constraint", ENVIRONMENT_PROD_DB,
         ["prod", "database"], "You must not touch the prod database", ["t7.0"]),
        ("user_constraint", "constraint", "user_constraint",
         f"bug456:constraint:{cands[1].detail['topic']}", [],
         "Never run migrations on Fridays", ["t7.0"]),
    ]  # fmt: skip
    assert cands[0].detail == {"role": "user", "topic": "environment"}


def test_two_different_constraints_on_one_topic_do_not_share_a_canonical_key() -> None:
    # Given two distinct "do not restart" constraints about different systems
    cands = extract(
        "t8",
        [(U, "Don't restart the prod database. Don't restart payment-service either.", {})],
    )
    # Then both are proposed as constraints...
    assert [c.rule for c in cands] == ["user_constraint", "user_constraint"]
    # ...and they must not collide on one key, or the second would overwrite the first
    assert cands[0].canonical_fact_key != cands[1].canonical_fact_key


# ---------------------------------------------------------------- Chinese session

ZH_TURN_1: list[Msg] = [
    (U, "createOrder 在 prod 超时了，工单 BUG-456。不要重启生产数据库。我喜欢先说结论。", {}),
    (A, "我先查一下数据库的慢查询。", call("c1", "query_db")),
    (T, "慢查询: 0\n线程池 active_threads 200/200 已打满\n连接池 active 20/100", result("c1")),
    (A, "数据库没问题，不是数据库的问题。可能是线程池打满了。下一步重点看线程池。", {}),
]


def test_chinese_turn_with_constraint_preference_tool_result_and_next_step() -> None:
    cands = extract("t1", ZH_TURN_1)
    assert view(cands) == [
        ("user_symptom", "fact", "symptom", "bug456:symptom:createorder", ["createOrder", "prod"],
         "createOrder 在 prod 超时了，工单 BUG-456。", ["t1.0"]),
        ("user_constraint", "constraint", "user_constraint", NO_RESTART_DB_ZH,
         ["database"], "不要重启生产数据库。", ["t1.0"]),
        ("user_preference", "preference", "user_preference", "user:pref:answer_style", [],
         "我喜欢先说结论。", ["t1.0"]),
        ("next_step", "decision", "next_step", "bug456:next_step", ["database", "slow_query"],
         "我先查一下数据库的慢查询。", ["t1.1"]),
        ("tool_observation", "observation", "tool_result",
         "bug456:obs:query_db:thread_pool:b7fd9348", ["thread_pool"],
         "[query_db] 线程池 active_threads 200/200 已打满", ["t1.2"]),
        ("excluded_cause", "fact", "excluded_cause", "bug456:excluded:database", ["database"],
         "数据库没问题", ["t1.3"]),
        ("excluded_cause", "fact", "excluded_cause", "bug456:excluded:database", ["database"],
         "不是数据库的问题。", ["t1.3"]),
        ("hypothesis", "hypothesis", "hypothesis", "bug456:hypothesis:fca24b38f0",
         ["thread_pool"], "可能是线程池打满了。", ["t1.3"]),
        ("next_step", "decision", "next_step", "bug456:next_step", ["thread_pool"],
         "下一步重点看线程池。", ["t1.3"]),
    ]  # fmt: skip
    by_rule = {c.rule: c for c in cands}
    assert flags(by_rule["user_constraint"]) == {
        "is_verified",
        "is_user_constraint",
        "is_stable_for_current_task",
    }
    assert by_rule["excluded_cause"].signals.is_verified
    assert flags(by_rule["hypothesis"]) == {"transient"}
    # the user's symptom report ("createOrder 在 prod 超时了") is kept as the task's fact
    assert flags(by_rule["user_symptom"]) == {"is_verified", "is_stable_for_current_task"}


def test_chinese_follow_up_chit_chat_question_reasoning_and_decision() -> None:
    cands = extract(
        "t2",
        [
            (U, "好的", {}),
            (U, "为什么会超时？", {}),
            (U, "这个是什么原因呢", {}),
            (A, "<think>也许是GC，我们决定重启</think>决定先把线程池从200调到400。", {}),
        ],
    )
    assert view(cands) == [
        ("chit_chat", "fact", "chit_chat", "bug456:chat:e8b67408b3", [], "好的", ["t2.0"]),
        ("decision", "decision", "current_decision", "bug456:decision:thread_pool",
         ["thread_pool"], "决定先把线程池从200调到400。", ["t2.3"]),
    ]  # fmt: skip


def test_chinese_remember_marks_every_clause_of_the_message() -> None:
    cands = extract("t3", [(U, "不要重启生产数据库。请记住：回答用中文。", {})])
    assert view(cands) == [
        ("explicit_remember", "constraint", "user_constraint", NO_RESTART_DB_ZH,
         ["database"], "不要重启生产数据库。", ["t3.0"]),
        ("explicit_remember", "preference", "user_preference", "user:pref:language", [],
         "请记住：回答用中文。", ["t3.0"]),
    ]  # fmt: skip
    assert all(c.signals.explicit_remember for c in cands)
    assert all(c.confidence == 0.95 for c in cands)


def test_chinese_conclusion_without_tool_evidence_is_unverified() -> None:
    cands = extract("t4", [(A, "确认根因是线程池耗尽。", {})])
    assert view(cands) == [
        ("conclusion", "fact", "conclusion", "bug456:conclusion:thread_pool", ["thread_pool"],
         "确认根因是线程池耗尽。", ["t4.0"]),
    ]  # fmt: skip
    assert (cands[0].signals.is_verified, cands[0].confidence) == (False, 0.7)


# ---------------------------------------------------------------- what yields nothing


@pytest.mark.parametrize(
    "question",
    [
        "Why does createOrder time out?",
        "Is the database slow",
        "how do we restart payment-service",
        "Should we roll back?",
        "为什么会超时",
        "数据库是不是有问题？",
        "线程池满了吗",
        "怎么排查这个问题",
    ],
)
def test_questions_never_become_candidates(question: str) -> None:
    assert extract("t1", [(U, question, {}), (A, question, {})]) == []


@pytest.mark.parametrize(
    "reasoning",
    [
        "<thought>We decided to roll back payment-service.</thought>",
        "<THINK>Redis is not the cause.</THINK>",
        "<thinking>\nNext, check the thread pool.\n</thinking>",
        "_Thinking:_ The root cause is the database, we'll restart it",
        "THOUGHT: we will roll back payment-service",
    ],
)
def test_model_reasoning_is_dropped_entirely(reasoning: str) -> None:
    assert extract("t1", [(A, reasoning, {})]) == []


def test_text_after_a_reasoning_block_is_still_extracted() -> None:
    cands = extract("t1", [(A, "<think>maybe DNS</think>We will roll back payment-service.", {})])
    assert [(c.rule, c.summary) for c in cands] == [
        ("decision", "We will roll back payment-service.")
    ]


@pytest.mark.parametrize("text", ["Hi!", "thanks", "OK.", "sounds good", "你好", "谢谢！", "嗯嗯"])
def test_user_chit_chat_is_proposed_flagged_and_assistant_chit_chat_dropped(text: str) -> None:
    cands = extract("t1", [(U, text, {}), (A, text, {})])
    assert [(c.rule, c.memory_type, c.source.message_ids) for c in cands] == [
        ("chit_chat", MemoryType.FACT, ["t1.0"])
    ]
    assert flags(cands[0]) == {"chit_chat", "transient"}


def test_plain_narration_and_empty_messages_yield_nothing() -> None:
    assert (
        extract(
            "t1",
            [
                (U, "", {}),
                (A, "   ", {}),
                (A, "Here is the output of the command you asked for", {}),
                (T, "", result("c1")),
            ],
        )
        == []
    )


def test_a_guess_is_a_hypothesis_even_when_it_sounds_like_a_constraint() -> None:
    cands = extract("t1", [(U, "Maybe we must not restart the database", {})])
    assert [(c.rule, c.memory_type) for c in cands] == [("hypothesis", MemoryType.HYPOTHESIS)]


def test_fenced_code_and_pasted_logs_in_chat_text_are_raw_material_not_facts() -> None:
    # Given a user pasting a log and an assistant writing a file, both inside code fences
    cands = extract(
        "t1",
        [
            (
                U,
                "Here is the log:\n```\nERROR createOrder timed out\nWe decided to restart\n```\n"
                "Don't restart the prod database.",
                {},
            ),
            (
                A,
                "Writing the fix:\n```python\n# we will roll back payment-service\n"
                "POOL_SIZE = 400  # the root cause is the pool\n```",
                {},
            ),
        ],
    )
    # Then only the sentence outside the fence is proposed
    assert [(c.rule, c.summary) for c in cands] == [
        ("user_constraint", "Don't restart the prod database.")
    ]


def test_an_unclosed_code_fence_swallows_the_rest_of_the_message() -> None:
    assert extract("t1", [(A, "Patch below\n```diff\n- we will roll back\n+ let's go", {})]) == []


# ---------------------------------------------------------------- tool results


def test_small_tool_result_without_signal_is_a_flagged_raw_dump() -> None:
    cands = extract(
        "t1",
        [(A, "run", call("c9", "ping")), (T, "all good here, nothing to see", result("c9"))],
    )
    assert view(cands) == [
        ("raw_tool_output", "observation", "raw_output", "bug456:raw:t1.1", [],
         "raw output of ping (29 chars)", ["t1.1"]),
    ]  # fmt: skip


def test_tool_result_keeps_two_distinct_observations_at_most() -> None:
    output = "\n".join(
        [
            "createOrder failed: HTTP 504",
            "createOrder failed: HTTP 504",  # repeated line
            "short",  # under 8 chars
            "x" * 401 + " error",  # over 400 chars
            "refundOrder failed: HTTP 503",
            "getOrder failed: HTTP 500",
        ]
    )
    cands = extract("t1", [(A, "go", call("c1", "curl")), (T, output, result("c1"))])
    assert [c.summary for c in cands] == [
        "[curl] createOrder failed: HTTP 504",
        "[curl] refundOrder failed: HTTP 503",
    ]


def test_tool_name_falls_back_to_the_record_name_then_to_tool() -> None:
    named = extract("t1", [(T, "connect timeout after 30s", {"tool_call_id": "x", "name": "dig"})])
    assert named[0].summary == "[dig] connect timeout after 30s"
    anonymous = extract("t1", [(T, "connect timeout after 30s", result("x"))])
    assert anonymous[0].summary == "[tool] connect timeout after 30s"
    assert anonymous[0].canonical_fact_key.startswith("bug456:obs:tool:")


def test_keys_are_scoped_to_the_session_when_there_is_no_task() -> None:
    ctx = ExtractionContext(user_id="u_42", session_id="s_1")
    cands = extract("t1", [(U, "Don't restart the prod database. I prefer English.", {})], ctx)
    assert [c.canonical_fact_key for c in cands] == [
        NO_RESTART_PROD_DB_NO_TASK,
        "user:pref:language",  # preferences follow the user across sessions and tasks
    ]


def test_known_entities_from_the_context_are_recognised() -> None:
    ctx = ExtractionContext(
        user_id="u_42", session_id="s_1", task_id="bug456", known_entities=("Ledger",)
    )
    cands = extract("t1", [(A, "We will roll back the ledger.", {})], ctx)
    assert cands[0].entities == ["Ledger"]
    assert cands[0].canonical_fact_key == "bug456:decision:ledger"


# ---------------------------------------------------------------- entities


@pytest.mark.parametrize(
    ("text", "entities"),
    [
        ("createOrder on payment-service", ["createOrder", "payment-service"]),
        ("bug456 and BUG-456 and JIRA-1234", ["bug456", "BUG-456", "JIRA-1234"]),
        ("got HTTP 504 then HTTP503", ["HTTP504", "HTTP503"]),
        ("数据库和线程池", ["database", "thread_pool"]),
        ("数据库连接池打满", ["database", "connection_pool"]),
        ("the Thread Pool and the DB", ["thread_pool", "database"]),
        ("NullPointerException in order_service.create_order()",
         ["NullPointerException", "order_service.create_order"]),
        ("POST /api/v1/orders returned ECONNREFUSED", ["/api/v1/orders", "ECONNREFUSED"]),
        ("ORA-01555 on staging-eu", ["ORA-01555", "staging-eu"]),
        ("redis and Redis and REDIS", ["redis"]),
        ("dbx is not db", ["database"]),
    ],
)  # fmt: skip
def test_entities_are_found_normalised_and_in_text_order(text: str, entities: list[str]) -> None:
    assert extract_entities(text, LEX) == entities


def test_entities_follow_the_seed_example_without_overlapping_fragments() -> None:
    # Seed 四.1: "createOrder 在 prod-k8s 超时" → createOrder, prod-k8s (no extra "kubernetes"
    # from inside "prod-k8s"); next_focus thread_pool, downstream_latency (no "downstream").
    assert extract_entities("createOrder on payment-service in prod-k8s", LEX) == [
        "createOrder",
        "payment-service",
        "prod-k8s",
    ]
    assert extract_entities("check the thread pool and downstream latency", LEX) == [
        "thread_pool",
        "downstream_latency",
    ]
    assert extract_entities("重点看线程池和下游延迟", LEX) == ["thread_pool", "downstream_latency"]


def test_log_level_error_is_not_an_entity() -> None:
    # E[A-Z]{4,} is meant for errno names (ETIMEDOUT, ECONNREFUSED), not the word ERROR
    assert extract_entities("ERROR createOrder ETIMEDOUT", LEX) == ["createOrder", "ETIMEDOUT"]


def test_entity_list_is_capped() -> None:
    text = " ".join(f"svc{i}-service" for i in range(30))
    assert len(extract_entities(text, LEX)) == 16


def test_topics_come_from_the_lexicon() -> None:
    assert topic_of("请用中文回答", "preference", LEX) == "language"
    assert topic_of("answer in a markdown table", "preference", LEX) == "format"
    assert topic_of("do not drop the table", "constraint", LEX) == "data_safety"
    assert topic_of("nothing here", "constraint", LEX) is None


# ---------------------------------------------------------------- text helpers


def test_clauses_split_on_sentence_ends_in_both_languages() -> None:
    assert split_clauses("The DB is fine. Next, check the pool! Ok?") == [
        "The DB is fine",  # an English full stop is consumed by the split
        "Next, check the pool!",
        "Ok?",
    ]
    assert split_clauses("数据库正常。下一步看线程池；先别重启！") == [
        "数据库正常。",
        "下一步看线程池；",
        "先别重启！",
    ]
    assert split_clauses("- first point\n* second point\n1. third") == [
        "first point",
        "second point",
        "third",
    ]
    # version numbers and file names are not sentence ends
    assert split_clauses("roll back to v1.4.2 today") == ["roll back to v1.4.2 today"]


def test_clauses_are_clipped_to_a_bounded_length() -> None:
    assert max(len(c) for c in split_clauses("a" * 1000)) == 300
    assert len(clip("word " * 100)) == 200
    assert clip("word " * 100).endswith("…")
    assert clip("  keep   this,  ") == "keep this"


def test_normalise_fact_folds_case_whitespace_digits_and_final_punctuation() -> None:
    assert normalise_fact("  Pool   SIZE 200.  ") == "pool size #"
    assert normalise_fact("线程池 200！") == "线程池 #"


def test_strip_reasoning_removes_blocks_and_marker_led_text() -> None:
    assert strip_reasoning("a<thought>x</thought>b", LEX) == "a b"
    assert strip_reasoning("_Thinking:_ hmm\n\nAnswer", LEX).strip() == "Answer"
    assert strip_reasoning("  THOUGHT: anything", LEX) == ""
