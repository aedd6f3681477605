"""Versioned row keys (core/ltm/rows.py) and one hit per card (core/ltm/search.py)."""

from __future__ import annotations

import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.ports import Hit
from memstrata.core.ltm.rows import (
    MAX_STALE_VERSIONS,
    card_of,
    row_key,
    stale_keys,
    validate_row_keys,
)
from memstrata.core.ltm.search import first_per_card


def test_a_row_key_splits_back_into_its_card() -> None:
    assert row_key("ltm_ab12", 7) == "ltm_ab12@7"
    assert card_of("ltm_ab12@7") == "ltm_ab12"
    assert card_of("ltm_ab12") == "ltm_ab12"  # a row written before versioned keys


def test_stale_keys_are_the_bare_key_and_the_versions_since_the_last_settled_one() -> None:
    assert stale_keys("c", 2, 1) == ["c", "c@1"]
    # a write of version 3 that never settled may have left its row: 4 replaces 2 and 3
    assert stale_keys("c", 4, 2) == ["c", "c@2", "c@3"]
    assert stale_keys("c", 1, None) == ["c"]  # the first version: only a legacy row
    assert stale_keys("c", 3, 3) == ["c"]  # the same version written again: upserted
    many = stale_keys("c", 1000, None)
    assert len(many) == 1 + MAX_STALE_VERSIONS and many[-1] == "c@999"


@pytest.mark.parametrize("key", ["ltm_1@1", "ltm_1", "~abc@12"])
def test_valid_row_keys_pass(key: str) -> None:
    assert validate_row_keys([key]) == [key]


@pytest.mark.parametrize("key", ["ltm_1@", "ltm_1@0", "ltm_1@x", "a b@1", 'x"@1', "ltm@1@2"])
def test_a_key_that_is_not_an_id_with_a_version_is_refused(key: str) -> None:
    with pytest.raises(InvalidInput):
        validate_row_keys([key])


def _hit(mid: str, score: float, at: float, summary: str) -> Hit:
    return Hit(memory_id=mid, score=score, importance=0.5, updated_at=at, summary=summary)


def test_a_card_held_twice_keeps_its_best_place_and_its_newest_text() -> None:
    hits = [
        _hit("a", 0.9, 1.0, "old words"),  # the stale row matched best
        _hit("b", 0.8, 5.0, "b"),
        _hit("a", 0.2, 2.0, "new words"),
        _hit("b", 0.1, 4.0, "older b"),
    ]
    out = first_per_card(hits)
    assert [(h.memory_id, h.score, h.summary) for h in out] == [
        ("a", 0.9, "new words"),
        ("b", 0.8, "b"),
    ]
