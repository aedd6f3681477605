"""Seed 2's batch rule and the forgetting policy: pure plans from (inputs, policy, now)."""

from __future__ import annotations

from memstrata.core.lifecycle.batch import BatchEntry, BatchPolicy, plan_batch
from memstrata.core.lifecycle.config import ForgetPolicy
from memstrata.core.lifecycle.forgetting import CardFacts, select_for_forgetting

NOW = 1_800_000_000.0


def entry(mid: str, topic: str, importance: float = 0.5, user: str = "u1") -> BatchEntry:
    return BatchEntry(user_id=user, memory_id=mid, session_id="s1", topic=topic,
                      importance=importance, summary=f"note {mid}", enqueued_at=NOW)  # fmt: skip


def test_three_on_one_topic_merge_and_the_isolated_decay() -> None:
    entries = [entry("a", "pool"), entry("b", "pool"), entry("c", "pool"), entry("d", "dns")]
    plan = plan_batch(entries, policy=BatchPolicy(), now=NOW)
    assert [len(m.entries) for m in plan.merges] == [3]
    assert plan.merges[0].importance == 0.6
    assert [(e.memory_id, left) for e, left in plan.decays] == [("d", 0.4)]
    assert plan.drops == ()


def test_topics_of_different_users_never_merge() -> None:
    entries = [entry("a", "pool"), entry("b", "pool"), entry("c", "pool", user="u2")]
    plan = plan_batch(entries, policy=BatchPolicy(), now=NOW)
    assert plan.merges == () and len(plan.decays) == 3


def test_decay_reaches_zero_and_drops_without_float_residue() -> None:
    e = entry("a", "pool", importance=0.3)
    for expected in (0.2, 0.1):
        plan = plan_batch([e], policy=BatchPolicy(), now=NOW)
        ((_, left),) = plan.decays
        assert left == expected
        e = e.model_copy(update={"importance": left})
    plan = plan_batch([e], policy=BatchPolicy(), now=NOW)
    assert plan.drops == (e,) and plan.decays == ()


def test_the_same_memory_queued_twice_counts_once() -> None:
    entries = [entry("a", "pool"), entry("a", "pool"), entry("b", "pool")]
    assert plan_batch(entries, policy=BatchPolicy(), now=NOW).merges == ()


def test_young_entries_wait_when_a_minimum_wait_is_set() -> None:
    plan = plan_batch([entry("a", "pool")], policy=BatchPolicy(min_wait_s=600), now=NOW + 60)
    assert plan.waiting and not plan.decays


def test_large_groups_are_split_into_bounded_merges() -> None:
    entries = [entry(f"m{i:03d}", "pool") for i in range(7)]
    plan = plan_batch(entries, policy=BatchPolicy(max_merge=3), now=NOW)
    assert [len(m.entries) for m in plan.merges] == [3, 4]


def test_forgetting_selects_only_long_inactive_unimportant_unread_cards() -> None:
    old = NOW - 200 * 86400
    cards = [
        CardFacts("c_old", "default", "u1", "experience", 0.2, 0, old),
        CardFacts("c_read", "default", "u1", "experience", 0.2, 5, old),
        CardFacts("c_vital", "default", "u1", "experience", 0.9, 0, old),
        CardFacts("c_new", "default", "u1", "experience", 0.2, 0, NOW - 86400),
        CardFacts("c_summary", "default", "u1", "session_summary", 0.2, 0, old),
        CardFacts("c_used", "default", "u1", "experience", 0.2, 0, old),
    ]
    plan = select_for_forgetting(cards, policy=ForgetPolicy(max_access_count=0), now=NOW,
                                 last_access={"c_used": NOW - 86400})  # fmt: skip
    assert [f.card.memory_id for f in plan] == ["c_old"]
    assert "inactive 200 d" in plan[0].reason


def test_a_restated_item_counts_as_many_votes_as_mentions() -> None:
    restated = entry("a", "pool").model_copy(update={"mentions": 3})
    plan = plan_batch([restated], policy=BatchPolicy(), now=NOW)
    assert [len(m.entries) for m in plan.merges] == [1]
