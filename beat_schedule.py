"""Every periodic job of memstrata, as plain data (DESIGN §1: the one scheduler).

Each entry names a task by its dotted name; ``expires`` sits just below the interval so
a backlog never runs a stale copy of a job.  A test checks every name is registered.
"""

from __future__ import annotations

from typing import Any


def build_schedule(settings: Any) -> dict[str, dict[str, Any]]:
    sweep_s = float(settings.sweep_interval_s)
    ltm_s = float(settings.ltm.reconcile_interval_s)
    idle_s = float(settings.compress_idle_check_s)
    return {
        "sweep-expired-stm": {
            "task": "memstrata.maintenance.sweep_expired",
            "schedule": sweep_s,
            "options": {"queue": "maintenance", "expires": sweep_s * 0.9},
        },
        "ltm-reconcile": {
            "task": "memstrata.ltm.reconcile",
            "schedule": ltm_s,
            "options": {"queue": "ltm", "expires": ltm_s * 0.9},
        },
        "ingest-reclaim": {
            "task": "memstrata.maintenance.ingest_reclaim",
            "schedule": 30.0,
            "options": {"queue": "maintenance", "expires": 27.0},
        },
        "compress-idle-sessions": {
            "task": "memstrata.maintenance.compress_idle",
            "schedule": idle_s,
            "options": {"queue": "maintenance", "expires": idle_s * 0.9},
        },
    }
