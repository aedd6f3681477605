"""Projection of ledger cards into the two indexes: index, delete, reconcile, rebuild.

One function does the work for tasks, the CLI and tests: :func:`project` reads cards and
their projection rows, embeds the ones the vector index lacks (one batch), inserts the
cards an index has never held and upserts the others (:func:`never_written`: on
milvus-lite an upsert's id lookup grows with the collection) or deletes, then records
per (card, index) ``indexed``, a transient error (still ``pending``, attempts + 1) or a
permanent one (``failed``, the dead letter, with its reason).  Every step is idempotent
by memory_id, so a retry, a duplicate task or the reconciler can run it again at any
time (a re-run insert can hold an id twice until its next write; searches return it once).

An index with versioned rows (``versioned``, ``core.ltm.rows``) takes a new version of a
held card as an *insert* under ``<memory_id>@<version>`` too; the rows it replaces are
recorded with the marks and deleted later, many per call (:meth:`Projector.purge_stale`,
run by the reconciler).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from memstrata.core.errors import MemstrataError, PermanentError, TransientError
from memstrata.core.ltm.card import CardStatus, LtmCard
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.ledger import Ledger, Projection, StaleRow
from memstrata.core.ltm.ports import ContextRead, IndexContext, LexicalIndex, VectorIndex
from memstrata.core.ltm.projection import ProjectionState
from memstrata.core.ltm.rows import card_of, row_key, stale_keys

log = logging.getLogger(__name__)


@dataclass
class ProjectReport:
    indexed: int = 0
    deleted: int = 0
    transient: list[str] = field(default_factory=list)
    permanent: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    owners: set[tuple[str, str]] = field(default_factory=set)  # (tenant, user) of cards read

    def add(self, part: ProjectReport) -> None:
        self.indexed += part.indexed
        self.deleted += part.deleted
        self.transient += part.transient
        self.permanent += part.permanent
        self.missing += part.missing
        self.owners |= part.owners

    @property
    def retry(self) -> bool:
        return bool(self.transient)


Mark = tuple[str, str, int]  # memory_id, index name, card version


@dataclass
class Outcome:
    """What happened to each (card, index) in one projection run."""

    done: list[Mark] = field(default_factory=list)
    transient: list[tuple[Mark, str]] = field(default_factory=list)
    permanent: list[tuple[Mark, str]] = field(default_factory=list)
    deleted: int = 0
    stale: list[StaleRow] = field(default_factory=list)  # rows the writes replaced
    # the versioned rows written, with their version: stale themselves if a newer version
    # became the card's target before this run settled (a slower, concurrent projection)
    written: list[tuple[StaleRow, int]] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.done += other.done
        self.transient += other.transient
        self.permanent += other.permanent
        self.deleted += other.deleted
        self.stale += other.stale
        self.written += other.written

    def report(self, missing: list[str]) -> ProjectReport:
        return ProjectReport(
            indexed=len(self.done) - self.deleted,
            deleted=self.deleted,
            transient=[m for (m, _, _), _ in self.transient],
            permanent=[m for (m, _, _), _ in self.permanent],
            missing=missing,
        )


@dataclass(frozen=True)
class Work:
    card: LtmCard
    version: int
    fresh: bool = False  # the index has never held this card: insert, not upsert
    held: int | None = None  # the version the ledger last recorded as indexed

    @property
    def key(self) -> str:
        """This version's row key in a versioned index."""
        return row_key(self.card.memory_id, self.version)

    def replaced(self) -> list[str]:
        """The keys of the rows a versioned index may still hold for earlier versions:
        from the one last settled on; a card never recorded as written may still hold
        an earlier version's row (written, then the settle was lost, then updated: the
        update resets the attempts), so it names them all."""
        if self.fresh:
            return stale_keys(self.card.memory_id, self.version, None) if self.version > 1 else []
        return stale_keys(self.card.memory_id, self.version, self.held)


def never_written(row: Projection) -> bool:
    """No attempt ever wrote this card into the index: it was never indexed and nothing
    was tried since the last reset (a failed or timed-out write counts an attempt).  The
    one window left, a crash between the index write and the ledger settle, can only
    make an id appear twice, which searches tolerate (ports.py)."""
    return row.indexed_version is None and row.attempts == 0


def _work_per_index(
    cards: dict[str, LtmCard], rows: Sequence[Projection], *, force: bool
) -> dict[str, list[Work]]:
    todo: dict[str, list[Work]] = {"lexical": [], "vector": []}
    for row in rows:
        card = cards.get(row.memory_id)
        if card is None or row.index_name not in todo:
            continue
        if not force and row.state is ProjectionState.INDEXED:
            continue
        fresh = not force and never_written(row)
        todo[row.index_name].append(Work(card, row.target_version, fresh, row.indexed_version))
    return todo


class Projector:
    """Keeps the lexical and vector indexes in step with the ledger."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        lexical: LexicalIndex,
        vector: VectorIndex,
        embedder: CachedEmbedder,
        max_embed_chars: int = 2000,
        context: IndexContext | None = None,
        versioned: frozenset[str] = frozenset(),
    ) -> None:
        self.ledger = ledger
        self.lexical = lexical
        self.vector = vector
        self.embedder = embedder
        self.max_embed_chars = max_embed_chars
        self.context = context
        self.versioned = versioned  # names of the indexes whose rows are versioned
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ltm-lexical")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def project(
        self, memory_ids: Sequence[str], *, force: bool = False, settle: bool = True
    ) -> ProjectReport:
        """Bring both indexes up to the ledger for ``memory_ids``; see module docstring.

        The lexical write runs in a helper thread while this one embeds and writes the
        vectors (embedding is CPU in C, the index writes wait on the network), and all
        outcomes are recorded in one ledger transaction, unless ``settle`` is false: a
        reindex writes a generation that does not serve yet, so the ledger (which speaks
        of the serving one) must not hear of it.
        """
        cards, rows = self.ledger.work(memory_ids)
        todo = _work_per_index(cards, rows, force=force)
        read = self._contexts(todo)
        outcome = Outcome()
        if read.unread:  # these cards wait for their context: retried later
            for ix, ws in todo.items():
                waiting = [w for w in ws if w.card.memory_id in read.unread]
                outcome.transient += [
                    ((w.card.memory_id, ix, w.version), read.unread[w.card.memory_id])
                    for w in waiting
                ]
                todo[ix] = [w for w in ws if w.card.memory_id not in read.unread]
        lexical = self._pool.submit(self._apply, "lexical", todo["lexical"], read.texts)
        outcome.merge(self._apply("vector", todo["vector"], read.texts))
        outcome.merge(lexical.result())
        if settle:
            self.ledger.settle(
                indexed=outcome.done,
                transient=outcome.transient,
                permanent=outcome.permanent,
                now=time.time(),
                stale=outcome.stale,
                written=outcome.written,
            )
        report = outcome.report(missing=[m for m in memory_ids if m not in cards])
        report.owners = {(c.tenant_id, c.user_id) for c in cards.values()}
        if report.transient or report.permanent:
            log.warning(
                "ltm projection incomplete cards=%s transient=%s permanent=%s",
                len(memory_ids), len(report.transient), len(report.permanent),
            )  # fmt: skip
        return report

    def _contexts(self, todo: dict[str, list[Work]]) -> ContextRead:
        """The index-time context of the live cards to write (one read for both
        indexes).  A card whose source cannot be read now is not written (``pending``,
        retried), so no card is ever indexed without its context; a context that fails
        as a whole holds back every live card of the batch."""
        live = {w.card.memory_id: w.card for ws in todo.values() for w in ws
                if w.card.status is CardStatus.ACTIVE}  # fmt: skip
        if self.context is None or not live:
            return ContextRead({})
        try:
            read = self.context(list(live.values()))
        except (MemstrataError, OSError) as exc:
            why = f"index context: {_reason(exc)}"
            read = ContextRead({}, dict.fromkeys(live, why))
        if read.unread:
            log.warning("ltm index context unread cards=%s of %s: %s", len(read.unread),
                        len(live), next(iter(read.unread.values())))  # fmt: skip
        return read

    def _apply(self, index_name: str, work: list[Work], extra: Mapping[str, str]) -> Outcome:
        outcome = Outcome()
        live = [w for w in work if w.card.status is CardStatus.ACTIVE]
        gone = [w for w in work if w.card.status is not CardStatus.ACTIVE]
        for batch, removing in ((live, False), (gone, True)):
            if not batch:
                continue
            marks = [(w.card.memory_id, index_name, w.version) for w in batch]
            try:
                self._write(index_name, batch, removing, extra)
            except TransientError as exc:
                outcome.transient.extend((m, str(exc)) for m in marks)
                continue
            except PermanentError as exc:
                if len(batch) > 1:  # find the culprit: retry one by one
                    for single in batch:
                        outcome.merge(self._apply(index_name, [single], extra))
                    continue
                outcome.permanent.extend((m, _reason(exc)) for m in marks)
                continue
            outcome.done.extend(marks)
            if removing:
                outcome.deleted += len(batch)
            else:
                outcome.merge(self._replaced(index_name, batch))

        return outcome

    def _replaced(self, index_name: str, batch: list[Work]) -> Outcome:
        """What a successful write of ``batch`` left for the purge: the rows of earlier
        versions (in an index that is not versioned, only versioned keys, which it held
        while it was: its bare key is the card's current row), and, in a versioned one,
        the rows written, in case a newer version overtook them (``Ledger.settle``)."""
        out = Outcome()
        if index_name in self.versioned:
            out.stale = [StaleRow(index_name, key, w.card.memory_id)
                         for w in batch for key in w.replaced()]  # fmt: skip
            out.written = [(StaleRow(index_name, w.key, w.card.memory_id), w.version)
                           for w in batch]  # fmt: skip
        else:  # the bare key is the row just written; a versioned row of this very
            # version (written while they were on) is not
            out.stale = [StaleRow(index_name, key, w.card.memory_id) for w in batch if not w.fresh
                         for key in stale_keys(w.card.memory_id, w.version + 1, w.held)
                         if key != w.card.memory_id]  # fmt: skip
        return out

    def _write(
        self, index_name: str, batch: list[Work], removing: bool, extra: Mapping[str, str]
    ) -> None:
        versioned = index_name in self.versioned
        if removing:  # every row the card may have, versioned or not (versioned rows may
            # have been on before) and those waiting for a purge: a deleted card must not
            # be found until the next purge.  One call: the cost is per call, not per id
            ids = [k for w in batch for k in stale_keys(w.card.memory_id, w.version + 1, None)]
            (self.lexical if index_name == "lexical" else self.vector).delete(ids)
            return
        # versioned, a new version is a new row: only a version written again upserts
        inserted = [w.fresh or (versioned and w.held != w.version) for w in batch]
        new = [w for w, i in zip(batch, inserted, strict=True) if i]
        known = [w for w, i in zip(batch, inserted, strict=True) if not i]
        new_keys = [w.key for w in new] if versioned else None
        known_keys = [w.key for w in known] if versioned else None
        if index_name == "lexical":
            self.lexical.insert([_with_context(w, extra) for w in new], keys=new_keys)
            self.lexical.upsert([_with_context(w, extra) for w in known], keys=known_keys)
            return
        vectors = self.embedder.embed_documents([
            w.card.embedding_text(self.max_embed_chars, extra.get(w.card.memory_id, ""))
            for w in new + known
        ])  # fmt: skip
        self.vector.insert([w.card for w in new], vectors[: len(new)], keys=new_keys)
        self.vector.upsert([w.card for w in known], vectors[len(new) :], keys=known_keys)

    def purge_stale(self, limit: int = 1000) -> int:
        """Delete up to ``limit`` rows the indexes hold for versions they no longer serve
        (oldest first, up to :data:`PURGE_CALL` keys a delete call) and forget them;
        returns how many.

        An index that is down keeps its rows for the next run.  A batch an index refuses
        is split in halves until the refused keys are alone; those are dropped with a
        warning (they can never be deleted, and must not hold back the others).  A row
        recorded again while this ran (a late write of that version) is not forgotten:
        the next run deletes it (``Ledger.forget_stale``)."""
        rows = self.ledger.stale_rows(limit)
        gone: list[StaleRow] = []
        for name, index in (("lexical", self.lexical), ("vector", self.vector)):
            mine = [r for r in rows if r.index_name == name]
            if name not in self.versioned:  # versioned rows turned off since: the bare key
                # is the card's current row now, never delete it
                gone += [r for r in mine if card_of(r.row_key) == r.row_key]
                mine = [r for r in mine if card_of(r.row_key) != r.row_key]
            for start in range(0, len(mine), PURGE_CALL):
                try:
                    gone += _delete_rows(index, name, mine[start : start + PURGE_CALL])
                except TransientError as exc:
                    log.warning("ltm stale rows not purged index=%s rows=%s: %s", name,
                                len(mine) - start, exc)  # fmt: skip
                    break
        self.ledger.forget_stale(gone)
        return len(gone)

    def drop_earlier(self, versions: Mapping[str, int]) -> None:
        """Delete every row of these cards older than the given version (each card's
        earlier versions and, in a versioned index, its bare key), one call per index:
        what a reindex's catch-up does in the generation it built, where the copy may
        have written an old version after the live update that replaced it was purged."""
        for name, index in (("lexical", self.lexical), ("vector", self.vector)):
            keep_bare = name not in self.versioned
            keys = [k for m, v in versions.items() for k in stale_keys(m, v, None)
                    if not (keep_bare and k == m)]  # fmt: skip
            if keys:
                index.delete(keys)


PURGE_CALL = 5000
"""Keys per delete call of the purge: the call's cost is mostly the index's id lookup,
once per call; the cap bounds the expression Milvus parses."""


def _delete_rows(
    index: LexicalIndex | VectorIndex, name: str, rows: list[StaleRow]
) -> list[StaleRow]:
    """Delete ``rows`` from ``index`` in one call; on a refusal, each half alone, down to
    single keys, which are dropped with a warning.  The rows the index no longer holds."""
    try:
        index.delete([r.row_key for r in rows])
        return rows
    except PermanentError as exc:
        if len(rows) == 1:
            log.warning("ltm stale row dropped index=%s key=%s: %s", name,
                        rows[0].row_key[:96], exc)  # fmt: skip
            return rows
    half = len(rows) // 2
    return _delete_rows(index, name, rows[:half]) + _delete_rows(index, name, rows[half:])


def _with_context(w: Work, extra: Mapping[str, str]) -> LtmCard:
    return w.card.with_context(extra.get(w.card.memory_id, ""))


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class ReconcilePlan:
    """What one reconciler run will re-drive (computed first, so it can be shown)."""

    memory_ids: tuple[str, ...]


def plan_reconcile(
    ledger: Ledger, *, now: float, grace_s: float, max_attempts: int, limit: int
) -> ReconcilePlan:
    ids = ledger.due(now=now, grace_s=grace_s, max_attempts=max_attempts, limit=limit)
    return ReconcilePlan(tuple(ids))


def reconcile(projector: Projector, plan: ReconcilePlan, *, batch: int = 100) -> ProjectReport:
    """Re-drive the planned cards in batches; the report sums all batches."""
    total = ProjectReport()
    ids = list(plan.memory_ids)
    for start in range(0, len(ids), batch):
        part = projector.project(ids[start : start + batch])
        total.indexed += part.indexed
        total.deleted += part.deleted
        total.transient += part.transient
        total.permanent += part.permanent
        total.missing += part.missing
        if part.transient:  # the index is down: stop early, the next run picks up
            break
    return total


def rebuild(
    projector: Projector, *, drop: bool = True, batch: int = 500,
    on_progress: Callable[[int, int], None] | None = None,
) -> ProjectReport:  # fmt: skip
    """Rebuild both indexes from PostgreSQL: optionally drop them, then re-project all.

    Every projection goes back to ``pending`` first, so an interrupted rebuild is
    finished by the reconciler.  Without ``drop`` the indexes keep answering searches
    throughout (each card is upserted in place).  ``on_progress(cards done, cards)``
    is called after each page.
    """
    if drop:
        projector.lexical.drop()
        projector.vector.drop()
    projector.vector.ensure_schema()
    projector.lexical.ensure_schema()
    projector.ledger.reset_all(now=time.time())
    total = ProjectReport()
    after = ""
    cards = sum(projector.ledger.counts().get("vector", {}).values())
    done = 0
    while ids := projector.ledger.ids(after=after, limit=batch):
        part = projector.project(ids)
        done += len(ids)
        if on_progress is not None:
            on_progress(done, max(done, cards))
        total.indexed += part.indexed
        total.deleted += part.deleted
        total.transient += part.transient
        total.permanent += part.permanent
        after = ids[-1]
    return total
