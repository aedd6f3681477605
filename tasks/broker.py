"""The Redis broker transport, hardened against the kombu 5.x restore-after-close crash.

D1 of the reliability review: after a Redis restart the worker's main process sometimes
died with ``Unrecoverable error: AttributeError("'NoneType' object has no attribute
'hostname'")`` right after "Restoring N unacknowledged message(s)".  The path, read
from kombu 5.7.0's ``transport/redis.py``: closing a channel restores the messages it
had delivered but not acknowledged (``QoS.restore_unacked``), which opens a *new*
client through ``Channel._connparams``; that reads ``self.connection.client`` -- the
transport's :class:`kombu.Connection` -- and once the connection has been closed
(``Connection._do_close_transport`` sets it to ``None``) the restore raises
``AttributeError``.  It is not a connection error, so Celery treats it as fatal.

The fix here: when the transport's connection is already gone, do not try to reconnect
just to restore.  The messages stay in the broker's ``unacked`` hash and index (they were
written there at delivery, and a restart with AOF keeps them), and kombu's own
``restore_visible`` puts them back on their queues once the visibility timeout passes
(set above the task hard time limit in :mod:`tasks.app`).  memstrata's tasks are all
idempotent kicks over durable state (the ingest streams' pending entries are reclaimed
by XAUTOCLAIM independently), so a late restore costs latency, never a turn.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        transport = getattr(self.channel, "connection", None)
        if client is None and getattr(transport, "client", None) is None:
            if self._delivered:
                log.warning(
                    "broker connection already closed: leaving %d unacknowledged message(s) "
                    "to the visibility-timeout restore",
                    len(self._delivered),
                )
            self._delivered.clear()
            return
        super().restore_unacked(client)  # type: ignore[no-untyped-call]


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
