"""The two index ports of long-term memory and what flows through them.

Both indexes are projections of the ledger, keyed by ``memory_id``: upserts are
idempotent, deletes of absent ids are no-ops, and each can be dropped and rebuilt.
``insert`` is for a card the index has never held: on milvus-lite an upsert first looks
the id up, a cost that grows with the collection (docs/LTM.md, "Benchmarks"), while an
insert does not; should a crash ever make one id appear twice, Milvus's search still
returns it once (it reduces results by primary key) and the next upsert or delete
removes both (tests/integration/test_ltm_search_pipeline.py).

``keys`` (one per card, optional): the row keys to write the cards under instead of their
memory_ids, for an index whose rows are versioned (``core.ltm.rows``): an update then
inserts a new row instead of upserting, and ``delete`` takes row keys as well as ids.
A hit's ``memory_id`` is always the card's, whatever key its row has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.embedding import Vectors
from memstrata.core.ltm.filters import CardFilter


@dataclass(frozen=True)
class Hit:
    """One search result of one index; ``score`` is higher-is-better within that index."""

    memory_id: str
    score: float
    importance: float
    updated_at: float
    title: str = ""
    summary: str = ""


@dataclass(frozen=True)
class ContextRead:
    """What an :class:`IndexContext` read: ``texts`` (memory_id → context, for the cards
    that have any) and ``unread`` (memory_id → why its source cannot be read now: those
    cards wait, ``pending``, instead of being indexed without their context)."""

    texts: Mapping[str, str]
    unread: Mapping[str, str] = field(default_factory=dict)


class IndexContext(Protocol):
    """Text that both indexes add to a card, read from the card's source (L0) at
    projection time and never stored on the card: what a card is found by may be wider
    than what it remembers (an episode is found by the question it answered), and that
    wider text stays in L0, the one place it is kept (``core.lifecycle.episodes``)."""

    def __call__(self, cards: Sequence[LtmCard]) -> ContextRead: ...


class LexicalIndex(Protocol):
    """BM25 over the card's normalised ``bm25_text`` (plus title/summary where supported)."""

    name: str

    def ensure_schema(self) -> None: ...

    def upsert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None: ...

    def insert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        """Add rows the index has never held (cheaper than ``upsert`` where it differs)."""
        ...

    def delete(self, memory_ids: Sequence[str]) -> None:
        """Delete these rows (memory_ids or row keys); absent ones are no-ops."""
        ...

    def search(self, normalised_query: str, flt: CardFilter, limit: int) -> list[Hit]: ...

    def get(self, memory_ids: Sequence[str]) -> list[Hit]:
        """The stored title and summary of these ids (score 0); absent ids are skipped."""
        ...

    def refresh(self) -> None:
        """Make recent writes visible to search (a no-op where they already are)."""
        ...

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        """How many records of one owner the index holds, whatever their status."""
        ...

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        """Delete every record of one owner, by filter (scoped erase; idempotent)."""
        ...

    def drop(self) -> None: ...


class VectorIndex(Protocol):
    """Nearest-neighbour search over card embeddings (cosine)."""

    name: str
    dim: int

    def ensure_schema(self) -> None: ...

    def upsert(
        self, cards: Sequence[LtmCard], vectors: Vectors, *, keys: Sequence[str] | None = None
    ) -> None: ...

    def insert(
        self, cards: Sequence[LtmCard], vectors: Vectors, *, keys: Sequence[str] | None = None
    ) -> None:
        """Add rows the index has never held (cheaper than ``upsert`` where it differs)."""
        ...

    def delete(self, memory_ids: Sequence[str]) -> None:
        """Delete these rows (memory_ids or row keys); absent ones are no-ops."""
        ...

    def search(self, vector: Vectors, flt: CardFilter, limit: int) -> list[Hit]: ...

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        """How many records of one owner the index holds, whatever their status."""
        ...

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        """Delete every record of one owner, by filter (scoped erase; idempotent)."""
        ...

    def drop(self) -> None: ...
