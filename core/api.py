"""The agent-facing write API: ``record_turn()``.

``record_turn`` costs the agent one fsync-ed append to L0 plus one Redis call; the
extraction happens later on a worker.  The Celery wiring lives in ``tasks.client`` and
reaches this module as a ``Kicker`` callable, so ``core`` never imports Celery.  The read
path is ``recall()`` on a :class:`core.recall.service.Recaller`, built by
:meth:`core.runtime.Runtime.recaller`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from core.errors import InvalidInput
from core.ids import validate_id
from core.ingest.queue import IngestQueue
from core.models.transcript import MessageIn, TurnReceipt
from core.transcript.store import TranscriptStore


class Kicker(Protocol):
    def __call__(self, shard: int) -> None:
        """Make sure a drain task for ``shard`` is enqueued."""
        ...


def parse_messages(messages: Sequence[MessageIn | Mapping[str, Any]]) -> list[MessageIn]:
    """Validate messages given as models or plain dicts, with a readable error."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, MessageIn):
            out.append(m)
            continue
        try:
            out.append(MessageIn.model_validate(m))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(f"message {i}: {where}: {first['msg']}") from exc
    return out


class MemoryClient:
    """What an agent process holds to hand finished turns to memory (the write path)."""

    def __init__(self, *, transcript: TranscriptStore, queue: IngestQueue, kicker: Kicker) -> None:
        self.transcript = transcript
        self.queue = queue
        self.kicker = kicker

    def record_turn(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Sequence[MessageIn | Mapping[str, Any]],
        task_id: str | None = None,
        tenant_id: str | None = None,
        turn_id: str | None = None,
        at: float | None = None,
    ) -> TurnReceipt:
        """Append a finished turn to L0 (durable on return) and queue it for extraction.

        Every id is validated and every size limit checked before anything is written.
        ``at`` is the event time (seconds since the epoch); it stamps the items the turn
        produces, which lets a replay or a simulation follow its own clock.
        """
        validate_id(user_id, kind="user_id")
        validate_id(session_id, kind="session_id")
        parsed = parse_messages(messages)
        appended = self.transcript.append_turn(
            user_id=user_id,
            session_id=session_id,
            messages=parsed,
            tenant_id=tenant_id,
            task_id=task_id,
            turn_id=turn_id,
            at=at,
        )
        shard, kicked = self.queue.enqueue(appended.pointer)
        if kicked:
            self.kicker(shard)
        return TurnReceipt(
            turn_id=appended.pointer.turn_id,
            message_ids=[r.message_id for r in appended.records],
            shard=shard,
            kicked=kicked,
        )
