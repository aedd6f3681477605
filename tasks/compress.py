"""Compression tasks on the ``maintenance`` queue (thin: core does the work).

* ``compress_session``: build (or read back) the compressed view of one session for a
  budget; idempotent, the view is cached by session + last message id + budget.
* ``compress_idle``: Beat job; compress long sessions that went quiet, so the next
  prompt of a returning agent finds its view ready.
* :func:`track_turns`: called by the ingest drain after each batch; keeps each
  session's raw-context size and enqueues a compression when it passes the threshold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from memstrata.core.compress.cache import SessionActivity, ViewCache, due_for_compression
from memstrata.core.compress.errors import BudgetTooSmall
from memstrata.core.compress.service import compress_cached
from memstrata.core.compress.tokens import EstimateCounter
from memstrata.core.errors import NotFound
from memstrata.core.ids import SafeId
from memstrata.core.maintenance import run_locked
from memstrata.core.models.transcript import TranscriptRecord, TurnPointer
from memstrata.core.runtime import get_runtime
from memstrata.tasks._options import BEAT, COMPRESS, COMPRESS_IDLE, ON_DEMAND, TaskInput, payload
from memstrata.tasks.app import app

log = logging.getLogger(__name__)


class CompressRequest(TaskInput):
    user_id: SafeId
    session_id: SafeId
    budget_tokens: int | None = Field(None, ge=1, le=10_000_000)
    tenant_id: SafeId | None = None


@app.task(name=COMPRESS, **ON_DEMAND)
def compress_session(
    user_id: str, session_id: str, budget_tokens: int | None = None, tenant_id: str | None = None
) -> dict[str, Any]:
    """Compress one session; a missing session or a too-small budget is reported, not retried."""
    req = payload(
        CompressRequest,
        user_id=user_id,
        session_id=session_id,
        budget_tokens=budget_tokens,
        tenant_id=tenant_id,
    )
    res = get_runtime()
    budget = req.budget_tokens or res.settings.compress_budget_tokens
    cache = ViewCache(
        res.redis,
        namespace=res.settings.key_namespace,
        ttl_s=res.settings.compress_view_ttl_s,
    )
    try:
        view, cached = compress_cached(
            transcript=res.transcript,
            stm=res.stm,
            cache=cache,
            user_id=req.user_id,
            session_id=req.session_id,
            budget_tokens=budget,
            tenant_id=req.tenant_id,
            activity=SessionActivity(res.redis, namespace=res.settings.key_namespace),
        )
    except NotFound as exc:
        log.warning("compress: session gone user=%s session=%s: %s", user_id, session_id, exc)
        return {"status": "not_found", "reason": str(exc)}
    except BudgetTooSmall as exc:
        log.warning("compress: budget too small session=%s needed=%s", session_id, exc.needed)
        return {"status": "budget_too_small", "needed": exc.needed, "budget": exc.budget}
    log.info(
        "compressed user=%s session=%s level=%s raw=%s view=%s cached=%s",
        user_id,
        session_id,
        view.level.value,
        view.raw_tokens,
        view.view_tokens,
        cached,
    )
    return {
        "status": "ok",
        "cached": cached,
        "level": view.level.value,
        "last_message_id": view.last_message_id,
        "raw_tokens": view.raw_tokens,
        "view_tokens": view.view_tokens,
        "budget_tokens": budget,
    }


@app.task(name=COMPRESS_IDLE, **BEAT)
def compress_idle() -> dict[str, int]:
    """Enqueue compression for long sessions idle since their last compression."""
    res = get_runtime()
    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)

    def work() -> int:
        due = activity.idle(
            now=time.time(),
            idle_s=res.settings.compress_idle_s,
            min_tokens=res.settings.compress_threshold_tokens,
            limit=res.settings.compress_idle_batch,
        )
        for ctx in due:
            compress_session.apply_async(
                args=[ctx.user_id, ctx.session_id], kwargs={"tenant_id": ctx.tenant_id}
            )
        return len(due)

    n = run_locked(res.redis, res.settings.key_namespace, "compress-idle", ttl_s=120, work=work)
    return {"enqueued": n or 0, "skipped": int(n is None)}


def track_turns(turns: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]]) -> int:
    """Record each turn's tokens; enqueue compression for sessions that pass the threshold.

    Call from the ingest drain after a batch is acknowledged; returns how many tasks were
    enqueued.  Counting is approximate under concurrent drains of one session (rare: a
    session's turns go to one shard), which only shifts when the trigger fires.
    """
    res = get_runtime()
    due = due_for_compression(
        SessionActivity(res.redis, namespace=res.settings.key_namespace),
        [records for _pointer, records in turns],
        EstimateCounter(),  # a trigger needs no exact count (the view itself uses cl100k)
        threshold=res.settings.compress_threshold_tokens,
        step=res.settings.compress_step_tokens,
    )
    for rec in due:
        compress_session.apply_async(
            args=[rec.user_id, rec.session_id], kwargs={"tenant_id": rec.tenant_id}
        )
    return len(due)
