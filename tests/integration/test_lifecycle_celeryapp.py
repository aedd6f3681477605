"""The Celery app for the lifecycle's worker and Beat subprocesses (no tests here).

``tasks.app`` with ``tasks.lifecycle`` loaded and, when ``MEMSTRATA_TEST_LIFECYCLE_BEAT``
is set, the lifecycle's Beat entries added if ``beat_schedule.py`` does not list them
yet (the proposed patch adds the same entries there).  Start it with
``celery -A tests.integration.test_lifecycle_celeryapp``.
"""

from __future__ import annotations

import os
from typing import Any

import tasks.lifecycle  # noqa: F401  (registers the lifecycle tasks on the app)
from core.lifecycle.config import LifecycleSettings, lifecycle_settings
from core.settings import load_settings
from tasks._options import (
    LIFECYCLE_BATCH,
    LIFECYCLE_FORGET,
    LIFECYCLE_IDLE,
    LIFECYCLE_SCAN,
    LIFECYCLE_SUMMARISE,
)
from tasks.app import app

__all__ = ["app", "lifecycle_entries"]


def lifecycle_entries(cfg: LifecycleSettings) -> dict[str, dict[str, Any]]:
    """The lifecycle's Beat entries (the same data as the beat_schedule.py patch)."""

    def entry(task: str, every: float) -> dict[str, Any]:
        return {"task": task, "schedule": every,
                "options": {"queue": "maintenance", "expires": every * 0.9}}  # fmt: skip

    return {
        "lifecycle-promotion-scan": entry(LIFECYCLE_SCAN, cfg.scan_interval_s),
        "lifecycle-batch-queue": entry(LIFECYCLE_BATCH, cfg.batch_interval_s),
        "lifecycle-idle-sessions": entry(LIFECYCLE_IDLE, cfg.idle_check_s),
        "lifecycle-ltm-summarise": entry(LIFECYCLE_SUMMARISE, cfg.maintain_interval_s),
        "lifecycle-ltm-forget": entry(LIFECYCLE_FORGET, cfg.forget_interval_s),
    }


@app.on_after_configure.connect  # type: ignore[untyped-decorator]
def _add_entries(sender: Any, **_: Any) -> None:
    if not os.environ.get("MEMSTRATA_TEST_LIFECYCLE_BEAT"):
        return
    wanted = lifecycle_entries(lifecycle_settings(load_settings()))
    schedule = dict(sender.conf.beat_schedule or {})
    names = {e["task"] for e in schedule.values()}
    schedule.update({k: v for k, v in wanted.items() if v["task"] not in names})
    sender.conf.beat_schedule = schedule
