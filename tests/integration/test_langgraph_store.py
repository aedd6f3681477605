"""The LangGraph ``BaseStore`` contract of ``MemstrataStore``, on real PostgreSQL.

LangGraph ships no store contract suite (``langgraph-checkpoint-conformance`` covers
checkpointers only), so the contract is LangGraph's own reference store: every sequence
of operations is run on ``InMemoryStore`` and on ``MemstrataStore`` and the answers must
agree (values, keys, namespaces, filters, pagination, deletes), except where the
mapping documents a difference: search order is newest first, and namespaces must start
with a user id.  Then what is memstrata's own: owner scoping, erase, limits, scores.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, Item, ListNamespacesOp, MatchCondition, Op, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from sqlalchemy import Engine

from memstrata.core.agent_store import AgentStore
from memstrata.core.erase import erase_owner
from memstrata.core.errors import InvalidInput, PayloadTooLarge
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.integrations.langgraph import MemstrataStore
from tests.conftest import REDIS_URL
from tests.integration import authority_db

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(engine: Engine, tenant: str) -> MemstrataStore:
    return MemstrataStore.from_engine(engine, tenant_id=tenant)


def keys(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return sorted((tuple(i.namespace), i.key, i.value) for i in items)


def run_both(ops: list[Any], mine: MemstrataStore) -> tuple[list[Any], list[Any]]:
    """The same operations, one at a time, on the reference store and on ours."""
    ref = InMemoryStore()
    return [ref.batch([op])[0] for op in ops], [mine.batch([op])[0] for op in ops]


def normal(result: Any) -> Any:
    """A result without what the mapping may differ in (timestamps; search order)."""
    if isinstance(result, Item):
        return (tuple(result.namespace), result.key, result.value)
    if isinstance(result, list) and result and isinstance(result[0], Item):
        return sorted(normal(i) for i in result)
    return result  # None, or a list of namespaces (sorted by both stores)


def same(a: Any, b: Any) -> bool:
    return bool(normal(a) == normal(b))


# ---------------------------------------------------------------------------- contract

SCENARIO = [
    PutOp(("alice", "memories"), "m1", {"text": "prefers dark mode", "n": 1, "tag": "ui"}),
    PutOp(("alice", "memories"), "m2", {"text": "works on createOrder", "n": 5, "tag": "work"}),
    PutOp(("alice", "memories", "deep"), "m3", {"text": "nested", "n": 9, "meta": {"a": 1}}),
    PutOp(("alice", "prefs"), "lang", {"value": "zh", "list": [1, 2], "n": 0}),
    PutOp(("bob", "memories"), "m1", {"text": "bob's own", "n": 2}),
    GetOp(("alice", "memories"), "m1"),
    GetOp(("alice", "memories"), "nope"),
    SearchOp(("alice",), limit=10),
    SearchOp(("alice", "memories"), limit=10),
    SearchOp(("alice",), filter={"tag": "ui"}, limit=10),
    SearchOp(("alice",), filter={"n": {"$gte": 5}}, limit=10),
    SearchOp(("alice",), filter={"n": {"$gt": 1, "$lt": 9}}, limit=10),
    SearchOp(("alice",), filter={"n": {"$ne": 1}}, limit=10),
    SearchOp(("alice",), filter={"meta": {"a": 1}}, limit=10),
    SearchOp(("alice",), filter={"list": [1, 2]}, limit=10),
    SearchOp(("alice",), filter={"missing": "x"}, limit=10),
    SearchOp((), limit=10),
    ListNamespacesOp(),
    ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("alice",)),)),
    ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("memories",)),)),
    ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("*", "memories")),)),
    ListNamespacesOp(max_depth=1),
    ListNamespacesOp(max_depth=2, limit=2, offset=1),
    PutOp(("alice", "memories"), "m1", {"text": "now light mode"}),  # update
    GetOp(("alice", "memories"), "m1"),
    PutOp(("alice", "memories"), "m2", None),  # delete
    GetOp(("alice", "memories"), "m2"),
    SearchOp(("alice", "memories"), limit=10),
    PutOp(("alice", "memories"), "m2", None),  # deleting twice is fine
    ListNamespacesOp(),
    # last: the reference's get registers an empty namespace (a defaultdict) that a
    # later list would show; a prefix is not the item's namespace in either
    GetOp(("alice",), "m1"),
]


def test_every_operation_answers_like_langgraphs_reference_store(store: MemstrataStore) -> None:
    ref, mine = run_both(SCENARIO, store)
    for op, a, b in zip(SCENARIO, ref, mine, strict=True):
        assert same(a, b), (op, a, b)


def test_items_carry_timestamps_and_an_update_keeps_created_at(store: MemstrataStore) -> None:
    store.put(("alice", "notes"), "k", {"v": 1})
    first = store.get(("alice", "notes"), "k")
    store.put(("alice", "notes"), "k", {"v": 2})
    second = store.get(("alice", "notes"), "k")
    assert first is not None and second is not None
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    assert second.created_at.tzinfo is UTC


def test_pagination_and_newest_first_order(store: MemstrataStore) -> None:
    for n in range(7):
        store.put(("alice", "log"), f"k{n}", {"n": n})
    pages = [store.search(("alice", "log"), limit=3, offset=o) for o in (0, 3, 6)]
    got = [i.key for page in pages for i in page]
    assert got == [f"k{n}" for n in reversed(range(7))]
    filtered = store.search(("alice", "log"), filter={"n": {"$lt": 5}}, limit=2, offset=1)
    assert [i.key for i in filtered] == ["k3", "k2"]


def test_query_ranks_by_matching_terms_and_sets_a_score(store: MemstrataStore) -> None:
    store.put(("alice", "m"), "a", {"text": "the payment service times out in prod"})
    store.put(("alice", "m"), "b", {"text": "prefers dark mode in the editor"})
    store.put(("alice", "m"), "c", {"text": "支付服务在生产环境超时"})
    hits = store.search(("alice",), query="dark mode editor", limit=3)
    assert hits[0].key == "b" and hits[0].score == 1.0
    assert all(h.score is not None and h.score < 1.0 for h in hits[1:])
    zh = store.search(("alice",), query="支付超时", limit=1)
    assert zh[0].key == "c" and zh[0].score is not None and zh[0].score > 0.5


def test_batch_runs_in_order_and_abatch_agrees(store: MemstrataStore) -> None:
    ops: list[Op] = [
        PutOp(("alice", "b"), "x", {"v": 1}),
        GetOp(("alice", "b"), "x"),
        PutOp(("alice", "b"), "x", None),
        GetOp(("alice", "b"), "x"),
    ]
    out = store.batch(ops)
    assert [normal(r) for r in out] == [None, (("alice", "b"), "x", {"v": 1}), None, None]
    again = asyncio.run(store.abatch(ops))
    assert [normal(r) for r in again] == [normal(r) for r in out]
    asyncio.run(store.aput(("alice", "b"), "y", {"v": 2}))
    got = asyncio.run(store.aget(("alice", "b"), "y"))
    assert got is not None and got.value == {"v": 2}


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "delete", "get", "search"]),
            st.sampled_from([("alice", "a"), ("alice", "a", "b"), ("bob", "a")]),
            st.sampled_from(["k1", "k2", "k3"]),
            st.integers(0, 3),
        ),
        max_size=25,
    )
)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_operation_sequences_agree_with_the_reference(
    engine: Engine, ops: list[tuple[str, tuple[str, ...], str, int]]
) -> None:
    mine = MemstrataStore.from_engine(engine, tenant_id=f"t{uuid.uuid4().hex[:10]}")
    built: list[Any] = []
    for kind, ns, key, n in ops:
        if kind == "put":
            built.append(PutOp(ns, key, {"n": n}))
        elif kind == "delete":
            built.append(PutOp(ns, key, None))
        elif kind == "get":
            built.append(GetOp(ns, key))
        else:
            built.append(SearchOp(ns[:1], filter={"n": {"$gte": n}}, limit=50))
    ref = InMemoryStore()
    for op in built:
        a, b = ref.batch([op])[0], mine.batch([op])[0]
        assert same(a, b), (op, a, b)
    # the reference lists every namespace it was ever asked about (a defaultdict); the
    # contract is the namespaces that hold items
    holding = sorted({tuple(i.namespace) for i in ref.search((), limit=1000)})
    assert mine.list_namespaces() == holding


# ---------------------------------------------------------------------------- memstrata's own


def test_tenants_never_see_each_other(engine: Engine) -> None:
    one = MemstrataStore.from_engine(engine, tenant_id=f"t{uuid.uuid4().hex[:10]}")
    two = MemstrataStore.from_engine(engine, tenant_id=f"t{uuid.uuid4().hex[:10]}")
    one.put(("alice", "m"), "k", {"secret": 1})
    assert two.get(("alice", "m"), "k") is None
    assert two.search(("alice",)) == [] and two.list_namespaces() == []
    two.delete(("alice", "m"), "k")
    assert one.get(("alice", "m"), "k") is not None


def test_a_store_bound_to_a_user_refuses_other_users(engine: Engine, tenant: str) -> None:
    alice = MemstrataStore.from_engine(engine, tenant_id=tenant, user_id="alice")
    shared = MemstrataStore.from_engine(engine, tenant_id=tenant)
    shared.put(("bob", "m"), "k", {"v": "bob"})
    alice.put(("alice", "m"), "k", {"v": "alice"})
    with pytest.raises(InvalidInput, match="bound to user 'alice'"):
        alice.get(("bob", "m"), "k")
    assert [i.value for i in alice.search(())] == [{"v": "alice"}]
    assert alice.list_namespaces() == [("alice", "m")]


@pytest.mark.parametrize(
    ("namespace", "key", "value", "error"),
    [
        ((), "k", {"v": 1}, "must start with the user id"),
        (("a:b", "m"), "k", {"v": 1}, "invalid user_id"),
        (("alice", "x.y"), "k", {"v": 1}, "must not contain '.'"),
        (("alice", ""), "k", {"v": 1}, "non-empty"),
        (("alice", "m"), "", {"v": 1}, "key: must be a non-empty string"),
        (("alice", "m"), "k" * 1025, {"v": 1}, "key: at most 1024"),
        (("alice", "m"), "k", {"v": "x" * 300_000}, "larger than"),
        (("alice", "m"), "k", {"v": float("nan")}, "not JSON"),
    ],
)
def test_bad_input_is_refused_typed(
    store: MemstrataStore, namespace: tuple[str, ...], key: str, value: Any, error: str
) -> None:
    with pytest.raises((InvalidInput, PayloadTooLarge), match=error):
        store.agent_store.put(namespace, key, value)  # the layer that enforces it
    with pytest.raises(ValueError):  # and through BaseStore (its own checks come first)
        store.put(namespace, key, value)


def test_limits_on_search_and_list(store: MemstrataStore) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        store.search(("alice",), limit=0)
    with pytest.raises(InvalidInput, match="limit"):
        store.agent_store.list_namespaces(limit=10_000)
    with pytest.raises(InvalidInput, match="unsupported operator"):
        store.put(("alice", "m"), "k", {"n": 1})
        store.search(("alice",), filter={"n": {"$regex": "."}})


# ---------------------------------------------------------------------------- erase


@pytest.fixture
def rt(namespace: str, tmp_path: Any, pg_url: str) -> Iterator[Runtime]:
    s: Settings = load_settings(
        redis_url=REDIS_URL, key_namespace=namespace, postgres_url=pg_url,
        transcript_dir=tmp_path / "transcripts",
    )  # fmt: skip
    runtime = Runtime(s.model_copy(update={"ltm": s.ltm.model_copy(update={"enabled": False})}))
    yield runtime
    runtime.close()


def test_erasing_the_owner_removes_their_documents_only(rt: Runtime, tenant: str) -> None:
    store = MemstrataStore.from_runtime(rt, tenant_id=tenant)
    store.put(("alice", "m"), "k1", {"v": 1})
    store.put(("alice", "m", "x"), "k2", {"v": 2})
    store.put(("bob", "m"), "k1", {"v": 3})
    report = erase_owner(rt, tenant_id=tenant, user_id="alice")
    assert report.removed["pg.agent_store_items"] == 2
    assert store.search(("alice",)) == []
    assert [i.value for i in store.search(("bob",))] == [{"v": 3}]
    assert AgentStore(rt.engine, tenant_id=tenant).list_namespaces() == [("bob", "m")]
