"""Compact decision records (issue 17): what is stored is small, and ``read_decisions``
gives back, from L0, exactly the decisions the pipeline computed.

Real Redis, a real transcript folder (the runtime's), the scripted sessions of
``test_ingest_pipeline``.
"""

from __future__ import annotations

import json
from typing import cast

import pytest

from memstrata.core.ingest.pipeline import (
    UNRECOVERABLE,
    TurnOutcome,
    read_decision_records,
    read_decisions,
)
from memstrata.core.models.candidate import Verdict, WriteDecision
from memstrata.core.models.decision_record import BUDGET_RULE, REASONS, DecisionRecord
from memstrata.core.models.transcript import MessageIn
from memstrata.core.runtime import Runtime
from tests.integration.test_ingest_pipeline import EN_SESSION, USER, ZH_SESSION, append, process

pytestmark = pytest.mark.integration


def raw_records(res: Runtime, session: str, user: str = USER) -> dict[str, str]:
    return cast(dict[str, str], res.redis.hgetall(res.stm.keys(user).decisions(session)))


def computed(outcomes: list[TurnOutcome]) -> list[WriteDecision]:
    """What the pipeline decided, in the order ``read_decisions`` promises."""
    out = [d for o in outcomes for d in (*o.decisions, *o.summaries)]
    return sorted(out, key=lambda d: (d.at, d.decision_id))


def test_expanding_the_compact_records_from_l0_gives_the_decisions_the_pipeline_computed(
    res: Runtime,
) -> None:
    # Given both scripted sessions processed turn by turn (written, refused, merged,
    # changed, restated in one message, chit-chat, raw dumps, reasoning blocks)
    outcomes = {
        session: [
            process(res, append(res, n, msgs, session=session))
            for n, msgs in enumerate(script, start=1)
        ]
        for session, script in (("s_en", EN_SESSION), ("s_zh", ZH_SESSION))
    }
    for session, outs in outcomes.items():
        decisions = computed(outs)
        assert {d.verdict for d in decisions} == {Verdict.WRITTEN, Verdict.REFUSED}
        assert {d.profile.novelty for d in decisions} >= {1.0, 0.0}  # new and restated facts
        # When they are read back
        # Then every field is the one computed: breakdowns, profile, importance, summary
        assert read_decisions(res, USER, session) == decisions
        # ... and the compact records alone carry what stage-loss accounting reads
        records = read_decision_records(res.stm, USER, session)
        assert [(r.decision_id, r.verdict, r.rule, r.reason, r.memory_id, list(r.message_ids),
                 r.score, r.threshold, r.memory_type)
                for r in records] == [
            (d.decision_id, d.verdict, d.rule, d.reason, d.memory_id, d.message_ids, d.score,
             d.threshold, d.memory_type)
            for d in decisions
        ]  # fmt: skip


def test_a_compact_record_round_trips_and_holds_no_detail_l0_can_give_again(
    res: Runtime,
) -> None:
    for n, msgs in enumerate(EN_SESSION, start=1):
        process(res, append(res, n, msgs))
    raw = raw_records(res, "s_en")
    assert raw
    full = {d.decision_id: d for d in read_decisions(res, USER, "s_en")}
    for field, value in raw.items():
        record = DecisionRecord.decode(field, value, session_id="s_en")
        assert record.encode() == value
        row = json.loads(value)
        assert row[0] == 1 and isinstance(row, list)
        # the summary, canonical key and breakdowns are not stored: L0 tells them again
        d = full[field]
        assert d.summary not in value and d.canonical_fact_key not in value
        # about an eighth of the full JSON
        assert len(value.encode()) * 4 < len(d.model_dump_json().encode())
    # every fixed reason of this session is stored as its index, not its text
    assert not any(r in v for v in raw.values() for r in REASONS)


def test_records_in_the_previous_json_format_are_still_read(res: Runtime) -> None:
    # Given a session whose first turn was recorded before the compact format
    old = process(res, append(res, 1, EN_SESSION[0]))
    key = res.stm.keys(USER).decisions("s_en")
    res.redis.delete(key)
    for d in old.decisions:  # as the old record_decisions wrote them
        res.redis.hsetnx(key, d.decision_id, d.model_dump_json())
    # ... and its second turn after
    new = process(res, append(res, 2, EN_SESSION[1]))
    assert {v[0] for v in raw_records(res, "s_en").values()} == {"{", "["}
    # When it is read back, both formats give the full decisions, in turn order
    assert read_decisions(res, USER, "s_en") == computed([old, new])


def test_a_record_of_an_unknown_format_is_skipped_and_the_others_still_read(
    res: Runtime,
) -> None:
    # Given a session with one record a newer writer stored in a format not known here
    out = process(res, append(res, 1, EN_SESSION[0]))
    key = res.stm.keys(USER).decisions("s_en")
    res.redis.hset(key, "t-future:0:conversation_fact", '[99, "from a later version"]')
    # When it is read back, the known records come back whole and the unknown one is left out
    assert read_decisions(res, USER, "s_en") == computed([out])
    assert len(res.stm.decisions(USER, "s_en")) == len(out.decisions)


def test_an_old_record_names_its_rule_from_its_own_fields_not_the_id_layout(
    res: Runtime,
) -> None:
    d = process(res, append(res, 1, EN_SESSION[0])).decisions[0]
    legacy = d.model_copy(update={"decision_id": "legacy-id"})  # no turn:ordinal:rule layout
    rec = DecisionRecord.decode("legacy-id", legacy.model_dump_json(), session_id="s_en")
    assert (rec.rule, rec.is_budget) == (d.rule, d.rule == BUDGET_RULE)


def test_a_record_whose_turn_is_gone_from_l0_keeps_its_verdict_and_says_so(
    res: Runtime,
) -> None:
    (outcome,) = [process(res, append(res, 1, EN_SESSION[0], session="s_gone"))]
    res.transcript.path(user_id=USER, session_id="s_gone").unlink()
    back = read_decisions(res, USER, "s_gone")
    assert [(d.decision_id, d.verdict, d.reason, d.score, d.memory_id) for d in back] == [
        (d.decision_id, d.verdict, d.reason, d.score, d.memory_id) for d in outcome.decisions
    ]
    assert {d.summary for d in back} == {UNRECOVERABLE}


def test_a_budget_summary_is_read_back_whole_without_l0(res: Runtime) -> None:
    guesses = " ".join(f"Maybe service-{chr(97 + i % 26)}{i} is slow." for i in range(40))
    appended = res.transcript.append_turn(
        user_id=USER, session_id="s_b", task_id="INC-1",
        messages=[MessageIn(role="user", content=guesses)],
    )  # fmt: skip
    (outcome,) = res.pipeline.process([(appended.pointer, list(appended.records))])
    (summary,) = outcome.summaries
    assert summary.rule == BUDGET_RULE and summary.omitted
    res.transcript.path(user_id=USER, session_id="s_b").unlink()
    back = [d for d in read_decisions(res, USER, "s_b") if d.rule == BUDGET_RULE]
    assert back == [summary]
