"""What every task module shares: task names, retry presets, limits and payload parsing.

**Names.**  Producers, Beat (``beat_schedule.py``) and workers address tasks by these
dotted names; ``task_routes`` in ``tasks/app.py`` picks the queue from the prefix.

**Retries.**  A task retries on :class:`core.errors.TransientError` and on nothing else:
adapters map every vendor error onto that tree (``core.adapters``), so a permanent error
(bad input, a bug such as bad SQL, a missing record) fails the task once, logged with
its reason, and is never retried.  Backoff is exponential from 1 s with full jitter, up
to the preset's cap:

=============  ===========  ========  ===================================================
preset         max_retries  cap (s)   for
=============  ===========  ========  ===================================================
``INGEST``     20           60        the drain: turns must get through an outage of
                                      minutes (their pointers wait in the stream)
``LTM``        8            120       index / delete cards; after that the ledger's
                                      reconciler re-drives what is still pending
``ON_DEMAND``  5            60        work someone asked for (compress a session,
                                      finalise / preload / rebuild / retract)
``BEAT``       3            60        periodic jobs; the next Beat run is the safety net
=============  ===========  ========  ===================================================

Every preset acks late and rejects on a lost worker (a killed child's task is
redelivered), so every task must be idempotent, and they are.

**Bad input.**  A task validates its arguments with :func:`payload` against a pydantic
model: anything that does not fit raises :class:`core.errors.InvalidInput` (or the more
precise subclass a validator raised, such as ``InvalidId``), a permanent error.  Tasks
never return an error dict and never raise a bare ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memstrata.core.errors import InvalidInput, TransientError

# ------------------------------------------------------------------ task names
DRAIN = "memstrata.ingest.drain"
SWEEP = "memstrata.maintenance.sweep_expired"
RECLAIM = "memstrata.maintenance.ingest_reclaim"
RECONCILE = "memstrata.maintenance.ingest_reconcile"
COMPRESS = "memstrata.maintenance.compress_session"
COMPRESS_IDLE = "memstrata.maintenance.compress_idle"
LTM_INDEX = "memstrata.ltm.index"
LTM_DELETE = "memstrata.ltm.delete"
LTM_RECONCILE = "memstrata.ltm.reconcile"
LTM_INDEX_HISTORY = "memstrata.ltm.index_history"
LIFECYCLE_SCAN = "memstrata.maintenance.lifecycle_scan"
LIFECYCLE_BATCH = "memstrata.maintenance.lifecycle_batch"
LIFECYCLE_IDLE = "memstrata.maintenance.lifecycle_idle_sessions"
LIFECYCLE_SUMMARISE = "memstrata.maintenance.lifecycle_summarise"
LIFECYCLE_FORGET = "memstrata.maintenance.lifecycle_forget"
LIFECYCLE_CONSOLIDATE = "memstrata.maintenance.lifecycle_consolidate"
LIFECYCLE_RETRACT = "memstrata.maintenance.lifecycle_retract"
LIFECYCLE_FINALISE = "memstrata.maintenance.lifecycle_finalise"
LIFECYCLE_PRELOAD = "memstrata.maintenance.lifecycle_preload"
LIFECYCLE_REBUILD = "memstrata.maintenance.lifecycle_rebuild"

MAX_IDS = 500
"""Most memory ids one LTM task message carries (producers split longer lists)."""

# ------------------------------------------------------------------ retry presets
RETRY_ON: tuple[type[Exception], ...] = (TransientError,)


def _retrying(*, max_retries: int, backoff_max_s: int) -> Mapping[str, Any]:
    return MappingProxyType(
        {
            "acks_late": True,
            "reject_on_worker_lost": True,
            "autoretry_for": RETRY_ON,
            "retry_backoff": 1,
            "retry_backoff_max": backoff_max_s,
            "retry_jitter": True,
            "max_retries": max_retries,
        }
    )


INGEST = _retrying(max_retries=20, backoff_max_s=60)
LTM = _retrying(max_retries=8, backoff_max_s=120)
ON_DEMAND = _retrying(max_retries=5, backoff_max_s=60)
BEAT = _retrying(max_retries=3, backoff_max_s=60)


# ------------------------------------------------------------------ payloads
class TaskInput(BaseModel):
    """Base of every task's payload model: immutable, unknown fields refused, and strict
    (``"5"`` or ``True`` is not an int, ``b"u"`` not a str; free text is ``inputs.Text``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class BatchLimit(TaskInput):
    """How much one run of a periodic job may do at most (None or 0: the configured size)."""

    limit: int | None = Field(None, ge=0)


M = TypeVar("M", bound=BaseModel)


def payload(model: type[M], /, *, context: Mapping[str, Any] | None = None, **fields: Any) -> M:
    """``fields`` validated as ``model``; bad input raises :class:`InvalidInput`.

    When a field's own validator raised one of our typed errors (``SafeId`` raises
    ``InvalidId``), that type is kept, with the field's position in front of the message.
    """
    try:
        return model.model_validate(fields, context=dict(context or {}))
    except ValidationError as exc:
        problems = exc.errors(include_url=False, include_input=False)
        for problem in problems:
            cause = problem.get("ctx", {}).get("error")
            if isinstance(cause, InvalidInput):
                raise type(cause)(f"{model.__name__}.{_where(problem['loc'])}: {cause}") from exc
        shown = "; ".join(f"{_where(p['loc'])}: {p['msg']}" for p in problems)
        raise InvalidInput(f"{model.__name__}: {shown}"[:1000]) from exc


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "payload"
