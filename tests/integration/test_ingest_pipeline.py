"""The post-turn write path in-process (no Celery): L0 turn → extract → judge → Redis STM.

Scripted debugging sessions in English and Chinese, with exact expectations of what is
stored, what is updated (a new version), what is merged and what is refused, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from memstrata.core.extract.rules import RuleExtractor
from memstrata.core.ingest.pipeline import (
    IngestPipeline,
    TurnOutcome,
    memory_id_for,
    read_decisions,
)
from memstrata.core.models.candidate import Verdict, WriteDecision
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import (
    MessageIn,
    Role,
    ToolCall,
    TranscriptRecord,
    TurnPointer,
)
from memstrata.core.policy.write import WritePolicy
from memstrata.core.runtime import Runtime
from memstrata.core.stm.store import StmStore

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0
HOUR = 3600
DAY = 24 * HOUR
U, A, T = Role.USER, Role.ASSISTANT, Role.TOOL
USER, TASK = "u_42", "bug456"

Turn = tuple[TurnPointer, Sequence[TranscriptRecord]]
Msg = tuple[Role, str, dict[str, Any]]

NO_RESTART_EN = "bug456:constraint:no_restart:prod"  # "Don't restart the prod database."
NO_RESTART_ZH = "bug456:constraint:no_restart:database"  # "不要重启生产数据库。"

RAW_DUMP_REFUSAL = "raw unstructured text (seed 四.5: no raw logs or transcripts in STM)"
LOG_BLOB = (
    "\n".join(
        f"2024-05-01T10:00:{i:02d}Z level=info pool=payment worker-{i % 4} handled request {i}"
        for i in range(40)
    )
    + "\n2024-05-01T10:00:41Z level=error createOrder HTTP 504 upstream timed out after 3000 ms"
)


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"tool_calls": [ToolCall(id=call_id, name=name)]}


def result(call_id: str) -> dict[str, Any]:
    return {"tool_call_id": call_id}


EN_SESSION: list[list[Msg]] = [
    [
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
            "The database looks fine, so it is not the cause. Maybe the thread pool is "
            "saturated. Next, check the thread pool and the downstream calls.",
            {},
        ),
    ],
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
    [
        (U, "Don't restart the prod database.", {}),
        (
            A,
            "The database looks fine, so it is not the cause. "
            "Next, check the connection pool metrics.",
            {},
        ),
    ],
    [(U, "We decided to set the thread pool size to 500 on payment-service.", {})],
]

ZH_SESSION: list[list[Msg]] = [
    [
        (U, "createOrder 在 prod 超时了，工单 BUG-456。不要重启生产数据库。我喜欢先说结论。", {}),
        (A, "我先查一下数据库的慢查询。", call("c1", "query_db")),
        (T, "慢查询: 0\n线程池 active_threads 200/200 已打满\n连接池 active 20/100", result("c1")),
        (A, "数据库没问题。可能是线程池打满了。下一步重点看线程池。", {}),
    ],
    [
        (U, "好的", {}),
        (U, "为什么会超时？", {}),
        (A, "<think>也许是GC，我们决定重启</think>决定先把线程池从200调到400。", {}),
    ],
    [
        (A, "查一下连接池。", call("c3", "query_db")),
        (T, "连接池 active 100/100 已耗尽\n等待获取连接超时 3000ms", result("c3")),
        (A, "根因是连接池耗尽，不是线程池的问题。", {}),
    ],
    [(U, "请记住：回答用中文。", {}), (U, "不要重启生产数据库。", {})],
]


def append(
    res: Runtime,
    n: int,
    messages: list[Msg],
    *,
    user: str = USER,
    session: str = "s_en",
    task: str | None = TASK,
) -> Turn:
    """Append turn ``t<n>`` to L0 at T0 + 60 n and read it back through its pointer."""
    appended = res.transcript.append_turn(
        user_id=user,
        session_id=session,
        task_id=task,
        messages=[MessageIn(role=role, content=text, **extra) for role, text, extra in messages],
        turn_id=f"t{n}",
        at=T0 + 60 * n,
    )
    return appended.pointer, res.transcript.read_turn(appended.pointer)


def process(res: Runtime, turn: Turn) -> TurnOutcome:
    (outcome,) = res.pipeline.process([turn])
    return outcome


def verdicts(outcome: TurnOutcome) -> list[tuple[str, str, float, str]]:
    return [(d.rule, d.verdict.value, d.score, d.reason) for d in outcome.decisions]


def ops(outcome: TurnOutcome) -> list[tuple[str, str, int]]:
    return [(u.op, u.memory_id, u.version) for u in outcome.upserts]


def mid(key: str, user: str = USER) -> str:
    return memory_id_for(user, key)


def written(score: float) -> str:
    return f"score {score:g} ≥ threshold 3"


def snapshot(res: Runtime, *, with_decisions: bool = True) -> dict[str, Any]:
    r = res.redis
    out: dict[str, Any] = {}
    for key in sorted(r.scan_iter(match=f"{res.settings.key_namespace}:*", count=1000)):
        if not with_decisions and ":decisions:" in key:
            continue
        kind = r.type(key)
        if kind == "hash":
            out[key] = r.hgetall(key)
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        else:  # pragma: no cover - the write path writes no other types
            out[key] = (kind, r.dump(key))
    return out


def items(res: Runtime, session: str = "s_en", user: str = USER) -> list[MemoryItem]:
    return res.stm.by_session(user, session, limit=1000)


# ---------------------------------------------------------------- English session


def test_english_debugging_session_stores_updates_merges_and_refuses_exactly(
    res: Runtime,
) -> None:
    turns = [append(res, n, msgs) for n, msgs in enumerate(EN_SESSION, start=1)]

    # Turn 1: the user's constraint and preference, two verified tool lines, the verified
    # exclusion and the next step are stored; the guess is refused.
    t1 = process(res, turns[0])
    assert verdicts(t1) == [
        ("user_symptom", "written", 8, written(8)),
        ("user_preference", "written", 8, written(8)),
        ("user_constraint", "written", 11, written(11)),
        ("tool_observation", "written", 8, written(8)),
        ("tool_observation", "written", 8, written(8)),
        ("excluded_cause", "written", 8, written(8)),
        ("hypothesis", "refused", 0, "unverified guess (seed 四.5)"),
        ("next_step", "written", 7, written(7)),
    ]
    assert [op for op, _m, _v in ops(t1)] == ["inserted"] * 7
    assert [d.decision_id for d in t1.decisions][:3] == [
        "t1:000:user_symptom",
        "t1:001:user_preference",
        "t1:002:user_constraint",
    ]

    # Turn 2: chit-chat refused, the question and the reasoning block yield nothing,
    # the decision is stored.
    t2 = process(res, turns[1])
    assert verdicts(t2) == [
        ("chit_chat", "refused", 0, "chit-chat carries no task state"),
        ("decision", "written", 7, written(7)),
    ]
    assert ops(t2) == [("inserted", mid("bug456:decision:thread_pool"), 1)]

    # Turn 3: a 40-line log → one salient verified line; the dump itself is refused.
    t3 = process(res, turns[2])
    assert verdicts(t3) == [
        ("tool_observation", "written", 8, written(8)),
        ("raw_tool_output", "refused", 1, RAW_DUMP_REFUSAL),
        ("conclusion", "written", 8, written(8)),
    ]

    # Turn 4: the restated constraint is merged (one more mention), the restated
    # unverified exclusion is refused as a duplicate, the new next step replaces the old.
    t4 = process(res, turns[3])
    constraint_id = mid(NO_RESTART_EN)
    next_id = mid("bug456:next_step")
    assert verdicts(t4) == [
        ("user_constraint", "written", 6, f"restated fact merged into {constraint_id}"),
        ("excluded_cause", "refused", -1, "duplicate of a fact already in STM"),
        ("next_step", "written", 7, "changed fact: new version"),
    ]
    assert ops(t4) == [("merged", constraint_id, 1), ("updated", next_id, 2)]
    duplicate = t4.decisions[1]
    assert duplicate.breakdown == {"is_stable_for_current_task": 2, "duplicate": -3}
    assert duplicate.memory_id is None

    # Turn 5: a changed decision under the same key is a new version.
    t5 = process(res, turns[4])
    decision_id = mid("bug456:decision:thread_pool")
    assert verdicts(t5) == [("decision", "written", 7, "changed fact: new version")]
    assert ops(t5) == [("updated", decision_id, 2)]

    # Finally STM holds exactly these items, newest first (by the turn that last touched them)
    stored = items(res)
    assert [i.updated_at for i in stored] == sorted((i.updated_at for i in stored), reverse=True)
    assert sorted(
        (round((i.updated_at - T0) / 60), i.memory_type.value, i.subtype, i.version,
         i.mention_count, i.summary)
        for i in stored
    ) == sorted([
        (5, "decision", "current_decision", 2, 2,
         "We decided to set the thread pool size to 500 on payment-service."),
        (4, "decision", "next_step", 2, 2, "Next, check the connection pool metrics."),
        (4, "constraint", "user_constraint", 1, 2, "Don't restart the prod database."),
        (3, "observation", "tool_result", 1, 1,
         "[kubectl_logs] 2024-05-01T10:00:41Z level=error createOrder HTTP 504 upstream timed "
         "out after 3000 ms"),
        (3, "fact", "conclusion", 1, 1,
         "It turns out the root cause is connection pool exhaustion in payment-service."),
        (1, "fact", "excluded_cause", 1, 1, "The database looks fine, so it is not the cause"),
        (1, "fact", "symptom", 1, 1, "createOrder on payment-service keeps timing out (BUG-456)"),
        (1, "preference", "user_preference", 1, 1, "Please answer in Chinese, conclusion first"),
        (1, "observation", "tool_result", 1, 1, "[query_metrics] active_threads 200/200"),
        (1, "observation", "tool_result", 1, 1, "[query_metrics] createOrder p99 latency 2300ms"),
    ])  # fmt: skip

    # And the superseded versions are kept as provenance
    decision = res.stm.get(USER, decision_id)
    assert decision is not None
    assert [(h.version, h.summary, h.message_ids) for h in decision.history] == [
        (1, "We decided to increase the thread pool size to 400 on payment-service.", ["t2.2"])
    ]
    assert decision.source.message_ids == ["t5.0"]
    constraint = res.stm.get(USER, constraint_id)
    assert constraint is not None
    assert constraint.source.message_ids == ["t1.0", "t4.0"]


def test_stored_items_carry_provenance_ttl_entities_and_every_index(res: Runtime) -> None:
    process(res, append(res, 1, EN_SESSION[0]))
    at = T0 + 60
    obs_key = "bug456:obs:query_metrics:createorder:47e140e7"
    obs = res.stm.get(USER, mid(obs_key))
    assert obs is not None
    assert obs.model_dump(
        include={"user_id", "session_id", "task_id", "canonical_fact_key", "entities",
                 "confidence", "created_at", "updated_at", "expires_at", "seen_sessions",
                 "detail", "tags"},
    ) == {
        "user_id": USER,
        "session_id": "s_en",
        "task_id": TASK,
        "canonical_fact_key": obs_key,
        "entities": ["createOrder"],
        "confidence": 0.9,
        "created_at": at,
        "updated_at": at,
        "expires_at": at + 6 * HOUR,
        "seen_sessions": ["s_en"],
        "detail": {"role": "tool", "tool": "query_metrics",
                   "line": "createOrder p99 latency 2300ms"},
        "tags": ["tool_result"],
    }  # fmt: skip
    assert obs.source.model_dump() == {
        "kind": "tool",
        "message_ids": ["t1.2"],
        "tool_call_ids": ["c1"],
    }
    # TTL by type: constraint 7 days, preference 30 days, decision 1 day
    by_key = {i.canonical_fact_key: i for i in items(res)}
    assert by_key[NO_RESTART_EN].expires_at == at + 7 * DAY
    assert by_key["user:pref:language"].expires_at == at + 30 * DAY
    assert by_key["bug456:next_step"].expires_at == at + DAY
    # every index finds what it should
    assert {i.id for i in res.stm.by_entity(USER, "createOrder")} == {
        mid(obs_key),
        mid("bug456:symptom:createorder"),
    }
    assert {i.canonical_fact_key for i in res.stm.by_entity(USER, "database")} == {
        NO_RESTART_EN,
        "bug456:excluded:database",
    }
    assert len(res.stm.by_task(USER, TASK)) == 7
    assert len(res.stm.by_type(USER, "observation")) == 2
    assert [i.subtype for i in res.stm.by_type(USER, "decision")] == ["next_step"]
    # the importance recorded in the decision is the one stored
    decisions = {d.memory_id: d for d in t1_decisions(res)}
    for item in items(res):
        assert item.importance == decisions[item.id].importance


def t1_decisions(res: Runtime) -> list[WriteDecision]:
    return [d for d in read_decisions(res, USER, "s_en") if d.decision_id.startswith("t1:")]


# ---------------------------------------------------------------- Chinese session


def test_chinese_debugging_session_stores_updates_merges_and_refuses_exactly(
    res: Runtime,
) -> None:
    turns = [append(res, n, msgs, session="s_zh") for n, msgs in enumerate(ZH_SESSION, start=1)]
    t1 = process(res, turns[0])
    assert verdicts(t1) == [
        ("user_symptom", "written", 8, written(8)),
        ("user_constraint", "written", 11, written(11)),
        ("user_preference", "written", 8, written(8)),
        ("next_step", "written", 7, written(7)),
        ("tool_observation", "written", 8, written(8)),
        ("excluded_cause", "written", 8, written(8)),
        ("hypothesis", "refused", 0, "unverified guess (seed 四.5)"),
        ("next_step", "written", 7, "changed fact: new version"),
    ]
    # the second next step of the same turn supersedes the first one at once
    assert ops(t1)[-1] == ("updated", mid("bug456:next_step"), 2)

    t2 = process(res, turns[1])
    assert verdicts(t2) == [
        ("chit_chat", "refused", 0, "chit-chat carries no task state"),
        ("decision", "written", 7, written(7)),
    ]

    t3 = process(res, turns[2])
    assert verdicts(t3) == [
        ("tool_observation", "written", 8, written(8)),
        ("tool_observation", "written", 8, written(8)),
        ("conclusion", "written", 8, written(8)),
        ("excluded_cause", "written", 8, written(8)),
    ]

    t4 = process(res, turns[3])
    constraint_id = mid(NO_RESTART_ZH)
    assert verdicts(t4) == [
        ("explicit_remember", "written", 8, written(8)),
        ("user_constraint", "written", 6, f"restated fact merged into {constraint_id}"),
    ]
    assert ops(t4) == [
        ("inserted", mid("user:pref:language"), 1),
        ("merged", constraint_id, 1),
    ]

    stored = {
        i.canonical_fact_key: (i.memory_type.value, i.version, i.mention_count, i.summary)
        for i in items(res, "s_zh")
    }
    assert stored == {
        "bug456:symptom:createorder": ("fact", 1, 1, "createOrder 在 prod 超时了，工单 BUG-456。"),
        NO_RESTART_ZH: ("constraint", 1, 2, "不要重启生产数据库。"),
        "user:pref:answer_style": ("preference", 1, 1, "我喜欢先说结论。"),
        "user:pref:language": ("preference", 1, 1, "请记住：回答用中文。"),
        "bug456:next_step": ("decision", 2, 2, "下一步重点看线程池。"),
        "bug456:obs:query_db:thread_pool:b7fd9348": (
            "observation", 1, 1, "[query_db] 线程池 active_threads 200/200 已打满"),
        "bug456:excluded:database": ("fact", 1, 1, "数据库没问题。"),
        "bug456:decision:thread_pool": ("decision", 1, 1, "决定先把线程池从200调到400。"),
        "bug456:obs:query_db:connection_pool:3aa33faf": (
            "observation", 1, 1, "[query_db] 连接池 active 100/100 已耗尽"),
        "bug456:obs:query_db:2f5405d91e": (
            "observation", 1, 1, "[query_db] 等待获取连接超时 3000ms"),
        "bug456:conclusion:connection_pool": ("fact", 1, 1, "根因是连接池耗尽"),
        "bug456:excluded:thread_pool": ("fact", 1, 1, "不是线程池的问题。"),
    }  # fmt: skip
    # Chinese names are indexed under their canonical entities
    assert {i.canonical_fact_key for i in res.stm.by_entity(USER, "thread_pool")} == {
        "bug456:obs:query_db:thread_pool:b7fd9348",
        "bug456:decision:thread_pool",
        "bug456:next_step",
        "bug456:excluded:thread_pool",
    }
    # the explicitly remembered preference is important and long-lived
    pref = res.stm.get(USER, mid("user:pref:language"))
    assert pref is not None
    assert pref.importance == 0.9
    assert pref.expires_at == T0 + 4 * 60 + 30 * DAY


# ---------------------------------------------------------------- seed 四.5


def test_nothing_seed_4_5_forbids_ends_up_as_an_item(res: Runtime) -> None:
    # Given both scripted sessions processed
    for n, msgs in enumerate(EN_SESSION, start=1):
        process(res, append(res, n, msgs))
    for n, msgs in enumerate(ZH_SESSION, start=1):
        process(res, append(res, n, msgs, session="s_zh"))
    stored = res.stm.recent(USER, limit=1000)
    summaries = [i.summary for i in stored]
    raw_texts = [
        text for sess in (EN_SESSION, ZH_SESSION) for turn in sess for _r, text, _e in turn
    ]
    # no raw chat text: no item is a whole multi-sentence message
    multi_sentence = [t for t in raw_texts if t.count(".") + t.count("。") > 1]
    assert not set(summaries) & set(multi_sentence)
    # no long logs: nothing holds more than one log line
    assert all("\n" not in s and len(s) <= 200 for s in summaries)
    assert not any("level=info" in s for s in summaries)
    # no reasoning
    assert not any(w in s for s in summaries for w in ("GC", "restart prod", "I guess", "决定重启"))
    # no guesses, chit-chat or raw dumps
    assert not {"hypothesis", "chit_chat", "raw_output"} & {i.subtype for i in stored}
    assert not any(s.startswith(("Maybe", "可能")) for s in summaries)
    # no questions
    assert not any(s.rstrip().endswith(("?", "？")) for s in summaries)
    # no duplicates: one item per fact key and per fingerprint
    assert len({i.canonical_fact_key for i in stored}) == len(stored)
    assert len({i.fingerprint for i in stored}) == len(stored)


# ---------------------------------------------------------------- idempotency


def test_reprocessing_any_turn_leaves_the_stm_state_identical(res: Runtime) -> None:
    # Given each turn of the session processed in order
    for n, msgs in enumerate(EN_SESSION, start=1):
        turn = append(res, n, msgs)
        process(res, turn)
        before = snapshot(res, with_decisions=False)
        # When the same turn is processed again (a redelivery)
        again = process(res, turn)
        # Then every STM key is unchanged and every upsert reports so
        assert snapshot(res, with_decisions=False) == before, f"turn t{n} changed STM"
        assert {op for op, _m, _v in ops(again)} <= {"unchanged"}


def test_reprocessing_an_earlier_turn_after_later_updates_changes_nothing(
    res: Runtime,
) -> None:
    turns = [append(res, n, msgs) for n, msgs in enumerate(EN_SESSION, start=1)]
    for turn in turns:
        process(res, turn)
    before = snapshot(res, with_decisions=False)
    # an old turn is redelivered after its items were updated by later turns
    for turn in turns:
        process(res, turn)
    assert snapshot(res, with_decisions=False) == before


def test_reprocessing_an_insert_only_turn_leaves_every_key_identical(res: Runtime) -> None:
    turn = append(res, 1, EN_SESSION[0])
    first = process(res, turn)
    before = snapshot(res)
    again = process(res, turn)
    assert snapshot(res) == before
    assert again.decisions == first.decisions


def test_reprocessing_a_turn_keeps_its_decision_records_identical(res: Runtime) -> None:
    # Given the whole session processed once, and its recorded decisions
    turns = [append(res, n, msgs) for n, msgs in enumerate(EN_SESSION, start=1)]
    for turn in turns:
        process(res, turn)
    recorded = read_decisions(res, USER, "s_en")
    # When every turn is redelivered (including t4, which merged and updated items)
    for turn in turns:
        process(res, turn)
    # Then "why was this stored?" still has the original answers
    assert read_decisions(res, USER, "s_en") == recorded


def test_a_batch_of_turns_gives_the_same_result_as_one_turn_at_a_time(res: Runtime) -> None:
    # Given the same session recorded for two users
    one_by_one = [append(res, n, m, user="u_seq") for n, m in enumerate(EN_SESSION, start=1)]
    batched = [append(res, n, m, user="u_batch") for n, m in enumerate(EN_SESSION, start=1)]
    # When one user's turns are processed one by one and the other's in one batch
    seq = [process(res, turn) for turn in one_by_one]
    bat = res.pipeline.process(batched)

    # Then the verdicts and the stored items are the same
    def norm(outcomes: list[TurnOutcome], user: str) -> list[tuple[object, ...]]:
        return [
            (d.rule, d.verdict, d.score, d.breakdown, d.importance,
             d.reason.replace(mid(NO_RESTART_EN, user), "<id>"))
            for o in outcomes for d in o.decisions
        ]  # fmt: skip

    assert norm(bat, "u_batch") == norm(seq, "u_seq")

    def state(user: str) -> list[tuple[object, ...]]:
        return sorted(
            (i.canonical_fact_key, i.summary, i.version, i.mention_count, i.importance,
             i.source.message_ids, [h.summary for h in i.history])
            for i in items(res, user=user)
        )  # fmt: skip

    assert state("u_batch") == state("u_seq")


def test_a_turn_processed_late_does_not_overwrite_a_newer_version(res: Runtime) -> None:
    # Given the decision of turn 5 processed before the older decision of turn 2
    # (two drains raced on one shard)
    older = append(res, 2, EN_SESSION[1])
    newer = append(res, 5, EN_SESSION[4])
    process(res, newer)
    # When turn 2 is processed late
    late = process(res, older)
    # Then its decision is filed as history and the stored fact stays the newer one
    decision_id = mid("bug456:decision:thread_pool")
    assert ops(late) == [("stale", decision_id, 1)]
    assert [(d.rule, d.verdict.value, d.reason) for d in late.decisions] == [
        ("chit_chat", "refused", "chit-chat carries no task state"),
        ("decision", "written", "older than the stored version; kept as history"),
    ]
    (stored,) = items(res)
    assert stored.summary == "We decided to set the thread pool size to 500 on payment-service."
    assert [h.summary for h in stored.history] == [
        "We decided to increase the thread pool size to 400 on payment-service."
    ]
    # And a redelivery of the late turn changes nothing
    before = snapshot(res, with_decisions=False)
    assert ops(process(res, older)) == [("unchanged", decision_id, 1)]
    assert snapshot(res, with_decisions=False) == before


# ---------------------------------------------------------------- decision records


def test_read_decisions_explains_every_verdict_in_turn_order(res: Runtime) -> None:
    for n, msgs in enumerate(EN_SESSION[:2], start=1):
        process(res, append(res, n, msgs))
    decisions = read_decisions(res, USER, "s_en")
    assert [d.decision_id for d in decisions] == [
        "t1:000:user_symptom",
        "t1:001:user_preference",
        "t1:002:user_constraint",
        "t1:003:tool_observation",
        "t1:004:tool_observation",
        "t1:005:excluded_cause",
        "t1:006:hypothesis",
        "t1:007:next_step",
        "t2:000:chit_chat",
        "t2:001:decision",
    ]
    constraint = decisions[2]
    assert constraint.breakdown == {
        "is_verified": 3,
        "is_user_constraint": 3,
        "is_stable_for_current_task": 2,
        "novelty_high": 2,
        "confidence_high": 1,
    }
    assert constraint.score == sum(constraint.breakdown.values()) == 11
    assert constraint.threshold == 3
    assert constraint.profile.is_user_constraint
    assert constraint.profile.estimated_ttl_minutes == 7 * DAY // 60
    assert constraint.memory_id == mid(NO_RESTART_EN)
    assert constraint.message_ids == ["t1.0"]
    assert constraint.session_id == "s_en"
    assert constraint.at == T0 + 60
    assert set(constraint.importance_breakdown) == {"type_prior", "seed2", "entity_density"}
    guess = decisions[6]
    assert (guess.verdict, guess.memory_id, guess.summary) == (
        Verdict.REFUSED,
        None,
        "Maybe the thread pool is saturated",
    )
    assert guess.breakdown == {"novelty_high": 2, "transient": -2}
    # the record is kept for the configured time, then expires by itself
    key = res.stm.keys(USER).decisions("s_en")
    assert 0 < res.redis.ttl(key) <= res.settings.decision_ttl_s
    assert read_decisions(res, USER, "s_other") == []


# ---------------------------------------------------------------- policy and edge cases


def test_the_write_threshold_comes_from_the_policy(res: Runtime) -> None:
    strict = IngestPipeline(
        store=res.stm, extractor=RuleExtractor(), policy=WritePolicy(threshold=8)
    )
    (outcome,) = strict.process([append(res, 1, EN_SESSION[0])])
    assert [(d.rule, d.verdict.value, d.reason) for d in outcome.decisions] == [
        ("user_symptom", "written", "score 8 ≥ threshold 8"),
        ("user_preference", "written", "score 8 ≥ threshold 8"),
        ("user_constraint", "written", "score 11 ≥ threshold 8"),
        ("tool_observation", "written", "score 8 ≥ threshold 8"),
        ("tool_observation", "written", "score 8 ≥ threshold 8"),
        ("excluded_cause", "written", "score 8 ≥ threshold 8"),
        ("hypothesis", "refused", "unverified guess (seed 四.5)"),
        ("next_step", "refused", "score 7 below threshold 8"),
    ]
    assert {d.threshold for d in outcome.decisions} == {8}
    assert len(items(res)) == 6


def test_an_over_long_summary_is_clipped_to_the_store_limit_not_fatal_to_the_batch(
    res: Runtime,
) -> None:
    # Given a store configured for short summaries (MEMSTRATA_MAX_SUMMARY_CHARS=100)
    short = StmStore(res.redis, namespace=res.settings.key_namespace, max_summary_chars=100)
    pipeline = IngestPipeline(store=short, extractor=RuleExtractor(), policy=WritePolicy())
    decision = (
        "We decided to move createOrder onto the async order queue and to give "
        "payment-service its own connection pool with a bulkhead of forty connections."
    )
    assert len(decision) > 100
    # When a turn with that decision and a constraint is processed
    (outcome,) = pipeline.process(
        [append(res, 1, [(U, decision, {}), (U, "Don't restart the prod database.", {})])]
    )
    # Then both are stored; the long one clipped to the limit
    assert [op for op, _m, _v in ops(outcome)] == ["inserted", "inserted"]
    stored = {i.subtype: i.summary for i in short.recent(USER)}
    assert len(stored["current_decision"]) <= 100
    assert stored["current_decision"].startswith("We decided to move createOrder")
    assert stored["user_constraint"] == "Don't restart the prod database."


def test_a_long_tool_name_does_not_make_the_turn_fail(res: Runtime) -> None:
    tool = "mcp__observability__" + "query_" * 38  # tool names may be up to 256 chars
    line = "createOrder failed with HTTP 504 after " + "x" * 150 + " timeout"
    (outcome,) = res.pipeline.process(
        [append(res, 1, [(A, "checking", call("c1", tool)), (T, line, result("c1"))])]
    )
    assert [(d.rule, d.verdict.value) for d in outcome.decisions] == [
        ("tool_observation", "written")
    ]
    (stored,) = items(res)
    assert len(stored.summary) <= res.settings.max_summary_chars


def test_settings_threshold_reaches_the_pipeline(res: Runtime) -> None:
    assert res.pipeline.policy.threshold == res.settings.write_threshold == 3


def test_users_in_one_batch_stay_isolated(res: Runtime) -> None:
    a = append(res, 1, EN_SESSION[1], user="u_a")
    b = append(res, 1, EN_SESSION[1], user="u_b")
    out_a, out_b = res.pipeline.process([a, b])
    # the same text from another user is new to that user, not a duplicate
    assert verdicts(out_a) == verdicts(out_b)
    assert ops(out_a)[0][1] != ops(out_b)[0][1]
    assert [i.user_id for i in items(res, user="u_b")] == ["u_b"]


def test_a_turn_with_nothing_to_remember_writes_no_item(res: Runtime) -> None:
    outcome = process(
        res, append(res, 1, [(U, "Why is it slow?", {}), (A, "Let me look into it.", {})])
    )
    assert (outcome.decisions, outcome.upserts) == ([], [])
    assert snapshot(res) == {}
    assert res.pipeline.process([]) == []


def test_a_remeasured_value_replaces_the_old_measurement(res: Runtime) -> None:
    # Given the p99 latency measured once
    def measure(n: int, value: str) -> TurnOutcome:
        return process(
            res,
            append(
                res,
                n,
                [
                    (A, "measuring", call(f"c{n}", "query_metrics")),
                    (T, f"createOrder p99 latency {value}", result(f"c{n}")),
                ],
            ),
        )

    measure(1, "2300ms")
    # When it is measured again after the fix, with a different value
    second = measure(2, "900ms")
    # Then the stored observation says 900ms, as version 2 with 2300ms in its history
    key = "bug456:obs:query_metrics:createorder:47e140e7"
    assert ops(second) == [("updated", mid(key), 2)]
    (stored,) = items(res)
    assert stored.summary == "[query_metrics] createOrder p99 latency 900ms"
    assert [h.summary for h in stored.history] == ["[query_metrics] createOrder p99 latency 2300ms"]
