"""Ingest tasks: drain one shard of the turn queue into STM (thin: core does the work)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationInfo, field_validator

from memstrata.core.ids import is_valid_id
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.queue import consumer_name
from memstrata.core.models.transcript import TranscriptRecord, TurnPointer
from memstrata.core.runtime import get_runtime
from memstrata.core.tracing import traced
from memstrata.tasks._options import DRAIN, INGEST, LTM_INDEX_HISTORY, MAX_IDS, TaskInput, payload
from memstrata.tasks.app import app
from memstrata.tasks.compress import track_turns

log = logging.getLogger(__name__)


class DrainInput(TaskInput):
    shard: int
    # display only (whose turn kicked the drain): a valid id, else dropped; never a reason
    # to fail the drain, which takes every turn of the shard whoever kicked it
    tenant_id: str = ""
    user_id: str = ""

    @field_validator("tenant_id", "user_id", mode="before")
    @classmethod
    def _shown_only_if_valid(cls, value: Any) -> str:
        return value if is_valid_id(value) else ""

    @field_validator("shard", mode="before")
    @classmethod
    def _configured(cls, shard: Any, info: ValidationInfo) -> Any:
        shards = int((info.context or {})["shards"])
        if not isinstance(shard, int) or not 0 <= shard < shards:
            raise ValueError(f"shard must be an int in [0, {shards})")
        return shard


def after_batch(turns: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]]) -> None:
    """What follows a processed batch, just before its acknowledgement: the compression
    trigger and the raw-history index (on the ``ltm`` queue: embedding is that queue's
    work, never the ingest worker's).  Both are idempotent by message: a soft time limit
    landing here leaves the batch pending and the next drain runs this again."""
    track_turns(turns)
    if turns:  # who the batch was for: one line per batch, the first 50 turns named
        named = [{"tenant_id": p.tenant_id, "user_id": p.user_id, "session_id": p.session_id,
                  "turn_id": p.turn_id} for p, _records in turns[:50]]  # fmt: skip
        log.info(
            "ingested turns=%s %s", len(turns),
            " ".join(f"{t['tenant_id'] or '-'}/{t['user_id']}/{t['session_id']}/{t['turn_id']}"
                     for t in named),
            extra={"event": "ingest_batch", "turns": named, "count": len(turns)},
        )  # fmt: skip
    ltm = get_runtime().settings.ltm
    if turns and ltm.enabled and ltm.history_enabled:
        pointers = [pointer.model_dump(mode="json") for pointer, _records in turns]
        for i in range(0, len(pointers), MAX_IDS):
            app.send_task(LTM_INDEX_HISTORY, args=[pointers[i : i + MAX_IDS]], queue="ltm")


@app.task(name=DRAIN, bind=True, **INGEST)
@traced("drain", "shard", "tenant_id", "user_id")
def drain(self: Any, shard: int, tenant_id: str = "", user_id: str = "") -> dict[str, int]:
    """Process every queued turn of ``shard``; idempotent (upserts by natural key).

    ``tenant_id``/``user_id`` name whose turn kicked the drain and change nothing it
    does (it takes every queued turn of the shard, and logs each batch's owners): they
    are there so Flower, the task's log line and a failure say whom it hit.
    """
    res = get_runtime()
    cfg = res.settings
    given = payload(DrainInput, context={"shards": cfg.ingest_shards}, shard=shard,
                    tenant_id=tenant_id, user_id=user_id)  # fmt: skip
    shard = given.shard
    owner = {k: v for k, v in (("tenant_id", given.tenant_id), ("user_id", given.user_id)) if v}
    try:
        report = drain_shard(
            shard,
            queue=res.queue,
            transcript=res.transcript,
            pipeline=res.pipeline,
            consumer=consumer_name(),
            batch=cfg.ingest_batch,
            max_run_s=cfg.ingest_max_run_s,
            linger_ms=cfg.ingest_linger_ms,
            on_batch=after_batch,
            attempts=res.attempts,
            max_attempts=cfg.ingest_max_attempts,
            chunk_bytes=cfg.ingest_chunk_bytes,
            abort_on=(SoftTimeLimitExceeded,),
        )
    except SoftTimeLimitExceeded:
        # the drain still holds the shard's flag: hand the shard on before failing, so its
        # unfinished turns are taken up (alone, counted) without waiting for Beat
        log.error("drain of shard %s hit the soft time limit; continuing in a new task", shard)
        self.apply_async(args=[shard], kwargs=owner)
        raise
    if report.continued:
        self.apply_async(args=[shard], kwargs=owner)
    log.info(
        "drained shard=%s turns=%s written=%s refused=%s dead=%s alone=%s",
        shard, report.turns, report.written, report.refused, report.dead, report.alone,
    )  # fmt: skip
    return {"turns": report.turns, "written": report.written, "refused": report.refused}
