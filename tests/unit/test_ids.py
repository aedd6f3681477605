"""Id validation: every id that becomes a Redis key part or a file path is checked first."""

from __future__ import annotations

import hashlib
import re

import pytest
from pydantic import BaseModel, ValidationError

from memstrata.core.errors import InvalidId, InvalidInput
from memstrata.core.ids import SafeId, entity_key_part, validate_id

UNSAFE_IDS = [
    pytest.param("u:42", id="key-separator-colon"),
    pytest.param("u*", id="glob-star"),
    pytest.param("u?", id="glob-question-mark"),
    pytest.param("u[1]", id="glob-brackets"),
    pytest.param("{u}", id="cluster-hash-tag-braces"),
    pytest.param("u 42", id="space"),
    pytest.param("u\t42", id="tab"),
    pytest.param("u\n42", id="newline"),
    pytest.param("..", id="parent-dir"),
    pytest.param(".", id="current-dir"),
    pytest.param("../etc", id="path-traversal"),
    pytest.param("a/b", id="slash"),
    pytest.param("a\\b", id="backslash"),
    pytest.param("u\uff1a42", id="fullwidth-colon"),
    pytest.param("\u0430dmin", id="cyrillic-a-look-alike"),
    pytest.param("us\u0435r", id="cyrillic-e-look-alike"),
    pytest.param("u\u200b42", id="zero-width-space"),
    pytest.param("u\u00a042", id="no-break-space"),
    pytest.param("用户", id="cjk"),
    pytest.param("", id="empty"),
    pytest.param("a" * 129, id="129-chars"),
    pytest.param("u\x00", id="nul-byte"),
]


@pytest.mark.parametrize("value", UNSAFE_IDS)
def test_unsafe_ids_are_rejected_with_invalid_id(value: str) -> None:
    # Given an id that could forge a key, a glob or a path
    # When it is validated / Then InvalidId (a permanent InvalidInput) is raised
    with pytest.raises(InvalidId):
        validate_id(value)


@pytest.mark.parametrize(
    "value", ["u_42", "s-1", "bug456", "t0001.2", "A.b-C_9", "a" * 128, "...", ".hidden"]
)
def test_safe_ids_are_returned_unchanged(value: str) -> None:
    assert validate_id(value) == value


def test_invalid_id_is_a_permanent_invalid_input_and_names_the_kind() -> None:
    with pytest.raises(InvalidId, match="invalid session_id") as info:
        validate_id("a:b", kind="session_id")
    assert isinstance(info.value, InvalidInput)


def test_error_message_truncates_a_huge_id() -> None:
    with pytest.raises(InvalidId) as info:
        validate_id("x" * 10_000 + ":")
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("value", [None, 42, b"u_42"])
def test_non_string_ids_are_rejected(value: object) -> None:
    with pytest.raises(InvalidId):
        validate_id(value)  # type: ignore[arg-type]


class _Holder(BaseModel):
    ident: SafeId


def test_safe_id_type_admits_safe_ids_in_models() -> None:
    assert _Holder(ident="m_1001").ident == "m_1001"


@pytest.mark.parametrize("value", ["a:b", "..", "x\uff1ay", ""])
def test_safe_id_type_rejects_unsafe_ids_in_models(value: str) -> None:
    with pytest.raises(ValidationError, match="invalid id"):
        _Holder(ident=value)


# ---------------------------------------------------------------- entity key parts


@pytest.mark.parametrize(
    ("entity", "expected"),
    [
        ("createOrder", "createorder"),
        ("payment-service", "payment-service"),
        ("prod-k8s", "prod-k8s"),
        ("BUG-456", "bug-456"),
        ("HTTP504", "http504"),
        ("thread_pool", "thread_pool"),
        ("/api/v1/orders", "/api/v1/orders"),
        ("order_service.create_order", "order_service.create_order"),
        ("数据库", "数据库"),
        ("  Redis  ", "redis"),
    ],
)
def test_safe_entities_map_to_their_case_folded_selves(entity: str, expected: str) -> None:
    assert entity_key_part(entity) == expected


def _hashed(folded: str) -> str:
    return "h_" + hashlib.sha1(folded.encode("utf-8")).hexdigest()[:16]


@pytest.mark.parametrize(
    "entity",
    [
        "a:b",
        "memory:user:{victim}:item",
        "orders*",
        "thread pool",
        "a\uff1ab",
        "x?y",
        "[abc]",
        "{tag}",
        "e" * 65,
        "",
    ],
)
def test_unsafe_entities_are_replaced_by_a_stable_short_hash(entity: str) -> None:
    # Given an entity with a separator, glob, brace, whitespace or over 64 chars
    part = entity_key_part(entity)
    # Then the key part is a fixed-shape hash of the case-folded name, safe as a key part
    assert part == _hashed(entity.strip().casefold())
    assert re.fullmatch(r"h_[0-9a-f]{16}", part)
    assert validate_id(part) == part


def test_entity_hashing_is_case_insensitive_and_deterministic() -> None:
    assert entity_key_part("Thread Pool") == entity_key_part("thread pool")
    assert entity_key_part("Thread Pool") == entity_key_part("THREAD POOL")
    assert entity_key_part("a:b") != entity_key_part("a:c")
