"""Maintenance tasks run by Celery Beat: expire sweep and the ingest safety nets."""

from __future__ import annotations

import logging
import time

from memstrata.core.ingest.reconcile import reconcile
from memstrata.core.maintenance import run_locked
from memstrata.core.runtime import get_runtime
from memstrata.tasks._options import BEAT, RECLAIM, RECONCILE, SWEEP, BatchLimit, payload
from memstrata.tasks.app import app

log = logging.getLogger(__name__)


@app.task(name=SWEEP, **BEAT)
def sweep_expired(max_items: int | None = None) -> dict[str, int]:
    """Remove expired STM items from every index (seed 十七.3); bounded, one at a time."""
    res = get_runtime()
    limit = payload(BatchLimit, limit=max_items).limit or res.settings.sweep_batch

    def work() -> dict[str, int]:
        report = res.stm.sweep(now=time.time(), max_items=limit)
        return {"removed": report.removed, "users": report.users}

    out = run_locked(res.redis, res.settings.key_namespace, "sweep", ttl_s=120, work=work)
    log.info("sweep %s", out)
    return out or {"removed": 0, "users": 0, "skipped": 1}


@app.task(name=RECLAIM, **BEAT)
def ingest_reclaim() -> dict[str, int]:
    """Kick a drain for any shard that holds turns but has no drain queued or running."""
    from memstrata.tasks.ingest import drain

    res = get_runtime()
    kicked = 0
    for shard in range(res.settings.ingest_shards):
        length, _pending = res.queue.backlog(shard)
        if length and res.queue.try_kick(shard):
            drain.apply_async(args=[shard])
            kicked += 1
    return {"kicked": kicked}


@app.task(name=RECONCILE, **BEAT)
def ingest_reconcile(max_turns: int | None = None) -> dict[str, float]:
    """Queue the turns that reached L0 but never the ingest stream (docs/RELIABILITY.md).

    Bounded (``max_turns``, else ``MEMSTRATA_INGEST_RECONCILE_MAX_TURNS``) and locked, so
    two runs never overlap; returns and logs the report, ``lag_s`` included.
    """
    from memstrata.tasks.ingest import drain

    limit = payload(BatchLimit, limit=max_turns).limit
    res = get_runtime()
    cfg = res.settings

    def work() -> dict[str, float]:
        report = reconcile(
            transcript=res.transcript,
            queue=res.queue,
            kick=lambda shard: drain.apply_async(args=[shard]),
            horizon_s=cfg.ingest_reconcile_horizon_s,
            max_turns=limit or cfg.ingest_reconcile_max_turns,
        )
        return report.as_dict()

    ttl = max(60, int(cfg.ingest_reconcile_interval_s * 2))
    out = run_locked(res.redis, cfg.key_namespace, "ingest-reconcile", ttl_s=ttl, work=work)
    return out or {"skipped": 1}
