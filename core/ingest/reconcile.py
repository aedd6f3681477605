"""The reconciler: turns that reached L0 but never the ingest stream are found and queued.

``record_turn`` writes L0 first, then queues a pointer.  If Redis is down between the two
steps, the process dies there, or the stream is lost, the turn sits in L0 unqueued.  Beat
runs :func:`reconcile` every ``MEMSTRATA_INGEST_RECONCILE_INTERVAL_S``:

1. list the session files written within ``horizon_s`` (one ``stat`` per L0 file);
2. read their watermarks (:mod:`core.ingest.queue`: the end offset up to which every turn
   of the session is queued), in pipelined batches;
3. for a file larger than its watermark, read the turns past it (under a shared lock, so
   never half a turn) and queue each with :meth:`IngestQueue.enqueue_once`, which moves
   the watermark over it and adds nothing if the turn got queued meanwhile;
4. a file with no watermark (its first turn never got queued, the watermark expired, or
   Redis lost its data) is read backwards from its end: the turns *recorded* (wall clock,
   ``recorded_at``) within the horizon are queued, oldest first; older ones are settled.

At most ``max_turns`` turns are queued per run, oldest files first; the rest wait for the
next run (``left``).  Queuing again is harmless: the pipeline upserts by natural key and
skips a redelivered turn.  See docs/RELIABILITY.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from memstrata.core.errors import CorruptRecord, NotFound
from memstrata.core.ingest.queue import IngestQueue
from memstrata.core.transcript.store import SessionFile, TranscriptStore, TurnSpan

log = logging.getLogger(__name__)

Kick = Callable[[int], object]
"""Make sure a drain task for the shard is enqueued (``MemoryClient``'s kicker)."""

WATERMARK_BATCH = 500  # watermarks read per round trip


@dataclass
class ReconcileReport:
    files: int = 0  # session files written within the horizon, all looked at
    behind: int = 0  # sessions found with turns in L0 past their watermark
    requeued: int = 0  # turns this run put on the ingest stream
    left: int = 0  # sessions still behind when the run's budget was spent
    failed: int = 0  # sessions whose file could not be read (logged; retried next run)
    lag_s: float = 0.0  # how long the oldest turn found unqueued had been in L0

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def reconcile(
    *,
    transcript: TranscriptStore,
    queue: IngestQueue,
    kick: Kick,
    horizon_s: float,
    max_turns: int,
    now: float | None = None,
) -> ReconcileReport:
    """Queue every turn of the last ``horizon_s`` that is in L0 but not on the stream."""
    now = time.time() if now is None else now
    since = now - horizon_s
    report = ReconcileReport()
    budget = max_turns
    files = sorted(transcript.session_files(modified_since=since), key=lambda f: f.mtime)
    report.files = len(files)
    for i in range(0, len(files), WATERMARK_BATCH):
        chunk = [(f, gen) for f in files[i : i + WATERMARK_BATCH] if (gen := _gen(transcript, f))]
        keys = [_key(queue, f, gen) for f, gen in chunk]
        for (f, gen), key, mark in zip(chunk, keys, queue.watermarks(keys), strict=True):
            if mark is not None and mark >= f.size:
                continue  # every turn of the session is queued
            if budget <= 0:
                report.left += 1
                continue
            try:
                spans, more = _unqueued(transcript, queue, f, key, mark, since, budget)
            except (CorruptRecord, NotFound) as exc:
                log.error("reconcile: cannot read %s/%s: %s", f.user_id, f.session_id, exc)
                report.failed += 1
                continue
            if not spans:
                continue
            report.behind += 1
            report.left += int(more)
            base = spans[0].offset if mark is None else mark
            for span in spans:
                budget -= 1
                out = queue.enqueue_once(span.pointer, generation=gen, base=base)
                if out.added:
                    report.requeued += 1
                    waited = now - (span.first.recorded_at or f.mtime)
                    report.lag_s = max(report.lag_s, waited)
                if out.kicked:
                    kick(out.shard)
    level = logging.WARNING if report.requeued or report.left or report.failed else logging.INFO
    log.log(level, "ingest reconcile %s", report.as_dict())
    return report


def _gen(transcript: TranscriptStore, f: SessionFile) -> str | None:
    """The file's generation; None for an empty or vanished file."""
    if f.size == 0:
        return None
    try:
        return transcript.generation(
            user_id=f.user_id, session_id=f.session_id, tenant_id=f.tenant_id
        )
    except NotFound:
        return None


def _key(queue: IngestQueue, f: SessionFile, generation: str) -> str:
    return queue.watermark_key(
        user_id=f.user_id, tenant_id=f.tenant_id, session_id=f.session_id, generation=generation
    )


def _unqueued(
    transcript: TranscriptStore,
    queue: IngestQueue,
    f: SessionFile,
    key: str,
    mark: int | None,
    since: float,
    budget: int,
) -> tuple[list[TurnSpan], bool]:
    """Up to ``budget`` turns of ``f`` past its watermark, and whether more are left."""
    ids = {"user_id": f.user_id, "session_id": f.session_id, "tenant_id": f.tenant_id}
    if mark is not None:
        spans = transcript.turns_after(**ids, offset=mark, limit=budget + 1)
    else:
        spans, end = transcript.recent_turns(**ids, since=since)
        if not spans:  # nothing recorded within the horizon: the whole file is settled
            queue.start_watermark(key, end)
    return spans[:budget], len(spans) > budget
