"""The Celery app.  Configuration is built from settings when Celery first needs it
(``on_configure``), not at import, and per-process clients are built after fork."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown
from kombu.entity import Queue

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


@worker_process_init.connect
def _init_process(**_: Any) -> None:
    reset_runtime()


@worker_process_shutdown.connect
def _close_process(**_: Any) -> None:
    close_runtime()
