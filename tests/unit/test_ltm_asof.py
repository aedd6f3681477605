"""The as-of read's rules: a card's text at a moment, the raw history's time filter, the
CLI's moments and the request's validation (pure; the stores: test_recall_as_of.py)."""

from __future__ import annotations

import argparse

import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.lifecycle.episodes import without_statements
from memstrata.core.ltm.asof import HISTORY_SOURCE, history_prefix, version_at
from memstrata.core.ltm.card import CardStatus, LtmCard
from memstrata.core.ltm.filters import CardFilter, es_filter, milvus_expr
from memstrata.core.recall.service import RecallRequest
from memstrata.ops.cli.memory import moment


def card(summary: str, *, created: float, key: str = "episode:k", version: int = 1) -> LtmCard:
    return LtmCard(
        memory_id="ltm_live", user_id="u1", tenant_id="t1", memory_type="episode",
        title=summary[:80], summary=summary, source_type="session_episode",
        source_message_ids=[f"m_{summary[:1]}"], bm25_text=summary, created_at=created,
        updated_at=created, importance=0.5, confidence=0.5, canonical_key=key,
        version=version,
    )  # fmt: skip


def replaced(summary: str, *, at: float, version: int) -> LtmCard:
    """A replaced version as the episode writer keeps it: written when it was replaced."""
    old = card(summary, created=at, key=f"{history_prefix('ltm_live')}{version}")
    return old.model_copy(update={"memory_id": f"ltm_h{version}", "source_type": HISTORY_SOURCE,
                                  "status": CardStatus.SUPERSEDED})  # fmt: skip


def test_a_card_reads_each_version_within_its_validity() -> None:
    # Given a card written at 100 as "A", replaced by "B" at 200, and by "C" at 300
    live = card("C", created=100.0, version=5)
    history = [replaced("B", at=300.0, version=3), replaced("A", at=200.0, version=1)]
    # Then each moment reads the text current then, under the live card's id
    assert version_at(live, history, 99.0) is None  # not written yet
    for at, text in ((100.0, "A"), (199.9, "A"), (200.0, "B"), (299.0, "B"), (300.0, "C")):
        got = version_at(live, history, at)
        assert got is not None and (got.summary, got.memory_id) == (text, "ltm_live"), at
    assert version_at(live, [], 150.0) is live  # never replaced: the card itself


def test_the_raw_history_filter_keeps_what_was_said_by_then_on_both_backends() -> None:
    flt = CardFilter(tenant_id="t1", user_id="u1", updated_before=1_683_500_000.5)
    assert milvus_expr(flt).endswith(" and updated_at <= 1683500000.5")
    assert {"range": {"updated_at": {"lte": 1_683_500_000.5}}} in es_filter(flt)
    assert "updated_at" not in milvus_expr(CardFilter(tenant_id="t1"))  # no filter: no clause
    with pytest.raises(InvalidInput):
        CardFilter.parse(tenant_id="t1", updated_before=float("nan"))


def test_as_of_is_a_finite_time_or_refused_naming_the_field() -> None:
    ok = RecallRequest(user_id="u1", session_id="s1", query="q", as_of=1_700_000_000)
    assert ok.as_of == 1_700_000_000
    for bad in (float("inf"), "1700000000", True):
        with pytest.raises(InvalidInput, match="as_of"):
            RecallRequest(user_id="u1", session_id="s1", query="q", as_of=bad)


def test_the_cli_reads_epoch_seconds_and_iso_dates_utc_unless_zoned() -> None:
    assert moment("1683500000") == 1_683_500_000.0
    assert moment("2023-05-08") == 1_683_504_000.0
    assert moment("2023-05-08T02:00:00+02:00") == 1_683_504_000.0
    with pytest.raises(argparse.ArgumentTypeError, match="neither"):
        moment("last tuesday")


@pytest.mark.parametrize(
    ("summary", "replaced", "left"),
    [
        ("A; B; C", ["B"], "A; C"),  # in the middle
        ("B; C", ["B"], "C"),  # first
        ("A; B", ["B"], "A"),  # last
        ("B", ["B"], ""),  # alone: nothing left
        ("A; B; B", ["B"], "A"),  # every time it stands whole
        ("A; BB; xB", ["B"], "A; BB; xB"),  # inside another statement: kept
        ("A; B; C; D", ["B", "C"], "A; D"),  # several replaced
        ("A; B", [""], "A; B"),  # an empty text replaces nothing
    ],
)
def test_a_replaced_statement_leaves_a_session_summary_only_where_it_stands_whole(
    summary: str, replaced: list[str], left: str
) -> None:
    assert without_statements(summary, replaced) == left
