"""The Celery app.  Configuration is built from settings when Celery first needs it
(``on_configure``), not at import, and per-process clients are built after fork."""

from __future__ import annotations

import gc
import inspect
import logging
from functools import cache
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)
from kombu.entity import Queue

from memstrata.core import logs
from memstrata.core.keys import GlobalKeys
from memstrata.core.runtime import close_runtime, reset_runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.tasks.broker import TRANSPORT

QUEUES = ("ingest", "ltm", "maintenance")

app = Celery(
    "memstrata",
    include=[
        "memstrata.tasks.ingest",
        "memstrata.tasks.maintenance",
        "memstrata.tasks.compress",
        "memstrata.tasks.ltm",
        "memstrata.tasks.lifecycle",
    ],
)


def visibility_timeout_s(settings: Settings) -> int:
    """Above the longest task time limit: a message still being worked on is never
    redelivered to a second worker just because it is slow."""
    return max(settings.broker_visibility_timeout_s, 2 * settings.task_time_limit_s + 60)


def celery_config(settings: Settings) -> dict[str, Any]:
    """Everything DESIGN §4 asks of Celery, derived from typed settings."""
    from memstrata.beat_schedule import build_schedule  # it imports the task names

    return {
        "broker_url": settings.effective_broker_url,
        # the Redis transport with the restore-after-close crash fixed (D1; tasks/broker.py)
        "broker_transport": TRANSPORT,
        # a broker restart is an outage to wait out, never a reason for the worker to exit
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        # a task running when the connection drops cannot be acked on that connection;
        # cancel it so its message is redelivered (every memstrata task is idempotent)
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "broker_transport_options": {
            "visibility_timeout": visibility_timeout_s(settings),
            "socket_timeout": settings.redis_socket_timeout_s,
            # one namespace = one isolated set of queues (tests, demo and prod can share a Redis)
            "global_keyprefix": GlobalKeys(settings.key_namespace).celery_prefix,
        },
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "task_queues": [Queue(q, routing_key=q) for q in QUEUES],
        "task_default_queue": "ingest",
        "task_routes": {
            "memstrata.ingest.*": {"queue": "ingest"},
            "memstrata.ltm.*": {"queue": "ltm"},
            "memstrata.maintenance.*": {"queue": "maintenance"},
        },
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "task_time_limit": settings.task_time_limit_s,
        "worker_send_task_events": True,
        "task_send_sent_event": False,  # one publish per kick; workers still report to Flower
        "worker_hijack_root_logger": False,
        "beat_schedule": build_schedule(settings),
        "timezone": "UTC",
    }


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    # config_from_object, not conf.update: updating conf inside on_configure re-enters it
    sender.config_from_object(celery_config(load_settings()))


log = logging.getLogger(__name__)
_ours = False  # this process runs memstrata's own worker (set before its pool forks)


@worker_init.connect
def _worker_started(sender: Any = None, **_: Any) -> None:
    """Celery's signals are process-wide: a user's worker that imports this module keeps
    its own garbage-collector schedule.  In memstrata's, what the main process built is
    frozen before the pool forks, so the children's collections leave it (and its memory
    pages) untouched (``gc.freeze``, as CPython's documentation advises for forks)."""
    global _ours
    _ours = getattr(sender, "app", None) is app
    if _ours and load_settings().gc_threshold > 0:
        gc.freeze()


@worker_process_init.connect
def _init_process(**_: Any) -> None:
    reset_runtime()
    from memstrata.core.metrics import metrics

    metrics()  # import prometheus_client and declare the metrics now, not in the first task
    if _ours:
        from memstrata.core.collector import tune_collector

        threshold = load_settings().gc_threshold
        tune_collector(threshold)  # last: freezes what was built above
        log.info("garbage collector: generation 0 every %s allocations, %s objects frozen",
                 gc.get_threshold()[0], gc.get_freeze_count())  # fmt: skip


@worker_process_shutdown.connect
def _close_process(**_: Any) -> None:
    close_runtime()


# ------------------------------------------------------------------ observability
_OUTCOMES = {"SUCCESS": "ok", "FAILURE": "failed", "RETRY": "retry"}


@after_setup_logger.connect
@after_setup_task_logger.connect
def _log_format(logger: logging.Logger, **_: Any) -> None:
    """MEMSTRATA_LOG_FORMAT on Celery's handlers, and URL passwords masked in every line."""
    logs.apply(logger.handlers, load_settings().log_format)


@worker_init.connect
def _worker_exporter(**_: Any) -> None:
    """``MEMSTRATA_METRICS_PORT``: the worker's main process serves its pool's counters."""
    settings = load_settings()
    if settings.metrics_port:
        from memstrata.core.exposition import serve

        serve(settings.metrics_port, address=settings.metrics_address, state=False)


@cache
def _arg_names(name: str) -> tuple[str, ...]:
    task = app.tasks.get(name)
    if task is None:
        return ()
    try:
        params = inspect.signature(task.run).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(p for p in params if p != "self")


@task_prerun.connect
def _task_started(task_id: str, **_: Any) -> None:
    from memstrata.tasks import observe

    observe.task_started(task_id)


@task_postrun.connect
def _task_finished(
    task_id: str, task: Any, args: Any = None, kwargs: Any = None, retval: Any = None,
    state: str | None = None, **_: Any,
) -> None:  # fmt: skip
    from memstrata.tasks import observe

    outcome = _OUTCOMES.get(state or "", (state or "unknown").lower())
    error = f"{type(retval).__name__}: {retval}" if isinstance(retval, BaseException) else ""
    try:
        observe.task_finished(
            name=task.name, task_id=task_id, outcome=outcome, error=error,
            owner=observe.owner_of(args, kwargs, _arg_names(task.name)),
            result=None if error else retval,
        )  # fmt: skip
    except Exception:  # never let bookkeeping fail a task
        logging.getLogger(__name__).exception("task outcome not recorded")
