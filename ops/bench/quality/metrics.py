"""Turn-budget retrieval metrics (bench README recipe, step 6-7), and what an injected
text of a token budget holds.

A system returns ranked *memories*, each covering one or more source turns.  The ranked
list is expanded into turn ids in rank order, de-duplicated and cut at ``k`` unique
turns, so a summary of 20 turns spends 20 of the budget.

An agent pays in tokens, not turns: at each token budget (cl100k) the harness takes the
text a system would inject and scores its *evidence recall* (gold turns among the
injected memories' source turns) and its *answer containment* (the normalised gold
answer appears in the normalised injected text).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from statistics import mean

KS: tuple[int, ...] = (1, 3, 5, 10, 25)
VERSUS_KS: tuple[int, ...] = (1, 5, 10)  # the k of issue 13.8's "never below the best raw"
METRICS: tuple[str, ...] = ("recall", "hit", "recall_all", "ndcg")
TOKEN_BUDGETS: tuple[int, ...] = (128, 256, 512, 1024)  # injected cl100k tokens


def turn_budget(ranked: Iterable[Sequence[str]], k: int) -> list[str]:
    """The first ``k`` unique turn ids of the ranked memories, in rank order."""
    out: list[str] = []
    seen: set[str] = set()
    for turns in ranked:
        for t in turns:
            if t in seen:
                continue
            seen.add(t)
            out.append(t)
            if len(out) >= k:
                return out
    return out


def recall_at(top: Sequence[str], gold: Sequence[str]) -> float:
    g = set(gold)
    return len(g & set(top)) / len(g) if g else 0.0


def hit_at(top: Sequence[str], gold: Sequence[str]) -> float:
    return 1.0 if set(gold) & set(top) else 0.0


def recall_all_at(top: Sequence[str], gold: Sequence[str]) -> float:
    return 1.0 if gold and set(gold) <= set(top) else 0.0


def ndcg_at(top: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Binary-relevance nDCG@k over the (already cut) turn list."""
    g = set(gold)
    if not g:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, t in enumerate(top[:k]) if t in g)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(g), k)))
    return dcg / ideal


def mrr(ranked_turns: Sequence[str], gold: Sequence[str]) -> float:
    """Reciprocal rank of the first gold turn in the expanded list (0 if absent)."""
    g = set(gold)
    for i, t in enumerate(ranked_turns):
        if t in g:
            return 1.0 / (i + 1)
    return 0.0


def score_question(
    ranked: Sequence[Sequence[str]], gold: Sequence[str], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Every metric of one question at every k, keys like ``recall@5``."""
    out: dict[str, float] = {}
    full = turn_budget(ranked, max(ks))
    for k in ks:
        top = full[:k]
        out[f"recall@{k}"] = recall_at(top, gold)
        out[f"hit@{k}"] = hit_at(top, gold)
        out[f"recall_all@{k}"] = recall_all_at(top, gold)
        out[f"ndcg@{k}"] = ndcg_at(top, gold, k)
    out["mrr"] = mrr(full, gold)
    return out


def average(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Macro average of per-question scores (keys of the first row)."""
    if not rows:
        return {}
    return {key: round(mean(r[key] for r in rows), 4) for key in rows[0]}


# ---------------------------------------------------------------------- token budgets
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPACE = re.compile(r"\s+")
# a match must not start or end inside a latin word or number ("cat" is not in
# "category"); CJK text has no spaces, so a CJK edge needs no boundary
_WORD = "0-9a-z\u00c0-\u024f"


def normalise_answer(text: str) -> str:
    """Casefold, punctuation to spaces, English articles out, whitespace collapsed."""
    folded = text.casefold()
    chars = [" " if unicodedata.category(ch).startswith("P") else ch for ch in folded]
    return _SPACE.sub(" ", _ARTICLES.sub(" ", "".join(chars))).strip()


def _found(normalised_text: str, answer: str) -> bool:
    needle = normalise_answer(answer)
    if not needle:
        return False
    pattern = rf"(?<![{_WORD}]){re.escape(needle)}(?![{_WORD}])"
    return re.search(pattern, normalised_text) is not None


def contains_answer(text: str, answer: str) -> bool:
    """Whether the normalised ``answer`` appears in the normalised ``text``."""
    return _found(normalise_answer(text), answer)


def containment_in(normalised_text: str, answers: Sequence[str]) -> float | None:
    """:func:`answer_containment` of a text already passed through :func:`normalise_answer`
    (a long text asked about many answers is normalised once)."""
    wanted = [a for a in answers if normalise_answer(a)]
    if not wanted:
        return None
    return sum(_found(normalised_text, a) for a in wanted) / len(wanted)


def answer_containment(text: str, answers: Sequence[str]) -> float | None:
    """The share of ``answers`` (one answer, or a question's key facts) found in ``text``;
    None when the question has no answer to look for."""
    return containment_in(normalise_answer(text), answers)


def average_present(values: Iterable[float | None]) -> float | None:
    """Mean of the values that exist (None when none does)."""
    present = [v for v in values if v is not None]
    return round(mean(present), 4) if present else None


def score_budgets(
    injected: Mapping[int, tuple[str, Sequence[str], int]],
    gold: Sequence[str],
    answers: Sequence[str],
) -> dict[str, float | None]:
    """One question at every token budget ``b`` → ``(text, source turns, cl100k tokens)``:
    ``evidence@b`` (recall of the gold turns), ``containment@b`` (None: no answer),
    ``tokens@b`` and ``over@b`` (1.0 when the text exceeds the budget)."""
    out: dict[str, float | None] = {}
    for b, (text, turns, tokens) in sorted(injected.items()):
        out[f"evidence@{b}"] = recall_at(turns, gold)
        out[f"containment@{b}"] = answer_containment(text, answers)
        out[f"tokens@{b}"] = float(tokens)
        out[f"over@{b}"] = 1.0 if tokens > b else 0.0
    return out


def average_budgets(
    rows: Sequence[Mapping[str, float | None]], budgets: Sequence[int] = TOKEN_BUDGETS
) -> dict[str, dict[str, float | int | None]]:
    """Macro averages per budget, keyed ``"128"`` …: evidence_recall, answer_containment
    (over the questions with an answer; None if none has), injected_tokens (mean cl100k),
    over_budget (share of injections longer than the budget), answer_questions."""
    out: dict[str, dict[str, float | int | None]] = {}
    for b in budgets:
        if not rows:
            break
        contained = [r.get(f"containment@{b}") for r in rows]
        out[str(b)] = {
            "evidence_recall": average_present(r.get(f"evidence@{b}") for r in rows),
            "answer_containment": average_present(contained),
            "injected_tokens": average_present(r.get(f"tokens@{b}") for r in rows),
            "over_budget": average_present(r.get(f"over@{b}") for r in rows),
            "answer_questions": sum(1 for c in contained if c is not None),
        }
    return out


# ---------------------------------------------------------------------- paired differences
def paired_difference(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 2_000, seed: int = 0
) -> dict[str, float | int]:
    """Mean of ``a[i] - b[i]`` over paired per-question scores, with a 95 % percentile
    bootstrap interval (questions resampled with replacement, ``seed`` fixed so a run
    repeats): whether a gap between two systems on the same questions is more than
    which questions happened to be asked."""
    import numpy as np

    if len(a) != len(b):
        raise ValueError(f"paired scores differ in length: {len(a)} and {len(b)}")
    diffs = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not len(diffs):
        return {"questions": 0, "mean": 0.0, "low": 0.0, "high": 0.0}
    picks = np.random.default_rng(seed).integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"questions": len(diffs), "mean": round(float(diffs.mean()), 4),
            "low": round(float(low), 4), "high": round(float(high), 4)}  # fmt: skip
