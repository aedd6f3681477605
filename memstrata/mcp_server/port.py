"""What the MCP server needs from memstrata: :class:`MemoryPort`, and an embedded adapter.

The server is written against this small protocol, not against the stores, so that the
public client (``memstrata.Memory``, embedded or remote) can replace
:class:`EmbeddedMemory` without touching a tool: its methods have the same names and
keyword arguments.  Until then :class:`EmbeddedMemory` talks to Redis / PostgreSQL /
Milvus in-process through the composition root (:class:`memstrata.core.runtime.Runtime`):
``record_turn`` through :class:`memstrata.core.api.MemoryClient` (L0 + ingest stream +
a Celery kick), ``recall`` through :meth:`Runtime.recaller`, ``erase`` through
:func:`memstrata.core.erase.erase_owner`, ``retract`` through
:mod:`memstrata.core.lifecycle.retract`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sqlalchemy.dialects.postgresql import insert as pg_insert

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.api import MemoryClient
from memstrata.core.authority.tables import TENANTS, USERS
from memstrata.core.erase import EraseReport, erase_owner
from memstrata.core.errors import InvalidInput, NotFound
from memstrata.core.ids import owner_tenant, validate_id
from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.models.candidate import WriteDecision
from memstrata.core.models.memory import MemoryItem
from memstrata.core.models.transcript import MessageIn, TurnReceipt
from memstrata.core.recall.service import Recaller, RecallRequest, RecallResult
from memstrata.core.runtime import Runtime

CARD_PREFIX = "ltm_"  # core.ltm.card.card_id: an LTM card; anything else is an STM item


@dataclass(frozen=True)
class Forgotten:
    """What ``retract`` did to one item: ``layer`` is ``stm`` (deleted) or ``ltm`` (card
    superseded, its index projections removed by the next index run)."""

    memory_id: str
    layer: Literal["stm", "ltm"]
    changed: bool


class MemoryPort(Protocol):
    """The memory operations an agent surface (MCP, LangGraph) calls; owner-scoped."""

    def record_turn(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Sequence[MessageIn | Mapping[str, Any]],
        task_id: str | None = None,
        tenant_id: str | None = None,
        turn_id: str | None = None,
    ) -> TurnReceipt: ...

    def recall(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str,
        tenant_id: str | None = None,
        task_id: str | None = None,
        top_k: int = 8,
        token_budget: int = 600,
        explain: bool = False,
    ) -> RecallResult: ...

    def inspect(
        self,
        *,
        user_id: str,
        tenant_id: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
    ) -> list[MemoryItem]: ...

    def explain(
        self, *, user_id: str, session_id: str, tenant_id: str | None = None
    ) -> list[WriteDecision]: ...

    def erase(
        self, *, user_id: str, tenant_id: str | None = None, dry_run: bool = False
    ) -> EraseReport: ...

    def retract(
        self, *, user_id: str, memory_id: str, tenant_id: str | None = None, reason: str
    ) -> Forgotten: ...


class EmbeddedMemory:
    """:class:`MemoryPort` in this process, on one :class:`Runtime` (its clients, its pool).

    ``auto_provision``: the first ``record_turn`` of an unknown tenant or user registers
    it in PostgreSQL (idempotent), so a remembered turn can be recalled; recall of an
    owner never registered raises ``UnknownTenant`` / ``UnknownUser``.
    """

    def __init__(
        self, runtime: Runtime, *, writer: MemoryClient, auto_provision: bool = True
    ) -> None:
        self.runtime = runtime
        self.writer = writer
        self.auto_provision = auto_provision
        self._recaller: Recaller | None = None
        self._known: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ writes
    def record_turn(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Sequence[MessageIn | Mapping[str, Any]],
        task_id: str | None = None,
        tenant_id: str | None = None,
        turn_id: str | None = None,
    ) -> TurnReceipt:
        tenant = owner_tenant(tenant_id)
        validate_id(user_id, kind="user_id")
        receipt = self.writer.record_turn(
            user_id=user_id, session_id=session_id, messages=messages, task_id=task_id,
            tenant_id=tenant, turn_id=turn_id,
        )  # fmt: skip
        if self.auto_provision:
            self._provision(tenant, user_id)
        return receipt

    def _provision(self, tenant_id: str, user_id: str) -> None:
        if (tenant_id, user_id) in self._known:
            return
        with pg_errors("register owner"), self.runtime.engine.begin() as conn:
            conn.execute(
                pg_insert(TENANTS)
                .values(id=tenant_id, name=tenant_id)
                .on_conflict_do_nothing(index_elements=["id"])
            )
            conn.execute(
                pg_insert(USERS)
                .values(tenant_id=tenant_id, id=user_id)
                .on_conflict_do_nothing(index_elements=["tenant_id", "id"])
            )
        if len(self._known) >= 100_000:  # a long-running server: bounded memory
            self._known.clear()
        self._known.add((tenant_id, user_id))

    # ------------------------------------------------------------------ reads
    def recall(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str,
        tenant_id: str | None = None,
        task_id: str | None = None,
        top_k: int = 8,
        token_budget: int = 600,
        explain: bool = False,
    ) -> RecallResult:
        request = RecallRequest(
            tenant_id=owner_tenant(tenant_id), user_id=user_id, session_id=session_id,
            query=query, task_id=task_id, top_k=top_k, token_budget=token_budget,
            explain=explain,
        )  # fmt: skip
        if self._recaller is None:  # one per process: it owns a thread pool
            self._recaller = self.runtime.recaller()
        return self._recaller.recall(request)

    def inspect(
        self,
        *,
        user_id: str,
        tenant_id: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
    ) -> list[MemoryItem]:
        tenant = owner_tenant(tenant_id)
        validate_id(user_id, kind="user_id")
        stm, now = self.runtime.stm, time.time()
        if session_id is not None:
            return stm.by_session(user_id, session_id, limit=limit, now=now, tenant_id=tenant)
        return stm.recent(user_id, limit=limit, now=now, tenant_id=tenant)

    def explain(
        self, *, user_id: str, session_id: str, tenant_id: str | None = None
    ) -> list[WriteDecision]:
        validate_id(user_id, kind="user_id")
        return read_decisions(
            self.runtime.stm, user_id, session_id, tenant_id=owner_tenant(tenant_id)
        )

    # ------------------------------------------------------------------ removal
    def erase(
        self, *, user_id: str, tenant_id: str | None = None, dry_run: bool = False
    ) -> EraseReport:
        report = erase_owner(self.runtime, user_id=user_id, tenant_id=tenant_id, dry_run=dry_run)
        if not dry_run:
            self._known.discard((report.tenant_id, report.user_id))
        return report

    def retract(
        self, *, user_id: str, memory_id: str, tenant_id: str | None = None, reason: str
    ) -> Forgotten:
        """Remove one item of the owner: an STM item is deleted, an LTM card superseded.

        A card of another owner is reported as not found (never retracted, never named).
        """
        from memstrata.core.lifecycle.retract import retract_card

        tenant = owner_tenant(tenant_id)
        validate_id(user_id, kind="user_id")
        validate_id(memory_id, kind="memory_id")
        if not reason.strip():
            raise InvalidInput("reason: must not be empty")
        if memory_id.startswith(CARD_PREFIX):
            lc = self.runtime.lifecycle()
            card = lc.ledger.cards([memory_id]).get(memory_id)
            if card is None or (card.tenant_id, card.user_id) != (tenant, user_id):
                raise NotFound(f"no LTM card {memory_id} of user {user_id}")
            out = retract_card(lc, card_id=memory_id, now=time.time(), reason=reason)
            return Forgotten(memory_id, "ltm", out.changed)
        n = self.runtime.stm.delete(user_id, [memory_id], tenant_id=tenant)
        if n == 0:
            raise NotFound(f"no STM item {memory_id} of user {user_id}")
        return Forgotten(memory_id, "stm", True)

    def close(self) -> None:
        if self._recaller is not None:
            self._recaller.close()
            self._recaller = None


__all__ = ["CARD_PREFIX", "EmbeddedMemory", "Forgotten", "MemoryPort"]
