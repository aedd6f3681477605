"""The STM item model: every seed field, and a lossless Redis hash encoding."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from memstrata.core.errors import CorruptRecord
from memstrata.core.models.memory import (
    MemoryItem,
    MemorySource,
    MemoryStatus,
    MemoryType,
    SupersededVersion,
)

# Seed 1 section 四.1 (recommended fields) and 四.4 (optional multi-agent fields).
SEED_FIELDS = {
    "id",
    "user_id",
    "session_id",
    "task_id",
    "memory_type",
    "subtype",
    "summary",
    "detail",
    "entities",
    "tags",
    "source",
    "confidence",
    "importance",
    "created_at",
    "updated_at",
    "last_access_at",
    "expires_at",
    "fingerprint",
    "canonical_fact_key",
    "version",
    "status",
}
MULTI_AGENT_FIELDS = {"agent_id", "owner_agent", "shared_scope"}


def seed_example(**overrides: Any) -> MemoryItem:
    """The seed's own example item (四.1), with multi-agent fields filled in."""
    data: dict[str, Any] = {
        "id": "m_1001",
        "user_id": "u_42",
        "session_id": "s_123",
        "task_id": "bug_456",
        "memory_type": "fact",
        "subtype": "diagnosis",
        "summary": "createOrder 在 prod-k8s 超时，数据库已排除",
        "detail": {
            "symptom": "timeout",
            "service": "payment-service",
            "api": "createOrder",
            "env": "prod-k8s",
            "excluded_root_causes": ["database"],
            "next_focus": ["thread_pool", "downstream_latency"],
            "nested": {"n": 1, "ok": True, "none": None},
        },
        "entities": ["createOrder", "payment-service", "database", "prod-k8s"],
        "tags": ["timeout", "diagnosis", "prod"],
        "source": {
            "kind": "conversation+tool",
            "message_ids": ["msg_91", "msg_94"],
            "tool_call_ids": ["tool_18"],
        },
        "confidence": 0.92,
        "importance": 0.84,
        "created_at": 1713861000,
        "updated_at": 1713861100,
        "last_access_at": 1713861200,
        "expires_at": 1713947400,
        "fingerprint": "0123456789abcdef01234567",
        "canonical_fact_key": "bug456:createOrder:db_excluded",
        "version": 3,
        "status": "active",
        "mention_count": 2,
        "seen_sessions": ["s_100", "s_123"],
        "history": [
            {
                "version": 2,
                "summary": "createOrder 在 prod-k8s 超时",
                "fingerprint": "fedcba9876543210fedcba98",
                "updated_at": 1713861050.5,
                "message_ids": ["msg_90"],
            }
        ],
        "agent_id": "agent_a",
        "owner_agent": "agent_b",
        "shared_scope": "team:payments",
        "tenant_id": "acme",
    }
    data.update(overrides)
    return MemoryItem.model_validate(data)


def test_memory_item_has_every_seed_field_and_the_multi_agent_fields() -> None:
    fields = set(MemoryItem.model_fields)
    assert fields >= SEED_FIELDS
    assert fields >= MULTI_AGENT_FIELDS


def test_memory_types_are_the_six_seed_categories() -> None:
    assert {t.value for t in MemoryType} == {
        "fact",
        "decision",
        "hypothesis",
        "observation",
        "constraint",
        "preference",
    }
    assert {s.value for s in MemoryStatus} == {"active", "superseded", "deleted"}


def test_item_round_trips_through_the_redis_hash_encoding() -> None:
    # Given the seed's example item with every optional field set
    item = seed_example()
    # When it is flattened to a Redis hash and parsed back
    encoded = item.to_redis_hash()
    decoded = MemoryItem.from_redis_hash(encoded)
    # Then nothing is lost and every hash value is a string
    assert decoded == item
    assert all(isinstance(v, str) for v in encoded.values())
    assert set(encoded) >= SEED_FIELDS | MULTI_AGENT_FIELDS


def test_nested_fields_are_stored_as_compact_unescaped_json() -> None:
    encoded = seed_example().to_redis_hash()
    assert json.loads(encoded["detail"])["excluded_root_causes"] == ["database"]
    assert json.loads(encoded["source"])["tool_call_ids"] == ["tool_18"]
    assert json.loads(encoded["history"])[0]["version"] == 2
    assert encoded["entities"] == '["createOrder","payment-service","database","prod-k8s"]'
    assert encoded["memory_type"] == "fact"
    assert encoded["status"] == "active"


def test_unset_optional_fields_are_left_out_of_the_hash_and_come_back_as_none() -> None:
    item = seed_example(task_id=None, agent_id=None, owner_agent=None, shared_scope=None)
    encoded = item.to_redis_hash()
    assert not {"task_id", "agent_id", "owner_agent", "shared_scope"} & set(encoded)
    decoded = MemoryItem.from_redis_hash(encoded)
    assert decoded.task_id is None
    assert decoded.agent_id is None
    assert decoded == item


def test_hash_written_by_lua_with_empty_tables_parses_as_empty_lists() -> None:
    # Given a hash as the Lua script writes it: cjson encodes empty arrays as {}
    encoded = seed_example().to_redis_hash()
    encoded.update(
        entities="{}",
        tags="{}",
        history="{}",
        seen_sessions="{}",
        source='{"kind":"tool","message_ids":{},"tool_call_ids":{}}',
        detail="{}",
        _idx='["recent"]',
    )
    # When it is parsed
    item = MemoryItem.from_redis_hash(encoded)
    # Then the lists are empty lists and the private index field is ignored
    assert item.entities == []
    assert item.tags == []
    assert item.history == []
    assert item.seen_sessions == []
    assert item.source == MemorySource(kind="tool")
    assert item.detail == {}


def test_history_entries_with_lua_empty_tables_parse_as_empty_lists() -> None:
    encoded = seed_example().to_redis_hash()
    encoded["history"] = (
        '[{"updated_at":1700000000,"version":1,"fingerprint":"abcdef0123456789",'
        '"message_ids":{},"summary":"pool size 200"}]'
    )
    item = MemoryItem.from_redis_hash(encoded)
    assert [(h.summary, h.message_ids) for h in item.history] == [("pool size 200", [])]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("detail", "{not json"),
        ("memory_type", "rumour"),
        ("confidence", "high"),
        ("importance", "1.5"),
        ("id", "m:1"),
    ],
)
def test_unparsable_hash_raises_corrupt_record(field: str, value: str) -> None:
    encoded = seed_example().to_redis_hash()
    encoded[field] = value
    with pytest.raises(CorruptRecord, match=r"m_1001|m:1"):
        MemoryItem.from_redis_hash(encoded)


def test_unknown_memory_type_is_rejected() -> None:
    with pytest.raises(ValidationError, match="memory_type"):
        seed_example(memory_type="rumour")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("confidence", 1.01),
        ("confidence", -0.1),
        ("importance", 2.0),
        ("version", 0),
        ("mention_count", 0),
        ("summary", ""),
        ("fingerprint", "short"),
        ("canonical_fact_key", ""),
        ("subtype", "x" * 65),
        ("user_id", "u:42"),
        ("session_id", "../s"),
        ("task_id", "bug 456"),
        ("agent_id", "agent*"),
        ("status", "archived"),
        ("entities", ["e"] * 65),
    ],
)
def test_out_of_range_or_unsafe_fields_are_rejected(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        seed_example(**{field: value})


def test_source_validates_message_ids_and_tool_call_ids() -> None:
    assert MemorySource(message_ids=["t1.0"], tool_call_ids=["call_1"]).kind == "conversation"
    with pytest.raises(ValidationError):
        MemorySource(message_ids=["t1:0"])
    with pytest.raises(ValidationError, match="printable"):
        MemorySource(tool_call_ids=["call\n1"])
    with pytest.raises(ValidationError, match="printable"):
        MemorySource(tool_call_ids=[""])


def test_defaults_describe_a_fresh_active_item() -> None:
    item = MemoryItem(
        id="m_1",
        user_id="u_1",
        session_id="s_1",
        memory_type=MemoryType.DECISION,
        summary="roll back payment-service",
        confidence=0.85,
        importance=0.5,
        created_at=1.0,
        updated_at=1.0,
        last_access_at=1.0,
        expires_at=2.0,
        fingerprint="0123456789abcdef",
        canonical_fact_key="s_1:decision:payment-service",
    )
    assert (item.version, item.mention_count, item.status) == (1, 1, MemoryStatus.ACTIVE)
    assert (item.subtype, item.history, item.seen_sessions) == ("general", [], [])
    assert item.source == MemorySource()


def test_superseded_version_keeps_provenance() -> None:
    item = seed_example()
    assert item.history == [
        SupersededVersion(
            version=2,
            summary="createOrder 在 prod-k8s 超时",
            fingerprint="fedcba9876543210fedcba98",
            updated_at=1713861050.5,
            message_ids=["msg_90"],
        )
    ]
