"""Producer side: a ``MemoryClient`` wired to Celery, for agent processes.

from tasks.client import connect
memory = connect()
memory.record_turn(user_id="u_42", session_id="s_123", task_id="bug456", messages=[...])
"""

from __future__ import annotations

from core.api import MemoryClient
from core.resources import get_resources
from tasks.app import app
from tasks.ingest import DRAIN


class CeleryKicker:
    """Enqueues one drain task for a shard (only called by whoever set the kick flag)."""

    def __call__(self, shard: int) -> None:
        app.send_task(DRAIN, args=[shard])


def connect() -> MemoryClient:
    res = get_resources()
    return MemoryClient(transcript=res.transcript, queue=res.queue, kicker=CeleryKicker())
