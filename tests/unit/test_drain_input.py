"""The drain's owner kwargs are display only: a valid id (mapped ones too) is kept, anything
else is dropped, and neither ever fails the drain (which takes every turn of its shard)."""

from __future__ import annotations

import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ids import user_key
from memstrata.tasks._options import payload
from memstrata.tasks.ingest import DrainInput

SHARDS = {"shards": 4}


def test_valid_owner_ids_are_kept_mapped_ones_included() -> None:
    mapped = user_key("alice@example.com")
    got = payload(DrainInput, context=SHARDS, shard=1, tenant_id="acme", user_id=mapped)
    assert (got.shard, got.tenant_id, got.user_id) == (1, "acme", mapped)


@pytest.mark.parametrize("bad", ["bad id!", "../etc", 42, None, "x" * 300, "my locker is 1234 "])
def test_anything_else_is_dropped_without_failing_the_drain(bad: object) -> None:
    got = payload(DrainInput, context=SHARDS, shard=0, tenant_id=bad, user_id=bad)
    assert (got.shard, got.tenant_id, got.user_id) == (0, "", "")


def test_the_shard_is_still_checked() -> None:
    with pytest.raises(InvalidInput, match="shard must be an int"):
        payload(DrainInput, context=SHARDS, shard=9, user_id="u_1")
