"""Compress a stored session: read L0 and the session's STM items, then compress.

The only I/O of the compressor.  L0 is read, never written: the view is derived data,
cached in Redis by session, last message id and budget.
"""

from __future__ import annotations

import time

from memstrata.core.compress.cache import SessionActivity, ViewCache
from memstrata.core.compress.engine import compress
from memstrata.core.compress.llm import Summariser, apply_summariser
from memstrata.core.compress.model import CompressedView, CompressionPolicy
from memstrata.core.compress.tokens import TokenCounter, default_counter
from memstrata.core.errors import NotFound
from memstrata.core.ids import validate_id
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import TranscriptRecord
from memstrata.core.stm.store import StmStore
from memstrata.core.transcript.store import TranscriptStore

ITEM_LIMIT = 1000


def session_items(
    stm: StmStore,
    user_id: str,
    session_id: str,
    *,
    now: float | None = None,
    tenant_id: str | None = None,
) -> list[MemoryItem]:
    """Active, unexpired items of a session, oldest first.

    The session index holds every live item of the session (an item evicted by the
    per-session cap is deleted from every index with it), so one read is enough.
    """
    now = time.time() if now is None else now
    found = stm.by_session(user_id, session_id, limit=ITEM_LIMIT, now=now, tenant_id=tenant_id)
    return sorted(found, key=lambda i: (i.created_at, i.id))


def _view(
    records: list[TranscriptRecord], *, stm: StmStore, activity: SessionActivity | None,
    user_id: str, session_id: str, tenant_id: str | None, now: float | None,
    budget_tokens: int | None, policy: CompressionPolicy | None, counter: TokenCounter | None,
) -> CompressedView:  # fmt: skip
    """The view of ``records`` with the session's STM items and ingest-time token counts."""
    items = session_items(stm, user_id, session_id, now=now, tenant_id=tenant_id)
    known = (
        activity.token_counts(user_id, session_id, tenant_id=tenant_id)
        if activity is not None
        else None
    )
    return compress(records, items, budget_tokens=budget_tokens, policy=policy,
                    counter=counter, known_tokens=known)  # fmt: skip


def compress_session(
    *,
    transcript: TranscriptStore,
    stm: StmStore,
    user_id: str,
    session_id: str,
    budget_tokens: int | None,
    tenant_id: str | None = None,
    policy: CompressionPolicy | None = None,
    counter: TokenCounter | None = None,
    now: float | None = None,
    activity: SessionActivity | None = None,
    summariser: Summariser | None = None,
) -> CompressedView:
    """The view of a stored session; :class:`~core.errors.NotFound` if it has no transcript.

    With ``activity``, token counts taken at ingest are reused instead of recounted; with
    ``summariser`` (off by default) a model rewrites the summary's optional lines.
    """
    validate_id(user_id, kind="user_id")
    validate_id(session_id, kind="session_id")
    records = list(
        transcript.read_session(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
    )
    view = _view(records, stm=stm, activity=activity, user_id=user_id, session_id=session_id,
                 tenant_id=tenant_id, now=now, budget_tokens=budget_tokens, policy=policy,
                 counter=counter)  # fmt: skip
    if summariser is not None:
        view = apply_summariser(view, summariser, records, counter or default_counter())
    return view


def compress_cached(
    *,
    transcript: TranscriptStore,
    stm: StmStore,
    cache: ViewCache,
    user_id: str,
    session_id: str,
    budget_tokens: int | None,
    tenant_id: str | None = None,
    policy: CompressionPolicy | None = None,
    counter: TokenCounter | None = None,
    now: float | None = None,
    activity: SessionActivity | None = None,
) -> tuple[CompressedView, bool]:
    """The view for the session's current last message, from the cache when it is there.

    Same transcript → same view: the cache key is (session, last message id, budget), so
    a redelivered task or a second request for the same version is a Redis read.
    Returns ``(view, was_cached)``.
    """
    validate_id(user_id, kind="user_id")
    validate_id(session_id, kind="session_id")
    records = list(
        transcript.read_session(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
    )
    if not records:
        raise NotFound(f"session {session_id!r} has no messages")
    hit = cache.get(user_id, session_id, records[-1].message_id, budget_tokens, tenant_id=tenant_id)
    if hit is not None:
        return hit, True
    view = _view(records, stm=stm, activity=activity, user_id=user_id, session_id=session_id,
                 tenant_id=tenant_id, now=now, budget_tokens=budget_tokens, policy=policy,
                 counter=counter)  # fmt: skip
    cache.put(view)
    return view, False
