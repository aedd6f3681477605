"""The state of one card's projection into one index: a small pure state machine.

The ledger (:mod:`core.ltm.ledger`) stores one state per (card, index) and moves it
with :func:`next_state`'s rules::

    pending --indexed--> indexed --new version--> pending
    pending --transient error--> pending (attempts + 1)
    pending --permanent error--> failed  --requeue / reconcile--> pending

No I/O here (an import-linter contract keeps it so).
"""

from __future__ import annotations

from enum import StrEnum

from memstrata.core.errors import IllegalTransition


class ProjectionState(StrEnum):
    PENDING = "pending"
    INDEXED = "indexed"
    FAILED = "failed"


class ProjectionEvent(StrEnum):
    NEW_VERSION = "new_version"
    INDEXED = "indexed"
    TRANSIENT_ERROR = "transient_error"
    PERMANENT_ERROR = "permanent_error"
    REQUEUE = "requeue"


_TRANSITIONS: dict[tuple[ProjectionState, ProjectionEvent], ProjectionState] = {
    (ProjectionState.PENDING, ProjectionEvent.NEW_VERSION): ProjectionState.PENDING,
    (ProjectionState.PENDING, ProjectionEvent.INDEXED): ProjectionState.INDEXED,
    (ProjectionState.PENDING, ProjectionEvent.TRANSIENT_ERROR): ProjectionState.PENDING,
    (ProjectionState.PENDING, ProjectionEvent.PERMANENT_ERROR): ProjectionState.FAILED,
    (ProjectionState.INDEXED, ProjectionEvent.NEW_VERSION): ProjectionState.PENDING,
    (ProjectionState.INDEXED, ProjectionEvent.INDEXED): ProjectionState.INDEXED,
    (ProjectionState.FAILED, ProjectionEvent.NEW_VERSION): ProjectionState.PENDING,
    (ProjectionState.FAILED, ProjectionEvent.REQUEUE): ProjectionState.PENDING,
    (ProjectionState.FAILED, ProjectionEvent.INDEXED): ProjectionState.INDEXED,
    (ProjectionState.FAILED, ProjectionEvent.TRANSIENT_ERROR): ProjectionState.FAILED,
    (ProjectionState.FAILED, ProjectionEvent.PERMANENT_ERROR): ProjectionState.FAILED,
}


def next_state(state: ProjectionState, event: ProjectionEvent) -> ProjectionState:
    """The state after ``event``, or :class:`IllegalTransition` if the machine forbids it."""
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"projection cannot go from {state} on {event}") from None
