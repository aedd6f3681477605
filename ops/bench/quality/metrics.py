"""Turn-budget retrieval metrics (bench README recipe, step 6-7).

A system returns ranked *memories*, each covering one or more source turns.  The ranked
list is expanded into turn ids in rank order, de-duplicated and cut at ``k`` unique
turns, so a summary of 20 turns spends 20 of the budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from statistics import mean

KS: tuple[int, ...] = (1, 3, 5, 10, 25)
METRICS: tuple[str, ...] = ("recall", "hit", "recall_all", "ndcg")


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
