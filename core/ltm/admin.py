"""Operator actions on long-term memory, for the CLI: status, reindex, requeue.

Each takes the process settings, builds its own runtime and closes it; nothing prints.
"""

from __future__ import annotations

import time
from typing import Any

from core.adapters.pg import pg_errors
from core.ltm.config import ltm_settings
from core.ltm.indexer import rebuild
from core.ltm.ledger import requeue_failed
from core.ltm.runtime import build_runtime


def status(settings: Any) -> dict[str, Any]:
    """Projection state counts per index (``{"lexical": {"indexed": n, ...}, ...}``)."""
    rt = build_runtime(ltm_settings(settings), postgres_url=settings.postgres_url)
    try:
        return {"projections": rt.ledger.counts()}
    finally:
        rt.close()


def reindex(settings: Any, *, drop: bool = True) -> dict[str, int]:
    """Rebuild both indexes from the PostgreSQL ledger (DESIGN §2: projections)."""
    rt = build_runtime(ltm_settings(settings), postgres_url=settings.postgres_url)
    try:
        report = rebuild(rt.projector, drop=drop)
        return {
            "indexed": report.indexed,
            "deleted": report.deleted,
            "transient": len(report.transient),
            "failed": len(report.permanent),
        }
    finally:
        rt.close()


def requeue(settings: Any) -> int:
    """Dead letters (``failed``) back to ``pending``; the reconciler picks them up."""
    rt = build_runtime(ltm_settings(settings), postgres_url=settings.postgres_url)
    try:
        with pg_errors("requeue"), rt.engine.begin() as conn:
            return requeue_failed(conn, now=time.time())
    finally:
        rt.close()
