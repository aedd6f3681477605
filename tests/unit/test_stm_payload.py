"""The upsert payload (``core.stm.store.payload_fields``) says what ``to_redis_hash`` says.

The payload is built from the item's attributes for speed (issue 17); the reference is the
model's own encoding, minus what the upsert script compacts away anyway (docs/KEYS.md
"Compact items"): the owner, the status and every field at its default.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.keys import index_suffixes
from memstrata.core.models.memory import MemoryItem, MemorySource, SupersededVersion
from memstrata.core.stm.store import payload_fields
from tests.unit.test_models import seed_example

DEFAULTS = {"version": "1", "mention_count": "1", "history": "[]", "entities": "[]",
            "tags": "[]", "detail": "{}", "subtype": "general"}  # fmt: skip


def reference(item: MemoryItem) -> dict[str, str]:
    """What the upsert sent before: the model's hash, provenance and index list added."""
    fields = item.to_redis_hash()
    src = item.source
    fields["source"] = json.dumps(
        {k: v for k, v in (("kind", src.kind), ("message_ids", src.message_ids),
                           ("tool_call_ids", src.tool_call_ids)) if v and v != "conversation"},
        ensure_ascii=False, separators=(",", ":"),
    )  # fmt: skip
    if fields.get("seen_sessions", "[]") == "[]":
        fields["seen_sessions"] = json.dumps([item.session_id])
    fields["_idx"] = json.dumps(
        index_suffixes(session_id=item.session_id, task_id=item.task_id, entities=item.entities),
        ensure_ascii=False, separators=(",", ":"),
    )  # fmt: skip
    return {k: v for k, v in fields.items()
            if k not in ("user_id", "tenant_id", "status") and DEFAULTS.get(k) != v}  # fmt: skip


# fmt: off
CASES: dict[str, dict[str, Any]] = {
    "the seed's example": {},
    "defaults everywhere": dict(entities=[], tags=[], detail={}, subtype="general",
                                task_id=None, agent_id=None, owner_agent=None,
                                shared_scope=None, seen_sessions=[]),
    "quotes, controls and CJK": dict(summary='数据库 "CPU" 15%\n\t\\ 排除\u0001',
                                     entities=["张三", 'a"b', "prod-k8s"]),
    "detail plain JSON cannot take": dict(detail={
        "nan": math.nan, "day": datetime.date(2026, 1, 2), "nested": {"inf": math.inf},
        "n": [1, 2.5]}),
    "tool provenance": dict(source=MemorySource(kind="tool", message_ids=["t1.2"],
                                                tool_call_ids=["call_1"])),
    "empty provenance kind": dict(source=MemorySource(kind="", message_ids=["t1.0"])),
    "a later version": dict(version=3, mention_count=4, history=[SupersededVersion(
        version=2, summary="old", fingerprint="f" * 16, updated_at=1.5, message_ids=["t0.1"])]),
}
# fmt: on


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_the_payload_carries_what_the_models_hash_carries(overrides: dict[str, Any]) -> None:
    item = seed_example(**overrides)
    assert payload_fields(item) == reference(item)


def test_a_number_that_is_not_finite_is_refused_with_a_typed_error() -> None:
    item = seed_example().model_copy(update={"expires_at": math.inf})
    with pytest.raises(InvalidInput, match="not a finite number"):
        payload_fields(item)
