"""``ltm reindex``: rebuild both card indexes into a new generation, then swap.

Search keeps answering from the serving generation throughout (core/ltm/generations.py):

1. recover from an earlier run that died: a half-built generation is dropped, a retired
   one that was not dropped yet is dropped now;
2. create generation ``n + 1`` of both indexes empty and record it as ``building``, so
   every process writes each change to both; wait until every process has seen that;
3. project every ledger card into the new generation (``force``: its state in the
   ledger says nothing about the new collections).  The ledger is not settled: it
   speaks of the serving generation, which this copy does not write;
4. catch up: a live write, delete or erase reaches both generations, but the copy may
   have read the card before it and land its older version after it.  So every card
   whose ledger row changed since step 2 is projected again (a tombstone as a delete),
   then those of them that changed again meanwhile, until none did; and every owner
   written who has no ledger row left (erased meanwhile) is deleted from the new
   generation again;
5. swap: the new generation serves, the old one becomes ``retiring`` (still written);
   wait until every process reads the new one;
6. forget the old one, wait again (a process that cached ``retiring`` still writes to
   it, and Elasticsearch would re-create a deleted index on such a write), drop it.

A run that does not swap (transient copy errors, writes that never let step 4 finish,
an exception or Ctrl-C) restores the pointer to the old generation alone, waits, and
drops the new one.  A crash (the process killed) before step 5 leaves the old
generation serving, after it the new one; the next run recovers and finishes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.generations import Pointer, RoutedLexical, RoutedVector, generation_name
from memstrata.core.ltm.indexer import Projector, ProjectReport
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.ports import IndexContext, LexicalIndex, VectorIndex

log = logging.getLogger(__name__)

Routed = RoutedLexical | RoutedVector
CATCH_UP_PASSES = 8  # each pass redoes the cards of the one before that changed meanwhile


@dataclass
class SwapReport:
    project: ProjectReport
    swapped: bool
    serving: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    caught_up: int = 0  # cards projected again because they changed during the copy


def _recover(index: Routed, dropped: list[str]) -> Pointer:
    """Undo or finish what a dead earlier run left; returns the pointer with no secondary."""
    pointer = index.names.current(force=True)
    if pointer.secondary is None:
        return pointer
    index.at(pointer.secondary).drop()  # half-built (building) or replaced (retiring)
    dropped.append(pointer.secondary)
    clean = Pointer(pointer.serving, pointer.generation)
    index.names.store.write(index.names.base, clean)
    return clean


def rebuild_and_swap(
    *,
    ledger: Ledger,
    lexical: RoutedLexical,
    vector: RoutedVector,
    embedder: CachedEmbedder,
    max_embed_chars: int,
    settle_s: float,
    context: IndexContext | None = None,
    versioned: frozenset[str] = frozenset(),
    batch: int = 500,
    on_progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> SwapReport:
    """See the module docstring; ``settle_s`` must exceed every process's refresh."""
    indexes: tuple[Routed, ...] = (lexical, vector)
    with ExitStack() as stack:
        for index in indexes:
            stack.enter_context(index.names.store.exclusive(index.names.base))
        dropped: list[str] = []
        old = {ix.name: _recover(ix, dropped) for ix in indexes}
        new = {ix.name: generation_name(ix.names.base, old[ix.name].generation + 1)
               for ix in indexes}  # fmt: skip
        serving_old = {ix.name: old[ix.name].serving for ix in indexes}
        new_lexical, new_vector = lexical.at(new["lexical"]), vector.at(new["vector"])
        try:
            for adapter in (new_lexical, new_vector):
                adapter.drop()  # a leftover of that name is not trusted
                adapter.ensure_schema()
            # changes from here on are projected again (step 4); settle_s covers the
            # writers' clock skew and the writes already under way with the old pointer
            since = time.time() - settle_s
            for ix in indexes:
                p = old[ix.name]
                ix.names.store.write(ix.names.base, Pointer(p.serving, p.generation,
                                                             new[ix.name], "building"))  # fmt: skip
            sleep(settle_s)
            projector = Projector(ledger=ledger, lexical=new_lexical, vector=new_vector,
                                  embedder=embedder, max_embed_chars=max_embed_chars,
                                  context=context, versioned=versioned)  # fmt: skip
            try:
                report = _copy(ledger, projector, batch, on_progress)
                caught_up = None if report.transient else _catch_up(
                    ledger, projector, since, report, batch)  # fmt: skip
                if caught_up is not None:
                    _drop_erased_owners(ledger, report.owners, (new_lexical, new_vector))
            finally:
                projector.close()
            if caught_up is None:
                _abandon(indexes, new, settle_s, sleep, dropped)
                return SwapReport(report, False, serving_old, dropped)
            new_lexical.refresh()
            for ix in indexes:
                p = old[ix.name]
                ix.names.store.write(ix.names.base, Pointer(new[ix.name], p.generation + 1,
                                                             p.serving, "retiring"))  # fmt: skip
            sleep(settle_s)
            for ix in indexes:
                final = Pointer(new[ix.name], old[ix.name].generation + 1)
                ix.names.store.write(ix.names.base, final)
            sleep(settle_s)
        except BaseException:
            try:
                _abandon(indexes, new, settle_s, sleep, dropped)
            except Exception:  # the original error says more; the next run recovers
                log.exception("ltm reindex: could not drop the unfinished generation")
            raise
        for ix in indexes:
            ix.at(serving_old[ix.name]).drop()
            dropped.append(serving_old[ix.name])
            ix.names.current(force=True)
        return SwapReport(report, True, new, dropped, caught_up)


def _abandon(
    indexes: Sequence[Routed],
    new: dict[str, str],
    settle_s: float,
    sleep: Callable[[float], None],
    dropped: list[str],
) -> None:
    """No swap: the old generation serves alone again, then the new one is dropped.

    Per index, from the stored pointer: one that already serves the new generation is
    left for the next run to finish.  The wait lets every process stop writing to the
    new one before it goes (Elasticsearch would re-create it on a late write).
    """
    stale: list[Routed] = []
    for ix in indexes:
        p = ix.names.store.read(ix.names.base)
        if p.serving == new[ix.name]:
            continue
        if p.secondary is not None:
            ix.names.store.write(ix.names.base, Pointer(p.serving, p.generation))
        stale.append(ix)
    if not stale:
        return
    sleep(settle_s)
    for ix in stale:
        ix.at(new[ix.name]).drop()
        dropped.append(new[ix.name])
        ix.names.current(force=True)


def _copy(
    ledger: Ledger,
    projector: Projector,
    batch: int,
    on_progress: Callable[[int, int], None] | None,
) -> ProjectReport:
    total = ProjectReport()
    cards = sum(ledger.counts().get("vector", {}).values())
    done, after = 0, ""
    while ids := ledger.ids(after=after, limit=batch):
        total.add(projector.project(ids, force=True, settle=False))
        done += len(ids)
        if on_progress is not None:
            on_progress(done, max(done, cards))
        after = ids[-1]
    return total


def _catch_up(
    ledger: Ledger, projector: Projector, since: float, total: ProjectReport, batch: int
) -> int | None:
    """Project again every card changed since ``since``; the number projected, or
    ``None`` when it did not settle (transient errors, or the same cards still changing
    after :data:`CATCH_UP_PASSES` passes).

    The copy has finished, so a live write committed from now on lands after every copy
    write; only this catch-up's own writes can still overtake one.  So each later pass
    redoes just the cards of the pass before whose version moved meanwhile.
    """
    versions = ledger.changed_since(since)
    redone: set[str] = set()
    for _ in range(CATCH_UP_PASSES):
        todo = sorted(versions)
        if not todo:
            return len(redone)
        for start in range(0, len(todo), batch):
            part = projector.project(todo[start : start + batch], force=True, settle=False)
            total.transient += part.transient
            total.permanent += part.permanent
            total.owners |= part.owners
            if part.transient:
                return None
        # the copy may have written an old version of a card after the live update that
        # replaced it had its stale rows purged: nothing else would ever name that row
        projector.drop_earlier({m: versions[m] for m in todo})
        redone.update(todo)
        now = _versions(ledger, todo)
        versions = {m: v for m, v in now.items() if v != versions[m]}
    log.warning("ltm reindex: cards still changing after %s catch-up passes", CATCH_UP_PASSES)
    return None


def _versions(ledger: Ledger, memory_ids: Sequence[str]) -> dict[str, int]:
    """Newest target version per card (an erased card has none: nothing to redo)."""
    out: dict[str, int] = {}
    for start in range(0, len(memory_ids), 1000):
        for row in ledger.projections(memory_ids[start : start + 1000]):
            out[row.memory_id] = max(out.get(row.memory_id, 0), row.target_version)
    return out


def _drop_erased_owners(
    ledger: Ledger,
    owners: set[tuple[str, str]],
    adapters: tuple[LexicalIndex, VectorIndex],
) -> None:
    """An owner the copy wrote who owns no card now was erased meanwhile: the copy may
    have landed a card after the erase's delete, so delete the owner there again."""
    for tenant_id, user_id in sorted(owners - ledger.owners_present(sorted(owners))):
        for adapter in adapters:
            adapter.delete_owner(tenant_id, user_id)
