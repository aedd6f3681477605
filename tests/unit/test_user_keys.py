"""External user ids → key parts (``core.ids.user_key``): injective, reversible, inert.

Properties over arbitrary strings: no two distinct ids share a key part; a key part
decodes back to its id; every key part passes ``validate_id`` and carries none of the
characters that could steer a Redis key, an L0 path or a Milvus/ES filter; safe ids (all
existing data) map to themselves.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.core.errors import InvalidId
from memstrata.core.ids import (
    MAX_EXTERNAL_USER_BYTES,
    external_user_id,
    is_valid_id,
    user_key,
    validate_id,
)
from memstrata.core.keys import UserKeys
from memstrata.core.ltm.filters import milvus_expr, owner_filter

DANGEROUS = set("/\\{}*?[]:'\"` \t\n\r\x00")


def _fits(s: str) -> bool:
    try:
        raw = s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return bool(s) and (is_valid_id(s) or len(raw) <= MAX_EXTERNAL_USER_BYTES)


external = st.text(min_size=1, max_size=40).filter(_fits)
safe = st.from_regex(r"[A-Za-z0-9_.\-]{1,128}", fullmatch=True).filter(
    lambda s: s not in {".", ".."}
)


@given(external, external)
@settings(max_examples=400)
def test_no_two_ids_share_a_key_part(a: str, b: str) -> None:
    assert (user_key(a) == user_key(b)) == (a == b)


@given(external)
@settings(max_examples=400)
def test_a_key_part_is_safe_and_decodes_back(user: str) -> None:
    key = user_key(user)
    assert validate_id(key) == key and len(key) <= 128
    assert not DANGEROUS & set(key)
    assert key not in {".", ".."}  # a path component that is never a traversal
    assert external_user_id(key) == user
    # what reaches a Redis key and a Milvus filter: the key part inside its own delimiters
    assert UserKeys("ns", key).prefix == f"ns:user:{{default/{key}}}:"
    assert f'user_id == "{key}"' in milvus_expr(owner_filter("t", key))


@given(safe)
def test_safe_ids_map_to_themselves(user: str) -> None:
    assert user_key(user) == user


@pytest.mark.parametrize(
    "user",
    ["alice@example.com", "user:42", "张三", "../../etc/passwd", 'x" || 1==1 || "', "{a}*",
     "a\x00b", ".", "..", "~abc", "Ünïcødé", "slack|U024BE7LH"],
)  # fmt: skip
def test_known_awkward_ids(user: str) -> None:
    key = user_key(user)
    assert key.startswith("~") and all(c in "abcdefghijklmnopqrstuvwxyz234567" for c in key[1:])
    assert external_user_id(key) == user


@pytest.mark.parametrize("bad", ["", "a" * 129, "é" * 40, "\ud800", 42, None])
def test_refused_ids(bad: object) -> None:
    with pytest.raises(InvalidId):
        user_key(bad)  # type: ignore[arg-type]


def test_the_length_limit_is_bytes_for_encoded_ids() -> None:
    assert user_key("a" * 128) == "a" * 128
    assert len(user_key("@" * MAX_EXTERNAL_USER_BYTES)) == 128
    with pytest.raises(InvalidId, match="79 UTF-8 bytes"):
        user_key("@" * (MAX_EXTERNAL_USER_BYTES + 1))
