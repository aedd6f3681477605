"""``memstrata bench embedders`` on a tiny LoCoMo file with real models: the table has
each provider's turn-budget recall and its ms/text, and the results are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata.core.ltm.embedding import PROVIDERS
from memstrata.ops import cli


def _locomo_file(tmp_path: Path) -> Path:
    turns = [
        "I adopted a grey cat called Tom from the shelter.",
        "My sister is moving to Lisbon for a new job in March.",
        "We spent the weekend repainting the kitchen yellow.",
        "The quarterly tax filing is due at the end of April.",
    ]
    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": f"D1:{i}", "text": t} for i, t in enumerate(turns, 1)
        ],
    }
    qa = [
        {"question": "What is the name of Ann's cat?", "answer": "Tom", "evidence": ["D1:1"],
         "category": 4},
        {"question": "Where is Ann's sister moving?", "answer": "Lisbon", "evidence": ["D1:2"],
         "category": 4},
    ]  # fmt: skip
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps([{"sample_id": "c1", "conversation": conv, "qa": qa}]))
    return p


@pytest.mark.timeout(120)  # two real models load and embed on a shared machine
def test_the_comparison_measures_every_chosen_provider_side_by_side(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = [n for n in ("use-multilingual", "wordllama") if PROVIDERS[n].installed()]
    monkeypatch.setenv("BENCH_EMBEDDERS", ",".join(chosen))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    data = _locomo_file(tmp_path)
    assert cli.main(["bench", "embedders", "--dataset", str(data), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = printed["datasets"]["tiny.json"]["results"]
    assert list(rows) == chosen
    for name in chosen:
        r = rows[name]
        assert r["questions"] == 2
        assert 0.0 <= r["recall@1"] <= r["recall@5"] <= r["recall@10"] == 1.0  # 4 turns, k 10
        assert r["ms_single_p50"] > 0 and r["ms_batch_p50"] > 0 and r["sample_texts"] == 4
        assert printed["embedders"][name]["weights_mb"] > 1
    assert rows["use-multilingual"]["recall@1"] == 1.0  # each question names its turn
    saved = json.loads((tmp_path / "var/bench-embedders/results.json").read_text())
    assert saved["datasets"] == printed["datasets"]
    assert (tmp_path / "var/bench-cache/use-multilingual.npz").exists()  # the disk cache
