"""Markdown tables and matplotlib plots of a quality run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memstrata.ops.bench.quality.metrics import KS, TOKEN_BUDGETS
from memstrata.ops.bench.quality.stageloss import STAGES

ERRORS_SHOWN = 5  # per system, in the markdown (results.json keeps up to MAX_ERRORS)


def _f(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def markdown(figures: dict[str, Any]) -> str:
    lines = _systems_table(figures)
    lines += _versus_table(figures)
    lines += _errors(figures)
    lines += _budget_table(figures)
    lines += _diagnostics_table(figures)
    lines += _category_table(figures)
    lines += _stage_table(figures)
    emb = figures.get("embedder")
    if emb:
        lines += ["", f"Embedder: {emb['name']} ({emb['dim']}-d), one text "
                  f"{emb['embed_ms']['p50']} ms p50 ({emb['embedded_now']} embedded in this run, "
                  "the rest from the cache); add/search latencies exclude embedding."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _versus_table(figures: dict[str, Any]) -> list[str]:
    versus = figures.get("versus_best_raw") or {}
    if not versus:
        return []
    n = next(iter(versus.values()))["questions"]
    lines = ["", f"memstrata against the best raw baseline at each k, paired over the {n} "
             "headline questions (Recall@k difference, 95 % bootstrap interval; an interval "
             "across 0 is within what the choice of questions moves):", "",
             "| k | best raw baseline | memstrata − baseline | 95 % interval |",
             "|---|---|---|---|"]  # fmt: skip
    for k, v in versus.items():
        lines.append(f"| {k} | {v['baseline']} | {v['mean']:+.3f} | "
                     f"[{v['low']:+.3f}, {v['high']:+.3f}] |")  # fmt: skip
    return lines


def _systems_table(figures: dict[str, Any]) -> list[str]:
    ds = figures.get("dataset", {})
    lines = [
        f"### Retrieval quality: {ds.get('name', '?')} ({ds.get('format', '?')})"
        + (" — quick" if figures.get("quick") else ""),
        "",
        f"{ds.get('spaces', '?')} memory spaces, {ds.get('questions', '?')} questions with gold; "
        f"headline = {', '.join(ds.get('headline', []))}. Turn budget: ranked memories "
        "expanded into source turns, de-duplicated, cut at k.",
        "",
        "| system | " + " | ".join(f"R@{k}" for k in KS) + " | hit@10 | all@10 | nDCG@10 | MRR "
        "| stored items | turns in | tokens/query | add p50 ms | search p50 ms | errors |",
        "|---" * (len(KS) + 11) + "|",
    ]
    systems = figures.get("systems", {})
    for name, s in systems.items():
        cells = [_f(s.get(f"recall@{k}", 0.0)) for k in KS]
        cells += [_f(s.get("hit@10", 0.0)), _f(s.get("recall_all@10", 0.0)),
                  _f(s.get("ndcg@10", 0.0)), _f(s.get("mrr", 0.0))]  # fmt: skip
        cells += [str(s.get("stored_items")), str(s.get("ingested_turns")),
                  _f(s.get("tokens_per_query")), _f(s.get("add_ms", {}).get("p50")),
                  _f(s.get("search_ms", {}).get("p50")),
                  f"**{n}**" if (n := s.get("error_count", 0)) else "0"]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for name, records in figures.get("errors", {}).items():
        if name not in systems and name not in figures.get("diagnostics", {}):
            first = records[0]["error"] if records else "?"
            lines.append(f"| {name} | did not run: {first} |")
    return lines


def _errors(figures: dict[str, Any]) -> list[str]:
    """The failures of the run, loudly: the run exits non-zero when there are any."""
    errors = figures.get("errors") or {}
    if not errors:
        return []
    ran = {**figures.get("systems", {}), **figures.get("diagnostics", {})}
    lines = ["", "**This run had errors** (failed parts are scored as misses; the command "
             "exits non-zero):", ""]  # fmt: skip
    for name, records in errors.items():
        total = ran.get(name, {}).get("error_count", len(records))
        for r in records[:ERRORS_SHOWN]:
            where = " ".join(x for x in (r.get("space"), r.get("item")) if x)
            lines.append(f"- {name}, {r.get('stage')}{' ' + where if where else ''}: "
                         f"`{r.get('error')}`")  # fmt: skip
        if total > min(len(records), ERRORS_SHOWN):
            lines.append(f"- {name}: {total} errors in all (results.json lists the first "
                         f"{len(records)})")  # fmt: skip
    return lines


def _budget_cell(row: dict[str, Any] | None) -> str:
    if not row:
        return "—"
    ans = row.get("answer_containment")
    tokens = row.get("injected_tokens")
    over = row.get("over_budget")  # a share of injections longer than the budget: say so
    said = f", {over:.1%} over budget" if over else ""
    return (f"{_f(row.get('evidence_recall'))} / {'—' if ans is None else _f(ans)}"
            f" ({'—' if tokens is None else round(tokens)}{said})")  # fmt: skip


def _budget_table(figures: dict[str, Any]) -> list[str]:
    systems = {**figures.get("systems", {}), **figures.get("diagnostics", {})}
    if not any(s.get("budget") for s in systems.values()):
        return []
    transcript = figures.get("transcript_tokens")
    answered = next((s["budget"][str(TOKEN_BUDGETS[0])].get("answer_questions")
                     for s in systems.values() if s.get("budget")), None)  # fmt: skip
    lines = [
        "",
        "#### What an agent pays for: evidence and answer within a token budget",
        "",
        "Per injected-token budget (cl100k): evidence recall / answer containment (mean "
        "tokens injected; the share of injections over the budget when any is), headline "
        "questions"
        + (f" (answer containment over the {answered} with an answer)" if answered else "")
        + ". Memory ratio = transcript tokens"
        + (f" ({transcript:,})" if isinstance(transcript, int) else "")
        + " ÷ tokens stored in the curated layers.",
        "",
        "| system | stored items | stored tokens | memory ratio | "
        + " | ".join(f"{b} tokens" for b in TOKEN_BUDGETS)
        + " |",
        "|---" * (len(TOKEN_BUDGETS) + 4) + "|",
    ]
    for name, s in systems.items():
        budget = s.get("budget") or {}
        cells = [
            str(s.get("stored_items")),
            str(s.get("stored_tokens")),
            _f(s.get("memory_ratio")) if s.get("memory_ratio") is not None else "—",
        ]
        cells += [_budget_cell(budget.get(str(b))) for b in TOKEN_BUDGETS]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ceiling = figures.get("answer_ceiling")
    if ceiling:
        lines += ["", "Answer containment within reach of a system that injects what was said "
                  f"(headline questions with an answer, {ceiling['questions']}): every gold "
                  f"turn of the question, no budget, {_f(ceiling['gold_turns'])}; the whole "
                  f"transcript of its space {_f(ceiling['transcript'])}."]  # fmt: skip
    layers = {n: s.get("stored_tokens_by_layer") for n, s in systems.items()
              if len(s.get("stored_tokens_by_layer") or {}) > 1}  # fmt: skip
    for name, by_layer in layers.items():
        parts = ", ".join(f"{k} {v:,}" for k, v in (by_layer or {}).items())
        lines += ["", f"Stored tokens of {name} by layer: {parts} (L0 text an index holds, "
                  "the raw_history layer and the l0 context indexed with cards, is "
                  "reported, never counted as curated)."]  # fmt: skip
    return lines


def _diagnostics_table(figures: dict[str, Any]) -> list[str]:
    diag = figures.get("diagnostics", {})
    if not diag:
        return []
    head = " | ".join(f"R@{k}" for k in KS)
    lines = [
        "",
        "#### Diagnostic systems (memstrata variants, or a baseline with one part changed)",
        "",
        f"| variant | {head} | stored items | notes |",
        "|---" * (len(KS) + 3) + "|",
    ]
    for name, s in diag.items():
        vals = " | ".join(_f(s.get(f"recall@{k}", 0.0)) for k in KS)
        notes = "; ".join(
            s.get("notes", [])[1:] if name.startswith("memstrata") else s.get("notes", [])
        )
        lines.append(f"| {name} | {vals} | {s.get('stored_items')} | {notes} |")
    return lines


def _category_table(figures: dict[str, Any]) -> list[str]:
    lines = ["", "#### Recall@k per category", ""]
    cats = sorted({c for pc in figures.get("per_category", {}).values() for c in pc})
    lines.append("| system | category | n | " + " | ".join(f"R@{k}" for k in KS) + " |")
    lines.append("|---" * (len(KS) + 3) + "|")
    for name, pc in figures.get("per_category", {}).items():
        for c in cats:
            if c in pc:
                row = pc[c]
                vals = " | ".join(_f(row.get(f"recall@{k}", 0.0)) for k in KS)
                lines.append(f"| {name} | {c} | {row.get('questions')} | {vals} |")
    return lines


def _stage_table(figures: dict[str, Any]) -> list[str]:
    sl = figures.get("stage_loss") or {}
    if not sl:
        return []
    lines = [
        "",
        f"#### Where {sl.get('system', 'memstrata')} loses gold turns (k = {sl['k']})",
        "",
        "| stage | " + " | ".join(STAGES) + " |",
        "|---" * (len(STAGES) + 1) + "|",
        "| all | " + " | ".join(str(sl["totals"].get(s, 0)) for s in STAGES) + " |",
    ]
    for c, row in sl.get("by_category", {}).items():
        lines.append(f"| {c} | " + " | ".join(str(row.get(s, 0)) for s in STAGES) + " |")
    for name, v in figures.get("stage_loss_variants", {}).items():
        cells = " | ".join(str(v["totals"].get(s, 0)) for s in STAGES)
        lines.append(f"| all, {name} | {cells} |")
    funnel = ", ".join(f"{k} {v}" for k, v in sl.get("write_funnel", {}).items())
    lines += ["", f"Write path over every ingested turn: {funnel}", ""]
    by_rule = ", ".join(f"{k} {v}" for k, v in sl.get("decisions_by_rule", {}).items())
    if by_rule:
        lines += [f"Write decisions by rule: {by_rule}", ""]
    if sl.get("refusal_reasons"):
        lines += ["Refusals of gold turns (rule: reason):", ""]
        lines += [f"- {n} × {r}" for r, n in sl["refusal_reasons"].items()]
    return lines


def plots(figures: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = Path(str(figures.get("dataset", {}).get("name", "dataset"))).stem
    out: list[Path] = []
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, s in figures.get("systems", {}).items():
        ax.plot(KS, [s.get(f"recall@{k}", 0.0) for k in KS], marker="o", label=name)
    for name, s in figures.get("diagnostics", {}).items():
        ax.plot(KS, [s.get(f"recall@{k}", 0.0) for k in KS], marker=".", ls="--", label=name)
    ax.set_xscale("log")
    ax.set_xticks(KS, [str(k) for k in KS])
    ax.set_ylim(0, 1)
    ax.set_xlabel("k (unique source turns)")
    ax.set_ylabel("Recall@k (headline categories)")
    ax.set_title(f"Recall@k per system — {stem}")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=7)
    p = out_dir / f"quality-recall-{stem}.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    out.append(p)

    pc = figures.get("per_category", {})
    cats = sorted({c for v in pc.values() for c in v})
    if pc and cats:
        fig, ax = plt.subplots(figsize=(7.4, 4.2))
        width = 0.8 / max(1, len(pc))
        for i, (name, rows) in enumerate(pc.items()):
            xs = [j + i * width for j in range(len(cats))]
            ax.bar(xs, [rows.get(c, {}).get("recall@10", 0.0) for c in cats], width, label=name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("Recall@10")
        ax.set_title(f"Recall@10 per category — {stem}")
        ax.legend(fontsize=8)
        p = out_dir / f"quality-categories-{stem}.png"
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)

    budget_png = _budget_plot(plt, figures, out_dir, stem)
    if budget_png is not None:
        out.append(budget_png)

    sl = figures.get("stage_loss") or {}
    if sl.get("totals"):
        fig, ax = plt.subplots(figsize=(7.4, 3.6))
        vals = [sl["totals"].get(s, 0) for s in STAGES]
        ax.barh(list(STAGES), vals, color="tab:red")
        ax.invert_yaxis()
        ax.set_xlabel(f"gold turns (k = {sl['k']})")
        ax.set_title(f"Where {sl.get('system', 'memstrata')} loses gold turns — {stem}")
        p = out_dir / f"quality-stageloss-{stem}.png"
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    return out


def _budget_plot(plt: Any, figures: dict[str, Any], out_dir: Path, stem: str) -> Path | None:
    """Evidence recall (solid) and answer containment (dashed) against the token budget."""
    systems = {**figures.get("systems", {}), **figures.get("diagnostics", {})}
    systems = {n: s for n, s in systems.items() if s.get("budget")}
    if not systems:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for name, s in systems.items():
        rows = [s["budget"].get(str(b)) or {} for b in TOKEN_BUDGETS]
        (line,) = ax.plot(TOKEN_BUDGETS, [r.get("evidence_recall") or 0.0 for r in rows],
                          marker="o", label=f"{name} evidence")  # fmt: skip
        answers = [r.get("answer_containment") for r in rows]
        if any(a is not None for a in answers):
            ax.plot(TOKEN_BUDGETS, [a or 0.0 for a in answers], marker=".", ls="--",
                    color=line.get_color(), label=f"{name} answer")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(TOKEN_BUDGETS, [str(b) for b in TOKEN_BUDGETS])
    ax.set_ylim(0, 1)
    ax.set_xlabel("injected tokens (cl100k budget)")
    ax.set_ylabel("evidence recall (solid), answer containment (dashed)")
    ax.set_title(f"What fits in a token budget — {stem}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    p = out_dir / f"quality-budget-{stem}.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
