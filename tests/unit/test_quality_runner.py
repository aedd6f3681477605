"""The quality harness fails loudly: a system that raises on any part of a dataset keeps its
figures, has its errors recorded, and the command exits non-zero after writing them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata.ops import cli
from memstrata.ops.bench import quality
from memstrata.ops.bench.quality import runner
from memstrata.ops.bench.quality.datasets import Dataset, Question, Space, Turn
from memstrata.ops.bench.quality.report import markdown
from memstrata.ops.bench.quality.systems.base import Hit, Injection, SystemStats


class Flaky:
    """A system that recalls every turn, and fails where it is told to."""

    def __init__(self, name: str, *, bad_space: str = "", bad_question: str = "",
                 bad_budget: int = 0, max_chars: int = 10_000) -> None:  # fmt: skip
        self.name = name
        self.stats = SystemStats()
        self.bad_space, self.bad_question, self.bad_budget = bad_space, bad_question, bad_budget
        self.max_chars = max_chars
        self.turns: dict[str, list[Turn]] = {}

    def ingest(self, space: Space) -> None:
        if space.id == self.bad_space:
            raise RuntimeError("this space breaks the system")
        kept = []
        for t in space.turns:
            if len(t.text) > self.max_chars:  # what memstrata's adapter does on a refusal
                self.stats.error("ingest", space.id, t.id, ValueError(f"{len(t.text)} chars"))
                continue
            kept.append(t)
        self.turns[space.id] = kept
        self.stats.ingested_turns += len(space.turns)
        self.stats.stored_items += len(kept)
        self.stats.stored_layers["raw turns"] += sum(len(t.text) for t in kept)

    def search(self, space: Space, question: Question, depth: int) -> list[Hit]:
        if question.id == self.bad_question:
            raise TimeoutError("search timed out")
        return [Hit(t.text, (t.id,)) for t in self.turns[space.id]][:depth]

    def inject(self, space: Space, question: Question, budget: int) -> Injection:
        if question.id == self.bad_question and budget == self.bad_budget:
            raise OSError("inject failed")
        kept = self.turns[space.id]
        return Injection(" ".join(t.text for t in kept), tuple(t.id for t in kept))

    def close(self) -> None:
        pass


def _dataset() -> Dataset:
    def space(sid: str) -> Space:
        turns = [Turn(f"{sid}1", "Ann", "Ann: my cat is called Tom", 0.0, "1"),
                 Turn(f"{sid}2", "Bob", "Bob: nice", 1.0, "1")]  # fmt: skip
        qs = [Question(f"{sid}:q1", "cat name?", (f"{sid}1",), "c", "Tom", ("Tom",)),
              Question(f"{sid}:q2", "what did Bob say?", (f"{sid}2",), "c")]  # fmt: skip
        return Space(sid, turns, qs)

    return Dataset("x.json", "locomo", [space("good"), space("bad")], frozenset({"c"}))


@pytest.fixture
def systems(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """``runner.make_system`` builds :class:`Flaky` systems from ``kw[name]``."""
    kw: dict[str, dict[str, Any]] = {}

    def make(name: str, **_: Any) -> Flaky:
        if kw.get(name, {}).get("broken"):
            raise ImportError("peer not installed")
        return Flaky(name, **kw.get(name, {}))

    monkeypatch.setattr(runner, "make_system", make)
    monkeypatch.setattr(runner, "SYSTEMS", ("flaky", "steady", "broken"))
    return kw


def test_a_system_failing_on_parts_keeps_its_figures_and_records_every_error(
    systems: dict[str, dict[str, Any]],
) -> None:
    # Given a system that breaks on one space, one search and one injection
    systems["flaky"] = {"bad_space": "bad", "bad_question": "good:q2", "bad_budget": 256}
    # When the harness runs it beside a steady one
    figures = runner.evaluate(_dataset(), ("flaky", "steady"))
    # Then it is still reported, its failed parts scored as misses
    flaky = figures["systems"]["flaky"]
    assert flaky["error_count"] == 3
    stages = [(e["stage"], e["space"], e["item"]) for e in flaky["errors"]]
    assert stages == [("ingest", "bad", ""), ("search", "good", "good:q2"),
                      ("inject@256", "good", "good:q2")]  # fmt: skip
    assert "RuntimeError: this space breaks the system" in flaky["errors"][0]["error"]
    assert figures["errors"] == {"flaky": flaky["errors"]}
    rows = figures["per_question"]["flaky"]
    assert rows["good:q1"]["recall@1"] == 1.0
    assert rows["good:q2"]["recall@25"] == 0.0 and rows["bad:q1"]["recall@25"] == 0.0
    assert flaky["questions"] == 4 and flaky["recall@25"] == 0.25
    assert figures["per_question_budget"]["flaky"]["good:q2"]["evidence@256"] == 0.0
    assert figures["per_question_budget"]["flaky"]["good:q2"]["evidence@512"] == 1.0
    # and the steady system is untouched
    assert figures["systems"]["steady"]["errors"] == []
    assert figures["systems"]["steady"]["recall@25"] == 1.0
    # the failures are listed for the exit code and shown in the tables
    assert len(quality.failures(figures)) == 3
    text = markdown(figures)
    assert "This run had errors" in text and "| **3** |" in text
    assert "- flaky, search good good:q2: `TimeoutError: search timed out`" in text


def test_a_system_that_does_not_start_is_an_error(systems: dict[str, dict[str, Any]]) -> None:
    systems["broken"] = {"broken": True}
    figures = runner.evaluate(_dataset(), ("broken", "steady"))
    assert "broken" not in figures["systems"] and "steady" in figures["systems"]
    assert figures["errors"]["broken"][0]["stage"] == "start"
    assert quality.failures(figures) == ["broken: start: ImportError: peer not installed"]
    assert "| broken | did not run: ImportError: peer not installed |" in markdown(figures)


def test_budget_figures_and_memory_ratio_per_system(systems: dict[str, dict[str, Any]]) -> None:
    figures = runner.evaluate(_dataset(), ("steady",))
    steady = figures["systems"]["steady"]
    assert figures["transcript_tokens"] > 0
    assert steady["stored_tokens"] == sum(len(t.text) for s in _dataset().spaces for t in s.turns)
    assert steady["memory_ratio"] == round(
        figures["transcript_tokens"] / steady["stored_tokens"], 3
    )
    assert set(steady["budget"]) == {"128", "256", "512", "1024"}
    row = steady["budget"]["128"]
    assert row["evidence_recall"] == 1.0
    assert row["answer_containment"] == 1.0 and row["answer_questions"] == 2  # q2: no answer
    assert steady["errors"] == [] and not quality.failures(figures)


def test_the_answer_ceiling_is_what_the_evidence_itself_contains() -> None:
    turns = [Turn("1", "Ann", "Ann: my cat is called Tom", 0.0, "1"),
             Turn("2", "Bob", "Bob: we moved to Oslo in May", 1.0, "1"),
             Turn("3", "Ann", "Ann: nice", 2.0, "1")]  # fmt: skip
    qs = [Question("q1", "cat name?", ("1",), "c", "Tom", ("Tom",)),
          # its gold turn does not say the answer's words; another turn does
          Question("q2", "where do they live?", ("3",), "c", "Oslo", ("Oslo",)),
          Question("q3", "what year?", ("2",), "c", "2023", ("2023",)),  # said nowhere
          Question("q4", "what did Bob say?", ("2",), "c"),  # no answer: not scored
          Question("q5", "off the headline", ("1",), "x", "Tom", ("Tom",))]  # fmt: skip
    ds = Dataset("x.json", "locomo", [Space("s", turns, qs)], frozenset({"c"}))
    ceiling = runner.answer_ceiling(ds)
    assert ceiling == {"questions": 3, "gold_turns": round(1 / 3, 4),
                       "transcript": round(2 / 3, 4)}  # fmt: skip
    unanswered = Dataset("m.json", "madial", [Space("s", turns, [qs[3]])], frozenset({"c"}))
    assert runner.answer_ceiling(unanswered) is None


def test_the_ceiling_is_in_the_figures_and_the_table(systems: dict[str, dict[str, Any]]) -> None:
    figures = runner.evaluate(_dataset(), ("steady",))
    assert figures["answer_ceiling"] == {"questions": 2, "gold_turns": 1.0, "transcript": 1.0}
    assert "every gold turn of the question, no budget, 1.000" in markdown(figures)


def test_memstrata_is_compared_with_the_best_raw_baseline_at_each_k() -> None:
    # Given per-question Recall@k of memstrata and two raw baselines on 3 headline questions
    turns = [Turn("1", "Ann", "Ann: hi", 0.0, "1")]
    qs = [Question(f"q{i}", "?", ("1",), "c") for i in range(3)]
    qs.append(Question("q9", "?", ("1",), "other"))  # off the headline: not paired
    ds = Dataset("x.json", "locomo", [Space("s", turns, qs)], frozenset({"c"}))

    def rows(*r1: float) -> dict[str, dict[str, float]]:
        return {f"q{i}": {"recall@1": v, "recall@5": v, "recall@10": 1.0}
                for i, v in enumerate(r1)} | {"q9": {"recall@1": 1.0, "recall@5": 1.0,
                                                     "recall@10": 1.0}}  # fmt: skip

    per_question = {
        "memstrata": rows(1.0, 0.0, 0.0), "bm25_raw": rows(0.0, 0.0, 0.0),
        "dense_raw": rows(0.0, 1.0, 1.0), "other_system": rows(1.0, 1.0, 1.0),
    }  # fmt: skip
    # When memstrata is compared
    versus = runner.versus_best_raw(ds, per_question)
    # Then each k names the best raw baseline (only raw ones) and the paired difference
    assert versus["1"]["baseline"] == "dense_raw" and versus["1"]["questions"] == 3
    assert versus["1"]["mean"] == round(-1 / 3, 4)
    assert versus["1"]["low"] <= versus["1"]["mean"] <= versus["1"]["high"]
    assert versus["10"]["mean"] == 0.0
    # And nothing is compared without memstrata or without a raw baseline
    assert runner.versus_best_raw(ds, {"bm25_raw": rows(0, 0, 0)}) == {}
    assert runner.versus_best_raw(ds, {"memstrata": rows(0, 0, 0)}) == {}


def test_the_comparison_is_a_table_of_the_report() -> None:
    row = {"baseline": "hybrid_raw", "questions": 80, "mean": -0.006, "low": -0.041,
           "high": 0.03}  # fmt: skip
    figures = {"versus_best_raw": {"10": row}}
    text = markdown(figures)
    assert "paired over the 80 headline questions" in text
    assert "| 10 | hybrid_raw | -0.006 | [-0.041, +0.030] |" in text


def test_an_injection_over_its_budget_is_named_in_the_table(
    systems: dict[str, dict[str, Any]],
) -> None:
    # Given a system that injects ~200 cl100k tokens whatever the budget
    long = Turn("w1", "Ann", "Ann: " + "word " * 200, 0.0, "1")
    q = Question("w:q1", "words?", ("w1",), "c", "word", ("word",))
    ds = Dataset("x.json", "locomo", [Space("w", [long], [q])], frozenset({"c"}))
    figures = runner.evaluate(ds, ("steady",))
    budget = figures["systems"]["steady"]["budget"]
    # Then the 128-token row records the overflow, the 256-token row none
    assert budget["128"]["over_budget"] == 1.0 and budget["256"]["over_budget"] == 0.0
    row = next(line for line in markdown(figures).splitlines() if line.startswith("| steady | 1 "))
    cells = row.split(" | ")
    assert cells[4].endswith(", 100.0% over budget)") and "over" not in cells[5]


def _locomo_file(tmp_path: Path) -> Path:
    conv = {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat called Tom."},
            {"speaker": "Ann", "dia_id": "D1:2", "text": "x" * 400},  # one huge message
        ],
    }
    qa = [{"question": "Cat?", "answer": "Tom", "evidence": ["D1:1"], "category": 4}]
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps([{"sample_id": "c1", "conversation": conv, "qa": qa}]))
    return p


def test_the_command_writes_its_results_and_exits_non_zero(
    systems: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a system that refuses one 400-character message of the dataset
    systems["flaky"] = {"max_chars": 300}
    monkeypatch.setattr(quality, "SYSTEMS", ("flaky",))
    monkeypatch.chdir(tmp_path)
    # When the quality benchmark runs on it
    code = cli.main(["bench", "quality", "--dataset", str(_locomo_file(tmp_path)), "--json"])
    # Then the command fails, says why, and the results are written all the same
    assert code == 1
    out = capsys.readouterr()
    assert "1 error(s)" in out.err and "flaky: ingest c1 D1:2: ValueError: 405 chars" in out.err
    printed = json.loads(out.out)
    assert printed["systems"]["flaky"]["recall@1"] == 1.0  # the rest of the space went in
    saved = json.loads((tmp_path / "var/bench-quality/tiny/results.json").read_text())
    assert saved["errors"]["flaky"][0]["item"] == "D1:2"
    assert saved["systems"]["flaky"]["error_count"] == 1


def test_a_clean_run_exits_zero(
    systems: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(quality, "SYSTEMS", ("steady",))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "quality", "--dataset", str(_locomo_file(tmp_path))]) == 0
    assert "error" not in capsys.readouterr().err


def test_the_command_runs_only_the_systems_it_is_given(
    systems: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a dataset and three known systems
    monkeypatch.chdir(tmp_path)
    data = str(_locomo_file(tmp_path))
    # When the quality benchmark is asked for two of them, one named twice
    code = cli.main(["bench", "quality", "--dataset", data, "--systems", "steady, flaky,steady",
                     "--json"])  # fmt: skip
    # Then those two ran, in the order given, and nothing else
    assert code == 0
    assert list(json.loads(capsys.readouterr().out)["systems"]) == ["steady", "flaky"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["quality", "--dataset", "{data}", "--systems", "steady,bm25"], "unknown system 'bm25'"),
        (["quality", "--dataset", "{data}", "--systems", " , "], "no system named"),
        (["quality", "--systems", "steady"], "--systems needs --dataset or --quick"),
        (["stm", "--systems", "steady"], "applies to a quality run with --dataset or --quick"),
        (["all", "--systems", "steady"], "applies to a quality run with --dataset or --quick"),
    ],
)
def test_a_systems_list_that_cannot_run_is_refused_before_anything_runs(
    systems: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    says: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    data = str(_locomo_file(tmp_path))
    code = cli.main(["bench", *(a.replace("{data}", data) for a in argv)])
    assert code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "var").exists()  # nothing was run, nothing written


def test_the_names_of_systems_and_variants_are_known_to_the_parser() -> None:
    assert runner.system_names("memstrata,bm25_raw+stem,memstrata+nottl+fetchall") == (
        "memstrata", "bm25_raw+stem", "memstrata+nottl+fetchall")  # fmt: skip
    with pytest.raises(ValueError, match="unknown system 'memstrata\\+fast'"):
        runner.system_names("memstrata+fast")
