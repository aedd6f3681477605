"""Operator actions on long-term memory, for the CLI: status, reindex, requeue.

Each takes the process's started :class:`LtmRuntime` (``core.runtime.Runtime.ltm``);
nothing prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memstrata.core.ltm.history import project_transcripts
from memstrata.core.ltm.indexer import rebuild
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.transcript.store import TranscriptStore


def status(ltm: LtmRuntime) -> dict[str, Any]:
    """Projection state counts per index (``{"lexical": {"indexed": n, ...}, ...}``)."""
    return {"projections": ltm.ledger.counts()}


def reindex(
    ltm: LtmRuntime, *, drop: bool = False, on_progress: Callable[[int, int], None] | None = None
) -> dict[str, int]:
    """Rebuild both indexes from the PostgreSQL ledger (DESIGN §2: projections); in place
    unless ``drop`` (search keeps answering from the old entries while cards are upserted)."""
    report = rebuild(ltm.projector, drop=drop, on_progress=on_progress)
    return {
        "indexed": report.indexed,
        "deleted": report.deleted,
        "transient": len(report.transient),
        "failed": len(report.permanent),
    }


def reindex_history(
    ltm: LtmRuntime, transcript: TranscriptStore, *, drop: bool = False
) -> dict[str, int]:
    """Rebuild the raw-history index from every L0 file (it is a projection of L0)."""
    if ltm.history is None:
        return {"indexed": 0}
    if drop:
        ltm.history.drop()
        ltm.history.ensure_schema()
    return {"indexed": project_transcripts(ltm.history, transcript)}


def requeue(ltm: LtmRuntime) -> int:
    """Dead letters (``failed``) back to ``pending``; the reconciler picks them up."""
    return ltm.ledger.requeue(now=time.time())
