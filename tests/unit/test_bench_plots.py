"""Performance plots: drawn from a small figures dict into valid PNG files, one per kind
(latency percentiles per benchmark, the ingest ladder, scaling with workers, LTM scales),
and embedded after the benchmark's section by the report generator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstrata.ops.bench import report
from memstrata.ops.bench.plots import embed, latency_rows, render

REPO_ROOT = Path(__file__).resolve().parents[2]

PNG = b"\x89PNG\r\n\x1a\n"

INGEST = {
    "record_turn_p50_ms": 0.7, "record_turn_p99_ms": 2.5, "e2e_p50_ms": 6.5, "e2e_p95_ms": 12.0,
    "workers_1_turns_per_s": 392, "workers_2_turns_per_s": 607,
    "backlog_w1_solo1": {"drain_turns_per_s": 392}, "backlog_w2_solo1": {"drain_turns_per_s": 600},
    "ladder_w2": [
        {"offered_per_s": 100.0, "achieved_per_s": 100, "e2e_p50_ms": 7.1, "e2e_p95_ms": 9.6,
         "sustained": True},
        {"offered_per_s": 400.0, "achieved_per_s": 310, "e2e_p50_ms": 112.0, "e2e_p95_ms": 442.0,
         "sustained": False},
    ],
}  # fmt: skip
LTM = {"search_p95_ms": 6.7, "scales": [
    {"cards": 1000, "index_cards_per_s": 190.0, "project_cards_per_s": 260.0,
     "ledger_cards_per_s": 700.0, "search_ms": {"lexical": {"p95": 1.2}, "vector": {"p95": 3.0},
                                                "hybrid": {"p95": 4.0}}},
    {"cards": 10000, "index_cards_per_s": 183.0, "project_cards_per_s": 257.0,
     "ledger_cards_per_s": 640.0, "search_ms": {"lexical": {"p95": 1.8}, "vector": {"p95": 5.0},
                                                "hybrid": {"p95": 6.7}}},
]}  # fmt: skip


def _valid_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(PNG) and data[12:16] == b"IHDR" and data.endswith(b"IEND\xaeB`\x82")


def test_latency_rows_pair_each_median_with_its_tails() -> None:
    rows = latency_rows({"a_p50_ms": 1.0, "a_p99_ms": 3.0, "b_p50_ms": 2, "c_p95_ms": 9.0})
    assert rows == [("a", 1.0, {"p99": 3.0}), ("b", 2.0, {}), ("c", None, {"p95": 9.0})]


def test_plots_of_each_kind_are_valid_pngs(tmp_path: Path) -> None:
    made = render("ingest", INGEST, tmp_path) + render("ltm", LTM, tmp_path)
    names = sorted(p.name for p in made)
    assert names == ["perf-ingest-ladder.png", "perf-ingest-workers.png",
                     "perf-latency-ingest.png", "perf-latency-ltm.png",
                     "perf-ltm-scales.png"]  # fmt: skip
    assert all(_valid_png(p) and p.stat().st_size > 5000 for p in made)
    # nothing to draw: no file, and an errored run draws nothing either
    assert render("sweep", {"items": 3, "quick": True}, tmp_path) == []
    assert render("stm", {"error": "boom", "upsert_p50_ms": 1.0}, tmp_path) == []


def test_the_report_embeds_each_benchmarks_plots_after_its_section(tmp_path: Path) -> None:
    section = embed("## ingest\n\ntable\n", [tmp_path / "figures" / "perf-ingest-ladder.png"],
                    relative_to=tmp_path)  # fmt: skip
    assert section == "## ingest\n\ntable\n\n![perf-ingest-ladder](figures/perf-ingest-ladder.png)"
    assert embed("## x\n", [], relative_to=tmp_path) == "## x\n"


class _FakeBench:
    """A benchmark module's interface (run, markdown) over fixed figures, so the page
    generator runs without measuring anything."""

    @staticmethod
    def run(quick: bool) -> dict[str, object]:
        return dict(INGEST)

    @staticmethod
    def markdown(figures: dict[str, object]) -> str:
        return "## ingest\n\n| a | b |\n"


def test_bench_all_writes_the_plots_into_docs_figures_and_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "fake_ingest_bench", _FakeBench)
    results = report.run_all({"ingest": "fake_ingest_bench"}, quick=True, out_dir=tmp_path,
                             progress=lambda m: None, run_bench=report.measure)  # fmt: skip
    assert "error" not in results["ingest"]
    page = (tmp_path / "BENCHMARKS.md").read_text()
    for png in ("perf-latency-ingest", "perf-ingest-ladder", "perf-ingest-workers"):
        assert f"![{png}](figures/{png}.png)" in page
        assert _valid_png(tmp_path / "figures" / f"{png}.png")
    assert json.loads((tmp_path / "benchmarks.json").read_text())["results"]["ingest"]


def test_bench_all_leaves_out_what_memstrata_bench_skip_names_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two benchmarks, one of them named in MEMSTRATA_BENCH_SKIP
    monkeypatch.setitem(sys.modules, "fake_ingest_bench", _FakeBench)
    monkeypatch.setenv("MEMSTRATA_BENCH_SKIP", "embedders")
    benches = {"ingest": "fake_ingest_bench", "embedders": "no.such.module"}
    # When bench all runs (in this process: the fake module lives only here)
    results = report.run_all(benches, quick=True, out_dir=tmp_path, progress=lambda m: None,
                             run_bench=report.measure)  # fmt: skip
    # Then the skipped one is not imported or run, and the page says it was left out
    assert results["embedders"] == {"skipped": True} and "error" not in results["ingest"]
    page = (tmp_path / "BENCHMARKS.md").read_text()
    assert "## embedders\n\nNot run by this `bench all` (MEMSTRATA_BENCH_SKIP)" in page
    assert "MEMSTRATA_BENCH_SKIP=embedders memstrata bench all --quick" in page
    # And a name that is no benchmark fails before anything runs
    monkeypatch.setenv("MEMSTRATA_BENCH_SKIP", "embedder")
    with pytest.raises(ValueError, match="unknown benchmark"):
        report.run_all(benches, quick=True, out_dir=tmp_path, progress=lambda m: None)


def test_bench_all_runs_each_benchmark_in_a_fresh_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a module only this process has imported
    from tests.unit import bench_stub

    monkeypatch.setitem(sys.modules, bench_stub.PARENT_ONLY, bench_stub)
    # When bench all runs the stub benchmark
    results = report.run_all({"stub": "tests.unit.bench_stub"}, quick=True, out_dir=tmp_path,
                             progress=lambda m: None)  # fmt: skip
    # Then it ran in another process that inherited nothing it did not import itself
    stub = results["stub"]
    assert stub["pid"] != os.getpid() and stub["quick"] is True
    assert stub["saw_parent_module"] is False
    assert f"ran in {stub['pid']}" in (tmp_path / "BENCHMARKS.md").read_text()


@pytest.mark.parametrize("how", ["raise", "die"])
def test_a_benchmark_that_fails_in_its_process_is_recorded_and_the_rest_run(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a benchmark that raises, or whose interpreter dies, before the fake ingest one
    monkeypatch.setenv("BENCH_STUB_FAIL", how)
    monkeypatch.setitem(sys.modules, "fake_ingest_bench", _FakeBench)
    benches = {"stub": "tests.unit.bench_stub", "ingest": "fake_ingest_bench"}
    lines: list[str] = []
    # When bench all runs both (the fake one in this process: the child cannot import it)
    results = report.run_all(
        benches, quick=True, out_dir=tmp_path, progress=lines.append,
        run_bench=lambda name, quick: (report.measure_in_child if name == "tests.unit.bench_stub"
                                       else report.measure)(name, quick),
    )  # fmt: skip
    # Then the failure is recorded with its cause, and the next benchmark still ran
    want = "RuntimeError: stub benchmark broke" if how == "raise" else "BrokenProcessPool"
    assert want in results["stub"]["error"]
    assert "error" not in results["ingest"]
    assert f"FAILED in this run: `{want}" in (tmp_path / "BENCHMARKS.md").read_text()
    if how == "raise":  # the child's traceback reaches the log
        assert any('bench_stub.py", line' in line for line in lines)


def _gone(pid: int) -> bool:
    """Exited (a zombie nobody reaps counts: it runs nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_killed_bench_all_takes_its_running_benchmark_down_with_its_clean_up(
    tmp_path: Path,
) -> None:
    # Given bench all running a long benchmark in its child process
    marker = tmp_path / "started"
    env = {**os.environ, "BENCH_STUB_HANG": str(marker), "PYTHONPATH": str(REPO_ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", "from memstrata.ops.bench.report import measure_in_child; "
         "measure_in_child('tests.unit.bench_stub', True)"],
        env=env, cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert parent.poll() is None and time.monotonic() < deadline, "never started"
            time.sleep(0.1)
        child = int(marker.read_text())
        # When bench all is killed outright (no clean-up of its own runs)
        parent.kill()
        parent.wait()
        # Then the benchmark is interrupted, runs its finally blocks and ends
        deadline = time.monotonic() + 20
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(child), "the benchmark outlived bench all"
        assert (tmp_path / "started.cleaned").read_text() == "stopped"
    finally:
        if parent.poll() is None:
            parent.kill()
