"""The write policy (seed 十三): write_profile, the seed's write_score, TTL and importance."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.core.models.candidate import Candidate, CandidateSignals, Verdict
from memstrata.core.models.identity import fingerprint
from memstrata.core.models.memory import MemorySource, MemoryType
from memstrata.core.policy.write import (
    Existing,
    TtlPolicy,
    WritePolicy,
    build_write_profile,
    importance,
    judge,
    novelty,
    ttl_seconds,
    write_score,
)

POLICY = WritePolicy()
HOUR = 3600
DAY = 24 * HOUR

# What the rule extractor emits for each kind of candidate (rule, type, subtype, confidence,
# signals): see core/extract/rules.py and tests/unit/test_extractor.py.
KINDS: dict[str, dict[str, Any]] = {
    "tool_observation": {
        "memory_type": MemoryType.OBSERVATION,
        "subtype": "tool_result",
        "confidence": 0.9,
        "signals": {"is_verified": True, "is_stable_for_current_task": True},
    },
    "raw_tool_output": {
        "memory_type": MemoryType.OBSERVATION,
        "subtype": "raw_output",
        "confidence": 0.5,
        "signals": {"is_verified": True, "raw_unstructured_blob": True, "transient": True},
    },
    "user_constraint": {
        "memory_type": MemoryType.CONSTRAINT,
        "subtype": "user_constraint",
        "confidence": 0.95,
        "signals": {
            "is_verified": True,
            "is_user_constraint": True,
            "is_stable_for_current_task": True,
        },
    },
    "user_preference": {
        "memory_type": MemoryType.PREFERENCE,
        "subtype": "user_preference",
        "confidence": 0.9,
        "signals": {"is_verified": True, "is_preference": True, "is_stable_for_current_task": True},
    },
    "explicit_remember": {
        "memory_type": MemoryType.FACT,
        "subtype": "user_stated",
        "confidence": 0.95,
        "signals": {
            "is_verified": True,
            "explicit_remember": True,
            "is_stable_for_current_task": True,
        },
    },
    "decision": {
        "memory_type": MemoryType.DECISION,
        "subtype": "current_decision",
        "confidence": 0.85,
        "signals": {"is_decision": True, "is_stable_for_current_task": True},
    },
    "next_step": {
        "memory_type": MemoryType.DECISION,
        "subtype": "next_step",
        "confidence": 0.8,
        "signals": {"is_decision": True, "is_stable_for_current_task": True},
    },
    "excluded_cause_verified": {
        "memory_type": MemoryType.FACT,
        "subtype": "excluded_cause",
        "confidence": 0.9,
        "signals": {"is_verified": True, "is_stable_for_current_task": True},
    },
    "excluded_cause_unverified": {
        "memory_type": MemoryType.FACT,
        "subtype": "excluded_cause",
        "confidence": 0.75,
        "signals": {"is_stable_for_current_task": True},
    },
    "conclusion_unverified": {
        "memory_type": MemoryType.FACT,
        "subtype": "conclusion",
        "confidence": 0.7,
        "signals": {"is_stable_for_current_task": True},
    },
    "hypothesis": {
        "memory_type": MemoryType.HYPOTHESIS,
        "subtype": "hypothesis",
        "confidence": 0.4,
        "signals": {"transient": True},
    },
    "chit_chat": {
        "memory_type": MemoryType.FACT,
        "subtype": "chit_chat",
        "confidence": 0.2,
        "signals": {"chit_chat": True, "transient": True},
    },
}


def make(
    kind: str,
    *,
    summary: str = "createOrder on payment-service times out in prod-k8s",
    entities: tuple[str, ...] = ("createOrder", "payment-service"),
    message_ids: tuple[str, ...] = ("t2.0",),
    **overrides: Any,
) -> Candidate:
    spec = KINDS[kind]
    data: dict[str, Any] = {
        "memory_type": spec["memory_type"],
        "subtype": spec["subtype"],
        "summary": summary,
        "entities": list(entities),
        "canonical_fact_key": f"bug456:{kind}:createorder",
        "source": MemorySource(message_ids=list(message_ids)),
        "confidence": spec["confidence"],
        "signals": CandidateSignals(**spec["signals"]),
        "rule": kind.removesuffix("_verified").removesuffix("_unverified"),
    }
    data.update(overrides)
    return Candidate(**data)


def decide(cand: Candidate, existing: Existing | None = None, policy: WritePolicy = POLICY):  # type: ignore[no-untyped-def]
    fp = fingerprint("u_42", "bug456", cand.subtype, cand.summary)
    return judge(cand, existing=existing, fp=fp, policy=policy)


# ---------------------------------------------------------------- the seed's formula


@pytest.mark.parametrize(
    ("kind", "breakdown", "verdict", "reason"),
    [
        (
            "tool_observation",
            {"is_verified": 3, "is_stable_for_current_task": 2, "novelty_high": 2,
             "confidence_high": 1},
            Verdict.WRITTEN, "score 8 ≥ threshold 3",
        ),
        (
            "user_constraint",
            {"is_verified": 3, "is_user_constraint": 3, "is_stable_for_current_task": 2,
             "novelty_high": 2, "confidence_high": 1},
            Verdict.WRITTEN, "score 11 ≥ threshold 3",
        ),
        (
            "user_preference",
            {"is_verified": 3, "is_stable_for_current_task": 2, "novelty_high": 2,
             "confidence_high": 1},
            Verdict.WRITTEN, "score 8 ≥ threshold 3",
        ),
        (
            "explicit_remember",
            {"is_verified": 3, "is_stable_for_current_task": 2, "novelty_high": 2,
             "confidence_high": 1},
            Verdict.WRITTEN, "score 8 ≥ threshold 3",
        ),
        (
            "decision",
            {"is_decision": 2, "is_stable_for_current_task": 2, "novelty_high": 2,
             "confidence_high": 1},
            Verdict.WRITTEN, "score 7 ≥ threshold 3",
        ),
        (
            "next_step",
            {"is_decision": 2, "is_stable_for_current_task": 2, "novelty_high": 2,
             "confidence_high": 1},
            Verdict.WRITTEN, "score 7 ≥ threshold 3",
        ),
        (
            "excluded_cause_verified",
            {"is_verified": 3, "is_stable_for_current_task": 2, "novelty_high": 2,
             "confidence_high": 1},
            Verdict.WRITTEN, "score 8 ≥ threshold 3",
        ),
        (
            "excluded_cause_unverified",
            {"is_stable_for_current_task": 2, "novelty_high": 2},
            Verdict.WRITTEN, "score 4 ≥ threshold 3",
        ),
        (
            "conclusion_unverified",
            {"is_stable_for_current_task": 2, "novelty_high": 2},
            Verdict.WRITTEN, "score 4 ≥ threshold 3",
        ),
        (
            "hypothesis",
            {"novelty_high": 2, "transient": -2},
            Verdict.REFUSED, "unverified guess (seed 四.5)",
        ),
        (
            "chit_chat",
            {"novelty_high": 2, "transient": -2},
            Verdict.REFUSED, "chit-chat carries no task state",
        ),
        (
            "raw_tool_output",
            {"is_verified": 3, "novelty_high": 2, "transient": -2, "raw_unstructured_blob": -2},
            Verdict.REFUSED, "raw unstructured text (seed 四.5: no raw logs or transcripts in STM)",
        ),
    ],
)  # fmt: skip
def test_new_candidate_of_each_kind_scores_the_seed_formula(
    kind: str, breakdown: dict[str, float], verdict: Verdict, reason: str
) -> None:
    # Given a new candidate of one kind, nothing in STM yet
    # When it is judged with the default policy (threshold 3)
    j = decide(make(kind))
    # Then its score is the seed's weighted sum, term by term, and the verdict follows
    assert j.breakdown == breakdown
    assert j.score == sum(breakdown.values())
    assert (j.verdict, j.reason) == (verdict, reason)


def test_the_default_weights_are_the_seed_formula_verbatim() -> None:
    w = POLICY.weights
    assert (w.is_verified, w.is_user_constraint, w.is_decision) == (3, 3, 2)
    assert (w.is_stable_for_current_task, w.novelty_high, w.confidence_high) == (2, 2, 1)
    assert (w.duplicate, w.transient, w.raw_unstructured_blob) == (-3, -2, -2)
    assert POLICY.threshold == 3


def test_every_true_signal_gives_the_formulas_maximum_and_minimum() -> None:
    everything = build_write_profile(
        make(
            "tool_observation",
            signals=CandidateSignals(
                is_verified=True,
                is_user_constraint=True,
                is_decision=True,
                is_stable_for_current_task=True,
                transient=True,
                raw_unstructured_blob=True,
            ),
        ),
        novelty_value=0.0,
        ttl_s=HOUR,
        policy=POLICY,
    )
    score, breakdown = write_score(everything, POLICY)
    # 3+3+2+2+0(novelty 0)+1 - 3(duplicate) - 2 - 2
    assert score == 4
    assert breakdown["duplicate"] == -3
    assert "novelty_high" not in breakdown


def test_write_profile_has_every_seed_field() -> None:
    profile = decide(make("decision")).profile
    assert set(profile.model_dump()) == {
        "is_verified",
        "is_stable_for_current_task",
        "is_user_constraint",
        "is_decision",
        "is_preference",
        "novelty",
        "confidence",
        "estimated_ttl_minutes",
        "duplicate",
        "transient",
        "raw_unstructured_blob",
    }
    assert profile.estimated_ttl_minutes == DAY // 60
    assert profile.confidence == 0.85


def test_off_task_and_chit_chat_count_as_transient() -> None:
    cand = make("decision", signals=CandidateSignals(is_decision=True, off_task=True))
    j = decide(cand)
    assert j.profile.transient is True
    assert j.breakdown == {
        "is_decision": 2,
        "novelty_high": 2,
        "confidence_high": 1,
        "transient": -2,
    }
    assert j.verdict is Verdict.WRITTEN  # 3 ≥ 3: the threshold is inclusive


def test_transient_candidate_below_threshold_is_refused_as_transient() -> None:
    cand = make("decision", signals=CandidateSignals(off_task=True), confidence=0.5)
    j = decide(cand)
    assert j.score == 0
    assert (j.verdict, j.reason) == (Verdict.REFUSED, "transient, short-lived information")


# ---------------------------------------------------------------- dedup: novelty and duplicates


def test_novelty_is_one_for_new_point_eight_for_changed_zero_for_restated() -> None:
    existing = Existing("m_1", "fp_a", ("t1.0",))
    assert novelty("fp_a", None, ["t2.0"]) == 1.0
    assert novelty("fp_b", existing, ["t2.0"]) == 0.8
    assert novelty("fp_a", existing, ["t2.0"]) == 0.0
    # a redelivery of the very turn that created the item is not a duplicate of itself
    assert novelty("fp_a", existing, ["t1.0"]) == 1.0


def test_restated_decision_is_refused_as_a_duplicate() -> None:
    # Given STM already holds the same decision, said in an earlier turn
    cand = make("decision")
    fp = fingerprint("u_42", "bug456", cand.subtype, cand.summary)
    existing = Existing("m_1", fp, ("t1.3",), mention_count=1)
    # When the same decision is restated in a later message
    j = decide(cand, existing)
    # Then the duplicate penalty drops it under the threshold
    assert j.breakdown == {
        "is_decision": 2,
        "is_stable_for_current_task": 2,
        "confidence_high": 1,
        "duplicate": -3,
    }
    assert (j.score, j.verdict) == (2, Verdict.REFUSED)
    assert j.reason == "duplicate of a fact already in STM"
    assert j.profile.duplicate is True


def test_restated_verified_observation_still_scores_three_and_is_merged() -> None:
    cand = make("tool_observation")
    fp = fingerprint("u_42", "bug456", cand.subtype, cand.summary)
    j = decide(cand, Existing("m_obs", fp, ("t1.2",), mention_count=2))
    assert j.score == 3
    assert (j.verdict, j.reason) == (Verdict.WRITTEN, "restated fact merged into m_obs")


def test_changed_fact_under_the_same_key_is_a_new_version() -> None:
    cand = make("excluded_cause_verified")
    j = decide(cand, Existing("m_1", "another-fingerprint", ("t1.3",)))
    assert j.profile.novelty == 0.8
    assert j.breakdown["novelty_high"] == 2
    assert (j.verdict, j.reason) == (Verdict.WRITTEN, "changed fact: new version")


def test_fingerprint_ignores_case_whitespace_and_final_punctuation() -> None:
    a = fingerprint("u_42", "bug456", "decision", "Roll back  payment-service.")
    assert a == fingerprint("u_42", "bug456", "decision", "roll back payment-service")
    assert len(a) == 24
    assert a != fingerprint("u_43", "bug456", "decision", "roll back payment-service")
    assert a != fingerprint("u_42", "bug457", "decision", "roll back payment-service")
    assert a != fingerprint("u_42", "bug456", "next_step", "roll back payment-service")


def test_fingerprint_changes_when_a_number_in_the_fact_changes() -> None:
    # A new measurement or a new setting is new information, not a restatement:
    # "pool size 200" → "pool size 400" must not be deduplicated away.
    before = fingerprint("u_42", "bug456", "current_decision", "Set the thread pool size to 200")
    after = fingerprint("u_42", "bug456", "current_decision", "Set the thread pool size to 400")
    assert before != after
    p99_old = fingerprint("u_42", "bug456", "tool_result", "[m] createOrder p99 latency 2300ms")
    p99_new = fingerprint("u_42", "bug456", "tool_result", "[m] createOrder p99 latency 900ms")
    assert p99_old != p99_new


# ---------------------------------------------------------------- threshold


def test_threshold_is_configurable() -> None:
    strict = WritePolicy(threshold=5)
    j = decide(make("excluded_cause_unverified"), policy=strict)
    assert (j.verdict, j.reason) == (Verdict.REFUSED, "score 4 below threshold 5")
    assert decide(make("decision"), policy=strict).verdict is Verdict.WRITTEN
    lenient = WritePolicy(threshold=0)
    assert decide(make("hypothesis"), policy=lenient).verdict is Verdict.WRITTEN
    assert decide(make("raw_tool_output"), policy=lenient).verdict is Verdict.WRITTEN


def test_score_equal_to_threshold_is_written_and_just_below_is_refused() -> None:
    j = decide(make("excluded_cause_unverified"), policy=WritePolicy(threshold=4))
    assert j.verdict is Verdict.WRITTEN
    j = decide(make("excluded_cause_unverified"), policy=WritePolicy(threshold=4.5))
    assert (j.verdict, j.reason) == (Verdict.REFUSED, "score 4 below threshold 4.5")


def test_confidence_and_novelty_cut_offs_are_configurable() -> None:
    picky = WritePolicy(high_confidence=0.95, high_novelty=0.9)
    j = decide(make("decision"), Existing("m_1", "other", ("t1.0",)), policy=picky)
    assert "confidence_high" not in j.breakdown  # 0.85 < 0.95
    assert "novelty_high" not in j.breakdown  # 0.8 < 0.9
    assert j.score == 4


# ---------------------------------------------------------------- TTL


@pytest.mark.parametrize(
    ("kind", "ttl"),
    [
        ("tool_observation", 6 * HOUR),
        ("raw_tool_output", 6 * HOUR),
        ("user_constraint", 7 * DAY),
        ("user_preference", 30 * DAY),
        ("decision", DAY),
        ("next_step", DAY),
        ("excluded_cause_verified", DAY),
        ("hypothesis", 2 * HOUR),
        ("explicit_remember", 30 * DAY),  # a fact the user asked to keep lives as long as a pref
    ],
)
def test_ttl_follows_the_memory_type(kind: str, ttl: int) -> None:
    cand = make(kind)
    assert ttl_seconds(cand, POLICY) == ttl
    assert decide(cand).ttl_s == ttl
    assert decide(cand).profile.estimated_ttl_minutes == ttl // 60


def test_ttl_policy_is_configurable_per_type() -> None:
    policy = WritePolicy(ttl=TtlPolicy(decision_s=600, observation_s=120, preference_s=90 * DAY))
    assert ttl_seconds(make("decision"), policy) == 600
    assert ttl_seconds(make("tool_observation"), policy) == 120
    assert ttl_seconds(make("explicit_remember"), policy) == 90 * DAY
    # an explicitly remembered fact never lives shorter than its own type's TTL
    short_prefs = WritePolicy(ttl=TtlPolicy(preference_s=900))
    assert ttl_seconds(make("explicit_remember"), short_prefs) == DAY
    assert decide(make("decision"), policy=policy).profile.estimated_ttl_minutes == 10


def test_ttl_policy_rejects_lifetimes_under_a_minute() -> None:
    with pytest.raises(ValueError, match="fact_s"):
        TtlPolicy(fact_s=59)


# ---------------------------------------------------------------- importance


def test_importance_blends_type_prior_seed2_and_entity_density() -> None:
    # Given a decision of 40 characters (10 tokens) naming two entities, first mention
    cand = make("decision", summary="x" * 40, entities=("createOrder", "payment-service"))
    value, parts = importance(cand)
    # Then: 0.5 * prior 0.7 + 0.3 * seed2 + 0.2 * min(2/4, 1)
    # seed2 = min(1/10, 1) * 0.4 + 0.3 (no explicit feedback) * 0.3 + min(10/500, 1) * 0.3
    seed2 = 0.1 * 0.4 + 0.3 * 0.3 + 0.02 * 0.3
    assert parts == {
        "type_prior": 0.35,
        "seed2": round(0.3 * seed2, 4),
        "entity_density": 0.1,
    }
    assert value == round(0.35 + 0.3 * seed2 + 0.1, 4)


@pytest.mark.parametrize(
    ("kind", "prior"),
    [
        ("user_constraint", 0.8),
        ("user_preference", 0.7),
        ("decision", 0.7),
        ("conclusion_unverified", 0.6),
        ("excluded_cause_verified", 0.7),  # excluded causes are worth more than plain facts
        ("tool_observation", 0.5),
        ("hypothesis", 0.3),
    ],
)
def test_type_prior_ranks_constraints_first_and_guesses_last(kind: str, prior: float) -> None:
    _value, parts = importance(make(kind))
    assert parts["type_prior"] == round(0.5 * prior, 4)


def test_seed2_weighting_grows_with_mentions_and_is_capped() -> None:
    cand = make("decision")
    values = [importance(cand, mentions=m)[1]["seed2"] for m in (1, 2, 5, 10, 50)]
    assert values == sorted(values)
    assert values[-2] == values[-1]  # mentions/10 is capped at 1
    assert max(values) <= 0.3  # seed 2's formula is one input, weighted 0.3


def test_seed2_density_term_is_capped_so_long_text_does_not_dominate() -> None:
    short = importance(make("decision", summary="roll back payment-service"))[0]
    huge = importance(make("decision", summary="word " * 2000))[0]
    assert huge - short <= 0.3 * 0.3 + 1e-9


def test_explicit_remember_lifts_importance_to_at_least_point_nine() -> None:
    value, parts = importance(make("explicit_remember", entities=()))
    assert value == 0.9
    assert sum(parts.values()) < 0.9


def test_judge_counts_the_existing_mentions_when_restated() -> None:
    cand = make("tool_observation")
    fp = fingerprint("u_42", "bug456", cand.subtype, cand.summary)
    first = decide(cand).importance
    again = decide(cand, Existing("m_1", fp, ("t1.0",), mention_count=4)).importance
    assert again == importance(cand, mentions=5)[0]
    assert again > first


# ---------------------------------------------------------------- properties

signals_st = st.builds(
    CandidateSignals,
    is_verified=st.booleans(),
    is_user_constraint=st.booleans(),
    is_decision=st.booleans(),
    is_preference=st.booleans(),
    is_stable_for_current_task=st.booleans(),
    explicit_remember=st.booleans(),
    transient=st.booleans(),
    raw_unstructured_blob=st.booleans(),
    chit_chat=st.booleans(),
    off_task=st.booleans(),
)
existing_st = st.one_of(
    st.none(),
    st.builds(
        Existing,
        memory_id=st.just("m_1"),
        fingerprint=st.sampled_from(["same", "other"]),
        message_ids=st.sampled_from([("t1.0",), ("t2.0",)]),
        mention_count=st.integers(1, 100),
    ),
)


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    return Candidate(
        memory_type=draw(st.sampled_from(list(MemoryType))),
        subtype=draw(st.sampled_from(["general", "excluded_cause", "next_step"])),
        summary=draw(st.text(min_size=1, max_size=3000)),
        entities=draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), max_size=8)),
        canonical_fact_key="k",
        source=MemorySource(message_ids=["t1.0"]),
        confidence=draw(st.floats(0, 1)),
        signals=draw(signals_st),
        rule="r",
    )


@settings(max_examples=150, deadline=None, database=None)
@given(
    cand=candidates(),
    existing=existing_st,
    threshold=st.floats(-10, 15, allow_nan=False),
)
def test_score_is_the_sum_of_its_breakdown_and_the_threshold_decides(
    cand: Candidate, existing: Existing | None, threshold: float
) -> None:
    policy = WritePolicy(threshold=threshold)
    j = judge(cand, existing=existing, fp="same", policy=policy)
    assert j.score == sum(j.breakdown.values())
    assert -7 <= j.score <= 13
    assert all(v != 0 for v in j.breakdown.values())
    assert (j.verdict is Verdict.WRITTEN) == (j.score >= threshold)
    assert j.reason


@settings(max_examples=150, deadline=None, database=None)
@given(cand=candidates(), mentions=st.integers(1, 10_000))
def test_importance_stays_within_zero_and_one(cand: Candidate, mentions: int) -> None:
    value, parts = importance(cand, mentions=mentions)
    assert 0.0 <= value <= 1.0
    assert set(parts) == {"type_prior", "seed2", "entity_density"}
    assert all(0.0 <= p <= 0.5 for p in parts.values())
    if not cand.signals.explicit_remember:
        assert value == pytest.approx(sum(parts.values()), abs=2e-4)
    else:
        assert value >= 0.9
