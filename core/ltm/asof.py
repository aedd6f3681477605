"""What a long-term card said at a past moment: the as-of read (issue 13.3).

Recall returns current memory by default.  ``RecallRequest.as_of`` asks for memory as it
stood at a moment instead: the time memory knew a thing (when a card was written, when a
newer statement replaced its text), not the time someone said it.  A card written after
that moment was not there yet; a card whose text a newer statement of the same fact
replaced since (``core.lifecycle.episodes``: the old text is kept as a
``superseded_statement`` card keyed ``history:<card id>:v<version>``) says what it said
then.  Pure functions of the cards; the ledger reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.core.ltm.card import LtmCard

HISTORY_SOURCE = "superseded_statement"


def history_prefix(memory_id: str) -> str:
    """The canonical-key prefix of a card's replaced versions (see ``history_draft``)."""
    return f"history:{memory_id}:v"


def version_at(card: LtmCard, replaced: Sequence[LtmCard], at: float) -> LtmCard | None:
    """``card`` as it read at ``at``: None before it was written; else the oldest replaced
    version whose replacement came after ``at`` (a replaced version is written when its
    replacement is, so its ``created_at`` is when it stopped being current); else ``card``.

    The version returned keeps the live card's id: it is the same memory, read at ``at``.
    """
    if card.created_at > at:
        return None
    for old in sorted(replaced, key=lambda v: (v.created_at, v.version)):
        if old.created_at > at:
            return old.model_copy(update={"memory_id": card.memory_id})
    return card
