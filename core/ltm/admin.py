"""Operator actions on long-term memory, for the CLI: status, reindex, requeue.

Each takes the process's started :class:`LtmRuntime` (``core.runtime.Runtime.ltm``);
nothing prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from memstrata.core.ltm.history import project_transcripts
from memstrata.core.ltm.indexer import ProjectReport, rebuild
from memstrata.core.ltm.reindex import rebuild_and_swap
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.transcript.store import TranscriptStore


def status(ltm: LtmRuntime) -> dict[str, Any]:
    """Projection state counts per index (``{"lexical": {"indexed": n, ...}, ...}``), the
    collection / index name serving each (its generation, after a reindex), and how many
    rows card updates replaced wait for the reconciler's purge (``stale_rows``)."""
    serving = {"lexical": ltm.lexical.collection, "vector": ltm.vector.collection}
    return {"projections": ltm.ledger.counts(), "serving": serving,
            "stale_rows": ltm.ledger.count_stale()}  # fmt: skip


def reindex(
    ltm: LtmRuntime, *, drop: bool = False, on_progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Rebuild both indexes from the PostgreSQL ledger (DESIGN §2: projections).

    By default into a new generation of each index, swapped in when complete (search
    answers from the old one meanwhile; :mod:`core.ltm.reindex`).  ``drop`` empties
    them in place first instead (nothing is found until the rebuild is done).  Both
    take the reindex lock: a second run at the same time is refused (``Conflict``).
    """
    if drop:
        with ExitStack() as stack:  # the same lock as a swapping reindex: one at a time
            for names in (ltm.lexical.names, ltm.vector.names):
                stack.enter_context(names.store.exclusive(names.base))
            report = rebuild(ltm.projector, drop=True, on_progress=on_progress)
        return _counts(report) | {"swapped": 0}
    swap = rebuild_and_swap(
        ledger=ltm.ledger,
        lexical=ltm.lexical,
        vector=ltm.vector,
        embedder=ltm.embedder,
        max_embed_chars=ltm.settings.max_embed_chars,
        context=ltm.projector.context,
        versioned=ltm.projector.versioned,
        settle_s=2 * ltm.settings.generation_refresh_s,
        on_progress=on_progress,
    )
    return _counts(swap.project) | {
        "swapped": int(swap.swapped),
        "serving": swap.serving,
        "dropped": swap.dropped,
    }


def _counts(report: ProjectReport) -> dict[str, Any]:
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
