"""The conversation_fact rule of the rule extractor, English and Chinese (pure, no Redis).

A user statement that no debugging rule claims becomes one verified, medium-confidence
``conversation_fact`` candidate per message; chit-chat, questions and messages another
rule already covered add none.
"""

from __future__ import annotations

from memstrata.core.extract.rules import (
    ExtractionContext,
    RuleExtractor,
    is_reaction,
    says_nothing_of_its_own,
)
from memstrata.core.models.candidate import Candidate
from memstrata.core.models.memory import MemoryType
from memstrata.core.models.transcript import Role, TranscriptRecord

CTX = ExtractionContext(user_id="u_42", session_id="s_1", turn_index=2)
EXTRACTOR = RuleExtractor()


def _rec(
    text: str, mid: str = "t1.0", *, role: Role = Role.USER, name: str | None = None
) -> TranscriptRecord:
    return TranscriptRecord(
        message_id=mid, turn_id=mid.split(".")[0], user_id="u_42", session_id="s_1",
        role=role, content=text, at=1_700_000_000.0, name=name,
    )  # fmt: skip


def _facts(
    text: str, mid: str = "t1.0", *, role: Role = Role.USER, name: str | None = None
) -> list[Candidate]:
    cands = EXTRACTOR.extract([_rec(text, mid, role=role, name=name)], CTX)
    return [c for c in cands if c.rule == "conversation_fact"]


def _fact(text: str, mid: str = "t1.0", *, name: str | None = None) -> Candidate:
    (cand,) = _facts(text, mid, name=name)
    return cand


def _only(text: str) -> Candidate:
    """The one candidate of any rule that a user message yields."""
    (cand,) = EXTRACTOR.extract([_rec(text)], CTX)
    return cand


def test_a_casual_statement_becomes_one_verified_fact_with_its_own_provenance() -> None:
    (cand,) = EXTRACTOR.extract([_rec("I went to a support group yesterday.")], CTX)
    assert cand.rule == "conversation_fact"
    assert cand.memory_type is MemoryType.FACT
    assert cand.subtype == "conversation_fact"
    assert cand.tags == ["conversation_fact"]
    assert cand.summary == "I went to a support group yesterday."
    assert cand.source.kind == "conversation"
    assert cand.source.message_ids == ["t1.0"]
    assert cand.confidence == 0.7
    assert cand.signals.is_verified
    assert not (cand.signals.chit_chat or cand.signals.transient)
    assert cand.detail == {"speaker": ""}
    assert cand.canonical_fact_key.startswith("user:conv:")
    assert len(cand.canonical_fact_key) == len("user:conv:") + 16


def test_questions_are_dropped_from_the_statement() -> None:
    cand = _fact("My kids love painting. How about yours?")
    assert cand.summary == "My kids love painting"
    assert "How about" not in cand.summary


def test_a_chinese_statement_becomes_a_fact() -> None:
    cand = _fact("我昨天去参加了一个互助小组的活动。你最近怎么样？")
    assert cand.summary == "我昨天去参加了一个互助小组的活动。"
    assert cand.signals.is_verified
    assert cand.canonical_fact_key.startswith("user:conv:")


def test_chit_chat_adds_no_fact() -> None:
    for text in ("thanks!", "哈哈好的", "Caroline: thanks!"):
        assert _facts(text) == [], text


def test_a_pure_question_adds_no_fact() -> None:
    for text in (
        "How have you been?",
        "Melanie: What did you paint last week?",
        "你周末去哪儿了？",
    ):
        assert _facts(text) == [], text


def test_too_short_a_statement_adds_no_fact() -> None:
    for text in ("Wonderful news", "Yesterday, really.", "我去了", "Ann: so cool"):
        assert _facts(text) == [], text


def test_assistant_text_adds_no_fact() -> None:
    assert _facts("I went hiking last week with my family.", role=Role.ASSISTANT) == []


def test_a_message_another_rule_covers_yields_only_that_rule() -> None:
    cands = EXTRACTOR.extract([_rec("I prefer the conclusion first.")], CTX)
    assert [c.rule for c in cands] == ["user_preference"]
    assert cands[0].memory_type is MemoryType.PREFERENCE


def test_each_uncovered_user_message_of_a_turn_gets_its_own_fact() -> None:
    turn = [
        _rec("I prefer the conclusion first.", "t1.0"),
        _rec("My sister just moved to Lisbon for work.", "t1.1"),
        _rec("That sounds like a big change for her.", "t1.2", role=Role.ASSISTANT),
    ]
    cands = EXTRACTOR.extract(turn, CTX)
    assert [(c.rule, c.source.message_ids) for c in cands] == [
        ("user_preference", ["t1.0"]),
        ("conversation_fact", ["t1.1"]),
    ]


def test_the_speaker_comes_from_the_record_name() -> None:
    cand = _fact("I adopted a cat named Tom last spring.", name="Caroline")
    assert cand.detail == {"speaker": "Caroline"}
    assert cand.entities[0] == "Caroline"
    assert cand.summary == "I adopted a cat named Tom last spring."


def test_the_speaker_comes_from_a_transcript_prefix_which_the_summary_keeps() -> None:
    cand = _fact("Caroline: I went to a LGBTQ support group yesterday. How about you?")
    assert cand.detail == {"speaker": "Caroline"}
    assert cand.summary == "Caroline: I went to a LGBTQ support group yesterday"
    assert cand.entities[0] == "Caroline"
    zh = _fact("小明: 我上周末带孩子们去博物馆看了恐龙展。")
    assert zh.detail == {"speaker": "小明"}
    assert zh.summary.startswith("小明: 我上周末")
    assert zh.entities[0] == "小明"


def test_the_record_name_wins_over_the_prefix() -> None:
    cand = _fact("Mel: I ran a charity race for mental health.", name="Melanie")
    assert cand.detail == {"speaker": "Melanie"}
    assert cand.summary.startswith("Mel: I ran")


def test_a_sentence_with_a_colon_is_no_speaker() -> None:
    cand = _fact("The thing I remember most about that trip, honestly: the food was amazing.")
    assert cand.detail == {"speaker": ""}


def test_the_speaker_is_the_first_entity_and_not_repeated() -> None:
    cand = _fact("I deployed billing-service to prod before the holidays.", name="billing-service")
    assert cand.entities[0] == "billing-service"
    assert [e.casefold() for e in cand.entities].count("billing-service") == 1
    assert "prod" in cand.entities
    assert len(cand.entities) <= 16


def test_the_same_statement_maps_to_one_canonical_key() -> None:
    a = _fact("Ann: I adopted a cat named Tom.", mid="t1.0")
    b = _fact("Ann: I adopted a cat named Tom.", mid="t7.0")
    c = _fact("Ann: I adopted a dog named Rex.", mid="t8.0")
    assert a.canonical_fact_key == b.canonical_fact_key
    assert a.source.message_ids != b.source.message_ids
    assert c.canonical_fact_key != a.canonical_fact_key


def test_the_summary_is_clipped() -> None:
    cand = _fact("We hiked up to the lake and back. " * 20)
    assert len(cand.summary) <= 300
    assert cand.summary.endswith("…")


def test_the_rule_can_be_switched_off() -> None:
    off = RuleExtractor(conversation_facts=False)
    assert off.extract([_rec("I went to a support group yesterday.")], CTX) == []
    cands = off.extract([_rec("I prefer the conclusion first.")], CTX)
    assert [c.rule for c in cands] == ["user_preference"]
    assert _facts("I went to a support group yesterday.")  # on by default


def test_a_reaction_states_nothing_of_the_speakers_own() -> None:
    for sentence in (
        "Wow, what a fun moment!",  # a short exclamation
        "Thanks, Melanie!",
        "Your kind words mean a lot.",  # addressed to the listener
        "You'd be a great counselor!",
        "你太厉害了！",
        "哇，好厉害！",
        "Have a lovely Sunday!",  # a day named in passing
    ):
        assert is_reaction(sentence, EXTRACTOR.lexicon), sentence
    for sentence in (
        "I just signed up for a pottery class yesterday.",  # the speaker's own
        "We even went on another camping trip in the forest!",
        "They were so excited to make something with clay.",  # the speaker's world
        "Took the kids to the museum last week, so fun!",  # long: maybe an "I" left out
        "You can find the API key in the vault.",  # an instruction: no word of praise
        "Use pnpm, not npm!",
        "周末去爬山了，风景特别好！",
        "Won 3 games in a row!",  # a number is a detail
        "Sorry, the meeting moved to Friday!",  # so is a day named as when
        "Congrats, the launch moved to March!",
        "我今天去了医院。",
        "Bart参与了学校的迷你马拉松，感到非常开心。",  # 迷你 is "mini", not "you"
    ):
        assert not is_reaction(sentence, EXTRACTOR.lexicon), sentence


def test_reactions_leave_the_statement_and_a_message_of_only_reactions_adds_no_fact() -> None:
    cand = _fact("Melanie: Wow, Caroline! That's great! I just signed up for a pottery class.")
    assert cand.summary == "Melanie: I just signed up for a pottery class."
    for text in (
        "Caroline: Wow, what a fun moment! What's the band?",
        "Caroline: Thanks, Melanie! Your kind words mean a lot.",
        "Hey Mel! Good to see you! How have you been?",
    ):
        assert _facts(text) == [], text
    kept = RuleExtractor(drop_reactions=False)
    (old,) = kept.extract([_rec("Caroline: Wow, what a fun moment! What's the band?")], CTX)
    assert old.summary == "Caroline: Wow, what a fun moment!"


def test_a_message_of_reactions_and_questions_about_the_listener_says_nothing() -> None:
    lexicon = EXTRACTOR.lexicon
    for text in (
        "Caroline: Thanks, Melanie! Your kind words mean a lot.",
        "Melanie: Cool! What type of music do you play?",  # asks for the other's news
        "Wow, great pic!",
        "哇，好厉害！",
        "thanks!",
    ):
        assert says_nothing_of_its_own(text, lexicon), text
    for text in (
        "Melanie: Wow! I just signed up for a pottery class yesterday.",
        "Caroline: Cool! What did it look like?",  # not about the listener
        "hmm, what about adding a loading spinner?",  # what a user asked is worth finding
        "hmm, can you show me another example?",  # the asker's own request
        "我上周去了医院。",
        "",
    ):
        assert not says_nothing_of_its_own(text, lexicon), text


def test_a_chinese_statement_ending_in_the_particle_ne_and_a_full_stop_is_no_question() -> None:
    # "呢。" closes a statement ("he is at work, you know"); "呢" alone or "呢？" asks
    cand = _fact("我表弟在浙江杭州工作呢。")
    assert cand.summary == "我表弟在浙江杭州工作呢。"
    for text in ("你最近在忙什么呢", "他在干嘛呢？"):
        assert _facts(text) == [], text


def test_cheering_the_listener_on_is_no_constraint_and_no_fact() -> None:
    # "must" and "never" also cheer a friend on; an STM constraint is pinned above every
    # answer (docs/QUALITY.md, twelfth wave)
    for text in (
        "Never give up!",
        "Don't give up, buddy!",
        "Melanie: You must really enjoy having them around - they're so cool!",
        "Hang in there, you got this!",
        "Don't let anything stop you",
    ):
        assert EXTRACTOR.extract([_rec(text)], CTX) == [], text
    for text in (
        "Never push to main on Fridays.",
        "You must not delete the backups.",
        "Never give up on a flaky test: rerun it 3 times!",  # a number: a detail
        "Never give up the admin password!",  # "give up" with an object is no cheer
        "Never quit the migration halfway!",
        "Keep going, never restart prod!",  # the cheer is one part, the rule another
        "Don't worry about the cache, never restart prod.",
    ):
        cand = _only(text)
        assert (cand.rule, cand.summary) == ("user_constraint", text)


def test_an_idiom_of_can_t_must_or_never_is_no_constraint() -> None:
    # "I can't wait" looks forward and "you must have been thrilled" guesses: neither
    # binds anyone, so what they say is the speaker's conversation fact
    for text in (
        "The Minnesota Wolves! I can't wait to play with them!",
        "You must have been so pumped when it happened!",
        "You must’ve been thrilled!",
        "I can't imagine life without it.",
        "Never had a chance to visit it.",
        "Don't worry, I won't let anything get me down.",
    ):
        cand = _only(text)
        assert (cand.rule, cand.summary) == ("conversation_fact", text)
    for text in (
        "I can't use Docker on this laptop.",
        "You must be logged in to deploy.",
        "You must have completed the training before deploying.",  # a requirement
        "Don't think about restarting prod without approval.",
    ):
        assert _only(text).rule == "user_constraint", text
