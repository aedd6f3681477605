"""What the MCP server needs from memstrata: :class:`MemoryPort`, and its embedded adapter.

The server is written against this small protocol, not against the stores.
:class:`EmbeddedMemory` implements it on the product's in-process client
(:class:`memstrata.client.Embedded`, the one ``memstrata.Memory`` and the REST service
use, tenant per call): ``record_turn`` (with the unknown-owner policy,
:mod:`memstrata.core.owners`), ``recall``, ``inspect``, ``cards``, ``explain`` and
``erase`` are its methods, so user ids are external ids (emails, ``user:42``, ``张三``)
mapped to key parts by :func:`memstrata.core.ids.user_key` exactly as everywhere else.
Only ``retract`` (one item: an STM item deleted, an LTM card superseded) is the MCP's
own, through :mod:`memstrata.core.lifecycle.retract`; the client has no single-item
removal.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memstrata.client import Embedded
from memstrata.core.api import Kicker
from memstrata.core.errors import InvalidInput, NotFound
from memstrata.core.ids import owner_tenant, user_key, validate_id
from memstrata.core.ltm.card import CardView
from memstrata.core.models.candidate import WriteDecision
from memstrata.core.models.memory import MemoryView
from memstrata.core.models.transcript import MessageIn, TurnReceipt
from memstrata.core.recall.result import RecallResult
from memstrata.core.runtime import Runtime
from memstrata.wire import EraseResult, RecallIn, TurnIn

CARD_PREFIX = "ltm_"  # core.ltm.card.card_id: an LTM card; anything else is an STM item


@dataclass(frozen=True)
class Forgotten:
    """What ``retract`` did to one item: ``layer`` is ``stm`` (deleted) or ``ltm`` (card
    superseded, its index projections removed by the next index run)."""

    memory_id: str
    layer: Literal["stm", "ltm"]
    changed: bool


class MemoryPort(Protocol):
    """The memory operations an agent surface calls; owner-scoped, external user ids."""

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
        as_of: float | None = None,
    ) -> RecallResult: ...

    def inspect(
        self,
        *,
        user_id: str,
        tenant_id: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
    ) -> list[MemoryView]: ...

    def cards(
        self, *, user_id: str, tenant_id: str | None = None, limit: int = 50
    ) -> list[CardView]: ...

    def explain(
        self, *, user_id: str, session_id: str, tenant_id: str | None = None
    ) -> list[WriteDecision]: ...

    def erase(
        self, *, user_id: str, tenant_id: str | None = None, dry_run: bool = False
    ) -> EraseResult: ...

    def retract(
        self, *, user_id: str, memory_id: str, tenant_id: str | None = None, reason: str
    ) -> Forgotten: ...


class EmbeddedMemory:
    """:class:`MemoryPort` on :class:`memstrata.client.Embedded` over one :class:`Runtime`.

    ``kicker`` replaces the Celery drain kick (as for ``memstrata.Memory``).
    """

    def __init__(self, runtime: Runtime, *, kicker: Kicker | None = None) -> None:
        self.runtime = runtime
        self.client = Embedded(runtime, None, background_kicks=True, kicker=kicker)

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
        body = TurnIn.model_construct(
            user_id=user_id, session_id=session_id, messages=[], task_id=task_id,
            turn_id=turn_id, at=None,
        )  # fmt: skip  # record_turn validates every field itself, as Memory does
        return self.client.record_turn(body, messages, tenant=owner_tenant(tenant_id))

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
        as_of: float | None = None,
    ) -> RecallResult:
        body = RecallIn(
            query=query, user_id=user_id, session_id=session_id, task_id=task_id,
            top_k=top_k, token_budget=token_budget, explain=explain, as_of=as_of,
        )  # fmt: skip
        return self.client.recall(body, tenant=owner_tenant(tenant_id))

    def inspect(
        self,
        *,
        user_id: str,
        tenant_id: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
    ) -> list[MemoryView]:
        return self.client.inspect(
            user_id, session_id=session_id, task_id=None, entity=None, memory_type=None,
            limit=limit, tenant=owner_tenant(tenant_id),
        )  # fmt: skip

    def cards(
        self, *, user_id: str, tenant_id: str | None = None, limit: int = 50
    ) -> list[CardView]:
        return self.client.cards(user_id, memory_type=None, superseded=False, limit=limit,
                                 tenant=owner_tenant(tenant_id))  # fmt: skip

    def explain(
        self, *, user_id: str, session_id: str, tenant_id: str | None = None
    ) -> list[WriteDecision]:
        return self.client.explain(user_id, session_id, None, tenant=owner_tenant(tenant_id))

    # ------------------------------------------------------------------ removal
    def erase(
        self, *, user_id: str, tenant_id: str | None = None, dry_run: bool = False
    ) -> EraseResult:
        return self.client.erase(user_id, dry_run=dry_run, tenant=owner_tenant(tenant_id))

    def retract(
        self, *, user_id: str, memory_id: str, tenant_id: str | None = None, reason: str
    ) -> Forgotten:
        """Remove one item of the owner: an STM item is deleted, an LTM card superseded.

        A card of another owner is reported as not found (never retracted, never named).
        """
        from memstrata.core.lifecycle.retract import retract_card

        tenant, key = owner_tenant(tenant_id), user_key(user_id)
        validate_id(memory_id, kind="memory_id")
        if not reason.strip():
            raise InvalidInput("reason: must not be empty")
        if memory_id.startswith(CARD_PREFIX):
            lc = self.runtime.lifecycle()
            card = lc.ledger.cards([memory_id]).get(memory_id)
            if card is None or (card.tenant_id, card.user_id) != (tenant, key):
                raise NotFound(f"no LTM card {memory_id} of user {user_id}")
            out = retract_card(lc, card_id=memory_id, now=time.time(), reason=reason)
            return Forgotten(memory_id, "ltm", out.changed)
        n = self.runtime.stm.delete(key, [memory_id], tenant_id=tenant)
        if n == 0:
            raise NotFound(f"no STM item {memory_id} of user {user_id}")
        return Forgotten(memory_id, "stm", True)

    def close(self) -> None:
        self.client.close()


__all__ = ["CARD_PREFIX", "EmbeddedMemory", "Forgotten", "MemoryPort"]
