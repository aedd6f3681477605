"""The agent-facing write API: ``record_turn()``.

``record_turn`` costs the agent one fsync-ed append to L0 plus one Redis call; the
extraction happens later on a worker.  The Celery wiring lives in ``tasks.client`` and
reaches this module as a ``Kicker`` callable, so ``core`` never imports Celery.  The read
path is ``recall()`` on a :class:`core.recall.service.Recaller`, built by
:meth:`core.runtime.Runtime.recaller`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from memstrata.core.errors import InvalidInput, PayloadTooLarge
from memstrata.core.ids import validate_id
from memstrata.core.ingest.queue import IngestQueue
from memstrata.core.metrics import metrics
from memstrata.core.models.inputs import invalid_input, validate_event_time
from memstrata.core.models.transcript import MessageIn, TurnReceipt
from memstrata.core.tracing import traced
from memstrata.core.transcript.store import TranscriptStore

log = logging.getLogger(__name__)


class Kicker(Protocol):
    def __call__(self, shard: int) -> None:
        """Make sure a drain task for ``shard`` is enqueued."""
        ...


def parse_messages(
    messages: Sequence[MessageIn | Mapping[str, Any]], *, limit: int | None = None
) -> list[MessageIn]:
    """Validate messages given as models or plain dicts, with a readable, typed error.

    ``messages`` must be a list or tuple; with ``limit`` its length is checked before any
    message is looked at, so a million messages are refused at once.
    """
    if not isinstance(messages, list | tuple):
        raise InvalidInput(f"messages: expected a list of messages, got {type(messages).__name__}")
    if limit is not None and len(messages) > limit:
        raise PayloadTooLarge(f"turn has {len(messages)} messages, limit {limit}")
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, MessageIn):
            out.append(m)
            continue
        if not isinstance(m, Mapping):
            got = type(m).__name__
            raise InvalidInput(f"message {i}: expected a dict or a MessageIn, got {got}")
        try:
            out.append(MessageIn.model_validate(m))
        except ValidationError as exc:
            raise invalid_input(exc, prefix=f"message {i}: ") from exc
    return out


class MemoryClient:
    """What an agent process holds to hand finished turns to memory (the write path)."""

    def __init__(self, *, transcript: TranscriptStore, queue: IngestQueue, kicker: Kicker) -> None:
        self.transcript = transcript
        self.queue = queue
        self.kicker = kicker

    @traced("record_turn", "tenant_id", "user_id", "session_id", "turn_id")
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

        The receipt is a promise (docs/RELIABILITY.md): the turn is in L0, fsync-ed, and
        its pointer is on the ingest stream.  Every argument is validated and every size
        limit checked before anything is written; bad input raises :class:`InvalidInput`
        (or a subclass) naming the field.  If queueing fails (``StoreUnavailable``), the
        turn is in L0 all the same: retry with the same ``turn_id``, which never records
        it twice, or leave it to the reconciler on Beat.  ``at`` is the event time
        (seconds since the epoch); it stamps the items the turn produces, which lets a
        replay or a simulation follow its own clock.
        """
        validate_id(user_id, kind="user_id")
        validate_id(session_id, kind="session_id")
        if tenant_id is not None:
            validate_id(tenant_id, kind="tenant_id")
        if task_id is not None:
            validate_id(task_id, kind="task_id")
        if turn_id is not None:  # "" is refused, never replaced by a fresh id
            validate_id(turn_id, kind="turn_id")
        if at is not None:
            validate_event_time(at, kind="at")
        parsed = parse_messages(messages, limit=self.transcript.max_turn_messages)
        appended = self.transcript.append_turn(
            user_id=user_id,
            session_id=session_id,
            messages=parsed,
            tenant_id=tenant_id,
            task_id=task_id,
            turn_id=turn_id,
            at=at,
        )
        queued = self.queue.enqueue_once(appended.pointer, generation=appended.generation)
        kicked = queued.kicked and self._kick(
            queued.shard, appended.pointer.tenant_id, appended.pointer.user_id
        )
        if not appended.existing:
            metrics().turns_recorded.inc()
        return TurnReceipt(
            turn_id=appended.pointer.turn_id,
            message_ids=[r.message_id for r in appended.records],
            shard=queued.shard,
            kicked=kicked,
            already_recorded=appended.existing,
        )

    def _kick(self, shard: int, tenant_id: str | None, user_id: str) -> bool:
        """Enqueue a drain; a failure is logged, not raised: the turn is queued already.

        The shard's kick flag is held, so no other call kicks until its TTL lapses; then
        Beat's ``ingest_reclaim`` kicks the shard (within ``kick TTL + 30 s``).  A kicker
        with ``kick_for`` is told whose turn kicked, so the task (and Flower) names them.
        """
        try:
            kick_for = getattr(self.kicker, "kick_for", None)
            if callable(kick_for):
                kick_for(shard, tenant_id=tenant_id, user_id=user_id)
            else:
                self.kicker(shard)
        except Exception:
            log.warning("could not enqueue a drain for shard %s; Beat will", shard, exc_info=True)
            return False
        return True
