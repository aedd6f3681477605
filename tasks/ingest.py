"""Ingest tasks: drain one shard of the turn queue into STM (thin: core does the work)."""

from __future__ import annotations

import logging
from typing import Any

from core.errors import StoreUnavailable
from core.ingest.drain import drain_shard
from core.ingest.queue import consumer_name
from core.runtime import get_runtime
from tasks.app import app
from tasks.compress import track_turns

log = logging.getLogger(__name__)

DRAIN = "memstrata.ingest.drain"


@app.task(
    name=DRAIN,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(StoreUnavailable,),
    retry_backoff=1,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=20,
)
def drain(self: Any, shard: int) -> dict[str, int]:
    """Process every queued turn of ``shard``; idempotent (upserts by natural key)."""
    res = get_runtime()
    if not isinstance(shard, int) or not 0 <= shard < res.settings.ingest_shards:
        raise ValueError(f"shard must be an int in [0, {res.settings.ingest_shards})")
    report = drain_shard(
        shard,
        queue=res.queue,
        transcript=res.transcript,
        pipeline=res.pipeline,
        consumer=consumer_name(),
        batch=res.settings.ingest_batch,
        max_run_s=res.settings.ingest_max_run_s,
        linger_ms=res.settings.ingest_linger_ms,
        on_batch=track_turns,
    )
    if report.continued:
        self.apply_async(args=[shard])
    log.info(
        "drained shard=%s turns=%s written=%s refused=%s dead=%s",
        shard, report.turns, report.written, report.refused, report.dead,
    )  # fmt: skip
    return {"turns": report.turns, "written": report.written, "refused": report.refused}
