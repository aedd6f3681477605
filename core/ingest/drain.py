"""Drain one ingest shard: read turn pointers in batches, process, acknowledge.

Transient store errors propagate (the Celery task retries; unacknowledged entries stay
pending and are read again first).  A batch is processed in chunks of at most
``chunk_bytes`` of L0, each acknowledged on its own.  When a chunk fails, its turns are
processed alone, so only the turn at fault fails; a turn that fails alone with a
permanent error (bad input, a missing or corrupt record, a bug that raises ``ValueError``
and the like) is dead-lettered at once with the reason.

**No poison turn.**  Entries a drain finds left over (read by a drain that failed, hit
its soft time limit or was killed at the hard one) are processed alone, those never tried
alone first, and each attempt is counted (:class:`core.ingest.deadletters.Attempts`).
A turn whose ``max_attempts`` attempts did not complete (it raised something unexpected,
ran out of time, or took its worker down) is dead-lettered with its last error, and the
rest of the shard goes on.  ``abort_on`` names exceptions that end the drain at once
(the task's soft time limit): the turn being processed alone has that recorded as its
error, and the exception propagates.

**The post-batch hook runs before the acknowledgement.**  ``on_batch`` (the compression
trigger counting each session's context tokens, the raw-history hand-over) is idempotent
by message, so it runs first and the batch is acknowledged after it: a soft time limit
landing in the hook leaves the batch pending, and the next drain re-runs its turns alone
and the hook with them, counting nothing twice.  Acknowledged first, the batch's tracking
was lost for good (its entries were never read again).

The drain stops after ``max_run_s`` and reports ``continued`` so the caller can enqueue a
continuation while it still holds the shard's kick flag, which it refreshes after every
chunk.  Before releasing the flag it waits ``linger_ms`` for more turns (``XREADGROUP
BLOCK``): under steady load one drain keeps serving its shard, so agents rarely pay for a
Celery publish and turns skip the broker round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from memstrata.core.errors import PermanentError, TransientError
from memstrata.core.ingest.deadletters import Attempts
from memstrata.core.ingest.pipeline import IngestPipeline, TurnOutcome
from memstrata.core.ingest.queue import Entry, IngestQueue
from memstrata.core.models.transcript import TranscriptRecord, TurnPointer
from memstrata.core.transcript.store import TranscriptStore

log = logging.getLogger(__name__)

# Called with the turns of each processed batch just before it is acknowledged (the
# compression trigger counts tokens): it must be idempotent, a batch may be re-run.
OnBatch = Callable[[list[tuple[TurnPointer, list[TranscriptRecord]]]], object]
Turn = tuple[Entry, TurnPointer, list[TranscriptRecord]]

# failing alone with one of these is deterministic: dead-letter at once
PERMANENT: tuple[type[Exception], ...] = (PermanentError, ValueError, KeyError, TypeError)
CHUNK_BYTES = 4 * 1024 * 1024


@dataclass
class DrainReport:
    shard: int
    turns: int = 0
    written: int = 0
    refused: int = 0
    batches: int = 0
    dead: int = 0
    alone: int = 0  # turns processed alone (left over, or of a failed chunk)
    continued: bool = False
    outcomes: list[TurnOutcome] = field(default_factory=list, repr=False)


@dataclass
class _Drain:
    shard: int
    queue: IngestQueue
    transcript: TranscriptStore
    pipeline: IngestPipeline
    report: DrainReport
    keep: bool
    on_batch: OnBatch | None
    attempts: Attempts | None
    max_attempts: int
    chunk_bytes: int
    abort_on: tuple[type[BaseException], ...]

    # ------------------------------------------------------------------ reading
    def read(self, entries: list[Entry]) -> list[Turn]:
        """Each entry's turn from L0; entries that cannot be read are dead-lettered."""
        turns: list[Turn] = []
        for e in entries:
            if e.pointer is None:
                self.dead(e, "unparseable turn pointer")
                continue
            try:
                turns.append((e, e.pointer, self.transcript.read_turn(e.pointer)))
            except PermanentError as exc:
                self.dead(e, f"{type(exc).__name__}: {exc}")
        return turns

    # ------------------------------------------------------------------ new entries
    def batch(self, entries: list[Entry]) -> None:
        """A batch of new entries, in chunks of at most ``chunk_bytes`` of L0."""
        chunk: list[Turn] = []
        size = 0
        for turn in self.read(entries):
            if chunk and size + turn[1].length > self.chunk_bytes:
                self.chunk(chunk)
                self.queue.hold_kick(self.shard)  # a long batch keeps its shard
                chunk, size = [], 0
            chunk.append(turn)
            size += turn[1].length
        if chunk:
            self.chunk(chunk)

    def chunk(self, turns: list[Turn]) -> None:
        try:
            outcomes = self.pipeline.process([(p, recs) for _e, p, recs in turns])
        except TransientError:
            raise
        except self.abort_on:
            raise
        except Exception:  # isolate the turn that fails; the rest of the chunk goes through
            log.exception(
                "chunk of %d turns failed on shard %s; processing them one by one",
                len(turns), self.shard,
            )  # fmt: skip
            for turn in turns:
                self.alone(turn)
            return
        self.done(turns, outcomes)

    # ------------------------------------------------------------------ left over
    def leftovers(self, entries: list[Entry]) -> None:
        """Entries a failed, timed-out or killed drain read: each alone, counted, those
        never tried alone before the suspects; exhausted ones are dead-lettered."""
        if self.attempts is None:
            for turn in self.read(entries):
                self.alone(turn)
            return
        counts = self.attempts.counts(self.shard, [e.entry_id for e in entries])
        fresh: list[Entry] = []
        suspects: list[Entry] = []
        for entry, (tried, error) in zip(entries, counts, strict=True):
            if tried >= self.max_attempts:
                self.give_up(entry, tried, error)
            else:
                (suspects if tried else fresh).append(entry)
        for entry in fresh + suspects:
            for turn in self.read([entry]):
                self.alone(turn)
            self.queue.hold_kick(self.shard)

    def alone(self, turn: Turn) -> None:
        """Process one turn by itself, counting the attempt."""
        entry, pointer, records = turn
        self.report.alone += 1
        tried = self.attempts.start(self.shard, entry.entry_id) if self.attempts else 0
        try:
            outcomes = self.pipeline.process([(pointer, records)])
        except TransientError:
            if self.attempts is not None:
                self.attempts.give_back(self.shard, entry.entry_id)
            raise
        except self.abort_on as exc:
            error = f"{type(exc).__name__}: the drain's time ran out processing this turn"
            self.failed(entry, tried, error)
            raise
        except PERMANENT as exc:
            self.dead(entry, f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:
            if self.attempts is None:
                raise
            log.exception("turn %s failed on shard %s", pointer.turn_id, self.shard)
            self.failed(entry, tried, f"{type(exc).__name__}: {exc}")
            return  # left pending: the next drain tries it again, until max_attempts
        try:
            self.done([turn], outcomes, alone=True)
        except TransientError:
            if self.attempts is not None:
                self.attempts.give_back(self.shard, entry.entry_id)
            raise
        except self.abort_on as exc:  # in the post-batch hook: the turn stays pending
            error = f"{type(exc).__name__}: the drain's time ran out after this turn"
            self.failed(entry, tried, error)
            raise

    def failed(self, entry: Entry, tried: int, error: str) -> None:
        if self.attempts is None:
            return
        if tried >= self.max_attempts:
            self.give_up(entry, tried, error)
        else:
            self.attempts.failed(self.shard, entry.entry_id, error)

    def give_up(self, entry: Entry, tried: int, error: str | None) -> None:
        last = error or (
            "no error recorded: the worker processing it died each time "
            "(hard time limit, out of memory or a crash)"
        )
        self.dead(entry, f"gave up after {tried} attempts alone; last: {last}")

    # ------------------------------------------------------------------ endings
    def done(self, turns: list[Turn], outcomes: list[TurnOutcome], *, alone: bool = False) -> None:
        ids = [e.entry_id for e, _p, _r in turns]
        if self.on_batch is not None:  # before the ack: interrupted, the batch is re-run
            try:
                self.on_batch([(p, recs) for _e, p, recs in turns])
            except TransientError:
                raise  # a store down: the batch is re-run later, the hook with it
            except self.abort_on:
                raise
            except Exception:  # a bug in the hook must not dead-letter written turns
                log.exception(
                    "post-batch hook failed on shard %s; %d turns acknowledged anyway "
                    "(their memories are written; the hook's work is best effort)",
                    self.shard, len(ids),
                )  # fmt: skip
        self.queue.ack(self.shard, ids)
        if alone and self.attempts is not None:
            self.attempts.forget(self.shard, ids)
        report = self.report
        report.batches += 1
        report.turns += len(outcomes)
        for o in outcomes:
            report.written += len(o.written)
            report.refused += len(o.refused)
        if self.keep:
            report.outcomes.extend(outcomes)

    def dead(self, entry: Entry, reason: str) -> None:
        log.error(
            "dead-lettering ingest entry %s on shard %s: %s", entry.entry_id, self.shard, reason
        )
        self.queue.dead_letter(entry, reason)
        self.queue.ack(self.shard, [entry.entry_id])
        if self.attempts is not None:
            self.attempts.forget(self.shard, [entry.entry_id])
        self.report.dead += 1


def drain_shard(
    shard: int,
    *,
    queue: IngestQueue,
    transcript: TranscriptStore,
    pipeline: IngestPipeline,
    consumer: str,
    batch: int,
    max_run_s: float,
    linger_ms: int = 0,
    keep_outcomes: bool = False,
    monotonic: Callable[[], float] = time.monotonic,
    on_batch: OnBatch | None = None,
    attempts: Attempts | None = None,
    max_attempts: int = 3,
    chunk_bytes: int = CHUNK_BYTES,
    abort_on: tuple[type[BaseException], ...] = (),
) -> DrainReport:
    """Drain ``shard``; without ``attempts`` a turn failing alone with an unexpected
    error propagates instead of being retried and, after ``max_attempts``, dead-lettered."""
    report = DrainReport(shard)
    d = _Drain(
        shard, queue, transcript, pipeline, report, keep_outcomes, on_batch,
        attempts, max_attempts, chunk_bytes, abort_on,
    )  # fmt: skip
    deadline = monotonic() + max_run_s
    leftovers = queue.own_pending(shard, consumer, batch)
    leftovers += queue.reclaim_stale(shard, consumer, batch)
    if leftovers:
        d.leftovers(leftovers)
        if monotonic() > deadline:
            return _continue(queue, report)
    while True:
        entries = queue.read_new(shard, consumer, batch, linger_ms) if linger_ms > 0 else []
        if not entries:  # nothing new for linger_ms: check and release the flag atomically
            entries = queue.claim_or_release(shard, consumer, batch)
        if not entries:
            return report
        d.batch(entries)
        if monotonic() > deadline:
            return _continue(queue, report)


def _continue(queue: IngestQueue, report: DrainReport) -> DrainReport:
    queue.hold_kick(report.shard)
    report.continued = True
    return report
