"""LTM maintenance (Beat): recall counts into the ledger, topic summaries, forgetting.

* :func:`sync_access` copies the recall service's per-user hit counts (``access`` ZSET,
  members ``ltm:<card id>``) into ``ltm_cards.access_count`` and remembers when a count
  last grew (the card's last use, which the forgetting policy reads).
* :func:`summarise` (seed 2 "同主题记忆 > 10 条 → 摘要化压缩"): more than ``over`` active
  cards on one topic become one ``topic_summary`` card listing every source card; the
  sources are superseded, so the indexes hold one card where there were eleven.
* :func:`forget` plans with :func:`select_for_forgetting`; applies only when asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, literal, select, text, tuple_, update

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.lifecycle.audit import Action, AuditEvent, record
from memstrata.core.lifecycle.forgetting import CardFacts, Forget, select_for_forgetting
from memstrata.core.lifecycle.promote import topic_tag
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import CardDraft, CardStatus
from memstrata.core.ltm.tables import cards

SUMMARY_TYPE = "topic_summary"


def _owners(lc: Lifecycle, limit: int) -> list[tuple[str, str]]:
    """The next ``limit`` card owners after the saved cursor (round robin over all owners)."""
    after = lc.store.cursor("access")
    tenant0, _, user0 = after.partition("/")
    stmt = (
        select(cards.c.tenant_id, cards.c.user_id)
        .where(cards.c.status == CardStatus.ACTIVE.value)
        .where(
            tuple_(cards.c.tenant_id, cards.c.user_id) > tuple_(literal(tenant0), literal(user0))
        )
        .group_by(cards.c.tenant_id, cards.c.user_id)
        .order_by(cards.c.tenant_id, cards.c.user_id)
        .limit(limit)
    )
    with pg_errors("list card owners"), lc.engine.connect() as conn:
        owners = [(r.tenant_id, r.user_id) for r in conn.execute(stmt)]
    # fewer than asked: the pass wrapped, start over next run
    lc.store.set_cursor("access", None if len(owners) < limit else "/".join(owners[-1]))
    return owners


def sync_access(lc: Lifecycle, *, now: float, max_users: int = 1000) -> int:
    """Copy recall hit counts of LTM cards into the ledger; returns cards updated."""
    changed: list[tuple[str, str, str, int]] = []  # tenant, user, card id, count
    for tenant, user in _owners(lc, max_users):
        hits = lc.store.access_hits(user, tenant)
        known = lc.store.card_access(user, tenant)
        for member, score in hits:
            src, _, cid = member.partition(":")
            if src != "ltm":
                continue
            before = int(known.get(cid, "0|0").split("|")[0])
            if int(score) > before:
                changed.append((tenant, user, cid, int(score)))
    if not changed:
        return 0
    with pg_errors("sync access counts"), lc.engine.begin() as conn:
        for _t, _u, cid, count in changed:
            # access_count is outside the content hash: no version bump, no re-indexing
            conn.execute(update(cards).where(cards.c.memory_id == cid).values(access_count=count))
    counts = [
        ((user, lc.tenant(tenant), cid), f"{count}|{now}") for tenant, user, cid, count in changed
    ]
    lc.store.set_card_access(counts)
    return len(changed)


@dataclass(frozen=True)
class TopicGroup:
    tenant_id: str
    user_id: str
    tag: str
    count: int


def crowded_topics(lc: Lifecycle, *, over: int, limit: int = 100) -> list[TopicGroup]:
    """(owner, topic) pairs with more than ``over`` active non-summary cards."""
    tag = func.jsonb_array_elements_text(cards.c.tags).table_valued("value").alias("t")
    stmt = (
        select(cards.c.tenant_id, cards.c.user_id, tag.c.value, func.count())
        .select_from(cards.join(tag, text("true")))
        .where(
            cards.c.status == CardStatus.ACTIVE.value,
            cards.c.memory_type != SUMMARY_TYPE,
            tag.c.value.like("topic:%"),
        )
        .group_by(cards.c.tenant_id, cards.c.user_id, tag.c.value)
        .having(func.count() > over)
        .limit(limit)
    )
    with pg_errors("find crowded topics"), lc.engine.connect() as conn:
        return [TopicGroup(r[0], r[1], r[2], int(r[3])) for r in conn.execute(stmt)]


def summarise(lc: Lifecycle, *, now: float, over: int, limit: int = 100) -> list[str]:
    """One summary card per crowded topic; returns the summary card ids."""
    made: list[str] = []
    touched: list[str] = []
    for g in crowded_topics(lc, over=over, limit=limit):
        topic = g.tag.removeprefix("topic:")
        stmt = (
            select(cards.c.memory_id, cards.c.title, cards.c.summary, cards.c.importance,
                   cards.c.entities, cards.c.memory_type, cards.c.content)
            .where(cards.c.tenant_id == g.tenant_id, cards.c.user_id == g.user_id,
                   cards.c.status == CardStatus.ACTIVE.value,
                   cards.c.tags.contains([g.tag]))
            .order_by(cards.c.importance.desc(), cards.c.updated_at.desc())
        )  # fmt: skip
        with pg_errors("summarise topic"), lc.engine.begin() as conn:
            rows = conn.execute(stmt).all()
            sources = [r for r in rows if r.memory_type != SUMMARY_TYPE]
            previous = [r for r in rows if r.memory_type == SUMMARY_TYPE]
            lines = [f"- {r.title}: {r.summary[:300]} (card {r.memory_id})" for r in sources]
            for p in previous:
                lines.append(p.content)  # an earlier summary's sources stay listed
            entities = list(dict.fromkeys(e for r in rows for e in (r.entities or [])))[:64]
            draft = CardDraft(
                tenant_id=g.tenant_id, user_id=g.user_id,
                canonical_key=f"summary:{topic[:200]}", memory_type=SUMMARY_TYPE,
                title=f"{topic}: {len(sources)} experiences"[:256],
                summary=" | ".join(r.summary[:200] for r in sources[:10])[:2000],
                content="\n".join(lines)[: lc.ledger.max_content_chars],
                entities=[e[:128] for e in entities], tags=[topic_tag(topic), "summary"],
                source_type="topic_summary",
                importance=max(float(r.importance) for r in sources),
            )  # fmt: skip
            res = lc.ledger.write(draft, now=now, conn=conn)
            for r in sources:
                lc.ledger.set_status(r.memory_id, CardStatus.SUPERSEDED, now=now, conn=conn)
            ids = tuple(r.memory_id for r in sources)
            record(conn, [AuditEvent(Action.SUMMARISE, g.tenant_id, g.user_id, res.memory_id,
                                     f"{len(sources)} > {over} cards on topic {topic!r}", now,
                                     ids, {"topic": topic, "sources": list(ids)},
                                     {"cards": float(len(sources))})])  # fmt: skip
        made.append(res.memory_id)
        touched += [res.memory_id, *ids]
    if touched:
        lc.on_cards(sorted(set(touched)))
    return made


def forget(
    lc: Lifecycle, *, now: float, apply: bool = False, limit: int = 1000,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Forget]:  # fmt: skip
    """Plan (and with ``apply``, carry out) forgetting; returns the plan either way.
    ``on_progress(cards done, cards)`` is called as ``apply`` marks each card."""
    pol = lc.settings.forget
    stmt = (
        select(cards.c.memory_id, cards.c.tenant_id, cards.c.user_id, cards.c.memory_type,
               cards.c.importance, cards.c.access_count, cards.c.updated_at, cards.c.status)
        .where(cards.c.status == CardStatus.ACTIVE.value,
               cards.c.importance <= pol.max_importance,
               cards.c.access_count <= pol.max_access_count,
               cards.c.updated_at <= now - pol.inactive_s)
        .order_by(cards.c.updated_at)
        .limit(limit)
    )  # fmt: skip
    with pg_errors("plan forgetting"), lc.engine.connect() as conn:
        facts = [CardFacts(*r) for r in conn.execute(stmt)]
    last: dict[str, float] = {}
    seen = lc.store.card_access_of(
        [(c.user_id, lc.tenant(c.tenant_id), c.memory_id) for c in facts]
    )
    for c, raw in zip(facts, seen, strict=True):
        if raw:
            last[c.memory_id] = float(raw.split("|")[1])
    plan = select_for_forgetting(facts, policy=pol, now=now, last_access=last)
    if apply and plan:
        with pg_errors("forget cards"), lc.engine.begin() as conn:
            for done, f in enumerate(plan, 1):
                lc.ledger.set_status(f.card.memory_id, CardStatus.DELETED, now=now, conn=conn)
                if on_progress is not None:
                    on_progress(done, len(plan))
            record(conn, [AuditEvent(Action.FORGET, f.card.tenant_id, f.card.user_id,
                                     f.card.memory_id, f.reason, now, (),
                                     {"memory_type": f.card.memory_type},
                                     {"importance": f.card.importance,
                                      "access_count": float(f.card.access_count),
                                      "last_active": f.last_active}) for f in plan])  # fmt: skip
        lc.on_cards([f.card.memory_id for f in plan])
    return plan
