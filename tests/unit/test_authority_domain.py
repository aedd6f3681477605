"""Canonical keys, domains and value encoding: the checks every authority write passes first."""

from __future__ import annotations

import pytest

from memstrata.core.authority.domain import (
    AUTHORITATIVE_DOMAINS,
    AuthorityLimits,
    FactDomain,
    check_key,
    check_value_shape,
    domain_of_key,
    encode_value,
    parse_domain,
)
from memstrata.core.authority.errors import (
    FactValueTooLarge,
    InvalidFactKey,
    InvalidFactValue,
    UnknownDomain,
)
from memstrata.core.errors import InvalidId, InvalidInput, PayloadTooLarge


def test_the_seed_names_exactly_four_authoritative_domains() -> None:
    assert {d.value for d in AUTHORITATIVE_DOMAINS} == {
        "profile",
        "permission",
        "config",
        "project_metadata",
    }


def test_unknown_domain_is_a_typed_invalid_input() -> None:
    with pytest.raises(UnknownDomain) as info:
        parse_domain("task_state")
    assert isinstance(info.value, InvalidInput)
    assert parse_domain("profile") is FactDomain.PROFILE


@pytest.mark.parametrize(
    "key",
    [
        "profile.language",
        "permission.project.shop-1",
        "project_metadata.shop.default_env",
        "config.default_env",
        "constraint.no_friday_deploys",
        "preference.code_style",
    ],
)
def test_well_formed_keys_pass(key: str) -> None:
    assert check_key(parse_domain(key.split(".")[0]), key) == key


@pytest.mark.parametrize(
    ("domain", "key"),
    [
        ("profile", "permission.x"),
        ("profile", "profile"),
        ("profile", "profile."),
        ("profile", "profile.a b"),
        ("profile", "profile.a:b"),
        ("profile", "profile..x"),
        ("config", "config." + "x" * 300),
        ("profile", "Profile.language"),
    ],
)
def test_malformed_or_foreign_keys_are_refused(domain: str, key: str) -> None:
    with pytest.raises(InvalidFactKey):
        check_key(parse_domain(domain), key)


def test_permission_key_needs_a_valid_project_id() -> None:
    with pytest.raises(InvalidId):
        check_key(FactDomain.PERMISSION, "permission.project." + "p" * 129)


def test_equal_values_have_equal_digests_whatever_the_key_order() -> None:
    a = encode_value({"b": [1, 2], "a": "中文"})
    b = encode_value({"a": "中文", "b": [1, 2]})
    assert a.digest == b.digest and a.text == '{"a":"中文","b":[1,2]}'
    assert encode_value("1").digest != encode_value(1).digest


def test_values_must_be_plain_json_within_the_limit() -> None:
    with pytest.raises(InvalidFactValue):
        encode_value(object())
    with pytest.raises(InvalidFactValue):
        encode_value(float("inf"))
    with pytest.raises(FactValueTooLarge) as info:
        encode_value("é" * 40, limits=AuthorityLimits(max_value_bytes=64))  # 80 bytes in UTF-8
    assert isinstance(info.value, PayloadTooLarge)


def test_typed_keys_need_typed_values() -> None:
    role = check_value_shape("permission.project.shop", {"role": "dev", "scope": "read_only"})
    assert role == {"role": "dev", "scope": "read_only"}
    with pytest.raises(InvalidFactValue):
        check_value_shape("permission.project.shop", {"role": "dev", "scope": "root"})
    with pytest.raises(InvalidFactValue):
        check_value_shape("permission.project.shop", {"role": "dev", "scope": "admin", "x": 1})
    with pytest.raises(InvalidFactValue):
        check_value_shape("profile.language", ["zh"])
    assert check_value_shape("preference.format", ["table"]) == ["table"]


def test_domain_of_key_knows_only_the_authority_domains() -> None:
    assert domain_of_key("profile.language") is FactDomain.PROFILE
    assert domain_of_key("task_state.bug456.next") is None
    assert domain_of_key("user:pref:language") is None
