"""Projection of ledger cards into the two indexes: index, delete, reconcile, rebuild.

One function does the work for tasks, the CLI and tests: :func:`project` reads cards and
their projection rows, embeds the ones the vector index lacks (one batch), inserts the
cards an index has never held and upserts the others (:func:`never_written`: on
milvus-lite an upsert's id lookup grows with the collection) or deletes, then records
per (card, index) ``indexed``, a transient error (still ``pending``, attempts + 1) or a
permanent one (``failed``, the dead letter, with its reason).  Every step is idempotent
by memory_id, so a retry, a duplicate task or the reconciler can run it again at any
time (a re-run insert can hold an id twice until its next write; searches return it once).
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
from memstrata.core.ltm.ledger import Ledger, Projection
from memstrata.core.ltm.ports import ContextRead, IndexContext, LexicalIndex, VectorIndex
from memstrata.core.ltm.projection import ProjectionState

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

    def merge(self, other: Outcome) -> None:
        self.done += other.done
        self.transient += other.transient
        self.permanent += other.permanent
        self.deleted += other.deleted

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
        todo[row.index_name].append(Work(card, row.target_version, fresh))
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
    ) -> None:
        self.ledger = ledger
        self.lexical = lexical
        self.vector = vector
        self.embedder = embedder
        self.max_embed_chars = max_embed_chars
        self.context = context
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

        return outcome

    def _write(
        self, index_name: str, batch: list[Work], removing: bool, extra: Mapping[str, str]
    ) -> None:
        ids = [w.card.memory_id for w in batch]
        if removing:
            (self.lexical if index_name == "lexical" else self.vector).delete(ids)
            return
        new = [w.card for w in batch if w.fresh]
        known = [w.card for w in batch if not w.fresh]
        if index_name == "lexical":
            self.lexical.insert([c.with_context(extra.get(c.memory_id, "")) for c in new])
            self.lexical.upsert([c.with_context(extra.get(c.memory_id, "")) for c in known])
            return
        vectors = self.embedder.embed_documents([
            c.embedding_text(self.max_embed_chars, extra.get(c.memory_id, ""))
            for c in new + known
        ])  # fmt: skip
        self.vector.insert(new, vectors[: len(new)])
        self.vector.upsert(known, vectors[len(new) :])


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
