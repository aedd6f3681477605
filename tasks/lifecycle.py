"""Lifecycle tasks on the ``maintenance`` queue (thin: core.lifecycle does the work).

Periodic ones (promotion scan, batch queue, idle sessions, LTM summaries, consolidation,
forgetting) run
under a Redis lock with a TTL (``run_locked``), so a second copy started while one runs
returns ``skipped``; each is bounded by a batch size and ``max_run_s`` seconds.  Card
changes are handed to ``memstrata.ltm.index`` by name (the LTM worker projects live cards
and removes superseded or deleted ones); the ledger reconciler is the safety net.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import Field, model_validator

from memstrata.core.ids import SafeId
from memstrata.core.lifecycle.consolidate import consolidate
from memstrata.core.lifecycle.finalise import finalise, finalise_idle
from memstrata.core.lifecycle.maintenance import forget, summarise, sync_access
from memstrata.core.lifecycle.preload import preload
from memstrata.core.lifecycle.rebuild import rebuild_session
from memstrata.core.lifecycle.retract import retract_card, retract_pg_fact
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.scan import scan
from memstrata.core.lifecycle.scheduler import run_batch
from memstrata.core.maintenance import run_locked
from memstrata.core.models.inputs import Text
from memstrata.core.runtime import get_runtime
from memstrata.tasks._options import (
    BEAT,
    LIFECYCLE_BATCH,
    LIFECYCLE_CONSOLIDATE,
    LIFECYCLE_FINALISE,
    LIFECYCLE_FORGET,
    LIFECYCLE_IDLE,
    LIFECYCLE_PRELOAD,
    LIFECYCLE_REBUILD,
    LIFECYCLE_RETRACT,
    LIFECYCLE_SCAN,
    LIFECYCLE_SUMMARISE,
    LTM_INDEX,
    MAX_IDS,
    ON_DEMAND,
    BatchLimit,
    TaskInput,
    payload,
)
from memstrata.tasks.app import app

log = logging.getLogger(__name__)

T = TypeVar("T")


class ScanInput(BatchLimit):
    dry_run: bool = False


class DryRun(TaskInput):
    dry_run: bool = False


class ForgetInput(TaskInput):
    apply: bool | None = None  # None: the configured ``forget_apply``


class RetractInput(TaskInput):
    kind: Literal["card", "fact"]
    target: Text = Field(min_length=1, max_length=1000)
    tenant_id: SafeId | None = None
    user_id: SafeId | None = None
    reason: Text = Field("retracted", max_length=1000)

    @model_validator(mode="after")
    def _fact_names_its_owner(self) -> RetractInput:
        if self.kind == "fact" and not (self.tenant_id and self.user_id):
            raise ValueError("kind must be 'card', or 'fact' with tenant_id and user_id")
        return self


class SessionInput(TaskInput):
    user_id: SafeId
    session_id: SafeId
    tenant_id: SafeId | None = None


class PreloadInput(SessionInput):
    query: Text = Field(max_length=64 * 1024)  # the task reads its first 2,000 chars


def _index(ids: Sequence[str]) -> None:
    for i in range(0, len(ids), MAX_IDS):
        app.send_task(LTM_INDEX, args=[list(ids[i : i + MAX_IDS])], queue="ltm")


def _lc() -> Lifecycle:
    return get_runtime().lifecycle(on_cards=_index)


def _locked(lc: Lifecycle, name: str, interval_s: float, work: Callable[[], T]) -> T | None:
    ttl = max(30, int(min(interval_s * 2, lc.settings.max_run_s * 3)))
    return run_locked(lc.redis, lc.stm.namespace, f"lifecycle-{name}", ttl_s=ttl, work=work)


@app.task(name=LIFECYCLE_SCAN, **BEAT)
def promotion_scan(max_items: int | None = None, dry_run: bool = False) -> dict[str, int]:
    """Seed 十四 promotion scan over live STM items (bounded; resumes where it stopped)."""
    req = payload(ScanInput, limit=max_items, dry_run=dry_run)
    lc = _lc()
    cfg = lc.settings
    limit = req.limit or cfg.scan_max_items

    def work() -> dict[str, int]:
        return scan(lc, now=time.time(), max_items=limit, max_s=cfg.max_run_s,
                    dry_run=req.dry_run).summary()  # fmt: skip

    out = _locked(lc, "scan", cfg.scan_interval_s, work)
    log.info("lifecycle scan %s", out)
    return out or {"skipped": 1}


@app.task(name=LIFECYCLE_BATCH, **BEAT)
def batch_queue(dry_run: bool = False) -> dict[str, int]:
    """Seed 2's 5-minute job: merge >= 3 per topic into a card, decay or drop the rest."""
    dry = payload(DryRun, dry_run=dry_run).dry_run
    lc = _lc()
    cfg = lc.settings

    def work() -> dict[str, int]:
        return run_batch(lc, now=time.time(), limit=cfg.batch_max_entries, dry_run=dry)[1]

    out = _locked(lc, "batch", cfg.batch_interval_s, work)
    log.info("lifecycle batch %s", out)
    return out or {"skipped": 1}


@app.task(name=LIFECYCLE_IDLE, **BEAT)
def idle_sessions() -> dict[str, int]:
    """Finalise sessions idle past ``session_idle_s`` (seed 2 四 finalizeSession)."""
    lc = _lc()
    cfg = lc.settings

    def work() -> dict[str, int]:
        done = finalise_idle(lc, now=time.time(), limit=cfg.idle_batch, max_s=cfg.max_run_s)
        return {"finalised": sum(1 for f in done if not f.skipped),
                "cards": sum(1 for f in done if f.card_id),
                "skipped": sum(1 for f in done if f.skipped)}  # fmt: skip

    out = _locked(lc, "idle", cfg.idle_check_s, work)
    return out or {"skipped": 1}


@app.task(name=LIFECYCLE_SUMMARISE, **BEAT)
def ltm_summarise() -> dict[str, int]:
    """Recall counts into the ledger, then > N cards on one topic → one summary card."""
    lc = _lc()
    cfg = lc.settings

    def work() -> dict[str, int]:
        now = time.time()
        synced = sync_access(lc, now=now)
        made = summarise(lc, now=now, over=cfg.summarise_over)
        return {"access_synced": synced, "summaries": len(made)}

    out = _locked(lc, "summarise", cfg.maintain_interval_s, work)
    return out or {"skipped": 1}


@app.task(name=LIFECYCLE_CONSOLIDATE, **BEAT)
def ltm_consolidate() -> dict[str, int]:
    """Merge same-topic and near-duplicate cards of owners whose cards changed lately, and
    gather their entity cards."""
    lc = _lc()
    pol = lc.settings.consolidate

    def work() -> dict[str, int]:
        if not pol.enabled:
            return {"disabled": 1}
        done = consolidate(lc, now=time.time(), max_s=lc.settings.max_run_s)
        return {"owners": sum(1 for r in done if not r.skipped),
                "merged": sum(len(r.merged) for r in done),
                "hidden": sum(r.hidden for r in done),
                "restored": sum(r.restored for r in done),
                "entity_cards": sum(len(r.entities) for r in done),
                "entity_cards_hidden": sum(len(r.entities_hidden) for r in done),
                "skipped": sum(1 for r in done if r.skipped)}  # fmt: skip

    out = _locked(lc, "consolidate", pol.interval_s, work)
    log.info("lifecycle consolidate %s", out)
    return out or {"skipped": 1}


@app.task(name=LIFECYCLE_FORGET, **BEAT)
def ltm_forget(apply: bool | None = None) -> dict[str, int]:
    """Forgetting of long-inactive low-importance cards; a dry run unless ``apply``."""
    req = payload(ForgetInput, apply=apply)
    lc = _lc()
    cfg = lc.settings
    really = cfg.forget_apply if req.apply is None else req.apply

    def work() -> dict[str, int]:
        plan = forget(lc, now=time.time(), apply=really)
        for f in plan[:20]:
            log.info("forget%s %s: %s", "" if really else " (dry run)", f.card.memory_id, f.reason)
        return {"planned": len(plan), "applied": len(plan) if really else 0}

    out = _locked(lc, "forget", cfg.forget_interval_s, work)
    return out or {"skipped": 1}


@app.task(name=LIFECYCLE_RETRACT, **ON_DEMAND)
def retract(kind: str, target: str, tenant_id: str | None = None, user_id: str | None = None,
            reason: str = "retracted") -> dict[str, Any]:  # fmt: skip
    """Undo a promotion: ``kind`` is ``fact`` (tenant, user, fact key) or ``card`` (card id)."""
    req = payload(
        RetractInput, kind=kind, target=target, tenant_id=tenant_id, user_id=user_id, reason=reason
    )
    lc = _lc()
    now = time.time()
    if req.kind == "card":
        out = retract_card(lc, card_id=req.target, now=now, reason=req.reason[:500])
    else:
        assert req.tenant_id is not None and req.user_id is not None  # the model checked
        out = retract_pg_fact(lc, tenant_id=req.tenant_id, user_id=req.user_id,
                              fact_key=req.target, now=now, reason=req.reason[:500])  # fmt: skip
    return {"target": out.target, "changed": out.changed, "memory_ids": list(out.memory_ids)}


@app.task(name=LIFECYCLE_FINALISE, **ON_DEMAND)
def finalise_session(user_id: str, session_id: str, tenant_id: str | None = None) -> dict[str, Any]:
    """End a session explicitly: summary card to LTM, session STM cleaned."""
    req = payload(SessionInput, user_id=user_id, session_id=session_id, tenant_id=tenant_id)
    lc = _lc()
    out = finalise(lc, user_id=req.user_id, session_id=req.session_id, tenant_id=req.tenant_id,
                   now=time.time(), reason="ended")  # fmt: skip
    return {"card_id": out.card_id, "items": out.items, "deleted": out.deleted}


@app.task(name=LIFECYCLE_PRELOAD, **ON_DEMAND)
def preload_session(user_id: str, session_id: str, query: str,
                    tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Warm a new session's STM with related LTM cards (seed 2 initializeSession)."""
    req = payload(
        PreloadInput, user_id=user_id, session_id=session_id, query=query, tenant_id=tenant_id
    )
    lc = _lc()
    ids = preload(lc, user_id=req.user_id, session_id=req.session_id, query=req.query[:2000],
                  tenant_id=req.tenant_id, now=time.time())  # fmt: skip
    return {"preloaded": len(ids)}


@app.task(name=LIFECYCLE_REBUILD, **ON_DEMAND)
def rebuild(user_id: str, session_id: str, tenant_id: str | None = None) -> dict[str, int]:
    """Re-derive a session's STM from its L0 transcript."""
    req = payload(SessionInput, user_id=user_id, session_id=session_id, tenant_id=tenant_id)
    out = rebuild_session(_lc(), user_id=req.user_id, session_id=req.session_id,
                          tenant_id=req.tenant_id, now=time.time())  # fmt: skip
    return {"deleted": out.deleted, "turns": out.turns, "written": out.written}
