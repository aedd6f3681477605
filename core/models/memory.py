"""The short-term memory item (seed 1 section 四.1/四.2/四.4) and its Redis hash encoding."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memstrata.core.errors import CorruptRecord
from memstrata.core.ids import SafeId, external_user_id

_JSON_FIELDS = ("detail", "entities", "tags", "source", "history", "seen_sessions")


class MemoryType(StrEnum):
    """Main category of an STM item (seed 四.3)."""

    FACT = "fact"
    DECISION = "decision"
    HYPOTHESIS = "hypothesis"
    OBSERVATION = "observation"
    CONSTRAINT = "constraint"
    PREFERENCE = "preference"


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    DELETED = "deleted"


class MemorySource(BaseModel):
    """Where an item came from, so it can be traced back to the L0 transcript."""

    model_config = ConfigDict(frozen=True)

    kind: str = Field("conversation", max_length=64)
    message_ids: list[SafeId] = Field(default_factory=list, max_length=256)
    tool_call_ids: list[str] = Field(default_factory=list, max_length=256)

    @field_validator("tool_call_ids")
    @classmethod
    def _short_printable(cls, value: list[str]) -> list[str]:
        for call_id in value:
            if not call_id or len(call_id) > 256 or not call_id.isprintable():
                raise ValueError("tool call ids must be 1-256 printable characters")
        return value


class SupersededVersion(BaseModel):
    """An earlier content of an item, kept as provenance when a newer version replaces it."""

    version: int
    summary: str
    fingerprint: str
    updated_at: float
    message_ids: list[str] = Field(default_factory=list)


class MemoryItem(BaseModel):
    """One STM item: a small structured fact about the current task or session."""

    id: SafeId
    user_id: SafeId
    tenant_id: SafeId | None = None
    session_id: SafeId
    task_id: SafeId | None = None
    memory_type: MemoryType
    subtype: str = Field("general", max_length=64)
    summary: str = Field(min_length=1)
    detail: dict[str, Any] = Field(default_factory=dict)
    entities: list[str] = Field(default_factory=list, max_length=64)
    tags: list[str] = Field(default_factory=list, max_length=32)
    source: MemorySource = Field(default_factory=MemorySource)
    confidence: float = Field(ge=0.0, le=1.0)
    importance: float = Field(ge=0.0, le=1.0)
    created_at: float
    updated_at: float
    last_access_at: float
    expires_at: float
    fingerprint: str = Field(min_length=8, max_length=64)
    canonical_fact_key: str = Field(min_length=1, max_length=256)
    version: int = Field(1, ge=1)
    status: MemoryStatus = MemoryStatus.ACTIVE
    mention_count: int = Field(1, ge=1)
    seen_sessions: list[str] = Field(default_factory=list, max_length=32)
    history: list[SupersededVersion] = Field(default_factory=list)
    # optional multi-agent fields (seed 四.4)
    agent_id: SafeId | None = None
    owner_agent: SafeId | None = None
    shared_scope: str | None = Field(None, max_length=64)

    def to_redis_hash(self) -> dict[str, str]:
        """Flatten to string fields, nested ones as compact JSON (one hash layout, no RedisJSON)."""
        raw = self.model_dump(mode="json")
        out: dict[str, str] = {}
        for key, value in raw.items():
            if value is None:
                continue
            if key in _JSON_FIELDS:
                out[key] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_redis_hash(cls, data: dict[str, str]) -> MemoryItem:
        """Parse a hash written by :meth:`to_redis_hash` or by the upsert script."""
        try:
            parsed: dict[str, Any] = dict(data)
            for key in _JSON_FIELDS:
                if key in parsed:
                    value = json.loads(parsed[key])
                    # cjson encodes an empty Lua table as {}: normalise to an empty list
                    if key != "detail" and value == {}:
                        value = []
                    if key == "source" and isinstance(value, dict):
                        value = {k: ([] if v == {} else v) for k, v in value.items()}
                    if key == "history" and isinstance(value, list):
                        value = [
                            {k: ([] if v == {} else v) for k, v in h.items()}
                            if isinstance(h, dict)
                            else h
                            for h in value
                        ]
                    parsed[key] = value
            return cls.model_validate(parsed)
        except (ValueError, TypeError) as exc:
            raise CorruptRecord(f"unreadable STM item {data.get('id')!r}: {exc}") from exc


class MemoryView(MemoryItem):
    """An STM item as the public surfaces show it (client, REST, CLI ``--json``):
    ``user_id`` is the caller's external id (``alice@example.com``, ``张三``), not the key
    part it is stored under (``core.ids.user_key``); everything else is the item."""

    user_id: str = Field(min_length=1, max_length=128)

    @classmethod
    def of(cls, item: MemoryItem) -> MemoryView:
        """The view of a stored item: its key part turned back into the external id."""
        values = dict(item.__dict__, user_id=external_user_id(item.user_id))
        return cls.model_construct(_fields_set=item.model_fields_set, **values)
