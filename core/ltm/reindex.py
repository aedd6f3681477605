"""``ltm reindex``: rebuild both card indexes into a new generation, then swap.

Search keeps answering from the serving generation throughout (core/ltm/generations.py):

1. recover from an earlier run that died: a half-built generation is dropped, a retired
   one that was not dropped yet is dropped now;
2. create generation ``n + 1`` of both indexes empty and record it as ``building``, so
   every process writes each change to both; wait until every process has seen that;
3. project every ledger card into the new generation (``force``: its state in the
   ledger says nothing about the new collections);
4. swap: the new generation serves, the old one becomes ``retiring`` (still written);
   wait until every process reads the new one;
5. forget the old one and drop it.

A crash anywhere before step 4 leaves the old generation serving; after it, the new one.
Either way the next run recovers and finishes.  A run whose copy hit transient errors
does not swap: it reports ``swapped: 0`` and leaves the old generation serving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.generations import Pointer, RoutedLexical, RoutedVector, generation_name
from memstrata.core.ltm.indexer import Projector, ProjectReport
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.ports import LexicalIndex, VectorIndex

Routed = RoutedLexical | RoutedVector


@dataclass
class SwapReport:
    project: ProjectReport
    swapped: bool
    serving: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


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
        new_lexical, new_vector = lexical.at(new["lexical"]), vector.at(new["vector"])
        for adapter in (new_lexical, new_vector):
            adapter.drop()  # a leftover of that name is not trusted
            adapter.ensure_schema()
        for ix in indexes:
            p = old[ix.name]
            ix.names.store.write(ix.names.base, Pointer(p.serving, p.generation,
                                                         new[ix.name], "building"))  # fmt: skip
        sleep(settle_s)
        report = _copy(ledger, new_lexical, new_vector, embedder, max_embed_chars, batch,
                       on_progress)  # fmt: skip
        if report.transient:
            return SwapReport(report, False, {ix.name: old[ix.name].serving for ix in indexes},
                              dropped)  # fmt: skip
        new_lexical.refresh()
        for ix in indexes:
            p = old[ix.name]
            ix.names.store.write(ix.names.base, Pointer(new[ix.name], p.generation + 1,
                                                         p.serving, "retiring"))  # fmt: skip
        sleep(settle_s)
        for ix in indexes:
            p = old[ix.name]
            ix.names.store.write(ix.names.base, Pointer(new[ix.name], p.generation + 1))
            ix.at(p.serving).drop()
            dropped.append(p.serving)
            ix.names.current(force=True)
        return SwapReport(report, True, new, dropped)


def _copy(
    ledger: Ledger,
    lexical: LexicalIndex,
    vector: VectorIndex,
    embedder: CachedEmbedder,
    max_embed_chars: int,
    batch: int,
    on_progress: Callable[[int, int], None] | None,
) -> ProjectReport:
    projector = Projector(ledger=ledger, lexical=lexical, vector=vector, embedder=embedder,
                          max_embed_chars=max_embed_chars)  # fmt: skip
    total = ProjectReport()
    cards = sum(ledger.counts().get("vector", {}).values())
    done, after = 0, ""
    try:
        while ids := ledger.ids(after=after, limit=batch):
            part = projector.project(ids, force=True)
            done += len(ids)
            if on_progress is not None:
                on_progress(done, max(done, cards))
            total.indexed += part.indexed
            total.deleted += part.deleted
            total.transient += part.transient
            total.permanent += part.permanent
            after = ids[-1]
    finally:
        projector.close()
    return total
