"""What every lifecycle operation works on, built once per process from its resources.

``on_cards`` is how a card change reaches the indexes: the Celery layer passes a
function that enqueues ``memstrata.ltm.index`` (which projects live cards and removes
superseded or deleted ones); tests pass a list's ``extend``.  Missing it is safe: the
ledger's reconciler re-drives every pending projection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from core.authority.cache import ProfileCache
from core.ingest.pipeline import IngestPipeline
from core.lifecycle.audit import AuditLog
from core.lifecycle.config import LifecycleSettings
from core.lifecycle.keys import LifecycleKeys
from core.ltm.ledger import Ledger
from core.stm.store import StmStore
from core.transcript.store import TranscriptStore


def _ignore(_ids: Sequence[str]) -> None:
    return None


@dataclass
class Lifecycle:
    redis: redis.Redis
    stm: StmStore
    engine: Engine
    ledger: Ledger
    settings: LifecycleSettings
    profile_cache: ProfileCache | None = None
    pipeline: IngestPipeline | None = None
    transcript: TranscriptStore | None = None
    on_cards: Callable[[Sequence[str]], None] = _ignore

    @property
    def keys(self) -> LifecycleKeys:
        return LifecycleKeys(self.stm.namespace)

    @property
    def audit(self) -> AuditLog:
        return AuditLog(self.engine)

    def tenant(self, tenant_id: str | None) -> str:
        """STM's "no tenant" is the authority's and the ledger's default tenant."""
        return tenant_id or self.settings.default_tenant

    def stm_tenant(self, tenant_id: str) -> str | None:
        return None if tenant_id == self.settings.default_tenant else tenant_id


def from_resources(res: object, settings: LifecycleSettings, **kw: object) -> Lifecycle:
    """Build from :class:`core.resources.Resources` (typed loosely to avoid an import cycle)."""
    from core.resources import Resources

    assert isinstance(res, Resources)
    return Lifecycle(
        redis=res.redis,
        stm=res.stm,
        engine=res.authority,
        ledger=Ledger(res.authority),
        settings=settings,
        profile_cache=res.profile_cache,
        pipeline=res.pipeline,
        transcript=res.transcript,
        **kw,  # type: ignore[arg-type]
    )
