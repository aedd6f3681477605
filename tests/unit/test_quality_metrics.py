"""Turn-budget metrics of the quality harness, on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from ops.bench.quality.metrics import (
    average,
    hit_at,
    mrr,
    ndcg_at,
    recall_all_at,
    recall_at,
    score_question,
    turn_budget,
)
from ops.bench.quality.systems.raw import rrf


def test_turn_budget_expands_dedups_and_cuts_in_rank_order() -> None:
    ranked = [("a", "b"), ("b", "c"), ("d",), ("e", "f")]
    assert turn_budget(ranked, 1) == ["a"]
    assert turn_budget(ranked, 3) == ["a", "b", "c"]
    assert turn_budget(ranked, 5) == ["a", "b", "c", "d", "e"]
    assert turn_budget(ranked, 50) == ["a", "b", "c", "d", "e", "f"]
    assert turn_budget([], 5) == []


def test_a_summary_spends_its_turns_of_the_budget() -> None:
    summary = tuple(f"t{i}" for i in range(20))
    assert turn_budget([summary, ("gold",)], 10) == list(summary[:10])
    assert score_question([summary, ("gold",)], ["gold"])["recall@10"] == 0.0
    assert score_question([summary, ("gold",)], ["gold"])["recall@25"] == 1.0


def test_recall_hit_recall_all() -> None:
    top = ["a", "b", "c"]
    assert recall_at(top, ["a", "x"]) == 0.5
    assert hit_at(top, ["a", "x"]) == 1.0
    assert recall_all_at(top, ["a", "x"]) == 0.0
    assert recall_all_at(top, ["a", "c"]) == 1.0
    assert recall_at(top, []) == 0.0
    assert recall_all_at(top, []) == 0.0


def test_ndcg_and_mrr() -> None:
    assert ndcg_at(["g", "x"], ["g"], 2) == 1.0
    assert ndcg_at(["x", "g"], ["g"], 2) == pytest.approx(1 / math.log2(3))
    # two gold, one found at rank 1: DCG 1, ideal 1 + 1/log2(3)
    assert ndcg_at(["g1", "x"], ["g1", "g2"], 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert mrr(["x", "y", "g"], ["g"]) == pytest.approx(1 / 3)
    assert mrr(["x"], ["g"]) == 0.0


def test_score_question_keys_and_average() -> None:
    row = score_question([("a",), ("b",)], ["b"], ks=(1, 5))
    assert row == {
        "recall@1": 0.0, "hit@1": 0.0, "recall_all@1": 0.0, "ndcg@1": 0.0,
        "recall@5": 1.0, "hit@5": 1.0, "recall_all@5": 1.0,
        "ndcg@5": pytest.approx(1 / math.log2(3)), "mrr": 0.5,
    }  # fmt: skip
    avg = average([{"recall@1": 1.0}, {"recall@1": 0.0}])
    assert avg == {"recall@1": 0.5}
    assert average([]) == {}


def test_rrf_fuses_by_reciprocal_rank() -> None:
    # 1 and 3: 1/61 + 1/63 > 2: 2/62; ties keep the order of first appearance
    assert rrf([[1, 2, 3], [3, 2, 1]]) == [1, 3, 2]
    fused = rrf([[1, 2], [2, 3]])
    assert fused[0] == 2  # in both lists
    assert set(fused) == {1, 2, 3}
