"""D1's failing step, on a real kombu Redis channel: restore after the connection closed.

kombu 5.7.0's own QoS raises ``AttributeError: 'NoneType' object has no attribute
'hostname'`` here (what killed the worker); memstrata's transport leaves the messages
to the visibility-timeout restore instead.  Uses the suite's throwaway Redis.
"""

from __future__ import annotations

import pytest
from kombu.connection import Connection
from kombu.transport import redis as kombu_redis

from memstrata.tasks.broker import Transport
from tests.faults.conftest import RedisServer

pytestmark = pytest.mark.integration


def _closed_transport_qos(url: str, transport: type) -> tuple[Connection, object]:
    conn = Connection(url, transport=transport)
    channel = conn.default_channel
    qos = channel.qos
    qos._delivered["tag-1"] = object()  # delivered, not yet acknowledged
    conn.transport.client = None  # what Connection._do_close_transport leaves behind
    return conn, qos


def test_stock_kombu_raises_where_the_worker_died(redis_server: RedisServer) -> None:
    conn, qos = _closed_transport_qos(redis_server.url, kombu_redis.Transport)
    with pytest.raises(AttributeError, match="hostname"):
        qos.restore_unacked()  # type: ignore[attr-defined]
    qos._delivered.clear()  # type: ignore[attr-defined]  # or releasing raises it again
    conn.release()


def test_memstrata_transport_leaves_them_to_the_visibility_restore(
    redis_server: RedisServer,
) -> None:
    conn, qos = _closed_transport_qos(redis_server.url, Transport)
    qos.restore_unacked()  # type: ignore[attr-defined]
    assert not qos._delivered  # type: ignore[attr-defined]
    conn.release()
