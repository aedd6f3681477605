"""Recall as of a past moment: what memory held then, each statement as it read then.

Real PostgreSQL, Redis and a milvus-lite server (issue 13.3: "recall returns current facts
by default, with an as-of option").
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import text

from memstrata.core.authority.facts import set_profile
from memstrata.core.authority.filters import RetrievalFilters
from memstrata.core.lifecycle.audit import Action
from memstrata.core.lifecycle.consolidate import consolidate_owner
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import CONSOLIDATED, CardDraft, CardStatus
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.policy import SearchMode, SearchPolicy
from memstrata.core.ltm.search import LtmSearch, Ranked
from memstrata.core.models.transcript import MessageIn
from memstrata.core.recall.ltm_adapter import LedgerBackedSearcher
from memstrata.core.recall.result import RecallResult
from memstrata.core.recall.route import LtmMode
from memstrata.core.recall.service import RecallRequest
from memstrata.core.runtime import Runtime
from tests.integration.test_recall_history import (
    AT,
    embedder,
    lifecycle_pg,
    milvus_server,
    runtime,
)

pytestmark = pytest.mark.integration
__all__ = ["embedder", "lifecycle_pg", "milvus_server", "runtime"]  # fixtures

DAY = 86_400.0
TWO = "My sister Anna keeps 2 horses on her farm in Alentejo."
THREE = "My sister Anna keeps 3 horses on her farm in Alentejo."


def _say(rt: Runtime, session: str, statement: str, at: float) -> str:
    """A user turn through L0, the ingest pipeline and the raw-history projection."""
    t = rt.transcript.append_turn(
        user_id="u1", tenant_id=rt.settings.key_namespace, session_id=session, at=at,
        messages=[MessageIn(role="user", content=statement, name="Caroline")],
    )  # fmt: skip
    rt.pipeline.process([(t.pointer, list(t.records))])
    assert rt.ltm.history is not None
    rt.ltm.history.project(t.records)
    return t.records[0].message_id


def _lifecycle(rt: Runtime) -> Lifecycle:
    def project(card_ids: Sequence[str]) -> None:
        rt.ltm.projector.project(list(card_ids))

    return rt.lifecycle(on_cards=project)


def _ask(
    rt: Runtime, query: str, *, as_of: float | None, explain: bool = False
) -> RecallResult:
    recaller = rt.recaller()
    try:
        return recaller.recall(RecallRequest(
            tenant_id=rt.settings.key_namespace, user_id="u1", session_id="ask",
            query=query, now=AT + 30 * DAY, as_of=as_of, top_k=20, explain=explain,
        ))  # fmt: skip
    finally:
        recaller.close()


def _episodes(out: RecallResult) -> list[str]:
    """The statements' own cards (a session summary is a digest of its session: left
    aside here)."""
    return [line.text for line in out.memory.long_term if line.memory_type == "episode"]


def test_a_superseded_statement_is_recalled_as_it_read_at_a_past_moment(
    runtime: Runtime,
) -> None:
    # Given a statement kept when its session ended, then a newer statement of the same
    # fact (its episode card takes the new text, the old text is kept as history)
    lc = _lifecycle(runtime)
    ns = runtime.settings.key_namespace
    old = _say(runtime, "s1", TWO, AT)
    finalise(lc, user_id="u1", tenant_id=ns, session_id="s1", now=AT + 3600)
    new = _say(runtime, "s2", THREE, AT + DAY)
    finalise(lc, user_id="u1", tenant_id=ns, session_id="s2", now=AT + DAY + 3600)
    query = "How many horses does Anna keep on her farm?"

    # When recall is asked now, then the current statement is the long-term memory
    now = _ask(runtime, query, as_of=None)
    assert _episodes(now) == [THREE], now.text
    assert f"2023-05-08:\n- {THREE}" in now.text

    # When it is asked as of a moment between the two sessions' ends
    then = _ask(runtime, query, as_of=AT + 7200)
    # Then the card says what it said then, with the messages it came from then
    [card] = [line for line in then.memory.long_term if line.memory_type == "episode"]
    assert card.text == TWO and card.message_ids == (old,)
    # ... dated when it was said (a dated event: the card keeps its statement's time)
    assert card.at == AT and f"2023-05-07:\n- {TWO}" in then.text
    # ... and nothing said later is injected from any layer
    assert "3 horses" not in then.text
    assert all(new not in line.message_ids for line in then.memory.history)

    # When it is asked as of the first session, before its card was written
    during = _ask(runtime, query, as_of=AT + 60)
    # Then no long-term card answers; the raw message said by then still may
    assert during.memory.long_term == ()
    assert "3 horses" not in during.text
    assert [line.message_ids for line in during.memory.history if "horses" in line.text] == [
        (old,)
    ]

    # When it is asked as of a moment before anything was said: nothing about horses
    before = _ask(runtime, query, as_of=AT - DAY)
    assert "horses" not in before.text


def test_a_newer_statement_leaves_the_earlier_session_summary_too(runtime: Runtime) -> None:
    # Given a session whose summary states two things, one of them replaced a day later
    lc = _lifecycle(runtime)
    ns = runtime.settings.key_namespace
    olives = "My sister Anna also grows olives next to the horses' paddock."
    _say(runtime, "s1", TWO, AT)
    _say(runtime, "s1", olives, AT + 60)
    first = finalise(lc, user_id="u1", tenant_id=ns, session_id="s1", now=AT + 3600)
    assert first.card_id is not None
    written = runtime.ltm.ledger.cards([first.card_id])[first.card_id]
    assert TWO in written.summary and olives in written.summary, written.summary
    _say(runtime, "s2", THREE, AT + DAY)
    finalise(lc, user_id="u1", tenant_id=ns, session_id="s2", now=AT + DAY + 3600)

    # Then the first session's summary no longer states the replaced statement, and keeps
    # the other one
    summary = runtime.ltm.ledger.cards([first.card_id])[first.card_id]
    assert TWO not in summary.summary and olives in summary.summary, summary.summary
    assert summary.status is CardStatus.ACTIVE and summary.version == written.version + 1
    # ... so a current recall's long-term memory says "3 horses" only (the raw message
    # of the first session is still history: dated, under "From earlier conversations")
    query = "How many horses does Anna keep on her farm?"
    now = _ask(runtime, query, as_of=None)
    remembered = " ".join(line.text for line in now.memory.long_term)
    assert "3 horses" in remembered and "2 horses" not in remembered, now.text
    # ... while as of a moment between the sessions the summary reads as it did then
    then = _ask(runtime, query, as_of=AT + 7200)
    summaries = [ln.text for ln in then.memory.long_term if ln.memory_id == first.card_id]
    assert summaries and TWO in summaries[0], then.text
    assert "3 horses" not in then.text
    # ... and the audit says what replaced it
    [why] = lc.audit.find(target=first.card_id, action=Action.SUPERSEDE)
    assert "replaced one this summary stated" in why["reason"], why


def test_a_merged_card_rewritten_since_stands_for_its_sources_as_they_read_then(
    runtime: Runtime,
) -> None:
    # Given three statements on one topic, written as cards on day 0, and merged on day 2
    ns = runtime.settings.key_namespace
    lc = _lifecycle(runtime)
    beagle = [
        "Our beagle Biscuit loves the beach walks at Carcavelos",
        "Biscuit the beagle chased gulls on the Carcavelos beach walks",
        "The beagle Biscuit sleeps after long beach walks at Carcavelos",
    ]
    ids = []
    for n, statement in enumerate(beagle):
        draft = CardDraft(
            tenant_id=ns, user_id="u1", canonical_key=f"episode:beagle{n}",
            memory_type="episode", title=statement[:80], summary=statement,
            source_type="session_episode", source_message_ids=[f"msg_{n}"],
        )  # fmt: skip
        ids.append(runtime.ltm.ledger.write(draft, now=AT + n).memory_id)
    runtime.ltm.projector.project(ids)
    report = consolidate_owner(lc, tenant_id=ns, user_id="u1", now=AT + 2 * DAY)
    assert len(report.merged) == 1
    cards = runtime.ltm.ledger.cards(ids)
    assert {c.status for c in cards.values()} == {CardStatus.SUPERSEDED}
    query = "What does Biscuit the beagle do on the Carcavelos beach walks?"

    # When recall is asked now, then the merged card answers
    now = _ask(runtime, query, as_of=None)
    assert {line.memory_type for line in now.memory.long_term if "Biscuit" in line.text} == {
        CONSOLIDATED
    }
    # When it is asked as of day 1, before the merge
    then = _ask(runtime, query, as_of=AT + DAY)
    # Then the cards of then answer, each on its own, with its own message
    found = {line.memory_id: line for line in then.memory.long_term if "Biscuit" in line.text}
    assert set(found) == set(ids), then.text
    assert {found[i].message_ids for i in ids} == {("msg_0",), ("msg_1",), ("msg_2",)}
    # ... and as of a moment between the first and the second card, only the first
    early = _ask(runtime, query, as_of=AT + 0.5)
    assert [line.memory_id for line in early.memory.long_term if "Biscuit" in line.text] == [
        ids[0]
    ]


def test_an_authoritative_fact_is_recalled_with_the_value_it_had_then(
    runtime: Runtime,
) -> None:
    # Given a timezone set, then changed (PostgreSQL keeps both versions with validity)
    ns = runtime.settings.key_namespace
    for zone in ("Europe/Lisbon", "Asia/Tokyo"):
        with runtime.engine.begin() as conn:
            set_profile(db=conn, tenant_id=ns, user_id="u1", update={"timezone": zone})
    with runtime.engine.connect() as conn:
        starts = [
            float(v)
            for (v,) in conn.execute(
                text(
                    "SELECT extract(epoch FROM valid_from) FROM stable_memory_facts "
                    "WHERE tenant_id = :t AND user_id = 'u1' "
                    "AND canonical_fact_key = 'profile.timezone' ORDER BY valid_from"
                ),
                {"t": ns},
            )
        ]
    assert len(starts) == 2 and starts[0] < starts[1]
    query = "What is my timezone in my profile?"
    # When recall is asked now (the profile cache warm), then the current value answers
    assert "Asia/Tokyo" in _ask(runtime, query, as_of=None).text
    current = _ask(runtime, query, as_of=None)
    assert "Asia/Tokyo" in current.text and "Europe/Lisbon" not in current.text
    # When it is asked as of a moment between the two writes: the value of then
    then = _ask(runtime, query, as_of=(starts[0] + starts[1]) / 2)
    assert "Europe/Lisbon" in then.text and "Asia/Tokyo" not in then.text
    # ... and before the first write there was no timezone at all
    before = _ask(runtime, query, as_of=starts[0] - 60)
    assert "Europe/Lisbon" not in before.text and "Asia/Tokyo" not in before.text


class FixedRanks(LtmSearch):
    """The ranking of a search, fixed (the ledger and what recall makes of it are real)."""

    def __init__(self, ids: Sequence[str]) -> None:  # no indexes: nothing is searched
        self.policy = SearchPolicy()
        self.ids = list(ids)

    def search(
        self, query: str, flt: CardFilter, *, mode: SearchMode = SearchMode.HYBRID,
        policy: SearchPolicy | None = None, now: float | None = None,
    ) -> list[Ranked]:  # fmt: skip
        return [Ranked(m, 1.0 - n / 10, 1.0 - n / 10, 0.5, 0.0, ("fixed",))
                for n, m in enumerate(self.ids)]  # fmt: skip


def test_an_entity_card_gives_its_rank_to_the_statements_asked_for(runtime: Runtime) -> None:
    # Given three sessions that each say something about Anna, consolidated on day 3
    lc = _lifecycle(runtime)
    ns = runtime.settings.key_namespace
    said = [
        "My sister Anna keeps 2 horses on her farm in Alentejo.",
        "Last spring my sister Anna ran the Lisbon half marathon in two hours.",
        "For my birthday my sister Anna baked a lemon cake with poppy seeds.",
    ]
    for n, statement in enumerate(said):
        _say(runtime, f"s{n}", statement, AT + n * DAY)
        finalise(lc, user_id="u1", tenant_id=ns, session_id=f"s{n}", now=AT + n * DAY + 3600)
    report = consolidate_owner(lc, tenant_id=ns, user_id="u1", now=AT + 3 * DAY)
    [entity] = report.entities
    view = runtime.ledger.cards([entity])[entity]
    named = runtime.ledger.cards(view.source_card_ids)
    by_text = {c.summary: c.memory_id for c in named.values()}
    assert set(said) <= set(by_text), by_text
    cake, marathon = by_text[said[2]], by_text[said[1]]
    filters = RetrievalFilters(tenant_id=ns, user_id="u1", project_ids=())
    query = "What cake did Anna bake for my birthday?"

    def found(ranks: Sequence[str], at: float | None = None) -> list[tuple[str, int | None]]:
        searcher = LedgerBackedSearcher(FixedRanks(ranks), runtime.ledger)
        hits = searcher.search(query=query, mode=LtmMode.HYBRID, filters=filters, k=10, as_of=at)
        return [(c.memory_id, c.layer_rank) for c in hits]

    # When the search ranks the entity card first, then the marathon statement
    # Then the statement asked for takes the entity card's rank, as the memory it is
    # (its own id, text and date), and the entity card itself is not a memory to inject
    got = found([entity, marathon])
    assert got == [(cake, 0), (marathon, 1)], [(named[m].summary if m in named else m, r)
                                               for m, r in got]  # fmt: skip
    searcher = LedgerBackedSearcher(FixedRanks([entity]), runtime.ledger)
    [hit] = searcher.search(query=query, mode=LtmMode.HYBRID, filters=filters, k=10)
    assert hit.summary == said[2] and hit.said_at == AT + 2 * DAY
    # ... a statement found again below is not repeated; found above, it keeps its rank
    assert found([entity, cake]) == [(cake, 0)]
    assert found([cake, entity]) == [(cake, 0)]
    # When asked as of a moment, the entity card (its cards as they are now) is left out
    assert found([entity, marathon], at=AT + 4 * DAY) == [(marathon, 1)]
    # And through the whole recall, the entity card is never a candidate of its own
    out = _ask(runtime, query, as_of=None, explain=True)
    assert out.explain is not None
    assert entity not in {s.candidate.memory_id for s in out.explain.candidates}
    assert sum(line.text == said[2] for line in out.memory.long_term) == 1, out.text
