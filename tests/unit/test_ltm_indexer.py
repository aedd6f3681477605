"""Which cards the projector inserts and which it upserts (pure rule)."""

from __future__ import annotations

from memstrata.core.ltm.card import CardDraft, LtmCard
from memstrata.core.ltm.indexer import _work_per_index, never_written
from memstrata.core.ltm.ledger import Projection
from memstrata.core.ltm.projection import ProjectionState


def _row(index: str, *, indexed: int | None, attempts: int, mid: str = "ltm_a") -> Projection:
    return Projection(mid, index, ProjectionState.PENDING, 2, indexed, attempts, None, 0.0)


def test_only_a_card_no_attempt_ever_wrote_counts_as_new() -> None:
    assert never_written(_row("vector", indexed=None, attempts=0))
    assert not never_written(_row("vector", indexed=None, attempts=1))  # may have landed
    assert not never_written(_row("vector", indexed=1, attempts=0))  # held, older version


def test_a_forced_reprojection_never_inserts() -> None:
    draft = CardDraft(tenant_id="t", user_id="u", canonical_key="k", title="x", summary="y")
    card = LtmCard.from_draft(draft, now=0.0)
    rows = [_row("vector", indexed=None, attempts=0, mid=card.memory_id)]
    assert _work_per_index({card.memory_id: card}, rows, force=False)["vector"][0].fresh
    assert not _work_per_index({card.memory_id: card}, rows, force=True)["vector"][0].fresh
