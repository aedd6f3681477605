"""Forgetting policy for LTM cards, pure: which cards are long inactive and unimportant.

A card is forgotten only if all hold: it is active, not a summary kind that carries
others' sources, its importance is at most ``max_importance``, it was recalled at most
``max_access_count`` times, and neither its content nor its recall count changed for
``inactive_s`` seconds.  Destructive, so the job is a dry run unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memstrata.core.lifecycle.config import ForgetPolicy


@dataclass(frozen=True)
class CardFacts:
    memory_id: str
    tenant_id: str
    user_id: str
    memory_type: str
    importance: float
    access_count: int
    updated_at: float
    status: str = "active"


@dataclass(frozen=True)
class Forget:
    card: CardFacts
    last_active: float
    reason: str


def select_for_forgetting(
    cards: Sequence[CardFacts],
    *,
    policy: ForgetPolicy,
    now: float,
    last_access: Mapping[str, float] | None = None,
) -> list[Forget]:
    out = []
    seen = last_access or {}
    for c in cards:
        if c.status != "active" or c.memory_type in policy.keep_types:
            continue
        last = max(c.updated_at, seen.get(c.memory_id, 0.0))
        if (
            c.importance <= policy.max_importance
            and c.access_count <= policy.max_access_count
            and now - last >= policy.inactive_s
        ):
            days = (now - last) / 86400.0
            out.append(Forget(c, last, f"inactive {days:.0f} d, importance {c.importance:.2f}, "
                                        f"{c.access_count} recalls"))  # fmt: skip
    return out
