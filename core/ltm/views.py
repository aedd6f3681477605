"""View cards: a card that names other cards (``LtmCard.source_card_ids``) instead of
copying what they say (an entity card, ``core.lifecycle.entity_cards``).

Its statements are read from the cards it names, each time they are needed: when the
card is indexed (:class:`ViewContext`, an ``IndexContext``: the view is found by what its
cards say) and when recall meets it (:func:`focused`: the cards it names that the query
is about stand in its place, each as the memory it is).  A named card of another owner,
or one gone from the ledger, adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memstrata.core.ltm.card import CardStatus, LtmCard
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.ports import ContextRead, IndexContext
from memstrata.core.ltm.text import tokens


def view_sources(views: Sequence[LtmCard]) -> list[str]:
    """Every card id the ``views`` name, once, in order."""
    return list(dict.fromkeys(i for v in views for i in v.source_card_ids))


def _owned(view: LtmCard, sources: Mapping[str, LtmCard]) -> list[LtmCard]:
    named = (sources.get(i) for i in view.source_card_ids)
    return [s for s in named if s is not None and (s.tenant_id, s.user_id) == (
        view.tenant_id, view.user_id)]  # fmt: skip


def focused(
    view: LtmCard, sources: Mapping[str, LtmCard], query: str, *, keep: int = 2
) -> list[LtmCard]:
    """The active cards a view names that ``query`` is about: of those sharing the most
    terms with it besides the view's own name (every card it names states that), at most
    ``keep``, each sharing at least half as many as the best ("my" alone does not make
    a second one), in the view's order; the first when none shares any.  A card a merge
    hides (superseded) is left out: the merged card is that memory now."""
    live = [s for s in _owned(view, sources) if s.status is CardStatus.ACTIVE]
    if not live:
        return []
    q = set(tokens(query)) - set(tokens(" ".join(view.entities)))
    shared = [len(q & set(tokens(s.summary))) for s in live]
    order = sorted(range(len(live)), key=lambda n: (-shared[n], n))
    top = shared[order[0]]
    best = [n for n in order[:keep] if shared[n] and 2 * shared[n] >= top] or [0]
    return [live[n] for n in sorted(best)]


class ViewContext:
    """The ``IndexContext`` of view cards: the statements of the cards each one names,
    read from the ledger (one statement per projection batch)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def __call__(self, cards: Sequence[LtmCard]) -> ContextRead:
        views = [c for c in cards if c.source_card_ids]
        if not views:
            return ContextRead({})
        sources = self.ledger.cards(view_sources(views))
        texts = {v.memory_id: "\n".join(s.summary for s in _owned(v, sources)) for v in views}
        return ContextRead({k: t for k, t in texts.items() if t})


class Contexts:
    """Several ``IndexContext`` s as one: a card's texts joined, every unread card kept."""

    def __init__(self, *parts: IndexContext) -> None:
        self.parts = parts

    def __call__(self, cards: Sequence[LtmCard]) -> ContextRead:
        texts: dict[str, list[str]] = {}
        unread: dict[str, str] = {}
        for part in self.parts:
            read = part(cards)
            for mid, text in read.texts.items():
                texts.setdefault(mid, []).append(text)
            unread |= read.unread
        return ContextRead({k: "\n".join(v) for k, v in texts.items()}, unread)
