"""Promotion over a multi-session week, in English and Chinese, on real Redis and PostgreSQL.

Seed 1 十四's examples are the oracle: "prefers conclusion first" and "this project's
default env is prod-cn" become PG facts; "timeouts of this kind are usually the thread
pool" becomes a card; "next look at the thread pool for bug456" and "the log output from
just now" never leave STM.  Time is injected (``now``), never slept.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from memstrata.core.authority.facts import fact_history
from memstrata.core.lifecycle import Route
from memstrata.core.lifecycle.audit import Action, audit_table
from memstrata.core.lifecycle.retract import retract_card, retract_pg_fact
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.scan import scan
from memstrata.core.lifecycle.scheduler import run_batch
from memstrata.core.lifecycle.states import Record, State
from memstrata.core.ltm.card import CardStatus
from memstrata.core.models.memory import MemoryType
from memstrata.core.runtime import Runtime
from tests.integration.test_lifecycle_env import (
    NOW,
    Kicks,
    Tenant,
    item,
    kicks,
    lc,
    lc_engine,
    lifecycle_pg,
    say,
    settings,
    tenant,
    user_cards,
)

pytestmark = pytest.mark.integration
__all__ = ["kicks", "lc", "lc_engine", "lifecycle_pg", "settings", "tenant"]  # fixtures

DAY = 86400.0
LANG = {
    "en": {
        "pref": "I prefer the conclusion first, then the details.",
        "env": "This project's default env is prod-cn.",
        "pool": "Timeouts of this kind are usually caused by the thread pool.",
        "next": "Next, look at the thread pool for bug456.",
        "log": "The log output from just now.",
    },
    "zh": {
        "pref": "我喜欢先说结论再讲细节。",
        "env": "这个项目默认环境是 prod-cn。",
        "pool": "这类 timeout 问题常见根因是线程池。",
        "next": "bug456 下一步先看线程池。",
        "log": "刚才那次日志输出。",
    },
}


def _state(lc: Lifecycle, user: str, tenant: str, memory_id: str) -> State | None:
    raw = lc.redis.hget(lc.keys.state(user, tenant), memory_id)
    return Record.loads(str(raw)).state if raw else None


def _audit(engine: Engine, tenant: str) -> list[dict[str, object]]:
    with engine.connect() as conn:
        rows = conn.execute(select(audit_table).where(audit_table.c.tenant_id == tenant))
        return [dict(r._mapping) for r in rows]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_week_of_sessions_promotes_exactly_what_the_seed_says(
    lang: str, res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    s = LANG[lang]
    u, t = tenant.user, tenant.id
    # Given day 1: a preference, a project default said with "remember", the thread-pool
    # experience, a next step and a log remark; day 2 and 3: the preference and the
    # experience again (the extractor writes what it can; the rest is written as it would)
    pref = say(res, u, t, "d1", s["pref"], NOW)
    res.stm.upsert(item(u, t, "d1", s["env"], f"project:{tenant.project}:config:default_env",
                        importance=0.9, detail={"value": "prod-cn"}, ttl_s=30 * DAY))  # fmt: skip
    res.stm.upsert(item(u, t, "d1", s["next"], "d1:next_step", mtype=MemoryType.DECISION,
                        subtype="next_step", importance=0.5))  # fmt: skip
    res.stm.upsert(item(u, t, "d1", s["log"], "d1:observation:log", importance=0.5))
    pool_ids = []
    for day in ("d1", "d2", "d3"):
        pool_ids.append(res.stm.upsert(item(u, t, day, s["pool"], f"{day}:conclusion:thread_pool",
                        subtype="conclusion", importance=0.45,
                        entities=("thread_pool",))).memory_id)  # fmt: skip
    say(res, u, t, "d2", s["pref"], NOW + DAY)
    # When the promotion scan runs, and then the 5-minute batch job
    report = scan(lc, now=NOW + DAY + 60, max_items=10_000, max_s=30, keep_decisions=True)
    _plan, applied = run_batch(lc, now=NOW + DAY + 300, limit=1000)
    # Then the preference (two sessions) and the project default (explicit) are PG facts
    assert report.applied["path_a"] == 2
    [answer_style] = fact_history(db=lc_engine.connect(), tenant_id=t, user_id=u,
                                  canonical_fact_key="profile.answer_style")  # fmt: skip
    assert answer_style.origin == "promotion" and answer_style.superseded_at is None
    assert answer_style.source_memory_ids == tuple(pref)
    [env] = fact_history(
        db=lc_engine.connect(),
        tenant_id=t,
        user_id=u,
        canonical_fact_key=f"project_metadata.{tenant.project}.default_env",
    )
    assert env.value == "prod-cn"
    # ... the three thread-pool notes were merged into one card that keeps its sources
    assert applied["merged_groups"] == 1 and applied["merged_items"] == 3
    [card] = user_cards(lc_engine, t, u)
    assert card.tags[0] == "topic:thread_pool" and all(m in card.content for m in pool_ids)
    assert kicks.ids == [card.memory_id]
    # ... and the next step and the log remark never left STM, nor reached any card
    for text in (s["next"], s["log"]):
        assert all(text not in c.content and text not in c.summary
                   for c in user_cards(lc_engine, t, u))  # fmt: skip
    moved = {m for row in _audit(lc_engine, t) for m in row["memory_ids"]}  # type: ignore[attr-defined]
    next_id = item(u, t, "d1", s["next"], "d1:next_step").id
    log_id = item(u, t, "d1", s["log"], "d1:observation:log").id
    assert next_id not in moved and log_id not in moved
    assert _state(lc, u, t, next_id) is None and _state(lc, u, t, log_id) is None
    # every movement is explained: inputs and breakdown are in the audit
    rows = _audit(lc_engine, t)
    assert (
        sorted(str(r["action"]) for r in rows) == ["enqueue"] * 3 + ["merge"] + ["promote_pg"] * 2
    )
    pref_row = next(r for r in rows if r["target"] == "profile.answer_style")
    assert pref_row["inputs"]["triggers"] == ["cross_session"]  # type: ignore[index]
    assert pref_row["inputs"]["summary"] == s["pref"]  # type: ignore[index]
    assert pref_row["breakdown"]["sessions"] == 2.0  # type: ignore[index]
    # a second scan changes nothing (states are remembered per fingerprint)
    again = scan(lc, now=NOW + DAY + 600, max_items=10_000, max_s=30)
    assert again.applied.get("path_a", 0) == 0 and again.applied.get("queued", 0) == 0


def test_an_important_general_item_becomes_a_card_at_once_and_can_be_retracted(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    u, t = tenant.user, tenant.id
    text = LANG["en"]["pool"]
    # Given the experience, important and seen in two sessions
    res.stm.upsert(item(u, t, "d1", text, "user:fact:pool", importance=0.8, subtype="conclusion"))
    mid = res.stm.upsert(item(u, t, "d2", text, "user:fact:pool", importance=0.8,
                              subtype="conclusion", at=NOW + DAY)).memory_id  # fmt: skip
    # When the scan runs
    report = scan(lc, now=NOW + DAY, max_items=100, max_s=30, keep_decisions=True)
    # Then it is a card right away (seed 2: > 0.7, seed 1: cross-session)
    assert [d.route for _v, d in report.decisions] == [Route.PATH_B]
    [card] = user_cards(lc_engine, t, u)
    assert _state(lc, u, t, mid) is State.PROMOTED_CARD
    # When it is retracted
    out = retract_card(lc, card_id=card.memory_id, now=NOW + 2 * DAY, reason="wrong lesson")
    # Then the card is superseded (its projections go), its source is marked, and the next
    # scan does not promote it again
    assert out.changed and out.memory_ids == (mid,)
    assert user_cards(lc_engine, t, u)[0].status is CardStatus.SUPERSEDED
    assert kicks.ids[-1] == card.memory_id
    assert _state(lc, u, t, mid) is State.RETRACTED
    assert scan(lc, now=NOW + 3 * DAY, max_items=100, max_s=30).applied.get("path_b", 0) == 0


def test_a_promoted_fact_can_be_retracted_and_is_not_promoted_again(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    say(res, u, t, "d1", "记住：我喜欢先说结论再讲细节。", NOW)
    scan(lc, now=NOW + 60, max_items=100, max_s=30)
    key = "profile.answer_style"
    with lc_engine.connect() as conn:
        assert fact_history(db=conn, tenant_id=t, user_id=u, canonical_fact_key=key)
    # When the promotion is retracted
    out = retract_pg_fact(lc, tenant_id=t, user_id=u, fact_key=key, now=NOW + 120,
                          reason="user said it was a one-off")  # fmt: skip
    # Then the fact is ended (history kept) and the source item will not come back
    with lc_engine.connect() as conn:
        [hist] = fact_history(db=conn, tenant_id=t, user_id=u, canonical_fact_key=key)
    assert out.changed and hist.superseded_at is not None
    assert scan(lc, now=NOW + 180, max_items=100, max_s=30).applied.get("path_a", 0) == 0
    assert {str(r["action"]) for r in _audit(lc_engine, t)} == {"promote_pg", "retract"}


def test_isolated_items_decay_each_run_until_they_are_dropped(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    mid = res.stm.upsert(item(u, t, "d1", "DNS lookups usually stall under load", "d1:c:dns",
                              subtype="conclusion", importance=0.35)).memory_id  # fmt: skip
    scan(lc, now=NOW, max_items=100, max_s=30)
    # When the batch job runs every 5 minutes with nothing else on the topic
    seen = []
    for run in range(5):
        _plan, applied = run_batch(lc, now=NOW + 300 * (run + 1), limit=100)
        seen.append((applied["decayed"], applied["dropped"]))
    # Then 0.35 → 0.25 → 0.15 → 0.05 → dropped, and the queue is empty
    assert seen == [(1, 0), (1, 0), (1, 0), (0, 1), (0, 0)]
    assert lc.redis.hlen(lc.keys.batch) == 0
    assert _state(lc, u, t, mid) is State.DROPPED
    rows = [r for r in _audit(lc_engine, t) if r["action"] in ("decay", "drop")]
    assert [r["breakdown"]["after"] for r in rows] == [0.25, 0.15, 0.05, 0.0]  # type: ignore[index]
    assert Action.DROP.value == rows[-1]["action"]
    # and a later scan does not queue it again
    assert scan(lc, now=NOW + DAY, max_items=100, max_s=30).applied.get("queued", 0) == 0
