"""The promotion lifecycle of one STM memory: an explicit state machine.

::

    (new) --enqueue--> queued --merge--> merged --retract--> retracted
      |                  |  \\--decay--> queued
      |                  |   \\--drop--> dropped
      |--promote_pg / promote_card--> promoted_pg | promoted_card --retract--> retracted

A state is remembered with the item's fingerprint: when the fact itself changes (a new
fingerprint), the old state no longer applies and the item is new again.  ``dropped``
and ``retracted`` are terminal for their fingerprint, so a retracted promotion is not
promoted again by the next scan.  A forbidden move raises
:class:`core.errors.IllegalTransition` (the same class as the card projection machine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from memstrata.core.errors import IllegalTransition


class State(StrEnum):
    NEW = "new"
    QUEUED = "queued"
    PROMOTED_PG = "promoted_pg"
    PROMOTED_CARD = "promoted_card"
    MERGED = "merged"
    DROPPED = "dropped"
    RETRACTED = "retracted"


class Event(StrEnum):
    ENQUEUE = "enqueue"
    DECAY = "decay"
    MERGE = "merge"
    DROP = "drop"
    PROMOTE_PG = "promote_pg"
    PROMOTE_CARD = "promote_card"
    RETRACT = "retract"


_T: dict[tuple[State, Event], State] = {
    (State.NEW, Event.ENQUEUE): State.QUEUED,
    (State.NEW, Event.PROMOTE_PG): State.PROMOTED_PG,
    (State.NEW, Event.PROMOTE_CARD): State.PROMOTED_CARD,
    (State.QUEUED, Event.DECAY): State.QUEUED,
    (State.QUEUED, Event.MERGE): State.MERGED,
    (State.QUEUED, Event.DROP): State.DROPPED,
    (State.QUEUED, Event.PROMOTE_PG): State.PROMOTED_PG,
    (State.QUEUED, Event.PROMOTE_CARD): State.PROMOTED_CARD,
    (State.PROMOTED_PG, Event.PROMOTE_PG): State.PROMOTED_PG,
    (State.PROMOTED_CARD, Event.PROMOTE_CARD): State.PROMOTED_CARD,
    (State.PROMOTED_PG, Event.RETRACT): State.RETRACTED,
    (State.PROMOTED_CARD, Event.RETRACT): State.RETRACTED,
    (State.MERGED, Event.RETRACT): State.RETRACTED,
}

TERMINAL = frozenset({State.DROPPED, State.RETRACTED})
SETTLED = frozenset({State.QUEUED, State.PROMOTED_PG, State.PROMOTED_CARD, State.MERGED})


def next_state(state: State, event: Event) -> State:
    try:
        return _T[(state, event)]
    except KeyError:
        raise IllegalTransition(f"memory cannot go from {state} on {event}") from None


@dataclass(frozen=True)
class Record:
    """What the lifecycle remembers of one memory: its state, for which fingerprint, where."""

    state: State
    fingerprint: str
    ref: str = ""  # fact key or card id it went to
    at: float = 0.0

    def dumps(self) -> str:
        return json.dumps([self.state.value, self.fingerprint, self.ref, self.at])

    @classmethod
    def loads(cls, raw: str) -> Record:
        state, fp, ref, at = json.loads(raw)
        return cls(State(state), str(fp), str(ref), float(at))


def current(record: Record | None, fingerprint: str) -> State:
    """The state that applies to the item as it is now (a changed fact is new again)."""
    if record is None or record.fingerprint != fingerprint:
        return State.NEW
    return record.state
