"""Every periodic job of memstrata, as plain data (DESIGN §1: the one scheduler).

Each entry names a task by its dotted name (the constants of ``tasks/_options.py``);
``expires`` sits just below the interval so a backlog never runs a stale copy of a job.
A test checks every name is registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstrata.core.settings import Settings

from memstrata.tasks import _options as names


def build_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    sweep_s = float(settings.sweep_interval_s)
    ltm_s = float(settings.ltm.reconcile_interval_s)
    idle_s = float(settings.compress_idle_check_s)
    reconcile_s = float(settings.ingest_reconcile_interval_s)
    lc = settings.lifecycle
    scan_s, batch_s = float(lc.scan_interval_s), float(lc.batch_interval_s)
    session_s, maintain_s = float(lc.idle_check_s), float(lc.maintain_interval_s)
    forget_s = float(lc.forget_interval_s)
    consolidate_s = float(lc.consolidate.interval_s)
    return {
        "sweep-expired-stm": {
            "task": names.SWEEP,
            "schedule": sweep_s,
            "options": {"queue": "maintenance", "expires": sweep_s * 0.9},
        },
        "ltm-reconcile": {
            "task": names.LTM_RECONCILE,
            "schedule": ltm_s,
            "options": {"queue": "ltm", "expires": ltm_s * 0.9},
        },
        "ingest-reclaim": {
            "task": names.RECLAIM,
            "schedule": 30.0,
            "options": {"queue": "maintenance", "expires": 27.0},
        },
        "ingest-reconcile": {  # turns in L0 that never reached the stream (RELIABILITY.md)
            "task": names.RECONCILE,
            "schedule": reconcile_s,
            "options": {"queue": "maintenance", "expires": reconcile_s * 0.9},
        },
        "compress-idle-sessions": {
            "task": names.COMPRESS_IDLE,
            "schedule": idle_s,
            "options": {"queue": "maintenance", "expires": idle_s * 0.9},
        },
        "lifecycle-promotion-scan": {
            "task": names.LIFECYCLE_SCAN,
            "schedule": scan_s,
            "options": {"queue": "maintenance", "expires": scan_s * 0.9},
        },
        "lifecycle-batch-queue": {  # seed 2: every 5 minutes
            "task": names.LIFECYCLE_BATCH,
            "schedule": batch_s,
            "options": {"queue": "maintenance", "expires": batch_s * 0.9},
        },
        "lifecycle-idle-sessions": {
            "task": names.LIFECYCLE_IDLE,
            "schedule": session_s,
            "options": {"queue": "maintenance", "expires": session_s * 0.9},
        },
        "lifecycle-ltm-summarise": {
            "task": names.LIFECYCLE_SUMMARISE,
            "schedule": maintain_s,
            "options": {"queue": "maintenance", "expires": maintain_s * 0.9},
        },
        "lifecycle-ltm-consolidate": {  # issue 13.3: topic merges, near-duplicates, entity cards
            "task": names.LIFECYCLE_CONSOLIDATE,
            "schedule": consolidate_s,
            "options": {"queue": "maintenance", "expires": consolidate_s * 0.9},
        },
        "lifecycle-ltm-forget": {  # a dry run unless MEMSTRATA_LIFECYCLE__FORGET_APPLY=true
            "task": names.LIFECYCLE_FORGET,
            "schedule": forget_s,
            "options": {"queue": "maintenance", "expires": forget_s * 0.9},
        },
    }
