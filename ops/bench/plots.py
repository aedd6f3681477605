"""PNG plots of the performance figures, for ``docs/BENCHMARKS.md`` (``docs/figures/``).

Drawn only from figures a run already produced (``benchmarks.json``'s ``results``), so a
plot never shows a number the page does not: per benchmark, its latency percentiles
(every ``<what>_p50_ms`` / ``_p95_ms`` / ``_p99_ms``, log scale); for ``ingest``, the
offered-load ladder (achieved vs offered turns/s and end-to-end latency) and scaling
with workers; for ``ltm``, indexing and search across corpus sizes.  Quality plots are
the quality run's own (``ops/bench/quality/report.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PREFIX = "perf"
_PCT = re.compile(r"^(?P<what>.+)_(?P<pct>p50|p95|p99)_ms$")
_TAILS = ("p95", "p99")


def latency_rows(figures: Mapping[str, Any]) -> list[tuple[str, float | None, dict[str, float]]]:
    """``(what, p50 or None, {"p95": .., "p99": ..})`` for each top-level
    ``<what>_p50_ms`` / ``_p95_ms`` / ``_p99_ms`` figure, in the figures' order."""
    found: dict[str, dict[str, float]] = {}
    for key, value in figures.items():
        m = _PCT.match(key)
        if key.startswith("target_"):  # a goal, not a measurement
            continue
        if m is not None and isinstance(value, int | float) and not isinstance(value, bool):
            found.setdefault(m.group("what"), {})[m.group("pct")] = float(value)
    return [(what, pcts.get("p50"), {t: pcts[t] for t in _TAILS if t in pcts})
            for what, pcts in found.items()]  # fmt: skip


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _latency(plt: Any, name: str, figures: Mapping[str, Any], out: Path) -> Path | None:
    rows = latency_rows(figures)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.42 * len(rows)))
    labels = [what.replace("_", " ") for what, _p50, _t in rows]
    ys = list(range(len(rows)))
    ax.barh(ys, [p50 or 0.0 for _w, p50, _t in rows], color="#4c72b0", label="p50")
    for tail, marker in zip(_TAILS, ("|", "x"), strict=True):
        pts = [(y, t[tail]) for y, (_w, _p, t) in zip(ys, rows, strict=True) if tail in t]
        if pts:
            color = "#c44e52" if tail == "p99" else "#dd8452"
            ax.scatter([v for _y, v in pts], [y for y, _v in pts], marker=marker, s=80,
                       color=color, label=tail, zorder=3)  # fmt: skip
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("milliseconds (log scale)")
    ax.set_title(f"{name}: latency percentiles (bar p50, markers tails)")
    ax.grid(axis="x", alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    return _save(plt, fig, out / f"{PREFIX}-latency-{name}.png")


def _ladder(plt: Any, ingest: Mapping[str, Any], out: Path) -> Path | None:
    steps = [s for s in ingest.get("ladder_w2") or [] if isinstance(s, Mapping)]
    if not steps:
        return None
    offered = [float(s["offered_per_s"]) for s in steps]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.8, 6.2), sharex=True)
    top.plot(offered, [float(s.get("achieved_per_s", 0)) for s in steps], marker="o",
             label="achieved")  # fmt: skip
    top.plot(offered, offered, ls="--", color="grey", label="offered = achieved")
    for s in steps:
        if s.get("sustained") is False:
            top.annotate("not sustained", (float(s["offered_per_s"]), float(s["achieved_per_s"])),
                         fontsize=7, color="#c44e52", ha="right", va="top")  # fmt: skip
    top.set_ylabel("turns/s")
    top.set_title("ingest: offered-load ladder (2 workers)")
    top.legend(fontsize=7)
    top.grid(alpha=0.3)
    for key, label in (("e2e_p50_ms", "end-to-end p50"), ("e2e_p95_ms", "end-to-end p95")):
        bottom.plot(offered, [float(s.get(key, float("nan"))) for s in steps], marker="o",
                    label=label)  # fmt: skip
    bottom.set_yscale("log")
    bottom.set_xlabel("offered turns/s")
    bottom.set_ylabel("ms (log scale)")
    bottom.legend(fontsize=7)
    bottom.grid(alpha=0.3, which="both")
    return _save(plt, fig, out / f"{PREFIX}-ingest-ladder.png")


def _scaling(plt: Any, ingest: Mapping[str, Any], out: Path) -> Path | None:
    """Drain rate of a standing backlog per worker set-up (``backlog_*``); without those,
    the ``workers_<n>_turns_per_s`` figures."""
    bars: list[tuple[str, float]] = []
    for key, value in ingest.items():
        if key.startswith("backlog_") and isinstance(value, Mapping):
            rate = value.get("drain_turns_per_s")
            if isinstance(rate, int | float):
                workers, pool = value.get("workers", "?"), value.get("pool", "?")
                label = f"{workers} worker(s)\n{pool} x{value.get('concurrency', '?')}"
                bars.append((label, float(rate)))
    if not bars:
        for workers in (1, 2):
            rate = ingest.get(f"workers_{workers}_turns_per_s")
            if isinstance(rate, int | float):
                bars.append((f"{workers} worker(s)", float(rate)))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(6.8, 3.8))
    ax.bar(range(len(bars)), [v for _l, v in bars], color="#55a868")
    ax.set_xticks(range(len(bars)), [label for label, _v in bars], fontsize=7)
    for i, (_l, v) in enumerate(bars):
        ax.annotate(f"{v:.0f}", (i, v), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("turns/s")
    ax.set_title("ingest: drain rate of a backlog, by workers (pool x concurrency)")
    ax.grid(axis="y", alpha=0.3)
    return _save(plt, fig, out / f"{PREFIX}-ingest-workers.png")


def _ltm_scales(plt: Any, ltm: Mapping[str, Any], out: Path) -> Path | None:
    scales = [s for s in ltm.get("scales") or [] if isinstance(s, Mapping) and "cards" in s]
    if not scales:
        return None
    cards = [int(s["cards"]) for s in scales]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.6))
    for key, label in (("index_cards_per_s", "index (embed + both)"),
                       ("project_cards_per_s", "project"),
                       ("ledger_cards_per_s", "ledger write")):  # fmt: skip
        values = [s.get(key) for s in scales]
        if all(isinstance(v, int | float) for v in values):
            left.plot(cards, values, marker="o", label=label)
    left.set_xscale("log")
    left.set_xlabel("cards")
    left.set_ylabel("cards/s")
    left.set_title("ltm: write throughput")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    for mode in ("lexical", "vector", "hybrid"):
        values = [(s.get("search_ms") or {}).get(mode, {}).get("p95") for s in scales]
        if all(isinstance(v, int | float) for v in values):
            right.plot(cards, values, marker="o", label=f"{mode} p95")
    right.set_xscale("log")
    right.set_xlabel("cards")
    right.set_ylabel("ms")
    right.set_title("ltm: search latency")
    if right.get_lines():
        right.legend(fontsize=7)
    right.grid(alpha=0.3)
    return _save(plt, fig, out / f"{PREFIX}-ltm-scales.png")


def render(name: str, figures: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Every plot of one benchmark's figures (none for an errored or empty run)."""
    if not figures or "error" in figures:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    made = [_latency(plt, name, figures, out_dir)]
    if name == "ingest":
        made += [_ladder(plt, figures, out_dir), _scaling(plt, figures, out_dir)]
    if name == "ltm":
        made.append(_ltm_scales(plt, figures, out_dir))
    return [p for p in made if p is not None]


def embed(section: str, pngs: list[Path], *, relative_to: Path) -> str:
    """``section`` (a benchmark's markdown) followed by its plots as images."""
    if not pngs:
        return section
    images = [f"![{p.stem}]({p.relative_to(relative_to).as_posix()})" for p in pngs]
    return section.rstrip("\n") + "\n\n" + "\n".join(images)
