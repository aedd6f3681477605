"""memstrata in the quality harness, on a tiny synthetic chat (real Redis, PostgreSQL, L0):
a message ``record_turn()`` refuses is an error of the run, the rest is still measured,
and the token-budget and stored-token figures come from what recall renders and holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstrata.core.settings import Settings
from memstrata.ops.bench import quality
from memstrata.ops.bench.quality import embed
from memstrata.ops.bench.quality.datasets import Dataset, Question, Space, Turn
from memstrata.ops.bench.quality.runner import evaluate
from tests.integration import authority_db

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url


def _chat() -> Dataset:
    day = 1_710_460_800.0  # March-15-2024; a second session the next day, so that the
    # first one is finalised into LTM cards before the questions
    turns = [
        Turn("0", "user", "user: My first sprint ends on March 29 with the login page.", day,
             "1"),
        Turn("1", "assistant", "assistant: Noted, the sprint ends on March 29.", day + 1, "1",
             "assistant"),
        # a role record_turn() does not know: refused (no message is refused for its length)
        Turn("2", "narrator", "narrator: " + "ascii art " * 40, day + 2, "1", "narrator"),
        Turn("3", "user", "user: I deploy the budget tracker with Docker on Fridays.",
             day + 86_400, "2"),
        Turn("4", "assistant", "assistant: Docker on Fridays, understood.", day + 86_401, "2",
             "assistant"),
    ]  # fmt: skip
    questions = [
        Question("c:ie:0", "When does my first sprint end?", ("0",), "information_extraction",
                 "It ends on March 29.", ("March 29",)),
        Question("c:ie:1", "How do I deploy the budget tracker?", ("3",),
                 "information_extraction", "", ("Docker",)),
        Question("c:x:0", "What did the drawing show?", ("2",), "information_extraction"),
        # the evidence is an assistant message no card keeps: the raw-history floor's line
        Question("c:ie:2", "What did you say about Docker on Fridays?", ("4",),
                 "information_extraction"),
    ]  # fmt: skip
    return Dataset("chat", "beam", [Space("chat", turns, questions)],
                   frozenset({"information_extraction"}))  # fmt: skip


def test_a_refused_message_is_an_error_and_the_rest_is_measured(
    settings: Settings, pg_url: str
) -> None:
    # Given a message record_turn refuses (its role)
    history = settings.ltm.model_copy(update={"history_enabled": True})
    tight = settings.model_copy(
        update={"postgres_url": pg_url, "transcript_fsync": False, "ltm": history}
    )
    # When memstrata runs beside bm25_raw
    figures: dict[str, Any] = evaluate(
        _chat(), ("memstrata", "bm25_raw"), system_kw={"memstrata": {"settings": tight}}
    )
    # Then the refusal is recorded, not swallowed, and the run counts as failed
    mem = figures["systems"]["memstrata"]
    assert mem["error_count"] == 1
    (err,) = mem["errors"]
    assert (err["stage"], err["space"], err["item"]) == ("ingest", "chat", "2")
    assert "InvalidInput" in err["error"]
    assert figures["errors"] == {"memstrata": mem["errors"]}
    assert quality.failures(figures)
    # the refused turn is charged to its own stage; the other turns went in and are found
    fates = {q["id"]: q["fates"] for q in figures["stage_loss"]["questions"]}
    assert fates["c:x:0"][0]["stage"] == "not_recorded"
    assert figures["stage_loss"]["write_funnel"]["not_recorded"] == 1
    assert figures["per_question"]["memstrata"]["c:ie:0"]["recall@25"] == 1.0
    # what recall renders within a token budget: the sprint's memory, with its answer
    row = figures["per_question_budget"]["memstrata"]["c:ie:0"]
    assert row["evidence@128"] == 1.0 and row["containment@128"] == 1.0
    assert 0 < row["tokens@128"] <= 128
    assert figures["per_question_budget"]["memstrata"]["c:x:0"]["containment@128"] is None
    # a raw message recall injects is evidence like any rendered memory
    floor = figures["per_question_budget"]["memstrata"]["c:ie:2"]
    assert floor["evidence@1024"] == 1.0
    budget = mem["budget"]
    assert set(budget) == {"128", "256", "512", "1024"}
    assert budget["128"]["answer_questions"] == 2  # c:x:0 has no answer to look for
    # what memstrata holds: STM items and LTM cards, fewer tokens than the transcript
    layers = mem["stored_tokens_by_layer"]
    assert layers["ltm cards"] > 0 and layers["raw_history"] == 0
    assert mem["stored_tokens"] == layers["stm"] + layers["pg facts"] + layers["ltm cards"]
    assert mem["memory_ratio"] == round(figures["transcript_tokens"] / mem["stored_tokens"], 3)
    # the baseline was not affected
    raw = figures["systems"]["bm25_raw"]
    assert raw["errors"] == [] and raw["memory_ratio"] == 1.0
    assert raw["stored_tokens"] == figures["transcript_tokens"]


def test_memstrata_alone_keeps_the_vectors_it_embedded_for_the_next_run(
    settings: Settings, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an empty vector cache (no raw system in the run to save it)
    monkeypatch.setattr(embed, "_shared", embed.SharedEmbedder(tmp_path))
    tight = settings.model_copy(update={"postgres_url": pg_url, "transcript_fsync": False})
    # When memstrata runs alone
    figures = evaluate(_chat(), ("memstrata",), system_kw={"memstrata": {"settings": tight}})
    # Then what its long-term memory embedded is on disk: a rerun embeds nothing again
    assert figures["embedder"]["embedded_now"] > 0
    (saved,) = tmp_path.glob("*.npz")
    again = embed.SharedEmbedder(tmp_path)
    assert len(again._cache) == figures["embedder"]["embedded_now"] > 0
    assert saved.name == f"{again.name}.npz"


def test_each_run_counts_only_the_texts_it_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the process's shared embedder with an empty cache (the suite's runs share one)
    monkeypatch.setattr(embed, "_shared", embed.SharedEmbedder(tmp_path))
    # When a dense baseline runs on a chat, then again on the same chat
    first = evaluate(_chat(), ("dense_raw",))
    second = evaluate(_chat(), ("dense_raw",))
    # Then the first embedded its texts and the second, finding them cached, none
    assert first["embedder"]["embedded_now"] > 0
    assert second["embedder"]["embedded_now"] == 0
    assert second["embedder"]["embed_ms"]["p50"] == 0.0
