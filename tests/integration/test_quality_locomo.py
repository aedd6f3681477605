"""A small real quality run: a slice of one LoCoMo conversation through memstrata's real
write and read paths (real Redis, PostgreSQL, L0) and the BM25 baseline."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from memstrata.core.settings import Settings
from memstrata.ops.bench.quality.datasets import load_locomo
from memstrata.ops.bench.quality.report import markdown
from memstrata.ops.bench.quality.runner import evaluate, save
from memstrata.ops.bench.quality.stageloss import STAGES
from tests.integration import authority_db

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo" / "locomo_dev.json"
KS = (1, 5, 10, 25)


@pytest.fixture(scope="module")
def dataset() -> Any:
    if not LOCOMO.exists():
        pytest.skip(f"LoCoMo data not found at {LOCOMO}")
    return load_locomo(LOCOMO, limit_spaces=1, limit_sessions=2)


def _in_range(row: dict[str, Any]) -> None:
    for k in KS:
        assert 0.0 <= row[f"recall@{k}"] <= 1.0
        assert 0.0 <= row[f"ndcg@{k}"] <= 1.0
        assert row[f"recall_all@{k}"] <= row[f"recall@{k}"] <= row[f"hit@{k}"]
    for a, b in itertools.pairwise(KS):
        assert row[f"recall@{a}"] <= row[f"recall@{b}"]


def test_memstrata_and_bm25_on_a_locomo_slice(
    dataset: Any, settings: Settings, pg_url: str, tmp_path: Path
) -> None:
    base = settings.model_copy(update={"postgres_url": pg_url, "transcript_fsync": False})
    # the v1 rules alone (conversation_fact rule off), to measure what that rule adds
    v1_rules = base.model_copy(
        update={"key_namespace": settings.key_namespace + "v", "extract_conversation_facts": False}
    )
    figures = evaluate(
        dataset, ("memstrata", "bm25_raw"), system_kw={"memstrata": {"settings": base}}
    )
    assert figures["errors"] == {}
    v1 = evaluate(dataset, ("memstrata",), system_kw={"memstrata": {"settings": v1_rules}})
    assert v1["errors"] == {}
    turns = sum(len(s.turns) for s in dataset.spaces)
    sessions = sum(len({t.session for t in s.turns}) for s in dataset.spaces)
    golds = [q for s in dataset.spaces for q in s.questions if q.gold]
    assert turns > 20 and golds
    for name in ("memstrata", "bm25_raw"):
        row = figures["systems"][name]
        assert set(row) >= {"recall@1", "recall@5", "recall@10", "recall@25", "stored_items",
                            "ingested_turns", "tokens_per_query"}  # fmt: skip
        _in_range(row)
        assert row["ingested_turns"] == turns
        # at most one memory per turn, plus one session summary card per session
        assert 0 <= row["stored_items"] <= turns + sessions
        assert figures["per_category"][name]
    assert figures["systems"]["bm25_raw"]["stored_items"] == turns
    assert figures["systems"]["bm25_raw"]["recall@25"] > 0.2  # the data is answerable
    _in_range(v1["systems"]["memstrata"])
    # conversation facts, promoted to episode cards at session end, are found again
    assert figures["systems"]["memstrata"]["recall@10"] > v1["systems"]["memstrata"]["recall@10"]
    assert figures["stage_loss"]["totals"]["retrieved"] > 0

    # every gold turn of every question is accounted for, by exactly one stage
    for sl in (figures["stage_loss"], v1["stage_loss"]):
        assert sl["gold_turns"] == sum(len(q.gold) for q in golds)
        assert sum(sl["totals"].values()) == sl["gold_turns"]
        assert set(sl["totals"]) == set(STAGES)
        assert sum(sl["write_funnel"].values()) == turns
        by_q = {q["id"]: q for q in sl["questions"]}
        for q in golds:
            fates = by_q[q.id]["fates"]
            assert [f["turn"] for f in fates] == list(q.gold)
            assert all(f["stage"] in STAGES for f in fates)
    # the retrieved count agrees with memstrata's recall@10
    sl = figures["stage_loss"]
    recall10 = figures["per_question"]["memstrata"]
    retrieved = sum(round(recall10[q.id]["recall@10"] * len(q.gold)) for q in golds)
    assert sl["totals"]["retrieved"] == retrieved
    # the conversation_fact rule proposes far more than the v1 rules on casual conversation
    never = sl["write_funnel"].get("never_proposed", 0)
    assert never < v1["stage_loss"]["write_funnel"].get("never_proposed", 0)

    figures["dataset"] = {"name": "slice.json", "format": "locomo", "headline": []}
    files = save(figures, tmp_path)
    assert all(p.exists() and p.stat().st_size > 0 for p in files)
    assert {p.suffix for p in files} == {".json", ".md", ".png"}
    text = markdown(figures)
    assert "| memstrata |" in text and "| bm25_raw |" in text
