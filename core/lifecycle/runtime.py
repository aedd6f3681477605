"""What every lifecycle operation works on: built by :meth:`core.runtime.Runtime.lifecycle`.

``on_cards`` is how a card change reaches the indexes: the Celery layer passes a
function that enqueues ``memstrata.ltm.index`` (which projects live cards and removes
superseded or deleted ones); tests pass a list's ``extend``.  Missing it is safe: the
ledger's reconciler re-drives every pending projection.

Redis is reached through stores only: ``stm`` for the owners' short-term memory,
``store`` for the lifecycle's own records, batch queue, cursors and access counts.
``redis`` (the runtime's client) is for keys no store owns here: the job locks of the
Celery layer and the compression activity it reads (``core.compress.cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from memstrata.core.authority.cache import ProfileCache
from memstrata.core.ids import owner_tenant
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.keys import LifecycleKeys
from memstrata.core.lifecycle.audit import AuditLog
from memstrata.core.lifecycle.config import LifecycleSettings
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.stm.lifecycle import LifecycleStore
from memstrata.core.stm.store import StmStore
from memstrata.core.transcript.store import TranscriptStore


def _ignore(_ids: Sequence[str]) -> None:
    return None


@dataclass
class Lifecycle:
    redis: redis.Redis
    stm: StmStore
    store: LifecycleStore
    engine: Engine
    ledger: Ledger
    settings: LifecycleSettings
    profile_cache: ProfileCache | None = None
    pipeline: IngestPipeline | None = None
    transcript: TranscriptStore | None = None
    on_cards: Callable[[Sequence[str]], None] = _ignore

    @property
    def keys(self) -> LifecycleKeys:
        return self.store.keys

    @property
    def audit(self) -> AuditLog:
        return AuditLog(self.engine)

    def tenant(self, tenant_id: str | None) -> str:
        """The owner's tenant: no tenant is the one default tenant of every layer."""
        return owner_tenant(tenant_id)
