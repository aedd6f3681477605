"""tasks/broker.py: restoring unacked messages after the connection closed must not raise (D1)."""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

from memstrata.core.settings import load_settings
from memstrata.tasks.app import celery_config, visibility_timeout_s
from memstrata.tasks.broker import TRANSPORT, QoS


def test_restore_after_close_leaves_messages_to_the_visibility_restore() -> None:
    qos = QoS.__new__(QoS)  # a QoS whose channel's transport lost its kombu Connection
    qos.channel = SimpleNamespace(connection=SimpleNamespace(client=None))
    qos._delivered = OrderedDict(tag1=object())
    qos.restore_unacked()  # kombu 5.7.0 raised AttributeError(... 'hostname') here
    assert not qos._delivered


def test_celery_options_for_broker_outages() -> None:
    settings = load_settings(task_time_limit_s=4000)
    conf = celery_config(settings)
    assert conf["broker_transport"] == TRANSPORT
    assert conf["broker_connection_max_retries"] is None
    assert conf["broker_connection_retry"] and conf["broker_connection_retry_on_startup"]
    assert conf["worker_cancel_long_running_tasks_on_connection_loss"]
    timeout = conf["broker_transport_options"]["visibility_timeout"]
    assert timeout == visibility_timeout_s(settings) > settings.task_time_limit_s
