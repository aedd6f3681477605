"""The batched write path leaves exactly the state the per-item one did (issue 17).

The same turns (the ingest benchmark's mix: English and Chinese, tool calls, restated
and changed facts, sessions long enough for the per-session cap to evict) go through the
pipeline twice, in two namespaces: once with one upsert script call per item
(``StmStore.upsert_many``, the path before) and once with one per owner
(``StmStore.upsert_batch``).  Every key, every reply and every decision must be equal.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from memstrata.core.extract.rules import RuleExtractor
from memstrata.core.ingest.pipeline import IngestPipeline, TurnOutcome
from memstrata.core.models.decision_record import DecisionRecord
from memstrata.core.models.transcript import TranscriptRecord, TurnPointer
from memstrata.core.policy.write import WritePolicy
from memstrata.core.stm.store import StmStore
from memstrata.ops.bench.common.fixtures import turn_messages
from tests.conftest import REDIS_URL, _purge

pytestmark = pytest.mark.integration

USERS = 3
TURNS = 90  # 30 a user, in sessions of 15: the session cap (20 here) evicts
BATCH = 45


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    made: list[str] = []
    c.made = made  # type: ignore[attr-defined]
    yield c
    for ns in made:
        _purge(c, ns)
    c.close()


def _turns() -> list[tuple[TurnPointer, list[TranscriptRecord]]]:
    out = []
    for n in range(TURNS):
        user = f"u{n % USERS}"
        session = f"{user}s{(n // USERS) // 15}"
        task = f"{session}t" if n % 5 else None
        turn_id, at = f"t{n:04d}", 1_700_000_000.0 + n
        records = [
            TranscriptRecord(
                message_id=f"{turn_id}.{i}",
                turn_id=turn_id,
                user_id=user,
                session_id=session,
                task_id=task,
                role=m["role"],
                content=m["content"],
                tool_call_id=m.get("tool_call_id"),
                tool_calls=m.get("tool_calls") or [],
                name=m.get("name"),
                at=at,
            )
            for i, m in enumerate(turn_messages(n % 40))  # turns repeat: merges, new versions
        ]
        ptr = TurnPointer(user_id=user, session_id=session, task_id=task, turn_id=turn_id,
                          at=at, offset=n * 10, length=10)  # fmt: skip
        out.append((ptr, records))
    return out


def _run(client: redis.Redis, batched: bool) -> tuple[str, list[TurnOutcome]]:
    ns = f"eq{uuid.uuid4().hex[:8]}"
    client.made.append(ns)  # type: ignore[attr-defined]
    store = StmStore(client, namespace=ns, session_cap=20, user_cap=45)
    if not batched:
        store.upsert_batch = store.upsert_many  # type: ignore[method-assign,assignment]
    pipe = IngestPipeline(store=store, extractor=RuleExtractor(), policy=WritePolicy())
    turns = _turns()
    outcomes = []
    for i in range(0, len(turns), BATCH):
        outcomes += pipe.process(turns[i : i + BATCH])
    return ns, outcomes


def _dump(client: redis.Redis, ns: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in client.scan_iter(match=f"{ns}:*", count=1000):
        kind = client.type(key)
        value: Any
        if kind == "hash":
            value = client.hgetall(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "string":
            value = client.get(key)
        else:
            value = kind
        out[key.removeprefix(ns)] = json.loads(json.dumps(value).replace(ns, "NS"))
    return out


def test_batched_upserts_leave_the_same_state_and_replies(client: redis.Redis) -> None:
    ns_item, per_item = _run(client, batched=False)
    ns_batch, batched = _run(client, batched=True)
    a, b = _dump(client, ns_item), _dump(client, ns_batch)
    assert a == b
    assert [o.upserts for o in per_item] == [o.upserts for o in batched]
    assert [o.decisions for o in per_item] == [o.decisions for o in batched]
    ops = {u.op for o in batched for u in o.upserts}
    assert {"inserted", "merged", "updated"} <= ops
    assert any(u.evicted for o in batched for u in o.upserts)  # the caps took part
    decisions = [k for k in b if ":decisions:" in k]
    assert decisions
    for key in decisions:  # every stored record is compact and reads back to itself
        for field, raw in b[key].items():
            assert raw.startswith("[")
            record = DecisionRecord.decode(field, raw, session_id=key.rsplit(":", 1)[1])
            assert record.encode() == raw
