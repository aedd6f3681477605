"""Redis key shapes of the lifecycle layer (next to ``core.stm.keys``, same hash tags).

Per-user keys carry the user's ``{<scope>}`` hash tag so they live in the same cluster
slot as the user's STM; the batch queue and the finalised-session map are global.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.stm.keys import user_scope


@dataclass(frozen=True)
class LifecycleKeys:
    namespace: str

    def state(self, user_id: str, tenant_id: str | None = None) -> str:
        """HASH memory_id → JSON :class:`core.lifecycle.states.Record`."""
        return f"{self.namespace}:user:{{{user_scope(user_id, tenant_id)}}}:lifecycle"

    def card_access(self, user_id: str, tenant_id: str | None = None) -> str:
        """HASH card id → "<access count>|<epoch s when the count last grew>"."""
        return f"{self.namespace}:user:{{{user_scope(user_id, tenant_id)}}}:card_access"

    def access(self, user_id: str, tenant_id: str | None = None) -> str:
        """ZSET ``<source>:<id>`` → recall hits, written by ``core.recall.service``."""
        return f"{self.namespace}:user:{{{user_scope(user_id, tenant_id)}}}:access"

    @property
    def batch(self) -> str:
        """HASH ``<scope>|<memory_id>`` → JSON BatchEntry (seed 2 ``mem:batch:queue``)."""
        return f"{self.namespace}:lifecycle:batch"

    @property
    def finalised(self) -> str:
        """HASH ``<scope>|<session_id>`` → last activity (epoch s) the session was finalised at."""
        return f"{self.namespace}:lifecycle:finalised"

    @property
    def access_cursor(self) -> str:
        """STRING: the "<tenant>/<user>" card owner the access sync resumes after."""
        return f"{self.namespace}:lifecycle:access_cursor"

    @property
    def scan_cursor(self) -> str:
        """STRING: the user scope the promotion scan resumes after (round robin)."""
        return f"{self.namespace}:lifecycle:scan_cursor"
