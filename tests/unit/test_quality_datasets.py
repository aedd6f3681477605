"""Loaders of the quality harness on tiny inline files of the three formats."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ops.bench.quality.datasets import (
    detect_format,
    load,
    load_locomo,
    load_madial,
    load_memdaily,
    madial_query,
    normalise_evidence,
    parse_locomo_time,
    parse_memdaily_time,
)
from ops.bench.quality.systems.base import bm25_tokens


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
