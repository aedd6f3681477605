"""Re-derive one session's STM from its L0 transcript (seed 十七: L0 is the source of truth).

The session's items and recorded decisions are deleted, then every turn is replayed in
order through the ingest pipeline, so extraction, dedup and the write policy run exactly
as they did live (or as they do now, after a rule change).  Items the session shares with
other sessions are deleted too and come back from this session's turns; their other
sessions' provenance returns when those sessions are rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby

from memstrata.core.errors import InvalidInput
from memstrata.core.lifecycle.audit import Action, AuditEvent
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.models.transcript import TurnPointer

REPLAY_TURNS = 200


@dataclass(frozen=True)
class RebuildReport:
    deleted: int
    turns: int
    written: int


def rebuild_session(
    lc: Lifecycle, *, user_id: str, session_id: str, tenant_id: str | None = None, now: float,
    on_progress: Callable[[int, int], None] | None = None, chunk: int = REPLAY_TURNS,
) -> RebuildReport:  # fmt: skip
    """``on_progress(turns replayed, turns)`` is called after each ``chunk`` of turns."""
    if lc.pipeline is None or lc.transcript is None:
        raise InvalidInput("rebuild needs the ingest pipeline and the transcript store")
    ids = lc.stm.session_members(user_id, session_id, tenant_id=tenant_id)
    deleted = lc.stm.delete(user_id, ids, tenant_id=tenant_id) if ids else 0
    lc.stm.drop_session(user_id, session_id, tenant_id=tenant_id, decisions=True)
    records = lc.transcript.read_session(user_id=user_id, session_id=session_id,
                                         tenant_id=tenant_id)  # fmt: skip
    turns = []
    for turn_id, group in groupby(records, key=lambda r: r.turn_id):
        recs = list(group)
        first = recs[0]
        # the pipeline reads who, when and which turn; the byte position is not used
        ptr = TurnPointer(user_id=first.user_id, tenant_id=first.tenant_id,
                          session_id=first.session_id, task_id=first.task_id,
                          turn_id=turn_id, at=first.at, offset=0, length=1)  # fmt: skip
        turns.append((ptr, recs))
    written = 0
    for i in range(0, len(turns), chunk):
        for outcome in lc.pipeline.process(turns[i : i + chunk]):
            written += len(outcome.written)
        if on_progress is not None:
            on_progress(min(i + chunk, len(turns)), len(turns))
    lc.audit.write([AuditEvent(Action.REBUILD, lc.tenant(tenant_id), user_id,
                               f"session:{session_id}", "rebuilt from L0", now,
                               tuple(ids), {"turns": len(turns), "written": written})])  # fmt: skip
    return RebuildReport(deleted, len(turns), written)
