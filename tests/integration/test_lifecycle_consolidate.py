"""Consolidation of LTM cards (issue 13.3) against the real PostgreSQL and Redis."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from memstrata.core.lifecycle.audit import Action
from memstrata.core.lifecycle.consolidate import (
    absorbed,
    consolidate,
    consolidate_owner,
    explain_card,
)
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.lifecycle.retract import retract_card
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import (
    CONSOLIDATED,
    CardDraft,
    CardStatus,
    LtmCard,
    focus,
)
from memstrata.core.models.transcript import MessageIn
from memstrata.core.runtime import Runtime
from tests.integration.test_lifecycle_env import (
    BEAGLE,
    NOW,
    Kicks,
    Tenant,
    kicks,
    lc,
    lc_engine,
    lifecycle_pg,
    settings,
    tenant,
    user_cards,
)

pytestmark = pytest.mark.integration
__all__ = ["kicks", "lc", "lc_engine", "lifecycle_pg", "settings", "tenant"]  # fixtures

POTTERY = ["Our pottery class made clay bowls", "The pottery class glazed clay bowls today"]


def _write(lc: Lifecycle, t: Tenant, n: int, text: str, *, user: str | None = None,
           tenant_id: str | None = None, at: float = NOW,
           project: str | None = None) -> str:  # fmt: skip
    draft = CardDraft(
        tenant_id=tenant_id or t.id, user_id=user or t.user, project_id=project,
        canonical_key=f"episode:k{n}",
        memory_type="episode", title=text[:80], summary=text, content=f"context of {n}",
        source_type="session_episode", source_message_ids=[f"msg_{n}"],
    )  # fmt: skip
    return lc.ledger.write(draft, now=at + n).memory_id


def _by_id(engine: Engine, t: Tenant, user: str | None = None) -> dict[str, LtmCard]:
    return {c.memory_id: c for c in user_cards(engine, t.id, user or t.user)}


def _merged(cards: dict[str, LtmCard]) -> list[LtmCard]:
    return [c for c in cards.values()
            if c.memory_type == CONSOLIDATED and c.status is CardStatus.ACTIVE]  # fmt: skip


def test_three_cards_on_one_topic_merge_two_do_not(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    beagle = [_write(lc, tenant, n, s) for n, s in enumerate(BEAGLE)]
    pottery = [_write(lc, tenant, 10 + n, s) for n, s in enumerate(POTTERY)]
    report = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    cards = _by_id(lc_engine, tenant)
    [merged] = _merged(cards)
    assert report.merged == (merged.memory_id,) and report.hidden == 3
    # every source message id on the merged card, its sources hidden (not deleted)
    assert sorted(merged.source_message_ids) == ["msg_0", "msg_1", "msg_2"]
    assert {cards[i].status for i in beagle} == {CardStatus.SUPERSEDED}
    assert "kind:topic" in merged.tags and "context of" not in merged.content
    # two on a topic are not enough (seed 2: >= 3)
    assert {cards[i].status for i in pottery} == {CardStatus.ACTIVE}
    assert set(beagle) | {merged.memory_id} <= set(kicks.ids)
    # explain names the sources and the rule, and the merged card for a source
    why = explain_card(lc, merged.memory_id)
    assert {s["memory_id"] for s in why.sources} == set(beagle)
    assert any(h["action"] == Action.CONSOLIDATE.value and "3 cards on one topic" in h["reason"]
               for h in why.history)  # fmt: skip
    assert explain_card(lc, beagle[0]).merged_into == merged.memory_id
    assert absorbed(lc, tenant_id=tenant.id, user_id=tenant.user) == {
        b: merged.memory_id for b in beagle
    }


def test_recall_focus_injects_the_members_a_query_asks_for() -> None:
    content = "msg_0\tI adopted a beagle named Max\nmsg_1,msg_2\tMax chewed my running shoes"
    assert focus(content, "what did Max chew?", keep=1) == (
        "Max chewed my running shoes", ("msg_1", "msg_2"),
    )  # fmt: skip
    assert focus(content, "unrelated words", keep=1) == ("I adopted a beagle named Max",
                                                         ("msg_0",))  # fmt: skip
    assert focus("plain card content", "Max") is None


def test_more_than_ten_are_summarised_and_keep_every_source(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    texts = [f"Max the beagle puppy learned trick number {n} in the garden" for n in range(11)]
    ids = [_write(lc, tenant, n, s) for n, s in enumerate(texts)]
    consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    cards = _by_id(lc_engine, tenant)
    [merged] = _merged(cards)
    assert "summarised" in merged.tags
    assert len(merged.summary) <= lc.settings.consolidate.summary_chars
    assert len(merged.source_message_ids) == 11 and len(merged.content.splitlines()) == 11
    assert {cards[i].status for i in ids} == {CardStatus.SUPERSEDED}
    # ten are merged, not summarised
    other = Tenant(tenant.id, "bob")
    _owner_user(lc_engine, other)
    for n, s in enumerate(texts[:10]):
        _write(lc, other, n, s, user="bob")
    consolidate_owner(lc, tenant_id=tenant.id, user_id="bob", now=NOW + 60)
    [ten] = _merged(_by_id(lc_engine, other))
    assert "summarised" not in ten.tags and len(ten.source_message_ids) == 10


def _owner_user(engine: Engine, t: Tenant) -> None:
    from memstrata.core.authority.admin import create_user

    with engine.begin() as conn:
        create_user(db=conn, user={"tenant_id": t.id, "id": t.user})


def test_near_duplicates_across_sessions_merge_as_a_pair(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    a = _write(lc, tenant, 1, "My sister Anna lives in Lisbon near the old harbour")
    b = _write(
        lc, tenant, 2, "My sister Anna lives in Lisbon, near the old harbour!", at=NOW + 86400
    )
    consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 2 * 86400)
    cards = _by_id(lc_engine, tenant)
    [merged] = _merged(cards)
    assert "kind:duplicate" in merged.tags and merged.summary.count("Anna") == 1
    assert sorted(merged.source_message_ids) == ["msg_1", "msg_2"]
    assert cards[a].status is cards[b].status is CardStatus.SUPERSEDED


def test_a_second_run_changes_nothing(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    for n, s in enumerate(BEAGLE):
        _write(lc, tenant, n, s)
    first = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    before = {i: (c.version, c.status) for i, c in _by_id(lc_engine, tenant).items()}
    audit = len(lc.audit.find(tenant_id=tenant.id, action=Action.CONSOLIDATE))
    kicked = len(kicks.ids)
    again = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 3600)
    assert first.changed and not again.changed
    assert {i: (c.version, c.status) for i, c in _by_id(lc_engine, tenant).items()} == before
    assert len(lc.audit.find(tenant_id=tenant.id, action=Action.CONSOLIDATE)) == audit
    assert len(kicks.ids) == kicked


def test_retracting_a_merged_card_brings_its_sources_back_for_good(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    ids = [_write(lc, tenant, n, s) for n, s in enumerate(BEAGLE)]
    consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    [merged] = _merged(_by_id(lc_engine, tenant))
    out = retract_card(lc, card_id=merged.memory_id, now=NOW + 120, reason="wrong merge")
    cards = _by_id(lc_engine, tenant)
    assert out.changed and cards[merged.memory_id].status is CardStatus.SUPERSEDED
    assert {cards[i].status for i in ids} == {CardStatus.ACTIVE}
    assert set(ids) <= set(kicks.ids[-4:])  # re-indexed
    # and the next run does not merge the same cluster again
    again = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 3600)
    assert not again.changed
    assert {_by_id(lc_engine, tenant)[i].status for i in ids} == {CardStatus.ACTIVE}


def test_one_owners_cards_are_never_merged_with_anothers(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    # two cards for alice, one each for bob (same tenant) and for alice of another tenant
    _owner_user(lc_engine, Tenant(tenant.id, "bob"))
    _write(lc, tenant, 0, BEAGLE[0])
    _write(lc, tenant, 1, BEAGLE[1])
    _write(lc, tenant, 2, BEAGLE[2], user="bob")
    other = Tenant(tenant.id + "x")
    from memstrata.core.authority.admin import create_tenant

    with lc_engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": other.id, "name": "Other"})
    _owner_user(lc_engine, other)
    _write(lc, other, 3, BEAGLE[2], tenant_id=other.id)
    assert consolidate(lc, now=NOW + 60, max_s=0.0) == []  # the time bound: no owner started
    done = consolidate(lc, now=NOW + 60)
    owners = {(r.tenant_id, r.user_id) for r in done}
    assert {(tenant.id, "alice"), (tenant.id, "bob"), (other.id, "alice")} <= owners
    for t, u in ((tenant, "alice"), (tenant, "bob"), (other, "alice")):
        cards = _by_id(lc_engine, t, u)
        assert not _merged(cards) and all(c.status is CardStatus.ACTIVE for c in cards.values())


def test_cards_of_two_projects_are_never_merged_one_projects_still_are(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    from memstrata.core.authority.admin import create_project

    with lc_engine.begin() as conn:
        create_project(db=conn, project={"tenant_id": tenant.id, "id": "garden", "name": "G"})
    shop = [_write(lc, tenant, n, s, project=tenant.project) for n, s in enumerate(BEAGLE)]
    # the same topic in another project, and a near-duplicate of a shop card there
    garden = [_write(lc, tenant, 10, BEAGLE[1], project="garden"),
              _write(lc, tenant, 11, BEAGLE[2] + "!", project="garden")]  # fmt: skip
    loose = _write(lc, tenant, 20, BEAGLE[0])  # no project: a scope of its own
    report = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    cards = _by_id(lc_engine, tenant)
    [merged] = _merged(cards)
    assert {cards[i].status for i in [*garden, loose]} == {CardStatus.ACTIVE}
    assert sorted(merged.source_message_ids) == ["msg_0", "msg_1", "msg_2"]
    assert {cards[i].status for i in shop} == {CardStatus.SUPERSEDED}
    assert report.merged == (merged.memory_id,) and merged.project_id == tenant.project
    assert {s["memory_id"] for s in explain_card(lc, merged.memory_id).sources} == set(shop)


def _say(res: Runtime, t: Tenant, session: str, text: str, at: float) -> str:
    turn = res.transcript.append_turn(
        user_id=t.user, tenant_id=t.id, session_id=session,
        messages=[MessageIn(role="user", content=text, name="Caroline")], at=at,
    )  # fmt: skip
    res.pipeline.process([(turn.pointer, list(turn.records))])
    return turn.records[0].message_id


def test_a_newer_statement_of_the_same_fact_supersedes_and_keeps_the_older(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    _say(res, tenant, "s1", "My sister Anna keeps 2 horses on her farm in Alentejo.", NOW)
    finalise(lc, user_id=u, session_id="s1", now=NOW + 3600, tenant_id=t)
    [old] = [c for c in user_cards(lc_engine, t, u) if c.memory_type == "episode"]
    newer = _say(res, tenant, "s2", "My sister Anna keeps 3 horses on her farm in Alentejo.",
                 NOW + 86400)  # fmt: skip
    finalise(lc, user_id=u, session_id="s2", now=NOW + 90000, tenant_id=t)
    cards = _by_id(lc_engine, tenant)
    current = cards[old.memory_id]
    assert current.status is CardStatus.ACTIVE and "3 horses" in current.summary
    assert current.source_message_ids == [newer]
    kept = {c.canonical_key.split(":")[1]: c for c in cards.values()
            if c.source_type == "superseded_statement"}  # fmt: skip
    past = kept[old.memory_id]
    assert past.status is CardStatus.SUPERSEDED and "2 horses" in past.summary
    assert past.source_message_ids == old.source_message_ids
    # the first session's summary stated only the replaced statement: it is superseded
    # too, its text kept as history
    [summary] = [c for c in cards.values()
                 if c.source_type == "session_summary" and c.title == "Session s1"]  # fmt: skip
    assert summary.status is CardStatus.SUPERSEDED
    assert set(kept) == {old.memory_id, summary.memory_id}
    rows = {r["target"]: r for r in lc.audit.find(tenant_id=t, action=Action.SUPERSEDE)}
    assert rows[old.memory_id]["inputs"]["previous"] == past.memory_id
    assert rows[summary.memory_id]["inputs"]["emptied"] is True


def test_a_source_retracted_while_hidden_stays_retracted_when_its_merge_is_undone(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    ids = [_write(lc, tenant, n, s) for n, s in enumerate(BEAGLE)]
    consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    [merged] = _merged(_by_id(lc_engine, tenant))
    # the user retracts one statement the merge had hidden, then the merged card itself
    retract_card(lc, card_id=ids[0], now=NOW + 90, reason="not true")
    retract_card(lc, card_id=merged.memory_id, now=NOW + 120, reason="wrong merge")
    cards = _by_id(lc_engine, tenant)
    assert cards[ids[0]].status is CardStatus.SUPERSEDED  # the retraction stands
    assert {cards[i].status for i in ids[1:]} == {CardStatus.ACTIVE}


def test_a_source_that_drifts_out_of_a_kept_cluster_comes_back(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    import dataclasses

    from memstrata.core.lifecycle.consolidate import card_terms, jaccard

    drifter = "Max the beagle puppy snored loudly all night long on the sofa"
    texts = [*BEAGLE, drifter]
    ids = [_write(lc, tenant, n, s) for n, s in enumerate(texts)]
    terms = [card_terms(s) for s in texts]
    sims = [jaccard(terms[0], t) for t in terms[1:]]  # to the cluster's first card
    assert sims[-1] < min(sims[:-1])  # the drifter is the loosest member

    def with_topic_min(value: float) -> Lifecycle:
        pol = lc.settings.consolidate.model_copy(update={"topic_min": value, "min_shared": 1})
        return dataclasses.replace(lc, settings=lc.settings.model_copy(update={"consolidate": pol}))

    # run 1 takes all four in; run 2 (the owner's term statistics moved, here: the rule)
    # keeps the three and leaves the drifter out
    consolidate_owner(with_topic_min(sims[-1] - 0.01), tenant_id=tenant.id,
                      user_id=tenant.user, now=NOW + 60)  # fmt: skip
    [merged] = _merged(_by_id(lc_engine, tenant))
    assert _by_id(lc_engine, tenant)[ids[3]].status is CardStatus.SUPERSEDED
    stricter = with_topic_min((sims[-1] + min(sims[:-1])) / 2)
    report = consolidate_owner(stricter, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 3600)
    cards = _by_id(lc_engine, tenant)
    assert [c.memory_id for c in _merged(cards)] == [merged.memory_id]
    assert cards[ids[3]].status is CardStatus.ACTIVE and report.restored == 1
    assert {cards[i].status for i in ids[:3]} == {CardStatus.SUPERSEDED}
    assert absorbed(lc, tenant_id=tenant.id, user_id=tenant.user) == {
        i: merged.memory_id for i in ids[:3]
    }


def test_a_restated_fact_a_merge_holds_stays_behind_the_merge_and_keeps_its_history(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    horses = [
        "My sister Anna keeps 2 horses on her farm in Alentejo.",
        "Anna feeds the horses on her farm in Alentejo every morning.",
        "Anna rides the horses across her farm in Alentejo on Sundays.",
    ]
    for n, text in enumerate(horses):
        _say(res, tenant, "s1", text, NOW + n)
    finalise(lc, user_id=u, session_id="s1", now=NOW + 3600, tenant_id=t)
    consolidate_owner(lc, tenant_id=t, user_id=u, now=NOW + 3700)
    cards = _by_id(lc_engine, tenant)
    [merged] = _merged(cards)
    [first] = [c for c in cards.values() if c.memory_type == "episode" and "2 horses" in c.summary]
    assert first.status is CardStatus.SUPERSEDED  # hidden behind the merge
    # When a later session states the first fact anew
    _say(res, tenant, "s2", "My sister Anna keeps 3 horses on her farm in Alentejo.", NOW + 86400)
    finalise(lc, user_id=u, session_id="s2", now=NOW + 90000, tenant_id=t)
    cards = _by_id(lc_engine, tenant)
    # Then the card takes the new text but stays hidden behind the merged card (not twice
    # in recall), and the older text is kept as history
    current = cards[first.memory_id]
    assert "3 horses" in current.summary and current.status is CardStatus.SUPERSEDED
    assert cards[merged.memory_id].status is CardStatus.ACTIVE
    [past] = [c for c in cards.values() if c.source_type == "superseded_statement"
              and c.canonical_key.startswith(f"history:{first.memory_id}:")]  # fmt: skip
    assert "2 horses" in past.summary
    # ... and the first session's summary keeps its other two statements, not this one
    [summary] = [c for c in cards.values()
                 if c.source_type == "session_summary" and c.title == "Session s1"]  # fmt: skip
    assert "2 horses" not in summary.summary and horses[1] in summary.summary


ANNA = [  # one sister, three sessions, no shared topic
    ("s1", "My sister Anna keeps 2 horses on her farm"),
    ("s2", "We visited my sister Anna in Lisbon for her birthday"),
    ("s3", "Yesterday my sister Anna sent me a recipe for cod fritters"),
]


def _say_card(
    lc: Lifecycle, t: Tenant, n: int, session: str, text: str, *, at: float | None = None
) -> str:
    """An episode card as a session end writes it: the speaker first among its entities."""
    draft = CardDraft(
        tenant_id=t.id, user_id=t.user, canonical_key=f"episode:e{n}", memory_type="episode",
        title=text[:80], summary=text, entities=["Caroline"],
        tags=["episode", f"session:{session}"], source_type="session_episode",
        source_message_ids=[f"msg_{n}"],
    )  # fmt: skip
    return lc.ledger.write(draft, now=NOW + n if at is None else at).memory_id


def test_a_name_stated_across_sessions_gets_an_entity_card_that_hides_nothing(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    # Given three statements about Anna from three sessions, and one about Oscar
    ids = [_say_card(lc, tenant, n, s, text) for n, (s, text) in enumerate(ANNA)]
    _say_card(lc, tenant, 9, "s1", "Our neighbour Oscar fixed the fence")
    # When the owner is consolidated
    report = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    cards = _by_id(lc_engine, tenant)
    entity = [c for c in cards.values() if c.memory_type == "entity"]
    # Then Anna has one entity card (not the speaker, not Oscar: one card only)
    assert [c.title for c in entity] == ["Anna: 3 memories"]
    [card] = entity
    assert report.entities == (card.memory_id,) and card.memory_id in kicks.ids
    assert card.source_message_ids == ["msg_0", "msg_1", "msg_2"]
    # ... naming its cards in the order they were written, copying none of their words
    assert card.source_card_ids == ids and card.content == ""
    assert not any(text in card.summary for _, text in ANNA)
    # ... the indexes add its cards' statements to it (read from the ledger, not stored)
    from memstrata.core.ltm.views import ViewContext

    indexed = ViewContext(lc.ledger)([card]).texts[card.memory_id]
    assert indexed.splitlines() == [text for _, text in ANNA]
    # ... a view: every statement stays an active card of its own
    assert {cards[i].status for i in ids} == {CardStatus.ACTIVE} and report.hidden == 0
    # ... and explain says what it gathered, and where a statement was gathered into
    why = explain_card(lc, card.memory_id)
    assert {s["memory_id"] for s in why.sources} == set(ids)
    assert any(h["action"] == Action.GATHER.value and "'Anna' is stated on 3 cards" in h["reason"]
               for h in why.history)  # fmt: skip
    assert explain_card(lc, ids[0]).entity_cards == (card.memory_id,)
    # When nothing changed, a second run writes nothing
    again = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 120)
    assert again.entities == () and not again.changed
    assert len(lc.audit.find(target=card.memory_id, action=Action.GATHER)) == 1
    # When one of its cards takes a newer text, the same cards are indexed again with it
    marks = [(card.memory_id, p.index_name, p.target_version)
             for p in lc.ledger.projections([card.memory_id])]  # fmt: skip
    lc.ledger.indexed(marks, now=NOW + 130)  # as the indexer leaves it
    _say_card(lc, tenant, 0, "s1", "My sister Anna keeps 3 horses on her farm", at=NOW + 140)
    kicks.ids.clear()
    fresh = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 150)
    assert fresh.entities == () and card.memory_id in kicks.ids
    assert {p.state.value for p in lc.ledger.projections([card.memory_id])} == {"pending"}
    assert "3 horses" in ViewContext(lc.ledger)([card]).texts[card.memory_id]
    quiet = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 160)
    assert not quiet.changed  # indexed again once, not at every run
    # When a fourth statement comes, the card is rebuilt with it
    ids.append(_say_card(lc, tenant, 4, "s4", "At the market Anna bought a red bicycle"))
    grown = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 180)
    assert grown.entities == (card.memory_id,)
    assert _by_id(lc_engine, tenant)[card.memory_id].title == "Anna: 4 memories"
    # When the user retracts the entity card, its statements stay and it is not rebuilt
    retract_card(lc, card_id=card.memory_id, now=NOW + 240, reason="not helpful")
    consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 300)
    cards = _by_id(lc_engine, tenant)
    assert cards[card.memory_id].status is CardStatus.SUPERSEDED
    assert {cards[i].status for i in ids} == {CardStatus.ACTIVE}


def test_an_entity_card_whose_name_no_longer_qualifies_is_hidden(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    ids = [_say_card(lc, tenant, n, s, text) for n, (s, text) in enumerate(ANNA)]
    consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 60)
    [card] = [c for c in _by_id(lc_engine, tenant).values() if c.memory_type == "entity"]
    retract_card(lc, card_id=ids[0], now=NOW + 90, reason="wrong")  # two statements left
    report = consolidate_owner(lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 120)
    assert report.entities_hidden == (card.memory_id,)
    assert _by_id(lc_engine, tenant)[card.memory_id].status is CardStatus.SUPERSEDED
    rows = lc.audit.find(target=card.memory_id, action=Action.GATHER)
    assert rows[0]["inputs"]["kind"] == "dissolved"
