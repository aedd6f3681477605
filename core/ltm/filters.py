"""Search filters: validated once, then rendered for each backend.

Milvus 2.5's filter templates (``filter_params``) are not served by milvus-lite 2.5.1,
so the Milvus expression is built as a string - from values that passed the id / label
validators (``[A-Za-z0-9_.-]`` only) and are then JSON-quoted, so no value can close a
quote or add a clause.  Elasticsearch gets structured ``term`` queries, never strings.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memstrata.core.errors import InvalidInput
from memstrata.core.ids import SafeId
from memstrata.core.ltm.card import CardStatus, Label


class CardFilter(BaseModel):
    """Who may see which cards: tenant always, then user, project, types and statuses."""

    model_config = ConfigDict(frozen=True)

    tenant_id: SafeId
    user_id: SafeId | None = None
    project_id: SafeId | None = None
    memory_types: tuple[Label, ...] = Field(default=(), max_length=16)
    statuses: tuple[CardStatus, ...] = Field(default=(CardStatus.ACTIVE,), min_length=1)
    # records last written at or before this time only (the raw history's as-of read:
    # a message's record is written once, at the message's time)
    updated_before: float | None = Field(default=None, allow_inf_nan=False)

    @classmethod
    def parse(cls, **values: Any) -> CardFilter:
        """Validate untrusted filter values; :class:`InvalidInput` names the bad field."""
        try:
            return cls(**values)
        except ValidationError as exc:
            fields = ", ".join(str(e["loc"][0]) for e in exc.errors() if e["loc"])
            raise InvalidInput(f"invalid search filter ({fields or 'values'})") from exc


def owner_filter(tenant_id: str, user_id: str) -> CardFilter:
    """Every record of one owner, whatever its status (scoped erase, its counts)."""
    return CardFilter.parse(tenant_id=tenant_id, user_id=user_id, statuses=tuple(CardStatus))


def _q(value: str) -> str:
    return json.dumps(value)


def milvus_expr(flt: CardFilter) -> str:
    """The boolean expression of ``flt`` for Milvus ``filter=``."""
    parts = [f"tenant_id == {_q(flt.tenant_id)}"]
    if flt.user_id is not None:
        parts.append(f"user_id == {_q(flt.user_id)}")
    if flt.project_id is not None:
        parts.append(f"project_id == {_q(flt.project_id)}")
    if flt.memory_types:
        parts.append(f"memory_type in [{', '.join(_q(t) for t in flt.memory_types)}]")
    parts.append(f"status in [{', '.join(_q(s.value) for s in flt.statuses)}]")
    if flt.updated_before is not None:  # a finite float: repr() is a valid literal
        parts.append(f"updated_at <= {float(flt.updated_before)!r}")
    return " and ".join(parts)


def es_filter(flt: CardFilter) -> list[dict[str, Any]]:
    """The ``bool.filter`` clauses of ``flt`` for Elasticsearch."""
    clauses: list[dict[str, Any]] = [{"term": {"tenant_id": flt.tenant_id}}]
    if flt.user_id is not None:
        clauses.append({"term": {"user_id": flt.user_id}})
    if flt.project_id is not None:
        clauses.append({"term": {"project_id": flt.project_id}})
    if flt.memory_types:
        clauses.append({"terms": {"memory_type": list(flt.memory_types)}})
    clauses.append({"terms": {"status": [s.value for s in flt.statuses]}})
    if flt.updated_before is not None:
        clauses.append({"range": {"updated_at": {"lte": flt.updated_before}}})
    return clauses
