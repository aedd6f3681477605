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

from pydantic import Field

from memstrata.core.ids import SafeId
from memstrata.core.ltm.errors import IndexUnavailable
from memstrata.core.ltm.history import project_turns
from memstrata.core.ltm.indexer import ProjectReport, plan_reconcile, reconcile
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.maintenance import run_locked
from memstrata.core.models.transcript import TurnPointer
from memstrata.core.runtime import get_runtime
from memstrata.tasks._options import (
    BEAT,
    LTM,
    LTM_DELETE,
    LTM_INDEX,
    LTM_INDEX_HISTORY,
    LTM_RECONCILE,
    MAX_IDS,
    BatchLimit,
    TaskInput,
    payload,
)
from memstrata.tasks.app import app

log = logging.getLogger(__name__)


class CardIds(TaskInput):
    memory_ids: list[SafeId] = Field(min_length=1, max_length=MAX_IDS)


class TurnPointers(TaskInput):
    pointers: list[TurnPointer] = Field(min_length=1, max_length=MAX_IDS)


def _runtime() -> LtmRuntime:
    return get_runtime().ltm


def _ids(memory_ids: Any) -> list[str]:
    return payload(CardIds, memory_ids=memory_ids).memory_ids


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


@app.task(name=LTM_INDEX, bind=True, **LTM)
def index_cards(self: Any, memory_ids: list[str]) -> dict[str, int]:
    """Embed and project cards into both indexes (seed 2: one LTM write, p95 <= 50 ms)."""
    ids = _ids(memory_ids)  # before the runtime: bad input never touches the stores
    report = _runtime().projector.project(ids)
    _raise_if_transient(report)
    return _summary(report)


@app.task(name=LTM_INDEX_HISTORY, bind=True, **LTM)
def index_history(self: Any, pointers: list[dict[str, Any]]) -> dict[str, int]:
    """Index the messages of drained turns in the raw-history fallback (idempotent)."""
    parsed = payload(TurnPointers, pointers=pointers).pointers
    rt = get_runtime()
    history = rt.ltm.history
    if history is None:
        return {"indexed": 0}
    return {"indexed": project_turns(history, rt.transcript, parsed)}


@app.task(name=LTM_DELETE, bind=True, **LTM)
def delete_cards(self: Any, memory_ids: list[str]) -> dict[str, int]:
    """Tombstone cards in the ledger and remove them from both indexes."""
    ids = _ids(memory_ids)
    rt = _runtime()
    for memory_id in ids:
        rt.ledger.delete(memory_id)
    report = rt.projector.project(ids)
    _raise_if_transient(report)
    return _summary(report)


@app.task(name=LTM_RECONCILE, **BEAT)
def reconcile_ltm(limit: int | None = None) -> dict[str, int]:
    """Re-drive pending and failed projections, then purge the rows updates replaced
    (Beat); one run at a time per namespace."""
    limit = payload(BatchLimit, limit=limit).limit
    res = get_runtime()
    if not res.settings.ltm.enabled:  # nothing is projected: do not reach for Milvus
        return {"planned": 0, "disabled": 1}
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
        # then the rows updates left behind, many per delete call (core/ltm/rows.py); a
        # card stuck pending must not hold them back (an index that is down keeps them)
        purged = rt.projector.purge_stale(cfg.stale_purge_batch)
        return {"planned": len(plan.memory_ids), **_summary(report), "purged": purged}

    ttl_s = max(30, int(cfg.reconcile_interval_s * 2))
    out = run_locked(res.redis, res.settings.key_namespace, "ltm-reconcile", ttl_s=ttl_s, work=work)
    log.info("ltm reconcile %s", out)
    return out or {"planned": 0, "skipped": 1}
