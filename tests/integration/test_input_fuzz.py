"""Every public entry, fuzzed against the real stores: success or a typed InvalidInput.

``record_turn``, ``RecallRequest`` + ``recall`` and the tasks of the write path get
generated arguments: ids from a mix of valid and hostile strings (separators, globs,
look-alikes, surrogates, bytes, over-long), numbers including ``nan``, ``inf``, huge and
negative ones, booleans and strings where numbers belong, ``None`` where a list belongs,
and nested junk.  Each example must either succeed or raise :class:`InvalidInput` (or a
subclass), never another exception, and a refused call must leave nothing behind: no
L0 file or folder changed, no stream entry, no kick flag, no dead letter, no key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from memstrata.core.api import MemoryClient
from memstrata.core.authority.cache import ProfileCache
from memstrata.core.authority.errors import ScopeDenied
from memstrata.core.errors import InvalidInput, NotFound, PayloadTooLarge
from memstrata.core.models.transcript import TurnReceipt
from memstrata.core.recall.result import RecallResult
from memstrata.core.recall.service import Recaller, RecallRequest
from memstrata.core.runtime import Runtime, close_runtime, reset_runtime
from tests.integration import authority_db
from tests.integration.authority_db import World

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world
cache = authority_db.cache

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

VALID_IDS = ["u1", "s_1", "t-9.x", "A" * 128, "bug456"]
HOSTILE_IDS = ["", ".", "..", "a:b", "u*", "a b", "ｕ42", "u\u200b", "\ud800", "x" * 129]
HOSTILE_IDS += ["../etc", "a/b", "\x00", "{s0}", "' or 1==1", "é"]
ids = st.one_of(
    st.sampled_from(VALID_IDS),
    st.sampled_from(HOSTILE_IDS),
    st.text(max_size=12),
    st.binary(max_size=6),
    st.integers(),
)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([10**400, -1, 0, True, False, "1790000000", b"1", 1e300, -1e-9]),
    st.floats(min_value=1.6e9, max_value=1.9e9),  # plausible event times
)
texts = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["\ud800", "ok \udfff", "\x00", "x" * 70_000, "我们决定回滚支付服务"]),
    st.binary(max_size=8),
)
junk = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, texts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
ROLES = ["user", "assistant", "tool", "system", "robot", "", "USER"]
tool_call = st.fixed_dictionaries(
    {"id": st.one_of(ids, junk), "name": st.one_of(ids, junk)},
    optional={"arguments": st.one_of(texts, junk)},
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(ROLES), junk)},
        optional={
            "content": st.one_of(texts, junk),
            "message_id": st.one_of(ids, st.none()),
            "tool_call_id": st.one_of(ids, st.none()),
            "tool_calls": st.one_of(st.lists(tool_call, max_size=2), junk),
            "name": st.one_of(texts, st.none()),
            "sudo": junk,
        },
    ),
    junk,
)
GOOD = {"role": "user", "content": "Don't restart the prod database."}
messages = st.one_of(
    st.lists(message, max_size=4),
    st.lists(st.just(GOOD), min_size=1, max_size=3),
    st.just([GOOD] * 65),
    st.none(),
    junk,
)
maybe = st.one_of(st.none(), ids)


def usually(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` about five times in six (one hostile field at a time tests more checks)."""
    return st.sampled_from([True] * 5 + [False]).flatmap(lambda ok: good if ok else bad)


def l0_state(root: Path) -> dict[str, int]:
    """Every path under L0 with its size (folders as -1)."""
    if not root.exists():
        return {}
    return {str(p): (p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")}


def redis_state(res: Runtime) -> dict[str, Any]:
    """Every key of the test namespace, with the length of each stream."""
    out: dict[str, Any] = {}
    for key in res.redis.scan_iter(match=f"{res.settings.key_namespace}:*", count=1000):
        kind = res.redis.type(key)
        out[key] = res.redis.xlen(key) if kind == "stream" else kind
    return out


# ------------------------------------------------------------------ record_turn
@FUZZ
@given(
    user_id=usually(st.sampled_from(["u1", "u2"]), ids),
    session_id=usually(st.just("s1"), ids),
    msgs=usually(st.lists(st.just(GOOD), min_size=1, max_size=3), messages),
    task_id=usually(st.sampled_from([None, "bug456"]), ids),
    tenant_id=usually(st.sampled_from([None, "default", "acme"]), ids),
    turn_id=usually(st.sampled_from([None, "t1", "t2"]), ids),
    at=usually(st.one_of(st.none(), st.floats(1.6e9, 1.9e9)), numbers),
)
def test_record_turn_succeeds_or_refuses_typed_and_writes_nothing(
    res: Runtime,
    user_id: Any,
    session_id: Any,
    msgs: Any,
    task_id: Any,
    tenant_id: Any,
    turn_id: Any,
    at: Any,
) -> None:
    memory = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=lambda shard: None)
    root = Path(res.settings.transcript_dir)
    l0_before, redis_before = l0_state(root), redis_state(res)
    try:
        receipt = memory.record_turn(
            user_id=user_id,
            session_id=session_id,
            messages=msgs,
            task_id=task_id,
            tenant_id=tenant_id,
            turn_id=turn_id,
            at=at,
        )
    except InvalidInput as exc:
        event(f"refused: {type(exc).__name__}")
        assert str(exc)
        assert l0_state(root) == l0_before, f"L0 changed on {type(exc).__name__}: {exc}"
        assert redis_state(res) == redis_before, f"Redis changed on {exc}"
        return
    event("recorded again" if receipt.already_recorded else "recorded")
    assert isinstance(receipt, TurnReceipt)
    assert receipt.already_recorded or l0_state(root) != l0_before


def test_a_million_messages_are_refused_before_any_is_parsed(
    res: Runtime,
) -> None:
    memory = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=lambda shard: None)
    huge = [{"role": "robot"}] * 1_000_000  # each one invalid: parsing any would say "role"
    t0 = time.perf_counter()
    with pytest.raises(PayloadTooLarge, match="1000000 messages, limit 64"):
        memory.record_turn(user_id="u", session_id="s", messages=huge)
    assert time.perf_counter() - t0 < 0.05


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ({"messages": None}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": "\ud800"}]}, "message 0: content"),
        ({"messages": [{"role": "user", "content": b"hi"}]}, "message 0: content"),
        ({"messages": [{"role": "user", "content": "hi", "message_id": b"m1"}]}, "message_id"),
        ({"at": math.nan}, "at"),
        ({"at": math.inf}, "at"),
        ({"at": 1e300}, "at"),
        ({"at": -1}, "at"),
        ({"at": True}, "at"),
        ({"at": "yesterday"}, "at"),
        ({"at": time.time() * 1000}, "at"),  # milliseconds
        ({"turn_id": ""}, "turn_id"),
        ({"user_id": b"alice"}, "user_id"),
        ({"tenant_id": "x" * 129}, "tenant_id"),
    ],
)
def test_each_bad_value_of_the_review_is_refused_naming_its_field(
    res: Runtime, override: dict[str, Any], where: str
) -> None:
    memory = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=lambda shard: None)
    kwargs: dict[str, Any] = {"user_id": "u", "session_id": "s", "messages": [GOOD]}
    with pytest.raises(InvalidInput) as info:
        memory.record_turn(**(kwargs | override))
    assert where in str(info.value)
    assert l0_state(Path(res.settings.transcript_dir)) == {}
    assert redis_state(res) == {}


# ------------------------------------------------------------------ recall
@pytest.fixture
def recaller(res: Runtime, engine: Engine, cache: ProfileCache) -> Iterator[Recaller]:
    r = Recaller(stm=res.stm, profile_cache=cache, engine=engine)
    yield r
    r.close()


@FUZZ
@given(data=st.data())
def test_recall_succeeds_or_refuses_typed(
    res: Runtime, world: World, recaller: Recaller, data: st.DataObject
) -> None:
    own = {"tenant_id": world.tenant_id, "user_id": world.alice, "session_id": "s1"}
    fields: dict[str, st.SearchStrategy[Any]] = {
        "tenant_id": usually(st.just(world.tenant_id), st.one_of(st.none(), ids)),
        "user_id": usually(st.just(world.alice), ids),
        "session_id": usually(st.just("s1"), ids),
        "query": usually(st.sampled_from(["那个接口还是超时", "why?"]), st.one_of(texts, junk)),
        "task_id": usually(st.sampled_from([None, "bug456"]), ids),
        "project_id": usually(st.none(), st.sampled_from([world.shop, world.blog, "nope"])),
        "workspace_id": usually(st.none(), st.sampled_from([world.workspace, "nope"])),
        "agent_id": usually(st.just("default"), ids),
        "top_k": usually(st.integers(1, 100), st.one_of(st.integers(-5, 200), numbers)),
        "token_budget": usually(st.integers(32, 32_000), numbers),
        "explain": usually(st.booleans(), numbers),
        "now": usually(st.one_of(st.none(), st.floats(1.6e9, 1.9e9)), numbers),
        "unknown": junk,
    }
    names = data.draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=6))
    kwargs = {**own, "query": "why?"} | {n: data.draw(fields[n], label=n) for n in names}
    try:  # (a request holds no client: a refused one cannot have touched a store)
        request = RecallRequest(**kwargs)
    except InvalidInput as exc:
        event(f"refused: {type(exc).__name__}")
        assert str(exc).startswith("RecallRequest."), exc
        return
    try:
        out = recaller.recall(request)
    except (NotFound, ScopeDenied) as exc:  # well-formed ids of an owner or scope not there
        event(f"not there: {type(exc).__name__}")
        mine = {k: getattr(request, k) for k in ("tenant_id", "user_id")}
        scoped = request.project_id is not None or request.workspace_id is not None
        assert mine != {k: own[k] for k in mine} or scoped, exc
        return
    event("recalled")
    assert isinstance(out, RecallResult)


def test_recall_refuses_what_is_not_a_request(recaller: Recaller) -> None:
    for bad in (None, {"user_id": "u"}, "query"):
        with pytest.raises(InvalidInput, match="RecallRequest"):
            recaller.recall(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *[("now", v) for v in (math.nan, math.inf, -1.0, 1e300, "1700000000", True)],
        *[("top_k", v) for v in ("5", True, 5.0, 0)],
        ("explain", 1),
        *[(f, b"alice") for f in ("session_id", "task_id", "agent_id", "tenant_id")],
        *[("query", v) for v in ("\ud800", b"q", "", "x" * 4001)],
        ("token_budget", -1),
    ],
)
def test_each_bad_recall_value_is_refused_naming_its_field(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"user_id": "u", "session_id": "s", "query": "q", field: value}
    with pytest.raises(InvalidInput, match=f"^RecallRequest.{field}: "):
        RecallRequest(**kwargs)


# ------------------------------------------------------------------ the write path's tasks
@pytest.fixture
def task_runtime(res: Runtime) -> Iterator[Runtime]:
    """Tasks run in this process on the test's settings (never the default namespace)."""
    rt = reset_runtime(res.settings)
    yield rt
    close_runtime()


@FUZZ
@given(
    task=st.sampled_from(["drain", "reconcile", "sweep"]),
    value=st.one_of(st.integers(-5, 10), numbers, ids, junk),
)
def test_write_path_tasks_succeed_or_refuse_typed(
    res: Runtime, task_runtime: Runtime, task: str, value: Any
) -> None:
    from memstrata.tasks.ingest import drain
    from memstrata.tasks.maintenance import ingest_reconcile, sweep_expired

    root = Path(res.settings.transcript_dir)
    l0_before, redis_before = l0_state(root), redis_state(res)
    run = {"drain": drain, "reconcile": ingest_reconcile, "sweep": sweep_expired}[task]
    try:
        out = run(value)
    except InvalidInput as exc:
        event(f"{task} refused")
        assert str(exc)
        assert l0_state(root) == l0_before and redis_state(res) == redis_before, exc
        return
    event(f"{task} ran")
    assert isinstance(out, dict)
