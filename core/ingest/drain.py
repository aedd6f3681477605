"""Drain one ingest shard: read turn pointers in batches, process, acknowledge.

Transient store errors propagate (the Celery task retries; unacknowledged entries stay
pending and are read again first).  Anything else that fails is isolated to the single
turn that caused it and dead-lettered with the reason, so one bad turn cannot block a
shard.  The drain stops after ``max_run_s`` and reports ``continued`` so the caller can
enqueue a continuation while it still holds the shard's kick flag.  Before releasing the
flag it waits ``linger_ms`` for more turns (``XREADGROUP BLOCK``): under steady load one
drain keeps serving its shard, so agents rarely pay for a Celery publish and turns skip
the broker round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import MemstrataError, PermanentError, TransientError
from core.ingest.pipeline import IngestPipeline, TurnOutcome
from core.ingest.queue import Entry, IngestQueue
from core.models.transcript import TranscriptRecord, TurnPointer
from core.transcript.store import TranscriptStore

log = logging.getLogger(__name__)

# Called with the turns of each acknowledged batch (the compression trigger counts tokens).
OnBatch = Callable[[list[tuple[TurnPointer, list[TranscriptRecord]]]], object]


@dataclass
class DrainReport:
    shard: int
    turns: int = 0
    written: int = 0
    refused: int = 0
    batches: int = 0
    dead: int = 0
    continued: bool = False
    outcomes: list[TurnOutcome] = field(default_factory=list, repr=False)


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
) -> DrainReport:
    report = DrainReport(shard)
    deadline = monotonic() + max_run_s
    for leftovers in (
        queue.own_pending(shard, consumer, batch),
        queue.reclaim_stale(shard, consumer, batch),
    ):
        if leftovers:
            _process(shard, leftovers, queue, transcript, pipeline, report, keep_outcomes, on_batch)
    while True:
        entries = queue.read_new(shard, consumer, batch, linger_ms) if linger_ms > 0 else []
        if not entries:  # nothing new for linger_ms: check and release the flag atomically
            entries = queue.claim_or_release(shard, consumer, batch)
        if not entries:
            return report
        _process(shard, entries, queue, transcript, pipeline, report, keep_outcomes, on_batch)
        if monotonic() > deadline:
            queue.hold_kick(shard)
            report.continued = True
            return report


def _process(
    shard: int,
    entries: list[Entry],
    queue: IngestQueue,
    transcript: TranscriptStore,
    pipeline: IngestPipeline,
    report: DrainReport,
    keep: bool,
    on_batch: OnBatch | None = None,
) -> None:
    turns: list[tuple[TurnPointer, list[TranscriptRecord]]] = []
    ids: list[str] = []
    for e in entries:
        if e.pointer is None:
            _dead(queue, shard, e, "unparseable turn pointer", report)
            continue
        try:
            turns.append((e.pointer, transcript.read_turn(e.pointer)))
            ids.append(e.entry_id)
        except PermanentError as exc:
            _dead(queue, shard, e, f"{type(exc).__name__}: {exc}", report)
    all_ids = list(ids)
    try:
        outcomes = pipeline.process(turns)
    except TransientError:
        raise
    except Exception:  # isolate the turn that fails; the rest of the batch goes through
        log.exception(
            "batch of %d turns failed on shard %s; retrying one by one", len(turns), shard
        )
        outcomes = []
        keep_ids = []
        for (ptr, recs), eid in zip(turns, ids, strict=True):
            try:
                outcomes.extend(pipeline.process([(ptr, recs)]))
                keep_ids.append(eid)
            except TransientError:
                raise
            except (MemstrataError, ValueError, KeyError, TypeError) as exc:
                entry = next(x for x in entries if x.entry_id == eid)
                _dead(queue, shard, entry, f"{type(exc).__name__}: {exc}", report)
        ids = keep_ids
    queue.ack(shard, ids)
    if on_batch is not None:  # e.g. count context tokens for the compression trigger
        acked = set(ids)
        on_batch([t for t, eid in zip(turns, all_ids, strict=True) if eid in acked])
    report.batches += 1
    report.turns += len(outcomes)
    for o in outcomes:
        report.written += len(o.written)
        report.refused += len(o.refused)
    if keep:
        report.outcomes.extend(outcomes)


def _dead(queue: IngestQueue, shard: int, entry: Entry, reason: str, report: DrainReport) -> None:
    log.error("dead-lettering ingest entry %s on shard %s: %s", entry.entry_id, shard, reason)
    queue.dead_letter(entry, reason)
    queue.ack(shard, [entry.entry_id])
    report.dead += 1
