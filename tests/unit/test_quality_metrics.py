"""Turn-budget metrics of the quality harness, on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from memstrata.ops.bench.quality.metrics import (
    answer_containment,
    average,
    average_budgets,
    contains_answer,
    hit_at,
    mrr,
    ndcg_at,
    normalise_answer,
    paired_difference,
    recall_all_at,
    recall_at,
    score_budgets,
    score_question,
    turn_budget,
)
from memstrata.ops.bench.quality.systems.base import Hit, Injection, cl100k, pack
from memstrata.ops.bench.quality.systems.raw import rrf


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


# ---------------------------------------------------------------------- token budgets
def test_normalise_answer() -> None:
    assert normalise_answer("The  Red-Bike, an OLD one!") == "red bike old one"
    assert normalise_answer('"Nothing is Impossible"') == "nothing is impossible"
    assert normalise_answer("北京。") == "北京"
    assert normalise_answer("  ...  ") == ""


def test_containment_is_whole_words_after_normalising() -> None:
    assert contains_answer("She adopted a CAT, called Tom.", "the cat")
    assert not contains_answer("a category of its own", "cat")  # not inside a word
    assert contains_answer("around 250ms now", "250ms")
    assert not contains_answer("2500ms", "250ms")
    assert contains_answer("论坛在北京举行", "北京")  # CJK needs no word boundary
    assert not contains_answer("anything", "")


def test_answer_containment_scores_the_share_of_key_facts() -> None:
    text = "Sprint 1 ends March 29; we use Flask."
    assert answer_containment(text, ["March 29"]) == 1.0
    assert answer_containment(text, ["March 29", "Django"]) == 0.5
    assert answer_containment(text, []) is None  # no answer: not scored
    assert answer_containment(text, ["", "?"]) is None


def test_score_and_average_budgets() -> None:
    row = score_budgets(
        {128: ("cat Tom", ["a"], 100), 256: ("cat Tom bike", ["a", "b"], 300)},
        ["a", "b"],
        ["Tom"],
    )
    assert row == {
        "evidence@128": 0.5, "containment@128": 1.0, "tokens@128": 100.0, "over@128": 0.0,
        "evidence@256": 1.0, "containment@256": 1.0, "tokens@256": 300.0, "over@256": 1.0,
    }  # fmt: skip
    other = score_budgets({128: ("", [], 0), 256: ("", [], 0)}, ["a"], [])
    avg = average_budgets([row, other], budgets=(128, 256))
    assert avg["128"] == {"evidence_recall": 0.25, "answer_containment": 1.0,
                          "injected_tokens": 50.0, "over_budget": 0.0,
                          "answer_questions": 1}  # fmt: skip
    assert avg["256"]["over_budget"] == 0.5
    assert average_budgets([]) == {}


def test_pack_injects_the_top_memories_until_the_budget_is_spent() -> None:
    count = cl100k().count
    big = Hit("word " * 200, ("big",))
    small = Hit("The cat is called Tom.", ("t1", "t2"))
    again = Hit("Tom likes fish.", ("t2", "t3"))
    assert 128 < count(big.text) < 1000
    inj = pack([small, again, big], 128)
    assert inj.text == "The cat is called Tom.\nTom likes fish."
    assert inj.turns == ("t1", "t2", "t3")  # source turns de-duplicated, in rank order
    assert count(inj.text) <= 128
    # a prefix of the ranking: what does not fit ends the injection, nothing is cut
    assert pack([big, small], 128) == Injection("", ())
    assert pack([big, small], 1024).turns == ("big", "t1", "t2")
    # the line breaks are charged: many one-token memories never exceed the budget
    many = pack([Hit("x", (str(i),)) for i in range(100)], 32)
    assert count(many.text) <= 32 and len(many.turns) == 16


def test_paired_difference_brackets_the_mean_and_repeats() -> None:
    # Given one system ahead on 30 of 100 questions and level on the rest
    a = [1.0] * 30 + [0.5] * 70
    b = [0.0] * 30 + [0.5] * 70
    d = paired_difference(a, b)
    # Then the mean gap is 0.3, its interval holds it and stays above 0, and a run repeats
    assert d["questions"] == 100 and d["mean"] == 0.3
    assert 0 < d["low"] < 0.3 < d["high"] < 0.45
    assert paired_difference(a, b) == d
    # And a gap of one question in a hundred either way is an interval across 0
    mixed = paired_difference([1.0] + [0.0] * 99, [0.0] * 99 + [1.0])
    assert mixed["mean"] == 0.0 and mixed["low"] < 0 < mixed["high"]
    # And identical scores have no spread
    assert paired_difference([0.2, 0.4], [0.2, 0.4]) == {"questions": 2, "mean": 0.0,
                                                         "low": 0.0, "high": 0.0}  # fmt: skip
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1.0], [1.0, 0.0])
