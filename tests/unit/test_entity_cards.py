"""Entity cards' rules (issue 13.3): which names a card states, which names get a card,
and what the card says (pure; the stores: test_lifecycle_consolidate.py)."""

from __future__ import annotations

import pytest

from memstrata.core.lifecycle.config import ConsolidatePolicy
from memstrata.core.lifecycle.entity_cards import (
    Statement,
    entity_draft,
    entity_key,
    gathered,
    names_of,
)
from memstrata.core.ltm.card import ENTITY
from memstrata.core.ltm.views import focused


@pytest.mark.parametrize(
    ("summary", "entities", "speaker_first", "names"),
    [
        # capitalised words inside a sentence are names; a possessive is the name
        ("My sister Anna keeps 2 horses on her farm in Alentejo.", [], False,
         ["Anna", "Alentejo"]),
        ("We stayed at Anna's place. Then we drove to Porto.", [], False, ["Anna", "Porto"]),
        # a sentence's first word, weekdays, months, greetings and "I" are not
        ("Yesterday I met Oscar on Friday in May. Oscar is my cat.", [], False, ["Oscar"]),
        # the extractor's entities come first; the speaker of a statement is left out
        ("I deployed payment-service to staging with Jordan", ["Caroline", "payment-service"],
         True, ["payment-service", "Jordan"]),
        ("Checkout times out on payment-service", ["payment-service"], False,
         ["payment-service"]),
        # all capitals (an acronym) and Chinese text give no proper nouns
        ("The LGBTQ support group met at the YMCA", [], False, []),
        ("我妹妹安娜在阿连特茹有三匹马", ["安娜"], False, ["安娜"]),
    ],
)  # fmt: skip
def test_the_names_a_card_states(
    summary: str, entities: list[str], speaker_first: bool, names: list[str]
) -> None:
    assert names_of(summary, entities, speaker_first=speaker_first) == names


def st(n: int, names: tuple[str, ...], session: str, **kw: object) -> Statement:
    return Statement(
        memory_id=f"ltm_{n}", summary=f"statement {n} about {' and '.join(names)}",
        names=names, message_ids=(f"m{n}",), session=session, created_at=float(n),
        importance=0.5, confidence=0.8, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


POL = ConsolidatePolicy()


def test_a_name_on_three_cards_of_two_sessions_gets_a_card_and_only_then() -> None:
    cards = [
        st(1, ("Anna",), "session:s1"),
        st(2, ("Anna", "Porto"), "session:s1"),
        st(3, ("anna",), "session:s2"),  # case does not matter
        st(4, ("Porto",), "session:s1"),
        st(5, ("Porto",), "session:s1"),  # three cards, one session
        st(6, ("Oscar",), "session:s1"),
        st(7, ("Oscar",), "session:s2"),  # two sessions, two cards
    ]
    [anna] = gathered(cards, POL)
    assert anna.name == "Anna" and [m.memory_id for m in anna.members] == [
        "ltm_1", "ltm_2", "ltm_3"
    ]  # fmt: skip
    assert anna.sessions == 2
    # a card without a session is a session of its own
    loose = [st(n, ("Porto",), "") for n in range(3)]
    assert [g.name for g in gathered(loose, POL)] == ["Porto"]


def test_a_name_on_most_of_a_large_scope_says_nothing_particular() -> None:
    # the speaker on every card of 200, a pet on 5 of them
    cards = [st(n, ("Caroline", *(("Oscar",) if n < 5 else ())), f"session:s{n % 7}")
             for n in range(200)]  # fmt: skip
    assert [g.name for g in gathered(cards, POL)] == ["Oscar"]
    # at most entity_max_cards, the most stated first
    many = [st(n, (f"Name{n // 3}",), f"session:s{n}") for n in range(30)]
    few = POL.model_copy(update={"entity_max_cards": 2})
    assert len(gathered(many, few)) == 2


def test_the_entity_card_names_its_cards_and_copies_no_statement() -> None:
    [g] = gathered([st(n, ("Anna",), f"session:s{n}") for n in range(4)], POL)
    draft = entity_draft(g, tenant="t1", user="u1")
    assert draft.memory_type == ENTITY and draft.canonical_key == entity_key("Anna")
    assert draft.source_card_ids == ["ltm_0", "ltm_1", "ltm_2", "ltm_3"]  # written order
    assert draft.source_message_ids == ["m0", "m1", "m2", "m3"]
    assert draft.summary == "Anna: stated on 4 cards of 4 sessions" and draft.content == ""
    assert "statement" not in draft.title + draft.summary
    assert draft.entities == ["Anna"] and draft.tags == [ENTITY]


def test_a_view_stands_for_its_own_owners_active_cards_the_query_is_about() -> None:
    from memstrata.core.ltm.card import CardStatus, LtmCard

    def card(mid: str, text: str, user: str = "u1", sources: list[str] | None = None,
             status: CardStatus = CardStatus.ACTIVE) -> LtmCard:  # fmt: skip
        return LtmCard(memory_id=mid, user_id=user, tenant_id="t1", memory_type="episode",
                       title=text[:20], summary=text, source_type="session_episode",
                       source_message_ids=[f"m_{mid}"], source_card_ids=sources or [],
                       bm25_text=text, created_at=1.0, updated_at=1.0, importance=0.5,
                       confidence=0.5, canonical_key=f"episode:{mid}", status=status)  # fmt: skip

    named = ["ltm_b", "ltm_a", "ltm_c", "ltm_x", "ltm_o", "ltm_h"]
    view = card("ltm_v", "Anna: stated on 5 cards", sources=named).model_copy(
        update={"entities": ["Anna"]}
    )
    found = {c.memory_id: c for c in (
        card("ltm_a", "Anna keeps horses on her farm"),
        card("ltm_b", "Anna ran the Lisbon marathon"),
        card("ltm_c", "Anna baked a lemon cake"),
        card("ltm_o", "Anna the cat keeps horses", user="u2"),  # another owner's
        card("ltm_h", "Anna keeps horses and a farm", status=CardStatus.SUPERSEDED),  # merged
    )}  # fmt: skip

    def ids(query: str, keep: int = 2) -> list[str]:
        return [c.memory_id for c in focused(view, found, query, keep=keep)]

    # the cards sharing the most terms with the query besides the name (every one states
    # it), in the view's order; a card gone (ltm_x), another owner's (ltm_o) or one a
    # merge hides (ltm_h) is never among them
    assert ids("does Anna keep horses on the farm?") == ["ltm_a"]
    assert ids("Did Anna run a marathon or bake a cake?") == ["ltm_b", "ltm_c"]
    assert ids("Did Anna run a marathon or bake a cake?", keep=1) == ["ltm_c"]  # 2 terms
    assert ids("Tell me about Anna") == ["ltm_b"]  # the first, when none shares a term
    assert focused(card("ltm_w", "empty view", sources=["ltm_x"]), found, "Anna") == []


def test_index_contexts_combine_per_card() -> None:
    from collections.abc import Sequence

    from memstrata.core.ltm.card import LtmCard
    from memstrata.core.ltm.ports import ContextRead
    from memstrata.core.ltm.views import Contexts

    def episodes(cards: Sequence[LtmCard]) -> ContextRead:
        assert cards == []
        return ContextRead({"ltm_a": "the question it answered"}, {"ltm_c": "L0: gone"})

    def views(cards: Sequence[LtmCard]) -> ContextRead:
        assert cards == []
        return ContextRead({"ltm_a": "a statement", "ltm_b": "another"})

    read = Contexts(episodes, views)([])
    assert dict(read.texts) == {"ltm_a": "the question it answered\na statement",
                                "ltm_b": "another"}  # fmt: skip
    assert dict(read.unread) == {"ltm_c": "L0: gone"}
