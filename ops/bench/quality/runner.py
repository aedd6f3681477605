"""Run every system on one dataset, score it, attribute memstrata's losses, write outputs."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from memstrata.core.recall.pool import estimate_tokens
from memstrata.ops.bench.quality import stageloss
from memstrata.ops.bench.quality.datasets import Dataset, Format, Question, Space, load
from memstrata.ops.bench.quality.embed import embedded_so_far, shared_embedder
from memstrata.ops.bench.quality.metrics import (
    KS,
    TOKEN_BUDGETS,
    VERSUS_KS,
    answer_containment,
    average,
    average_budgets,
    average_present,
    containment_in,
    normalise_answer,
    paired_difference,
    score_budgets,
    score_question,
    turn_budget,
)
from memstrata.ops.bench.quality.systems.base import Hit, Injection, System, cl100k, count_tokens

log = logging.getLogger(__name__)

SYSTEMS: tuple[str, ...] = ("memstrata", "bm25_raw", "dense_raw", "hybrid_raw", "mem0")
RAW_BASELINES: tuple[str, ...] = ("bm25_raw", "dense_raw", "hybrid_raw", "mem0")
# the shared folder beside the repository (read in place, never copied)
DEFAULT_DATASET = Path(__file__).resolve().parents[4] / "shared/bench/locomo/locomo_dev.json"
TOKENS_AT = 10  # tokens injected per query = the memories that fill a 10-turn budget
ATTRIBUTION_K = 10
QUICK_SESSIONS = 6
QUICK_CHATS = 1  # BEAM --quick: the first chat (about 190 messages, 18 questions with gold)


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(median(values) * 1000, 3) if values else 0.0,
        "p95": round(_pct(values, 0.95) * 1000, 3),
        "p99": round(_pct(values, 0.99) * 1000, 3),
    }


# Diagnostic variants of memstrata (not systems of the headline table): each suffix
# removes one measured loss with a general change, so the report can say what it buys.
VARIANTS: dict[str, str] = {
    "nottl": "every STM lifetime 10 years (stands in for promotion keeping what expires)",
    "fetchall": "recall reads up to 1000 STM items per index",
}


DIAGNOSTICS: tuple[str, ...] = ("bm25_raw+stem",)  # baselines with one part changed


def system_names(text: str) -> tuple[str, ...]:
    """``--systems``: comma-separated names, in order, each once; an unknown name is an
    error before anything is loaded, naming the choices."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError("no system named; choose from " + ", ".join((*SYSTEMS, *DIAGNOSTICS)))
    for name in names:
        base, *suffixes = name.split("+")
        variant = base == "memstrata" and bool(suffixes) and all(p in VARIANTS for p in suffixes)
        if name not in SYSTEMS and name not in DIAGNOSTICS and not variant:
            raise ValueError(
                f"unknown system {name!r}; choose from {', '.join((*SYSTEMS, *DIAGNOSTICS))}"
                f" or memstrata+<{'|'.join(VARIANTS)}>"
            )
    return names


def make_memstrata(name: str, **kw: Any) -> System:
    from memstrata.core.recall.service import RecallSettings
    from memstrata.ops.bench.quality.systems.memstrata import BENCH_TIMEOUTS, MemstrataSystem

    parts = name.split("+")
    unknown = [p for p in parts[1:] if p not in VARIANTS]
    if parts[0] != "memstrata" or unknown:
        raise ValueError(f"unknown memstrata variant {name!r}; suffixes: {', '.join(VARIANTS)}")
    if "nottl" in parts:
        kw.setdefault("ttl_days", 3650.0)
    if "fetchall" in parts:
        kw.setdefault("recall_settings", RecallSettings(stm_per_index=1000, **BENCH_TIMEOUTS))
    system = MemstrataSystem(name=name, **kw)
    system.stats.notes += [VARIANTS[p] for p in parts[1:]]
    return system


def make_system(name: str, **kw: Any) -> System:
    if name.startswith("memstrata"):
        return make_memstrata(name, **kw)
    if name == "bm25_raw+stem":
        from memstrata.ops.bench.quality.systems.raw import RawSystem

        return RawSystem("bm25", stem=True)
    if name in ("bm25_raw", "dense_raw", "hybrid_raw"):
        from memstrata.ops.bench.quality.systems.raw import RawSystem

        mode = name.removesuffix("_raw")
        return RawSystem(mode, None if mode == "bm25" else shared_embedder())
    if name == "mem0":
        from memstrata.ops.bench.quality.systems.mem0_peer import Mem0System

        return Mem0System(shared_embedder())
    raise ValueError(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")


def load_dataset(
    path: Path, fmt: Format | None, *, quick: bool, distractors: int | None
) -> Dataset:
    from memstrata.ops.bench.quality.datasets import detect_format

    fmt = fmt or detect_format(path)
    if fmt == "locomo":
        if quick:  # the first conversation's first sessions: under a minute on a cold cache
            return load(path, fmt, limit_spaces=1, limit_sessions=QUICK_SESSIONS)
        return load(path, fmt)
    if fmt == "memdaily":
        n = distractors if distractors is not None else (10 if quick else 50)
        return load(path, fmt, distractors=n, per_file=1 if quick else 10)
    if fmt == "beam" and quick:
        return load(path, fmt, limit_chats=QUICK_CHATS)
    return load(path, fmt)


def _tokens(hits: list[Hit], k: int) -> int:
    used: list[Hit] = []
    covered: set[str] = set()
    for h in hits:
        if len(covered) >= k:
            break
        used.append(h)
        covered.update(h.turns)
    return sum(estimate_tokens(h.text) for h in used)


OnQuestion = Callable[[Space, Question, list[Hit], dict[int, Injection]], None]


def _injections(system: System, space: Space, q: Question) -> dict[int, Injection]:
    out: dict[int, Injection] = {}
    for b in TOKEN_BUDGETS:
        try:
            out[b] = system.inject(space, q, b)
        except Exception as exc:
            system.stats.error(f"inject@{b}", space.id, q.id, exc)
            out[b] = Injection("", ())
    return out


def run_system(
    system: System,
    ds: Dataset,
    *,
    on_question: OnQuestion,
    transcript_tokens: int | None = None,
) -> dict[str, Any]:
    """Ingest every space, ask every question with gold.  A part that raises (a space's
    ingest, one search, one injection) is recorded in ``system.stats`` and scored as a
    miss; the run goes on, and the caller fails at the end."""
    t0 = time.perf_counter()
    broken: set[str] = set()
    for space in ds.spaces:
        try:
            system.ingest(space)
        except Exception as exc:
            system.stats.error("ingest", space.id, "", exc)
            broken.add(space.id)
    t_ingest = time.perf_counter() - t0
    tokens: list[int] = []
    for space in ds.spaces:
        for q in space.questions:
            if not q.gold:
                continue
            hits: list[Hit] = []
            injected = {b: Injection("", ()) for b in TOKEN_BUDGETS}
            if space.id not in broken:  # a space that never went in: its questions miss
                try:
                    hits = system.search(space, q, max(KS))
                except Exception as exc:
                    system.stats.error("search", space.id, q.id, exc)
                injected = _injections(system, space, q)
            tokens.append(_tokens(hits, TOKENS_AT))
            on_question(space, q, hits, injected)
    st = system.stats
    if transcript_tokens is None:
        transcript_tokens = count_tokens(t.text for s in ds.spaces for t in s.turns)
    return {
        "stored_items": st.stored_items,
        "stored_tokens": st.stored_tokens,
        "stored_tokens_by_layer": dict(st.stored_layers),
        "memory_ratio": round(transcript_tokens / st.stored_tokens, 3) if st.stored_tokens
        else None,
        "ingested_turns": st.ingested_turns,
        "tokens_per_query": round(sum(tokens) / len(tokens), 1) if tokens else 0.0,
        "add_ms": _ms(st.add_seconds),
        "search_ms": _ms(st.search_seconds),
        "ingest_s": round(t_ingest, 2),
        "total_s": round(time.perf_counter() - t0, 2),
        "notes": list(st.notes),
        "degraded": dict(st.degraded.most_common()),
    }  # fmt: skip


def _budget_row(q: Question, injected: dict[int, Injection]) -> dict[str, float | None]:
    counter = cl100k()
    return score_budgets(
        {b: (i.text, i.turns, counter.count(i.text)) for b, i in injected.items()},
        q.gold,
        q.answers,
    )


def evaluate(
    ds: Dataset,
    systems: Sequence[str] = SYSTEMS,
    *,
    system_kw: dict[str, dict[str, Any]] | None = None,
    attribution_k: int = ATTRIBUTION_K,
) -> dict[str, Any]:
    """Every system on every space of ``ds``; the figures as one JSON-able dict.

    Nothing is dropped quietly: a system that does not start, or fails on any part of the
    data, has its errors in ``errors`` (per system: the records of the first failures,
    and ``error_count``); the systems that ran keep their figures, the failed parts
    scored as misses.  :func:`ops.bench.quality.failures` lists them for the exit code.
    """
    out: dict[str, Any] = {"systems": {}, "per_category": {}, "diagnostics": {}, "errors": {}}
    embedded_before = embedded_so_far()  # this run's own embeddings are counted from here
    per_question: dict[str, dict[str, dict[str, float]]] = {}
    per_budget: dict[str, dict[str, dict[str, float | None]]] = {}
    stage: dict[str, Any] = {}  # memstrata (and variants) stage-loss attribution
    transcript = count_tokens(t.text for s in ds.spaces for t in s.turns)
    out["transcript_tokens"] = transcript
    out["answer_ceiling"] = answer_ceiling(ds)
    emb = None
    for name in systems:
        try:
            system = make_system(name, **(system_kw or {}).get(name, {}))
        except Exception as exc:  # recorded, the other systems still run
            log.exception("system %s did not start", name)
            out["errors"][name] = [_record("start", exc)]
            continue
        rows: dict[str, dict[str, float]] = {}
        brows: dict[str, dict[str, float | None]] = {}

        def record(
            space: Space,
            q: Question,
            hits: list[Hit],
            injected: dict[int, Injection],
            rows: dict[str, Any] = rows,
            brows: dict[str, Any] = brows,
        ) -> None:
            rows[q.id] = score_question([h.turns for h in hits], q.gold)
            brows[q.id] = _budget_row(q, injected)

        try:
            info = run_system(system, ds, on_question=record, transcript_tokens=transcript)
            if name.startswith("memstrata"):
                stage.setdefault("variants", {})[name] = attribute_losses(system, ds, attribution_k)
        except Exception as exc:  # the harness itself broke: no figures to show
            log.exception("system %s failed", name)
            out["errors"][name] = [*system.stats.errors, _record("run", exc)]
            _close(system)
            continue
        _close(system)
        info["errors"] = list(system.stats.errors)
        info["error_count"] = system.stats.error_count
        if system.stats.error_count:
            out["errors"][name] = info["errors"]
        per_question[name] = rows
        per_budget[name] = brows
        figures = {**_headline(ds, rows), **info, "budget": _budget(ds, brows)}
        if name in SYSTEMS:
            out["systems"][name] = figures
            out["per_category"][name] = _by_category(ds, rows, brows)
        else:  # a diagnostic variant: same figures, kept out of the systems table
            out["diagnostics"][name] = {**figures, "per_category": _by_category(ds, rows, brows)}
    # memstrata's LTM embeds through the same cache: a run of it alone keeps its vectors
    if any(s.startswith(("dense", "hybrid", "mem0", "memstrata")) for s in systems):
        emb = shared_embedder()
        emb.save()
        now = emb.embed_seconds[embedded_before:]
        out["embedder"] = {"name": emb.name, "dim": emb.dim, "embed_ms": _ms(now),
                           "embedded_now": len(now)}  # fmt: skip
    variants = stage.pop("variants", {})
    out["stage_loss"] = variants.get("memstrata") or next(iter(variants.values()), {})
    out["stage_loss_variants"] = {k: v for k, v in variants.items() if k != "memstrata"}
    out["versus_best_raw"] = versus_best_raw(ds, per_question)
    out["per_question"] = per_question
    out["per_question_budget"] = per_budget
    return out


def versus_best_raw(
    ds: Dataset, per_question: dict[str, dict[str, dict[str, float]]], system: str = "memstrata"
) -> dict[str, Any]:
    """``system`` against the best raw baseline of the run at each k of ``VERSUS_KS``
    (keys ``"1"``, ``"5"``, ``"10"``), paired over the headline questions both scored:
    the mean difference of Recall@k and its 95 % bootstrap interval, so a gap can be read
    against the spread of the questions (an interval across 0 is not a measured loss)."""
    mine = per_question.get(system)
    raws = {n: rows for n, rows in per_question.items() if n in RAW_BASELINES}
    if not mine or not raws:
        return {}
    heads = [q.id for q in _questions(ds) if q.category in ds.headline and q.id in mine
             and all(q.id in rows for rows in raws.values())]  # fmt: skip
    if not heads:
        return {}
    out: dict[str, Any] = {}
    for k in VERSUS_KS:
        key = f"recall@{k}"
        best = max(raws, key=lambda n: sum(raws[n][q][key] for q in heads))
        diff = paired_difference([mine[q][key] for q in heads], [raws[best][q][key] for q in heads])
        out[str(k)] = {"baseline": best, **diff}
    return out


def answer_ceiling(ds: Dataset) -> dict[str, Any] | None:
    """What answer containment any system that injects what was said can reach: the
    headline questions' answers found in their own gold turns (a perfect retriever, no
    token budget) and in the whole transcript of their space (everything injected).

    A target above these is out of reach for extraction and retrieval, whatever the
    ranking: only text that was never said (an abstractive writer) could pass it.
    None when no headline question has an answer to look for (MADial)."""
    gold_rows: list[float | None] = []
    transcript_rows: list[float | None] = []
    for space in ds.spaces:
        heads = [q for q in space.questions if q.gold and q.category in ds.headline]
        if not any(q.answers for q in heads):
            continue
        by_id = {t.id: t.text for t in space.turns}
        transcript = normalise_answer("\n".join(by_id.values()))  # once per space
        for q in heads:
            evidence = "\n".join(by_id[g] for g in q.gold if g in by_id)
            gold_rows.append(answer_containment(evidence, q.answers))
            transcript_rows.append(containment_in(transcript, q.answers))
    questions = sum(1 for v in gold_rows if v is not None)
    if not questions:
        return None
    return {"questions": questions, "gold_turns": average_present(gold_rows),
            "transcript": average_present(transcript_rows)}  # fmt: skip


def _record(stage: str, exc: BaseException) -> dict[str, str]:
    return {"stage": stage, "space": "", "item": "", "error": f"{type(exc).__name__}: {exc}"}


def _close(system: System) -> None:
    try:
        system.close()
    except Exception as exc:
        log.exception("system %s did not close", system.name)
        system.stats.error("close", "", "", exc)


def _questions(ds: Dataset) -> list[Question]:
    return [q for s in ds.spaces for q in s.questions if q.gold]


def _headline(ds: Dataset, rows: dict[str, dict[str, float]]) -> dict[str, Any]:
    head = [rows[q.id] for q in _questions(ds) if q.category in ds.headline and q.id in rows]
    avg = average(head)
    return {**avg, "questions": len(head)}


def _budget(ds: Dataset, brows: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The headline questions' figures per token budget (keys "128" … "1024")."""
    head = [brows[q.id] for q in _questions(ds) if q.category in ds.headline and q.id in brows]
    return average_budgets(head)


def _by_category(
    ds: Dataset,
    rows: dict[str, dict[str, float]],
    brows: dict[str, dict[str, float | None]] | None = None,
) -> dict[str, Any]:
    cats: dict[str, list[Question]] = {}
    for q in _questions(ds):
        if q.id in rows:
            cats.setdefault(q.category, []).append(q)
    out: dict[str, Any] = {}
    for c, qs in sorted(cats.items()):
        out[c] = {**average([rows[q.id] for q in qs]), "questions": len(qs)}
        if brows:
            out[c]["budget"] = average_budgets([brows[q.id] for q in qs if q.id in brows])
    return out


@dataclass
class _Losses:
    """Stage-loss counts, summed over the spaces attributed so far."""

    totals: Counter[str] = field(default_factory=Counter)
    by_cat: dict[str, Counter[str]] = field(default_factory=dict)
    refusals: Counter[str] = field(default_factory=Counter)
    funnel: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    questions: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: _Losses) -> None:
        self.totals.update(other.totals)
        for c, n in other.by_cat.items():
            self.by_cat.setdefault(c, Counter()).update(n)
        self.refusals.update(other.refusals)
        self.funnel.update(other.funnel)
        self.rules.update(other.rules)
        self.questions += other.questions


def _space_losses(system: Any, space: Space, k: int) -> _Losses:
    out = _Losses()
    ledger = stageloss.build_ledger(system, space.id)
    seen: set[str] = set()
    for ds_ in ledger.decisions.values():
        for d in ds_:
            if d.decision_id not in seen:
                seen.add(d.decision_id)
                out.rules[f"{d.rule} {d.verdict.value}"] += 1
    for t in space.turns:
        out.funnel[stageloss.write_stage(t.id, ledger)] += 1
    for q in space.questions:
        if not q.gold:
            continue
        fates = stageloss.attribute(system, space.id, ledger, q, k)
        for f in fates:
            out.totals[f.stage] += 1
            out.by_cat.setdefault(q.category, Counter())[f.stage] += 1
            if f.stage == "refused":
                out.refusals[f.detail] += 1
        out.questions.append(
            {"id": q.id, "category": q.category, "question": q.text,
             "fates": [f.as_dict() for f in fates]}
        )  # fmt: skip
    return out


def attribute_losses(system: Any, ds: Dataset, k: int) -> dict[str, Any]:
    """Stage-loss attribution of every gold turn (all questions) plus the write funnel.

    A space that never went in, or whose attribution raises, is left out (its error is
    recorded in ``system.stats``)."""
    losses = _Losses()
    for space in ds.spaces:
        if space.id not in system.spaces:
            continue  # its ingest failed: recorded by run_system
        try:
            losses.add(_space_losses(system, space, k))
        except Exception as exc:
            system.stats.error("attribution", space.id, "", exc)
    return {
        "k": k,
        "system": system.name,
        "gold_turns": sum(losses.totals.values()),
        "totals": {s: losses.totals.get(s, 0) for s in stageloss.STAGES},
        "by_category": {
            c: {s: n.get(s, 0) for s in stageloss.STAGES} for c, n in sorted(losses.by_cat.items())
        },
        "refusal_reasons": dict(losses.refusals.most_common(10)),
        "write_funnel": dict(losses.funnel.most_common()),
        "decisions_by_rule": dict(losses.rules.most_common()),
        "questions": losses.questions,
    }


def save(figures: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json, results.md and the PNG plots into ``out_dir``."""
    from memstrata.ops.bench.quality.report import markdown, plots

    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = plots(figures, out_dir)
    figures["figures"] = [str(p) for p in pngs]
    (out_dir / "results.json").write_text(json.dumps(figures, indent=1, ensure_ascii=False))
    (out_dir / "results.md").write_text(markdown(figures))
    return [out_dir / "results.json", out_dir / "results.md", *pngs]


def turns_of(hits: list[Hit], k: int) -> list[str]:
    return turn_budget([h.turns for h in hits], k)
