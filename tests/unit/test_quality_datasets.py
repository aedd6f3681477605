"""Loaders of the quality harness on tiny inline files of the three formats."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstrata.ops.bench.quality.datasets import (
    BEAM_HEADLINE,
    beam_answers,
    detect_format,
    flatten_ids,
    load,
    load_beam,
    load_locomo,
    load_madial,
    load_memdaily,
    madial_query,
    normalise_evidence,
    parse_beam_time,
    parse_locomo_time,
    parse_memdaily_time,
    strip_beam_artefact,
)
from memstrata.ops.bench.quality.systems.base import bm25_tokens


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (["D1:3"], ["D1:3"]),
        (["D:11:26"], ["D11:26"]),
        (["D30:05"], ["D30:5"]),
        (["D8:6; D9:17"], ["D8:6", "D9:17"]),
        (["D1:3, D1:4 D1:3"], ["D1:3", "D1:4"]),
        (["D2:1", "D02:01"], ["D2:1"]),
        (["not an id", ""], []),
    ],
)
def test_normalise_evidence(raw: list[str], want: list[str]) -> None:
    assert normalise_evidence(raw) == want


def test_normalise_evidence_drops_ids_that_do_not_exist() -> None:
    assert normalise_evidence(["D1:3", "D99:1"], known={"D1:3"}) == ["D1:3"]


def test_times() -> None:
    assert (
        parse_locomo_time("1:56 pm on 8 May, 2023")
        == datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()
    )
    assert (
        parse_memdaily_time("2024年04月01日 周一 08:30")
        == datetime(2024, 4, 1, 8, 30, tzinfo=UTC).timestamp()
    )


def _locomo(tmp_path: Path) -> Path:
    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Look!", "blip_caption": "a red bike"},
        ],
        "session_2_date_time": "10:00 am on 9 June, 2023",
        "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "The cat is called Tom."}],
        "session_3_date_time": "10:00 am on 1 July, 2023",  # a date key without turns
    }
    qa = [
        {"question": "What pet?", "answer": "cat", "evidence": ["D1:1"], "category": 4},
        {"question": "Name?", "answer": "Tom", "evidence": ["D:2:01; D1:1"], "category": 1},
        {"question": "Bike?", "answer": "red", "evidence": ["D1:2", "D7:7"], "category": 2},
        {"question": "Dog?", "adversarial_answer": "no", "evidence": [], "category": 5},
    ]
    p = tmp_path / "locomo.json"
    p.write_text(json.dumps([{"sample_id": "conv-1", "conversation": conv, "qa": qa}]))
    return p


def test_load_locomo(tmp_path: Path) -> None:
    ds = load_locomo(_locomo(tmp_path))
    assert ds.fmt == "locomo"
    (space,) = ds.spaces
    assert [t.id for t in space.turns] == ["D1:1", "D1:2", "D2:1"]
    assert space.turns[1].text == "Bob: Look! [shares a red bike]"
    assert space.turns[0].at < space.turns[1].at < space.turns[2].at  # one second apart
    assert [t.session for t in space.turns] == ["1", "1", "2"]
    golds = [q.gold for q in space.questions]
    assert golds == [("D1:1",), ("D2:1", "D1:1"), ("D1:2",), ()]
    # containment looks for the answer; category 5's adversarial answer is not one
    assert [q.answers for q in space.questions] == [("cat",), ("Tom",), ("red",), ()]
    assert ds.dropped_ids == 1  # D7:7 does not exist
    assert space.questions[1].category == "1 multi-hop"
    assert "5 adversarial" not in ds.headline
    assert {"1 multi-hop", "4 single-hop"} <= ds.headline


def test_load_locomo_session_slice_keeps_answerable_questions(tmp_path: Path) -> None:
    ds = load_locomo(_locomo(tmp_path), limit_sessions=1)
    (space,) = ds.spaces
    assert [t.id for t in space.turns] == ["D1:1", "D1:2"]
    # "Name?" needs session 2 and "Bike?" cites a missing session 7: both dropped
    assert [q.text for q in space.questions] == ["What pet?"]


def test_load_memdaily_with_distractors(tmp_path: Path) -> None:
    folder = tmp_path / "memdaily"
    folder.mkdir()
    for stem, word in (("01_simple_events", "论坛"), ("02_conditional_roles", "会议")):
        traj = {
            "tid": 0,
            "message_list": [
                {"mid": 0, "message": f"我将要参加{word}。", "time": "2024年04月01日 周一 08:30"},
                {"mid": 1, "message": f"{word}在北京。", "time": "2024年04月02日 周二 09:00"},
            ],
            "question_list": [
                {"qid": 0, "question": f"{word}在哪里？", "answer": "北京", "target_step_id": [1]}
            ],
        }
        (folder / f"{stem}.json").write_text(json.dumps([traj], ensure_ascii=False))
    ds = load_memdaily(folder, distractors=1, seed=3)
    assert detect_format(folder) == "memdaily"
    assert len(ds.spaces) == 2
    space = ds.spaces[0]
    assert len(space.turns) == 3
    assert [t.id for t in space.turns if t.id.startswith("02_")]  # the distractor
    assert space.questions[0].gold == ("01_simple_events:0:1",)
    assert space.questions[0].category == "01 simple"
    times = [t.at for t in space.turns]
    assert times == sorted(times)
    again = load_memdaily(folder, distractors=1, seed=3)
    assert [t.id for t in again.spaces[0].turns] == [t.id for t in space.turns]


def test_load_madial(tmp_path: Path) -> None:
    en, zh = tmp_path / "en", tmp_path / "zh"
    en.mkdir()
    zh.mkdir()
    (en / "X-en-memory.json").write_text(
        '{"1": {"time": "2023-12-25", "event": "Bart danced."}}\n'
        '{"2": {"time": "2023-05-01", "event": "Lisa read."}}\n'
    )
    (zh / "X-zh-memory.json").write_text(
        '{"1": {"time": "2023-12-25", "event": "跳舞", "user-id": 1}}\n'
        '{"2": {"time": "2023-05-01", "event": "读书", "user-id": 2}}\n'
    )
    dialogue = {
        "dialogue": ["<BOD>\n", '<Bart>: "Party!"\n', '<Assistant>: "Nice."\n',
                     '<Assistant>: "You danced!"\n', "<EOD>\n"],
        "test-turn": [3], "relevant-id": [1, 2], "user-id": 1,
    }  # fmt: skip
    (en / "X-en-dialogue.json").write_text(json.dumps(dialogue) + "\n")
    ds = load(en)
    assert ds.fmt == "madial"
    (space,) = ds.spaces
    assert [t.id for t in space.turns] == ["1"]  # user 2's memory is not a candidate
    (q,) = space.questions
    assert q.gold == ("1",)
    assert q.text == "Bart: Party!\nAssistant: Nice."
    assert load_madial(zh / ".." / "en").spaces[0].turns[0].text == "Bart danced."


def test_madial_query_without_test_turn_takes_everything() -> None:
    assert madial_query(["<BOD>", "<A>: x", "<EOD>"], []) == "A: x"


def test_bm25_tokens() -> None:
    assert bm25_tokens("The Cat's toy, and Bob's BIKE!") == ["cat's", "toy", "bob's", "bike"]
    assert "北京" in bm25_tokens("论坛在北京。")


# ---------------------------------------------------------------------- BEAM
BEAM_SHARED = Path(__file__).resolve().parents[3] / "shared" / "bench" / "beam" / "100K"


def _msg(mid: int, role: str, content: str, anchor: str | None = None) -> dict[str, object]:
    m: dict[str, object] = {"role": role, "id": mid, "content": content}
    if anchor:
        m["time_anchor"] = anchor
    return m


def _beam(tmp_path: Path) -> Path:
    """Two chats; chat 1 has two batches (anchors on the first message, as in the data)."""
    root = tmp_path / "100K"
    chat1 = [
        {"batch_number": 1, "time_anchor": None, "turns": [
            [_msg(0, "user", "My sprint ends on March 29. ->-> 1,1", "March-15-2024"),
             _msg(1, "assistant", "Noted: March 29.")],
            [_msg(2, "user", "I use Flask 2.3 ->->  1,2"), _msg(3, "assistant", "Good.")],
        ]},
        {"batch_number": 2, "turns": [
            [_msg(4, "user", "Now it ends on April 5. ->-> 2,N/A", "April-05-2024"),
             _msg(5, "assistant", "Updated. ->-> 2,1)")],
        ]},
    ]  # fmt: skip
    probing = {
        "abstention": [{"question": "What is my dog called?", "source_chat_ids": None}],
        "information_extraction": [
            {"question": "When does my sprint end?", "answer": "It ends on March 29.",
             "rubric": ["LLM response should state: March 29"], "source_chat_ids": [0]},
        ],
        "knowledge_update": [
            {"question": "When does the sprint end now?", "answer": "April 5",
             "source_chat_ids": {"original_info": [0], "updated_info": [4, 99]}},
        ],
        "event_ordering": [
            {"question": "Order?", "answer": "sprint, Flask", "source_chat_ids": [[0], [2]]},
        ],
        "contradiction_resolution": [
            {"question": "Flask?", "ideal_answer": "Which is correct?",
             "rubric": ["LLM response should state: there is contradictory information",
                        "LLM response should mention: I use Flask 2.3"],
             "source_chat_ids": {"first_statement": [2], "second_statement": [4]}},
        ],
    }  # fmt: skip
    chat2 = [
        {
            "batch_number": 1,
            "time_anchor": "May-01-2024",
            "turns": [[_msg(0, "user", "Hello there friend."), _msg(1, "assistant", "Hi!")]],
        }
    ]
    for name, chat, qs in (("1", chat1, probing), ("2", chat2, {})):
        (root / name).mkdir(parents=True)
        (root / name / "chat.json").write_text(json.dumps(chat))
        (root / name / "probing_questions.json").write_text(json.dumps(qs))
    return root


def test_beam_helpers() -> None:
    assert parse_beam_time("March-15-2024") == datetime(2024, 3, 15, tzinfo=UTC).timestamp()
    assert strip_beam_artefact("Plan my week? ->-> 1,1") == "Plan my week?"
    assert strip_beam_artefact("x ->->  3,8") == "x"
    assert strip_beam_artefact("x ->-> 5,14)") == "x"
    assert strip_beam_artefact("a -> b is an arrow") == "a -> b is an arrow"
    assert flatten_ids([3, 1, 3]) == ["3", "1"]
    assert flatten_ids([[1, 2], [2, 5]]) == ["1", "2", "5"]
    assert flatten_ids({"old": [7], "new": [9, 7]}) == ["7", "9"]
    assert flatten_ids(None) == []
    fact = {"answer": "It is 250ms.", "rubric": ["LLM response should state: 250ms"]}
    assert beam_answers(fact) == ("250ms",)
    assert beam_answers({"answer": "Four", "rubric": ["LLM response should contain: x"]}) == (
        "Four",
    )
    assert beam_answers({"rubric": []}) == ()


def test_load_beam_follows_the_recipe(tmp_path: Path) -> None:
    root = _beam(tmp_path)
    assert detect_format(root) == "beam" and detect_format(root / "1") == "beam"
    ds = load(root)
    assert ds.fmt == "beam" and ds.name == "beam-100K"
    assert [s.id for s in ds.spaces] == ["beam-1", "beam-2"]  # one space per chat
    space = ds.spaces[0]
    # both roles, in order, artefacts stripped, one session per batch dated by its anchor
    assert [t.id for t in space.turns] == ["0", "1", "2", "3", "4", "5"]
    assert [t.role for t in space.turns] == ["user", "assistant"] * 3
    assert space.turns[0].text == "user: My sprint ends on March 29."
    assert space.turns[2].text == "user: I use Flask 2.3"
    assert space.turns[5].text == "assistant: Updated."
    assert [t.session for t in space.turns] == ["1", "1", "1", "1", "2", "2"]
    assert space.turns[0].at == parse_beam_time("March-15-2024")
    assert space.turns[3].at == parse_beam_time("March-15-2024") + 3
    assert space.turns[4].at == parse_beam_time("April-05-2024")
    by_cat = {q.category: q for q in space.questions}
    assert by_cat["abstention"].gold == ()  # no gold: never asked
    assert by_cat["information_extraction"].gold == ("0",)
    assert by_cat["information_extraction"].answers == ("March 29",)  # the rubric's fact
    assert by_cat["knowledge_update"].gold == ("0", "4")  # old and new; 99 does not exist
    assert by_cat["knowledge_update"].answers == ("April 5",)
    assert by_cat["event_ordering"].gold == ("0", "2")
    assert by_cat["contradiction_resolution"].gold == ("2", "4")
    assert ds.dropped_ids == 1
    assert ds.headline == BEAM_HEADLINE and "event_ordering" not in ds.headline
    assert "abstention" not in ds.headline


def test_beam_slices(tmp_path: Path) -> None:
    root = _beam(tmp_path)
    assert [s.id for s in load_beam(root, limit_chats=1).spaces] == ["beam-1"]
    assert [s.id for s in load_beam(root / "2").spaces] == ["beam-2"]
    (space,) = load_beam(root, limit_chats=1, limit_batches=1).spaces
    assert [t.id for t in space.turns] == ["0", "1", "2", "3"]
    # only the questions whose every gold message lies in the first batch
    assert sorted(q.category for q in space.questions) == [
        "event_ordering",
        "information_extraction",
    ]


def test_the_shared_beam_data_loads_by_the_recipe() -> None:
    if not BEAM_SHARED.exists():
        pytest.skip(f"BEAM data not found at {BEAM_SHARED}")
    ds = load(BEAM_SHARED)
    assert ds.fmt == "beam" and len(ds.spaces) == 10
    for space in ds.spaces:
        ids = {t.id for t in space.turns}
        assert {t.role for t in space.turns} == {"user", "assistant"}
        assert not any("->->" in t.text for t in space.turns)
        times = [t.at for t in space.turns]
        assert times == sorted(times)
        assert all(set(q.gold) <= ids for q in space.questions)
        heads = {q.category for q in space.questions if q.gold and q.category in ds.headline}
        assert heads == BEAM_HEADLINE
        assert not [q for q in space.questions if q.category == "abstention" and q.gold]
