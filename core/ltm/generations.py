"""Generations of the two card indexes, so ``ltm reindex`` builds beside and then swaps.

milvus-lite 2.5.1 has no collection aliases (``create_alias`` answers UNIMPLEMENTED), so
the name that serves each logical index is recorded in one place instead: the row of
``ltm_index_generations`` for its base name (the settings' collection or ES index name).
No row means the base name serves, as before generations existed.  Generation ``n > 0``
is ``<base>_g<n>``.

While a reindex runs the row also names a *secondary*: the generation being built
(phase ``building``) and, right after the swap, the one just replaced (``retiring``).
Every write (upsert, delete, owner erase) goes to the serving name and the secondary, so
neither misses a change made during the rebuild; reads go to the serving name only.
Each process re-reads the row at most every ``refresh_s`` seconds; the reindex waits
longer than that between steps (and before it drops a generation), so every process
has seen one step before the next.
A write or read refused because a name vanished (dropped by a finished reindex) re-reads
the row at once and runs again on the new names.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.errors import Conflict, MemstrataError, StoreUnavailable
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.embedding import Vectors
from memstrata.core.ltm.errors import IndexRejected
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.ports import Hit, LexicalIndex
from memstrata.core.ltm.tables import index_generations
from memstrata.core.ltm.vector import MilvusVectorIndex

log = logging.getLogger(__name__)

Phase = Literal["building", "retiring"]
_WHAT = "ltm index generations (table ltm_index_generations: run `memstrata migrate`)"


@dataclass(frozen=True)
class Pointer:
    """Where one logical index lives now; ``secondary`` also receives every write."""

    serving: str
    generation: int = 0
    secondary: str | None = None
    phase: Phase | None = None

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.serving,) if self.secondary is None else (self.serving, self.secondary)


def generation_name(base: str, generation: int) -> str:
    """``base`` for generation 0 (the name before generations), ``<base>_g<n>`` after."""
    return base if generation == 0 else f"{base}_g{generation}"


class GenerationStore:
    """The ``ltm_index_generations`` rows, on the ledger's PostgreSQL pool."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read(self, base: str) -> Pointer:
        with pg_errors(_WHAT), self.engine.connect() as conn:
            row = conn.execute(
                select(index_generations).where(index_generations.c.base_name == base)
            ).first()
        if row is None:
            return Pointer(serving=base)
        phase = row.phase if row.phase in ("building", "retiring") else None
        return Pointer(row.serving, row.generation, row.secondary, phase)

    def write(self, base: str, pointer: Pointer) -> None:
        values = {
            "serving": pointer.serving,
            "generation": pointer.generation,
            "secondary": pointer.secondary,
            "phase": pointer.phase,
            "changed_at": time.time(),
        }
        stmt = insert(index_generations).values(base_name=base, **values)
        with pg_errors(_WHAT), self.engine.begin() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[index_generations.c.base_name], set_=values
                )
            )

    def clear(self, base: str) -> None:
        with pg_errors(_WHAT), self.engine.begin() as conn:
            conn.execute(delete(index_generations).where(index_generations.c.base_name == base))

    @contextmanager
    def exclusive(self, base: str) -> Iterator[None]:
        """Hold a PostgreSQL advisory lock for ``base`` (one reindex at a time), or refuse."""
        with pg_errors(_WHAT), self.engine.connect() as conn:
            key = conn.execute(select(func.hashtext(f"memstrata-reindex:{base}"))).scalar_one()
            if not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                raise Conflict(f"another reindex of {base!r} is running")
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()


class Names:
    """A process's cached view of one pointer, re-read at most every ``refresh_s``.

    Until one read succeeded, an unreadable pointer raises :class:`StoreUnavailable`:
    after a reindex the base name no longer serves, and writing or creating it would
    leave an orphan.  After that, a failed re-read keeps the last pointer read.
    """

    def __init__(self, store: GenerationStore, base: str, *, refresh_s: float) -> None:
        self.store = store
        self.base = base
        self.refresh_s = refresh_s
        self._pointer = Pointer(serving=base)
        self._read_at = float("-inf")
        self._known = False  # one read succeeded: later failures keep the last pointer
        self._lock = threading.Lock()

    def current(self, *, force: bool = False) -> Pointer:
        now = time.monotonic()
        if not force and now - self._read_at < self.refresh_s:
            return self._pointer
        with self._lock:
            if force or now - self._read_at >= self.refresh_s:
                try:
                    self._pointer = self.store.read(self.base)
                    self._known = True
                except (MemstrataError, SQLAlchemyError) as exc:  # PG down, or not migrated
                    if not self._known:  # the base name may not serve: never guess it
                        raise StoreUnavailable(
                            f"ltm generation pointer {self.base!r} unreadable: {exc}"
                        ) from exc
                    log.warning("ltm generation pointer %s unreadable: %s", self.base, exc)
                self._read_at = time.monotonic()
        return self._pointer


class _Droppable(Protocol):
    def drop(self) -> None: ...

    def ensure_schema(self) -> None: ...


T = TypeVar("T", bound=_Droppable)
R = TypeVar("R")


class _Routed(Generic[T]):
    """Sends each call to the adapter of the current name(s); adapters are made lazily."""

    def __init__(self, names: Names, make: Callable[[str], T]) -> None:
        self.names = names
        self._make = make
        self._adapters: dict[str, T] = {}

    def at(self, name: str) -> T:
        adapter = self._adapters.get(name)
        if adapter is None:
            adapter = self._adapters[name] = self._make(name)
        return adapter

    @property
    def serving(self) -> T:
        return self.at(self.names.current().serving)

    @property
    def collection(self) -> str:
        """The serving collection (Milvus) or index (Elasticsearch) name."""
        return self.names.current().serving

    def _write(self, op: Callable[[T], None]) -> None:
        seen = self.names.current()
        try:
            for name in seen.targets:
                op(self.at(name))
        except IndexRejected:
            fresh = self.names.current(force=True)
            if fresh == seen:
                raise
            for name in fresh.targets:  # a reindex moved on meanwhile: writes are idempotent
                op(self.at(name))

    def _insert(self, insert: Callable[[T], None], upsert: Callable[[T], None]) -> None:
        """``insert`` where one generation serves; ``upsert`` while a reindex copies (the
        copy may already hold the card) and on a retry after the pointer moved."""
        seen = self.names.current()
        if len(seen.targets) != 1:
            self._write(upsert)
            return
        try:
            insert(self.at(seen.targets[0]))
        except IndexRejected:
            if self.names.current(force=True) == seen:
                raise
            self._write(upsert)

    def _read(self, op: Callable[[T], R]) -> R:
        seen = self.names.current()
        try:
            return op(self.at(seen.serving))
        except IndexRejected:
            fresh = self.names.current(force=True)
            if fresh.serving == seen.serving:
                raise
            return op(self.at(fresh.serving))

    def ensure_schema(self) -> None:
        self._read(lambda a: a.ensure_schema())

    def drop(self) -> None:
        """Drop every generation this pointer names and forget the pointer."""
        for name in self.names.current(force=True).targets:
            self.at(name).drop()
        self.names.store.clear(self.names.base)
        self.names.current(force=True)


class RoutedLexical(_Routed[LexicalIndex]):
    """The lexical port over generations of one lexical index."""

    name = "lexical"

    def upsert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        self._write(lambda a: a.upsert(cards, keys=keys))

    def insert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        self._insert(lambda a: a.insert(cards, keys=keys), lambda a: a.upsert(cards, keys=keys))

    def delete(self, memory_ids: Sequence[str]) -> None:
        self._write(lambda a: a.delete(memory_ids))

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        self._write(lambda a: a.delete_owner(tenant_id, user_id))

    def search(self, normalised_query: str, flt: CardFilter, limit: int) -> list[Hit]:
        return self._read(lambda a: a.search(normalised_query, flt, limit))

    def get(self, memory_ids: Sequence[str]) -> list[Hit]:
        return self._read(lambda a: a.get(memory_ids))

    def refresh(self) -> None:
        self._write(lambda a: a.refresh())

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        """Counted in every generation named (an erase checks the one being built too)."""
        names = self.names.current(force=True).targets
        return sum(self.at(n).count_owner(tenant_id, user_id) for n in names)


class RoutedVector(_Routed[MilvusVectorIndex]):
    """The vector port over generations of one Milvus vector collection."""

    name = "vector"

    def __init__(self, names: Names, make: Callable[[str], MilvusVectorIndex], *, dim: int):
        super().__init__(names, make)
        self.dim = dim

    def upsert(
        self, cards: Sequence[LtmCard], vectors: Vectors, *, keys: Sequence[str] | None = None
    ) -> None:
        self._write(lambda a: a.upsert(cards, vectors, keys=keys))

    def insert(
        self, cards: Sequence[LtmCard], vectors: Vectors, *, keys: Sequence[str] | None = None
    ) -> None:
        self._insert(
            lambda a: a.insert(cards, vectors, keys=keys),
            lambda a: a.upsert(cards, vectors, keys=keys),
        )

    def delete(self, memory_ids: Sequence[str]) -> None:
        self._write(lambda a: a.delete(memory_ids))

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        self._write(lambda a: a.delete_owner(tenant_id, user_id))

    def search(self, vector: Vectors, flt: CardFilter, limit: int) -> list[Hit]:
        return self._read(lambda a: a.search(vector, flt, limit))

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        names = self.names.current(force=True).targets
        return sum(self.at(n).count_owner(tenant_id, user_id) for n in names)

    def collection_dim(self) -> int:
        return self._read(lambda a: a.collection_dim())

    def count(self) -> int:
        return self._read(lambda a: a.count())
