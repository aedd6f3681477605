"""Versioned row keys: how a card's update avoids milvus-lite's id lookup.

milvus-lite 2.5.1 looks an id up before every ``upsert`` or ``delete``, and that lookup
grows with the collection (~100 ms a call at 100k cards, docs/LTM.md), while an
``insert`` does not (~3 ms).  So a versioned index (``LtmSettings.versioned_indexes``,
the projector's ``versioned``) holds a card as one row per written version, keyed
``<memory_id>@<version>``: an update *inserts* the new version's row, and the rows it
replaces are recorded in the ledger (``ltm_stale_rows``, in the same transaction as the
projection's mark) and deleted later, many per call, by the reconciler
(:meth:`memstrata.core.ltm.indexer.Projector.purge_stale`).  Searches read a hit's card
from its key (:func:`card_of`) and keep one hit per card.

Rows written before versioned keys are keyed by the bare memory_id; every write of a
card to a versioned index schedules that key too, so they go with its first update.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memstrata.core.errors import InvalidInput
from memstrata.core.ids import validate_id
from memstrata.core.ltm.card import LtmCard

SEPARATOR = "@"
"""Not in the id alphabet (``core.ids``): a key splits back into its card unambiguously."""

MAX_STALE_VERSIONS = 64
"""How many earlier versions one write schedules at most (from the version the ledger
last saw indexed, so normally one): a card rewritten more often than that between two
settled projections is a crash loop, and its oldest rows are left to a rebuild."""

_VERSION = re.compile(r"[1-9][0-9]{0,9}")


def row_key(memory_id: str, version: int) -> str:
    """The key of ``version`` of a card in a versioned index."""
    return f"{memory_id}{SEPARATOR}{version}"


def keys_for(cards: Sequence[LtmCard], keys: Sequence[str] | None) -> list[str]:
    """The key each card's row is written under: ``keys`` (one per card, from the
    projector) when given, else the card's memory_id (an index that is not versioned)."""
    if keys is None:
        return [c.memory_id for c in cards]
    if len(keys) != len(cards):
        raise InvalidInput("one row key per card")
    return list(keys)


def card_of(key: str) -> str:
    """The memory_id a row key belongs to (a bare memory_id is its own card)."""
    return key.partition(SEPARATOR)[0]


def stale_keys(memory_id: str, written: int, held: int | None) -> list[str]:
    """The keys a card's earlier rows may have once version ``written`` is in: the bare
    memory_id, and every version from ``held`` (the one the ledger last recorded as
    indexed; earlier ones were scheduled when it was) up to ``written - 1``, the
    versions a write that never settled may have left."""
    lo = max(held or 1, written - MAX_STALE_VERSIONS, 1)
    return [memory_id, *(row_key(memory_id, v) for v in range(lo, written))]


def validate_row_keys(keys: Sequence[str]) -> list[str]:
    """``keys`` if each is a memory_id, optionally with a version; else
    :class:`~memstrata.core.errors.InvalidInput` (a key becomes a delete expression)."""
    out = []
    for key in keys:
        card, sep, version = key.partition(SEPARATOR)
        validate_id(card, kind="memory_id")
        if sep and not _VERSION.fullmatch(version):
            raise InvalidInput(f"row key {key[:80]!r} has no valid version")
        out.append(key)
    return out
