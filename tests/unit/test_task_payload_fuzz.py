"""Every task payload model, fuzzed: a parsed payload or a typed InvalidInput, nothing else.

``tasks._options.payload`` is the one way a task reads its arguments, before it touches a
store; so a payload that parses or raises :class:`InvalidInput` is the whole contract of
"bad task input fails once, typed" (the worker side is in test_task_failures and
test_input_fuzz).  Values mix valid ones with hostile strings, bytes, huge and non-finite
numbers, booleans where ints belong and nested junk.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from memstrata.core.errors import InvalidInput
from memstrata.tasks._options import BatchLimit, TaskInput, payload
from memstrata.tasks.compress import CompressRequest
from memstrata.tasks.ingest import DrainInput
from memstrata.tasks.lifecycle import (
    DryRun,
    ForgetInput,
    PreloadInput,
    RetractInput,
    ScanInput,
    SessionInput,
)
from memstrata.tasks.ltm import CardIds, TurnPointers

HOSTILE_IDS = ["", ".", "..", "a:b", "u*", "a b", "ｕ42", "u\u200b", "\ud800", "x" * 129]
HOSTILE_IDS += ["../etc", "a/b", "\x00", "{s0}", "' or 1==1"]
BAD_POINTER = {"user_id": "u", "session_id": "s", "turn_id": "t", "at": math.nan}
BAD_POINTER |= {"offset": 0, "length": 1}
VALID_IDS = ["u1", "s_1", "t-9.x", "A" * 128]

ids = st.one_of(st.sampled_from(VALID_IDS + HOSTILE_IDS), st.text(max_size=12))
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 3, 500, 501, 10**400, -1, True, False, "5", b"5", 5.0]),
)
texts = st.one_of(
    st.text(max_size=40), st.sampled_from(["\ud800", "ok\udfff", "x" * 70_000]), st.binary()
)
pointer = st.fixed_dictionaries(
    {
        "user_id": ids,
        "session_id": ids,
        "turn_id": ids,
        "at": numbers,
        "offset": numbers,
        "length": numbers,
    }
)
junk = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, texts, ids),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def value_for(name: str) -> st.SearchStrategy[Any]:
    """A strategy that usually fits the field and often does not."""
    if name.endswith("_id") or name in {"target"}:
        return st.one_of(ids, junk)
    if name in {"limit", "shard", "budget_tokens"}:
        return st.one_of(numbers, junk)
    if name in {"dry_run", "apply"}:
        return st.one_of(st.booleans(), st.none(), numbers, junk)
    if name == "kind":
        return st.one_of(st.sampled_from(["card", "fact", "CARD", ""]), junk)
    if name == "memory_ids":
        return st.one_of(st.lists(ids, max_size=3), st.just(["m1"] * 501), junk)
    if name == "pointers":
        return st.one_of(st.lists(pointer, max_size=2), junk)
    return st.one_of(texts, junk)


MODELS: dict[type[TaskInput], dict[str, Any]] = {
    BatchLimit: {},
    DrainInput: {"shards": 4},
    ScanInput: {},
    DryRun: {},
    ForgetInput: {},
    RetractInput: {},
    SessionInput: {},
    PreloadInput: {},
    CompressRequest: {},
    CardIds: {},
    TurnPointers: {},
}


def kwargs_for(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {name: value_for(name) for name in model.model_fields}
    fields["unknown"] = junk  # sometimes an extra field
    return st.lists(st.sampled_from(sorted(fields)), unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: fields[n] for n in names})
    )


@pytest.mark.parametrize("model", list(MODELS), ids=lambda m: m.__name__)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_payload_parses_or_is_refused_with_a_typed_error(
    model: type[TaskInput], data: st.DataObject
) -> None:
    fields = data.draw(kwargs_for(model))
    try:
        parsed = payload(model, context=MODELS[model], **fields)
    except InvalidInput as exc:
        assert str(exc), "an error names what is wrong"
        return
    # What parsed is what the task may use: typed, finite, no bytes, no bools for ints
    for name, value in parsed.model_dump().items():
        _assert_clean(name, value)


def _assert_clean(name: str, value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _assert_clean(f"{name}.{k}", v)
    elif isinstance(value, list | tuple):
        for v in value:
            _assert_clean(name, v)
    elif isinstance(value, float):
        assert math.isfinite(value), name
    elif isinstance(value, str):
        value.encode("utf-8")  # no lone surrogate got through
    else:
        assert value is None or isinstance(value, int | bool), (name, value)


@pytest.mark.parametrize(
    ("model", "fields", "where"),
    [
        (BatchLimit, {"limit": "5"}, "limit"),
        (BatchLimit, {"limit": True}, "limit"),
        (BatchLimit, {"limit": 5.0}, "limit"),
        (DryRun, {"dry_run": 1}, "dry_run"),
        (SessionInput, {"user_id": b"u", "session_id": "s"}, "user_id"),
        (CardIds, {"memory_ids": ["m1"] * 501}, "memory_ids"),
        (RetractInput, {"kind": "card", "target": "\ud800"}, "target"),
        (PreloadInput, {"user_id": "u", "session_id": "s", "query": b"q"}, "query"),
        (
            TurnPointers,
            {"pointers": [BAD_POINTER]},
            "pointers.0.at",
        ),
    ],
)
def test_the_error_names_the_field(
    model: type[TaskInput], fields: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidInput, match=where):
        payload(model, **fields)
