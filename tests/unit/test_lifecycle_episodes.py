"""Pure parts of episode cards: context from the session's L0 and the card draft."""

from __future__ import annotations

from memstrata.core.lifecycle.episodes import CONTEXT_CHARS, episode_draft, message_context
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType
from memstrata.core.models.transcript import Role, TranscriptRecord

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


def test_an_episode_card_renders_the_statement_and_indexes_its_neighbours() -> None:
    item = MemoryItem(
        id="m_1", user_id="u1", tenant_id="t1", session_id="s1", memory_type=MemoryType.FACT,
        subtype="conversation_fact", summary="Caroline: I went to a support group.",
        detail={"speaker": "Caroline"}, entities=["Caroline"],
        source=MemorySource(kind="conversation", message_ids=["m3"]), confidence=0.7,
        importance=0.6, created_at=AT, updated_at=AT, last_access_at=AT, expires_at=AT + 60,
        fingerprint="f" * 16, canonical_fact_key="user:conv:abc", seen_sessions=["s1"],
    )  # fmt: skip
    draft = episode_draft(item, tenant="t1", session_id="s1",
                          context={"m3": ("How was your weekend?", "Nice!")})  # fmt: skip
    assert draft.summary == item.summary and draft.title == item.summary[:80]
    assert draft.content == "How was your weekend?\nNice!"
    assert draft.canonical_key == "episode:user:conv:abc" and draft.memory_type == "episode"
    assert draft.source_message_ids == ["m3"] and draft.importance == 0.6
    # no transcript (L0 unavailable): still a card, without context
    bare = episode_draft(item, tenant="t1", session_id="s1", context={})
    assert bare.content == "" and bare.summary == item.summary
