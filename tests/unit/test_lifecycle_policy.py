"""The promotion policy (seed 1 十四 + seed 2 三): a pure function of (item, hits, policy, now)."""

from __future__ import annotations

import pytest

from memstrata.core.errors import IllegalTransition
from memstrata.core.lifecycle.policy import (
    ItemView,
    PromotionPolicy,
    Route,
    decide,
    pg_key,
    topic_of,
)
from memstrata.core.lifecycle.states import Event, Record, State, current, next_state

NOW = 1_800_000_000.0
POLICY = PromotionPolicy()


def view(summary: str, key: str, *, mtype: str = "fact", subtype: str = "general",
         importance: float = 0.5, sessions: tuple[str, ...] = ("s1",), mentions: int = 1,
         age_s: float = 60.0, topic: str | None = None,
         value: object = None) -> ItemView:  # fmt: skip
    return ItemView(
        memory_id="m1", user_id="u1", tenant_id=None, session_id=sessions[-1],
        memory_type=mtype, subtype=subtype, summary=summary, canonical_fact_key=key,
        fingerprint="f" * 16, importance=importance, created_at=NOW - age_s,
        updated_at=NOW, mention_count=mentions, seen_sessions=sessions, topic=topic,
        value=value,
    )  # fmt: skip


@pytest.mark.parametrize(
    "summary", ["I prefer the conclusion first, then the details.", "我喜欢先说结论再讲细节。"]
)
def test_a_preference_seen_in_two_sessions_goes_to_postgres(summary: str) -> None:
    # Given a preference the user stated in two sessions
    item = view(summary, "user:pref:answer_style", mtype="preference",
                subtype="user_preference", importance=0.4, sessions=("s1", "s2"))  # fmt: skip
    # When the policy decides
    d = decide(item, hits=0, policy=POLICY, now=NOW)
    # Then it is a stable profile fact for PostgreSQL, whatever its importance
    assert d.route is Route.PATH_A
    assert d.authority_key == "profile.answer_style"
    assert "cross_session" in d.triggers


def test_a_preference_said_once_waits_for_evidence() -> None:
    item = view("I prefer tabs", "user:pref:code_style", mtype="preference", importance=0.4)
    d = decide(item, hits=0, policy=POLICY, now=NOW)
    assert d.route is Route.STAY and d.authority_key == "preference.code_style"


@pytest.mark.parametrize(
    "summary", ["This project's default env is prod-cn.", "这个项目默认环境是 prod-cn。"]
)
def test_an_explicit_project_default_goes_to_postgres(summary: str) -> None:
    item = view(summary, "project:shop:config:default_env", importance=0.9, value="prod-cn")
    d = decide(item, hits=0, policy=POLICY, now=NOW)
    assert d.route is Route.PATH_A
    assert d.authority_key == "project_metadata.shop.default_env"
    assert d.triggers == ("explicit",)


@pytest.mark.parametrize(
    "summary",
    [
        "Timeouts of this kind are usually caused by the thread pool.",
        "这类 timeout 问题常见根因是线程池。",
    ],
)
def test_general_experience_becomes_a_card(summary: str) -> None:
    # important, general wording, seen in two sessions: seed 2's gate and seed 1's both pass
    item = view(summary, "s2:conclusion:thread_pool", subtype="conclusion", importance=0.75,
                sessions=("s1", "s2"))  # fmt: skip
    assert decide(item, hits=0, policy=POLICY, now=NOW).route is Route.PATH_B
    # at 0.3..0.7 it waits in the batch queue for same-topic company instead
    mid = view(summary, "s2:conclusion:thread_pool", subtype="conclusion", importance=0.4)
    d = decide(mid, hits=0, policy=POLICY, now=NOW)
    assert d.route is Route.BATCH and d.topic


@pytest.mark.parametrize(
    ("summary", "subtype"),
    [
        ("Next, look at the thread pool for bug456.", "next_step"),
        ("bug456 下一步先看线程池。", "next_step"),
        ("The log output from just now.", "general"),
        ("刚才那次日志输出。", "general"),
        ("The thread pool for bug456 usually times out.", "conclusion"),
    ],
)
def test_task_local_items_never_leave_stm(summary: str, subtype: str) -> None:
    # even important, repeated, cross-session: task-local wording or kind is a veto
    item = view(summary, "s1:x", subtype=subtype, importance=0.95, sessions=("s1", "s2"),
                mentions=9, age_s=30 * 86400)  # fmt: skip
    d = decide(item, hits=10, policy=POLICY, now=NOW)
    assert d.route is Route.NEVER, d


def test_importance_below_the_batch_gate_stays_until_its_ttl() -> None:
    item = view("Deploys usually fail on Fridays", "s1:conclusion:deploy", importance=0.2)
    assert decide(item, hits=0, policy=POLICY, now=NOW).route is Route.STAY


def test_important_general_item_without_a_trigger_goes_to_the_batch_queue() -> None:
    item = view("Deploys usually fail on Fridays", "s1:conclusion:deploy", importance=0.8)
    assert decide(item, hits=0, policy=POLICY, now=NOW).route is Route.BATCH
    # repeated recall hits are a seed 1 trigger
    assert decide(item, hits=3, policy=POLICY, now=NOW).route is Route.PATH_B


def test_survival_past_the_threshold_is_a_trigger_and_time_is_injected() -> None:
    item = view("I prefer short answers", "user:pref:verbosity", importance=0.4, age_s=60)
    assert decide(item, hits=0, policy=POLICY, now=NOW).route is Route.STAY
    later = NOW + POLICY.min_age_s
    assert decide(item, hits=0, policy=POLICY, now=later).route is Route.PATH_A


def test_permissions_are_never_promoted_from_conversation() -> None:
    item = view("I only have read access", "s1:constraint:permission", importance=0.95)
    assert decide(item, hits=0, policy=POLICY, now=NOW).route is Route.NEVER


def test_thresholds_are_configurable() -> None:
    strict = PromotionPolicy(promote_now=0.9, min_hits=100)
    item = view("Deploys usually fail on Fridays", "s1:conclusion:deploy", importance=0.8)
    assert decide(item, hits=3, policy=strict, now=NOW).route is Route.BATCH


def test_breakdown_explains_the_decision() -> None:
    item = view("I prefer tabs", "user:pref:code_style", importance=0.4, sessions=("a", "b"))
    d = decide(item, hits=2, policy=POLICY, now=NOW)
    assert d.breakdown["sessions"] == 2.0 and d.breakdown["hits"] == 2.0
    assert d.score == round(sum(d.breakdown.values()), 4)


def test_keys_map_onto_the_authority_key_space() -> None:
    assert pg_key(view("x", "user:pref:language")) == "profile.language"
    assert pg_key(view("x", "s1:constraint:no_deploy:prod")) == "constraint.no_deploy.prod"
    assert pg_key(view("x", "user:config:default_env")) == "config.default_env"
    assert pg_key(view("x", "s1:conclusion:thread_pool")) is None
    assert pg_key(view("x", "user:pref:bad key!")) is None
    assert topic_of(view("x", "s1:conclusion:Thread Pool")) == "thread_pool"


def test_lifecycle_state_machine_rejects_illegal_moves() -> None:
    assert next_state(State.NEW, Event.ENQUEUE) is State.QUEUED
    assert next_state(State.QUEUED, Event.MERGE) is State.MERGED
    assert next_state(State.PROMOTED_CARD, Event.RETRACT) is State.RETRACTED
    with pytest.raises(IllegalTransition):
        next_state(State.DROPPED, Event.PROMOTE_PG)
    with pytest.raises(IllegalTransition):
        next_state(State.RETRACTED, Event.PROMOTE_CARD)
    rec = Record(State.RETRACTED, "fp1", "ltm_x", NOW)
    assert Record.loads(rec.dumps()) == rec
    assert current(rec, "fp1") is State.RETRACTED
    assert current(rec, "fp2") is State.NEW  # the fact changed: decided afresh


@pytest.mark.parametrize(
    "summary",
    ["Caroline: I went to a support group yesterday, it was powerful.", "我昨天去了一个互助小组。"],
)
def test_an_episodic_statement_waits_for_its_session_end_whatever_its_wording(
    summary: str,
) -> None:
    # "yesterday" / repeated / important: an episode is neither PG material nor a batch topic
    item = view(summary, "user:conv:abc", subtype="conversation_fact", importance=0.9,
                sessions=("s1", "s2"), mentions=5)  # fmt: skip
    d = decide(item, hits=5, policy=POLICY, now=NOW)
    assert d.route is Route.EPISODE, d
    off = PromotionPolicy(episode_subtypes=frozenset())
    assert decide(item, hits=5, policy=off, now=NOW).route is not Route.EPISODE
