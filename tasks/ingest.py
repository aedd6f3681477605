"""Ingest tasks: drain one shard of the turn queue into STM (thin: core does the work)."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationInfo, field_validator

from core.ingest.drain import drain_shard
from core.ingest.queue import consumer_name
from core.resources import get_resources
from tasks._options import DRAIN, INGEST, TaskInput, payload
from tasks.app import app
from tasks.compress import track_turns

log = logging.getLogger(__name__)


class DrainInput(TaskInput):
    shard: int

    @field_validator("shard", mode="before")
    @classmethod
    def _configured(cls, shard: Any, info: ValidationInfo) -> Any:
        shards = int((info.context or {})["shards"])
        if not isinstance(shard, int) or not 0 <= shard < shards:
            raise ValueError(f"shard must be an int in [0, {shards})")
        return shard


@app.task(name=DRAIN, bind=True, **INGEST)
def drain(self: Any, shard: int) -> dict[str, int]:
    """Process every queued turn of ``shard``; idempotent (upserts by natural key)."""
    res = get_resources()
    shard = payload(DrainInput, context={"shards": res.settings.ingest_shards}, shard=shard).shard
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
