"""LTM tasks on the ``ltm`` queue: index cards, propagate deletes, reconcile (thin).

All three are idempotent by memory_id, so ``acks_late`` with redelivery is safe.  A
transient failure (Milvus, Elasticsearch, the embedding service or PostgreSQL down) is
first recorded in the ledger (still ``pending``, attempts + 1, last error) and then
retried with backoff; once retries run out the Beat reconciler re-drives the card.
Permanent failures are recorded as ``failed`` with the reason (the dead letter) and
are not retried here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from core.errors import InvalidInput, StoreUnavailable
from core.ids import validate_id
from core.ltm.errors import IndexUnavailable
from core.ltm.history import project_turns
from core.ltm.indexer import ProjectReport, plan_reconcile, reconcile
from core.ltm.runtime import LtmRuntime
from core.maintenance import run_locked
from core.models.transcript import TurnPointer
from core.runtime import get_runtime
from tasks.app import app

log = logging.getLogger(__name__)

INDEX = "memstrata.ltm.index"
DELETE = "memstrata.ltm.delete"
RECONCILE = "memstrata.ltm.reconcile"
INDEX_HISTORY = "memstrata.ltm.index_history"
MAX_IDS = 500

_RETRY: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (StoreUnavailable,),
    "retry_backoff": 1,
    "retry_backoff_max": 120,
    "retry_jitter": True,
    "max_retries": 8,
}


def _runtime() -> LtmRuntime:
    return get_runtime().ltm


def _ids(memory_ids: Any) -> list[str]:
    if not isinstance(memory_ids, list) or not 1 <= len(memory_ids) <= MAX_IDS:
        raise InvalidInput(f"memory_ids must be a list of 1-{MAX_IDS} ids")
    return [validate_id(m, kind="memory_id") for m in memory_ids]


def _summary(report: ProjectReport) -> dict[str, int]:
    return {
        "indexed": report.indexed,
        "deleted": report.deleted,
        "transient": len(report.transient),
        "failed": len(report.permanent),
        "missing": len(report.missing),
    }


def _raise_if_transient(report: ProjectReport) -> None:
    if report.retry:
        raise IndexUnavailable(f"{len(report.transient)} projections pending after an outage")


@app.task(name=INDEX, **_RETRY)
def index_cards(self: Any, memory_ids: list[str]) -> dict[str, int]:
    """Embed and project cards into both indexes (seed 2: one LTM write, p95 <= 50 ms)."""
    report = _runtime().projector.project(_ids(memory_ids))
    _raise_if_transient(report)
    return _summary(report)


def _pointers(pointers: Any) -> list[TurnPointer]:
    if not isinstance(pointers, list) or not 1 <= len(pointers) <= MAX_IDS:
        raise InvalidInput(f"pointers must be a list of 1-{MAX_IDS} turn pointers")
    try:
        return [TurnPointer.model_validate(p) for p in pointers]
    except ValidationError as exc:
        raise InvalidInput(f"bad turn pointer: {exc.errors()[0]['msg']}") from exc


@app.task(name=INDEX_HISTORY, **_RETRY)
def index_history(self: Any, pointers: list[dict[str, Any]]) -> dict[str, int]:
    """Index the messages of drained turns in the raw-history fallback (idempotent)."""
    rt = get_runtime()
    history = rt.ltm.history
    if history is None:
        return {"indexed": 0}
    return {"indexed": project_turns(history, rt.transcript, _pointers(pointers))}


@app.task(name=DELETE, **_RETRY)
def delete_cards(self: Any, memory_ids: list[str]) -> dict[str, int]:
    """Tombstone cards in the ledger and remove them from both indexes."""
    rt = _runtime()
    ids = _ids(memory_ids)
    for memory_id in ids:
        rt.ledger.delete(memory_id)
    report = rt.projector.project(ids)
    _raise_if_transient(report)
    return _summary(report)


@app.task(name=RECONCILE, acks_late=True, autoretry_for=(StoreUnavailable,), max_retries=2)
def reconcile_ltm(limit: int | None = None) -> dict[str, int]:
    """Re-drive pending and failed projections (Beat); one run at a time per namespace."""
    res = get_runtime()
    rt = _runtime()
    cfg = rt.settings

    def work() -> dict[str, int]:
        plan = plan_reconcile(
            rt.ledger,
            now=time.time(),
            grace_s=cfg.reconcile_grace_s,
            max_attempts=cfg.reconcile_max_attempts,
            limit=int(limit or cfg.reconcile_batch),
        )
        report = reconcile(rt.projector, plan)
        return {"planned": len(plan.memory_ids), **_summary(report)}

    ttl_s = max(30, int(cfg.reconcile_interval_s * 2))
    out = run_locked(res.redis, res.settings.key_namespace, "ltm-reconcile", ttl_s=ttl_s, work=work)
    log.info("ltm reconcile %s", out)
    return out or {"planned": 0, "skipped": 1}
