"""Pure parts of episode cards: context from the session's L0 and the card draft."""

from __future__ import annotations

from pathlib import Path

from memstrata.core.lifecycle.episodes import (
    CONTEXT_CHARS,
    EPISODE_SOURCE,
    EpisodeContext,
    episode_draft,
    exchange_of,
    message_context,
)
from memstrata.core.ltm.card import LtmCard
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType
from memstrata.core.models.transcript import MessageIn, Role, TranscriptRecord
from memstrata.core.transcript.store import TranscriptStore

AT = 1_800_000_000.0


def rec(n: int, role: Role, content: str, *, name: str | None = None,
        at: float | None = None) -> TranscriptRecord:  # fmt: skip
    return TranscriptRecord(
        user_id="u1", session_id="s1", turn_id=f"t{n}", message_id=f"m{n}", role=role,
        content=content, name=name, at=AT + n if at is None else at,
    )  # fmt: skip


def test_context_is_the_spoken_message_before_and_after_skipping_tool_output() -> None:
    records = [
        rec(1, Role.USER, "How was your weekend?"),
        rec(2, Role.TOOL, "{'rows': 3}"),
        rec(3, Role.ASSISTANT, "I went hiking " + "x" * 1000),
        rec(4, Role.USER, "Nice!"),
    ]
    ctx = message_context(records)
    assert ctx["m1"] == ("", records[2].content[:CONTEXT_CHARS])
    assert ctx["m3"] == ("How was your weekend?", "Nice!")
    assert ctx["m4"] == (records[2].content[:CONTEXT_CHARS], "")
    assert "m2" not in ctx and len(ctx["m1"][1]) == CONTEXT_CHARS


def test_context_is_an_exchange_between_parties_not_one_authors_next_entry() -> None:
    records = [
        rec(1, Role.USER, "Caroline: I went hiking.", name="Caroline"),
        rec(2, Role.USER, "Melanie: Where did you go?", name="Melanie"),
        rec(3, Role.USER, "Melanie: I painted a lake.", name="Melanie"),  # same author
        rec(4, Role.ASSISTANT, "Nice lake!", at=AT + 4000),  # an hour later: not a reply
    ]
    ctx = message_context(records)
    assert ctx["m1"] == ("", "Melanie: Where did you go?")
    assert ctx["m2"] == ("Caroline: I went hiking.", "")
    assert ctx["m3"] == ("", "") and ctx["m4"] == ("", "")


def test_an_episode_card_holds_the_statement_alone() -> None:
    item = MemoryItem(
        id="m_1", user_id="u1", tenant_id="t1", session_id="s1", memory_type=MemoryType.FACT,
        subtype="conversation_fact", summary="Caroline: I went to a support group.",
        detail={"speaker": "Caroline"}, entities=["Caroline"],
        source=MemorySource(kind="conversation", message_ids=["m3"]), confidence=0.7,
        importance=0.6, created_at=AT, updated_at=AT, last_access_at=AT, expires_at=AT + 60,
        fingerprint="f" * 16, canonical_fact_key="user:conv:abc", seen_sessions=["s1"],
    )  # fmt: skip
    draft = episode_draft(item, tenant="t1", session_id="s1")
    assert draft.summary == item.summary and draft.title == item.summary[:80]
    assert draft.content == ""  # the neighbours stay in L0 (EpisodeContext indexes them)
    assert draft.canonical_key == "episode:user:conv:abc" and draft.memory_type == "episode"
    assert draft.source_message_ids == ["m3"] and draft.importance == 0.6
    assert draft.tags == ["episode", "session:s1"]


def test_the_exchange_of_a_statement_is_what_its_first_message_answers_and_its_last_got() -> None:
    ctx = {"m1": ("Where were you?", "Oh nice"), "m2": ("x", "And then?")}
    assert exchange_of(["m1", "m2"], ctx) == "Where were you?\nAnd then?"
    assert exchange_of(["m9"], ctx) == "" and exchange_of(["m1"], {"m1": ("", "")}) == ""


def _card(mid: str, session_tag: str, messages: list[str], *, source: str = EPISODE_SOURCE,
          user: str = "u1") -> LtmCard:  # fmt: skip
    return LtmCard(
        memory_id=mid, user_id=user, tenant_id="t1", memory_type="episode", title="t",
        summary="s", tags=["episode", session_tag], source_type=source,
        source_message_ids=messages, bm25_text="s", created_at=AT, updated_at=AT,
        importance=0.5, confidence=0.7, canonical_key=f"episode:{mid}",
    )  # fmt: skip


def _say(store: TranscriptStore, session: str, *said: tuple[str, str, str]) -> list[str]:
    ids = []
    for n, (role, name, text) in enumerate(said):
        turn = store.append_turn(user_id="u1", tenant_id="t1", session_id=session,
                                 messages=[MessageIn(role=role, content=text, name=name)],
                                 at=AT + n)  # fmt: skip
        ids.append(turn.records[0].message_id)
    return ids


def test_episode_context_reads_each_session_from_l0_once_at_index_time(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path, fsync=False)
    a = _say(store, "s1", ("user", "Melanie", "How was your weekend?"),
             ("user", "Caroline", "I went to a support group."),
             ("user", "Melanie", "What did they talk about?"))  # fmt: skip
    long_session = "s" * 80  # the card's tag keeps only its head
    b = _say(store, long_session, ("user", "Jon", "Did you run?"), ("user", "Gina", "I ran 5k."))
    cards = [
        _card("c1", "session:s1", [a[1]]),
        _card("c2", f"session:{long_session}"[:64], [b[1]]),
        _card("c3", "session:s1", [a[1]], source="promoted_from_stm"),  # not an episode
        _card("c4", "session:gone", ["m_x"]),  # its session was erased: no context
        _card("c5", "session:..", ["m_y"]),  # not a valid id: never a path
    ]
    out = EpisodeContext(store)(cards)
    assert out.unread == {}
    assert out.texts == {
        "c1": "How was your weekend?\nWhat did they talk about?",
        "c2": "Did you run?",
    }


def test_cut_tags_sharing_a_head_each_find_their_own_session(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path, fsync=False)
    head = "x" * 56
    a = _say(store, head + "-A", ("user", "Jon", "Question A?"), ("user", "Gina", "Answer A."))
    b = _say(store, head + "-B", ("user", "Jon", "Question B?"), ("user", "Gina", "Answer B."))
    tag = f"session:{head}"[:64]
    out = EpisodeContext(store)([_card("ca", tag, [a[1]]), _card("cb", tag, [b[1]])])
    assert out.texts == {"ca": "Question A?", "cb": "Question B?"} and out.unread == {}


def test_an_unreadable_session_holds_back_its_own_cards_only(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path, fsync=False)
    a = _say(store, "s1", ("user", "Jon", "Did you run?"), ("user", "Gina", "I ran 5k."))
    _say(store, "s3", ("user", "Jon", "Hello there"))
    broken = store.path(user_id="u1", session_id="s3", tenant_id="t1")
    broken.unlink()
    broken.mkdir()  # reading it raises IsADirectoryError, an OSError
    out = EpisodeContext(store)([_card("c1", "session:s1", [a[1]]),
                                 _card("c3", "session:s3", ["m_z"])])  # fmt: skip
    assert out.texts == {"c1": "Did you run?"}
    assert list(out.unread) == ["c3"] and "L0" in out.unread["c3"]


def test_an_l0_root_that_is_not_there_is_a_fault_not_an_erased_owner(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "not-mounted", fsync=False)
    out = EpisodeContext(store)([_card("c1", "session:s1", ["m_1"]),
                                 _card("c2", "promoted", ["m_2"], source="promoted_from_stm")])
    assert out.texts == {} and list(out.unread) == ["c1"]
    assert "not there" in out.unread["c1"]
