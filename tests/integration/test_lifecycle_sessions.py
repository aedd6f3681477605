"""Session start and end (seed 2 四), rebuild from L0, and LTM maintenance, on real stores."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from memstrata.core.keys import GlobalKeys
from memstrata.core.lifecycle.audit import Action, AuditLog
from memstrata.core.lifecycle.finalise import finalise, finalise_idle, idle_sessions
from memstrata.core.lifecycle.maintenance import forget, summarise, sync_access
from memstrata.core.lifecycle.preload import preload
from memstrata.core.lifecycle.rebuild import rebuild_session
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.scan import scan_user
from memstrata.core.ltm.card import CardDraft, CardStatus
from memstrata.core.ltm.tables import cards
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


def _card(t: Tenant, key: str, text: str, *, topic: str = "thread_pool",
          importance: float = 0.5) -> CardDraft:  # fmt: skip
    return CardDraft(tenant_id=t.id, user_id=t.user, canonical_key=key, memory_type="experience",
                     title=text[:80], summary=text, tags=[f"topic:{topic}"],
                     importance=importance)  # fmt: skip


def test_a_new_session_is_preloaded_with_related_cards_that_never_promote_back(
    res: Runtime, lc: Lifecycle, tenant: Tenant
) -> None:
    u, t = tenant.user, tenant.id
    lc.ledger.write(
        _card(tenant, "k1", "Timeouts of this kind are usually the thread pool"), now=NOW
    )
    lc.ledger.write(_card(tenant, "k2", "Disk alerts on the build host", topic="disk"), now=NOW)
    # When a session starts with a question about timeouts
    ids = preload(lc, user_id=u, tenant_id=t, session_id="s9", query="why the timeout?", now=NOW)
    # Then the related card (only) is in the new session's STM, as an ltm_preload item
    [held] = res.stm.by_session(u, "s9", tenant_id=t, now=NOW)
    assert len(ids) == 1 and held.subtype == "ltm_preload" and held.detail["card_id"] == ids[0]
    # and the promotion policy never sends it back up
    report = scan_user(lc, u, tenant_id=t, now=NOW, dry_run=True)
    assert report.routes == {"never": 1, "settled": 0} and report.decisions == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_idle_session_is_finalised_into_a_summary_card_and_its_stm_cleaned(
    lang: str, res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    u, t = tenant.user, tenant.id
    texts = {
        "en": ("I prefer the conclusion first.", "Rollback fixed the checkout timeouts.",
               "Next, look at the thread pool for bug456."),
        "zh": ("我喜欢先说结论。", "回滚解决了结账超时。", "bug456 下一步先看线程池。"),
    }[lang]  # fmt: skip
    pref = res.stm.upsert(item(u, t, "s1", texts[0], "user:pref:answer_style",
                               mtype=MemoryType.PREFERENCE, subtype="user_preference",
                               importance=0.4, ttl_s=30 * DAY)).memory_id  # fmt: skip
    fact = res.stm.upsert(item(u, t, "s1", texts[1], "s1:conclusion:rollback",
                               subtype="conclusion", importance=0.5)).memory_id  # fmt: skip
    step = res.stm.upsert(item(u, t, "s1", texts[2], "s1:next_step", subtype="next_step",
                               mtype=MemoryType.DECISION)).memory_id  # fmt: skip
    scope = res.stm.keys(u, t).scope
    active = GlobalKeys(lc.stm.namespace).compress_active
    res.redis.zadd(active, {f"{scope}|s1": NOW, f"{scope}|s2": NOW + 3000})
    # When the idle check runs 40 minutes later (session_idle_s = 30 minutes)
    assert idle_sessions(lc, now=NOW + 2400, idle_s=1800, limit=10) == [(u, t, "s1")]
    [done] = finalise_idle(lc, now=NOW + 2400, limit=10, max_s=30)
    # Then a session summary card holds the conclusion and the preference, not the next step
    summary = next(c for c in user_cards(lc_engine, t, u) if c.memory_type == "session_summary")
    assert done.card_id == summary.memory_id and summary.importance == 0.8
    assert texts[1] in summary.summary and texts[2] not in summary.summary
    assert len(summary.summary) <= lc.settings.session_summary_chars
    # ... holding the words once: which items and messages it sums up is the audit's
    assert summary.content == ""
    [row] = AuditLog(lc.engine).find(target=summary.memory_id, action=Action.FINALISE)
    assert set(row["memory_ids"]) == {pref, fact}
    assert row["inputs"]["kinds"] and len(row["inputs"]["messages"]) >= 1
    assert summary.memory_id in kicks.ids
    # ... the session's index is gone, with the items that belonged to it alone
    assert not res.redis.exists(res.stm.keys(u, t).session("s1"))
    assert res.stm.get(u, fact, tenant_id=t) is None and res.stm.get(u, step, tenant_id=t) is None
    assert res.stm.get(u, pref, tenant_id=t) is not None  # user-level: lives to its own TTL
    # ... and it is not finalised twice; a session that went on is not touched
    assert idle_sessions(lc, now=NOW + 2400, idle_s=1800, limit=10) == []
    again = finalise(lc, user_id=u, tenant_id=t, session_id="s1", now=NOW + 2500)
    assert again.card_id is None and again.items == 0


def test_a_session_is_rebuilt_from_its_transcript(
    res: Runtime, lc: Lifecycle, tenant: Tenant
) -> None:
    u, t = tenant.user, tenant.id
    written = say(res, u, t, "s1", "我喜欢先说结论再讲细节。", NOW)
    written += say(res, u, t, "s1", "bug456 下一步先看线程池。", NOW + 10)
    before = {i.id: i.summary for i in res.stm.by_session(u, "s1", tenant_id=t, limit=100)}
    # Given STM lost the session
    res.stm.delete(u, list(before), tenant_id=t)
    assert res.stm.by_session(u, "s1", tenant_id=t) == []
    # When it is rebuilt from L0
    out = rebuild_session(lc, user_id=u, tenant_id=t, session_id="s1", now=NOW + 60)
    # Then the same items come back, with the same ids
    after = {i.id: i.summary for i in res.stm.by_session(u, "s1", tenant_id=t, limit=100)}
    assert after == before and out.turns == 2 and out.written == len(written)


def test_more_than_ten_cards_on_a_topic_become_one_summary_that_keeps_its_sources(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    ids = [lc.ledger.write(_card(tenant, f"k{i}", f"pool lesson {i}"), now=NOW).memory_id
           for i in range(11)]  # fmt: skip
    lc.ledger.write(_card(tenant, "other", "disk lesson", topic="disk"), now=NOW)
    # When maintenance runs (seed 2: > 10 on one topic)
    [made] = summarise(lc, now=NOW + 60, over=10)
    # Then one summary card lists all eleven sources, which are superseded
    by_id = {c.memory_id: c for c in user_cards(lc_engine, tenant.id, tenant.user)}
    assert by_id[made].memory_type == "topic_summary"
    assert all(i in by_id[made].content for i in ids)
    assert {by_id[i].status for i in ids} == {CardStatus.SUPERSEDED}
    assert set(ids) | {made} <= set(kicks.ids)
    assert summarise(lc, now=NOW + 120, over=10) == []  # nothing crowded any more


def test_recall_hits_reach_the_ledger_and_forgetting_is_a_dry_run_by_default(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    used = lc.ledger.write(_card(tenant, "used", "used lesson", importance=0.2), now=NOW).memory_id
    idle = lc.ledger.write(_card(tenant, "idle", "idle lesson", importance=0.2), now=NOW).memory_id
    # Given recall hit one card twice (the recall service's access ZSET)
    res.redis.zincrby(lc.keys.access(u, t), 2, f"ltm:{used}")
    assert sync_access(lc, now=NOW + 60) == 1
    with lc_engine.connect() as conn:
        counts = dict(conn.execute(select(cards.c.memory_id, cards.c.access_count)).all())
    assert counts[used] == 2 and counts[idle] == 0
    # When forgetting is planned 100 days later
    plan = forget(lc, now=NOW + 100 * DAY)
    # Then only the unread card is proposed, and nothing changed
    assert [f.card.memory_id for f in plan] == [idle]
    assert {c.status for c in user_cards(lc_engine, t, u)} == {CardStatus.ACTIVE}
    # When it is applied, the card is deleted (its projections follow)
    forget(lc, now=NOW + 100 * DAY, apply=True)
    status = {c.memory_id: c.status for c in user_cards(lc_engine, t, u)}
    assert status == {used: CardStatus.ACTIVE, idle: CardStatus.DELETED}


def test_the_audit_migration_matches_the_table_the_code_queries(lc_engine: Engine) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from memstrata.core.lifecycle.audit import lifecycle_metadata

    with lc_engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), lifecycle_metadata)
    ours = [d for d in diffs if "lifecycle_audit" in repr(d)]
    assert ours == []
