"""``memstrata.Memory`` embedded: one object records, recalls, inspects, explains, erases
and administers, for external user ids, against real Redis, PostgreSQL and L0.

Turns are drained inline (``drain_shard``, what the ingest task runs), so no worker is
needed; the kicker only counts kicks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata import (
    AsyncMemory,
    Conflict,
    InvalidInput,
    Memory,
    UnknownTenant,
    UnknownUser,
)
from memstrata.core.ids import user_key
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from tests.conftest import REDIS_URL, _purge
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "createOrder times out in prod-k8s. Don't restart prod."},
    {"role": "assistant", "content": "Checking the database.",
     "tool_calls": [{"id": "call_1", "name": "query_metrics", "arguments": "{}"}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "db cpu 12%\nslow queries: 0"},
    {"role": "assistant", "content": "The database is not the cause."},
]  # fmt: skip


@pytest.fixture
def settings(namespace: str, tmp_path: Path, lifecycle_pg: str) -> Settings:
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        postgres_url=lifecycle_pg,
        ltm=LtmSettings(enabled=False),
    )


class Kicks:
    def __init__(self) -> None:
        self.shards: list[int] = []

    def __call__(self, shard: int) -> None:
        self.shards.append(shard)


def drain(rt: Runtime) -> None:
    for shard in range(rt.settings.ingest_shards):
        drain_shard(shard, queue=rt.queue, transcript=rt.transcript, pipeline=rt.pipeline,
                    consumer="c1", batch=200, max_run_s=30)  # fmt: skip


@pytest.fixture
def memory(res: Runtime) -> Iterator[Memory]:
    tenant = "acme-" + res.settings.key_namespace
    with Memory(runtime=res, tenant=tenant, kicker=Kicks()) as m:
        yield m


@pytest.mark.parametrize("user", ["alice@example.com", "user:42", "张三", "u_42"])
def test_a_recorded_turn_is_recalled_inspected_and_explained(
    memory: Memory, res: Runtime, user: str
) -> None:
    receipt = memory.record_turn(user_id=user, session_id="s_123", task_id="PAY-4521",
                                 messages=TURN)  # fmt: skip
    assert len(receipt.message_ids) == 4
    drain(res)
    out = memory.recall("that endpoint still times out", user_id=user, session_id="s_123",
                        task_id="PAY-4521")  # fmt: skip
    assert "The database is not the cause" in out.text
    items = memory.inspect(user_id=user, session_id="s_123")
    assert {i.user_id for i in items} == {user}  # the caller's id, not the key part
    assert any("database is not the cause" in i.summary for i in items)
    refused = memory.explain(user_id=user, session_id="s_123", verdict="refused")
    written = memory.explain(user_id=user, session_id="s_123", verdict="written")
    assert written and all(d.verdict.value == "written" for d in written)
    assert all(d.verdict.value == "refused" for d in refused)
    # the owner was provisioned: it is a user of the tenant under its external id
    info = memory.admin.get_user(user)
    assert (info.user_id, info.key, info.tenant_id) == (user, user_key(user), memory.tenant)


def test_recall_as_of_a_moment_leaves_out_what_was_written_later(
    memory: Memory, res: Runtime
) -> None:
    # Given a turn recorded ten minutes ago (its event time; STM keeps it for hours)
    at = time.time() - 600
    memory.record_turn(user_id="u_asof", session_id="s1", task_id="PAY-1", messages=TURN, at=at)
    drain(res)

    def ask(as_of: float) -> str:
        return memory.recall("that endpoint still times out", user_id="u_asof",
                             session_id="s1", task_id="PAY-1", as_of=as_of).text  # fmt: skip

    # Then recall as of after it holds what it said, as of before it does not
    assert "The database is not the cause" in ask(at + 60)
    assert "The database is not the cause" not in ask(at - 60)
    with pytest.raises(InvalidInput, match="as_of"):
        ask(float("nan"))


def test_long_term_cards_are_listed_for_the_caller_and_only_theirs(
    memory: Memory, res: Runtime
) -> None:
    from memstrata import CardView
    from memstrata.core.ltm.card import CardDraft, CardStatus

    # Given an episode card, an entity card, a superseded card of alice, and bob's card
    def card(user: str, n: int, kind: str, status: CardStatus = CardStatus.ACTIVE) -> str:
        draft = CardDraft(tenant_id=memory.tenant, user_id=user_key(user),
                          canonical_key=f"{kind}:{n}", memory_type=kind, title=f"card {n}",
                          summary=f"statement {n}", source_type=kind, status=status,
                          source_message_ids=[f"m{n}"])  # fmt: skip
        return res.ledger.write(draft, now=1_700_000_000.0 + n).memory_id

    user = "alice@example.com"
    res.owners.ensure(memory.tenant, user_key(user))
    episode, entity = card(user, 1, "episode"), card(user, 2, "entity")
    old = card(user, 3, "episode", CardStatus.SUPERSEDED)
    card("bob", 4, "episode")
    # When the client lists alice's cards: the active ones, newest change first
    cards = memory.cards(user_id=user)
    assert [c.memory_id for c in cards] == [entity, episode]
    assert all(isinstance(c, CardView) and c.user_id == user for c in cards)
    assert "bm25_text" not in cards[0].model_dump()
    # ... of one kind, or the superseded too
    assert [c.memory_id for c in memory.cards(user_id=user, memory_type="entity")] == [entity]
    assert old in {c.memory_id for c in memory.cards(user_id=user, superseded=True)}
    with pytest.raises(InvalidInput, match="memory_type"):
        memory.cards(user_id=user, memory_type="Not A Type")
    with pytest.raises(InvalidInput, match="limit"):
        memory.cards(user_id=user, limit=0)


def test_tenants_are_isolated(res: Runtime) -> None:
    ns = res.settings.key_namespace
    a = Memory(runtime=res, tenant="a-" + ns, kicker=Kicks())
    b = Memory(runtime=res, tenant="b-" + ns, kicker=Kicks())
    a.record_turn(user_id="bob@x.org", session_id="s1", messages=TURN)
    drain(res)
    assert a.inspect(user_id="bob@x.org")
    assert b.inspect(user_id="bob@x.org") == []
    with pytest.raises(UnknownUser):
        b.admin.get_user("bob@x.org")
    a.close()
    b.close()


def test_admin_creates_lists_and_refuses_duplicates(memory: Memory) -> None:
    assert memory.tenant is not None
    memory.admin.create_tenant(memory.tenant, name="Acme")
    with pytest.raises(Conflict):
        memory.admin.create_tenant(memory.tenant)
    u = memory.admin.create_user("carol@example.com", display_name="Carol")
    assert u.display_name == "Carol" and u.key.startswith("~")
    with pytest.raises(Conflict):
        memory.admin.create_user("carol@example.com")
    assert [x.user_id for x in memory.admin.list_users()] == ["carol@example.com"]
    tenants = {t.tenant_id: t for t in memory.admin.list_tenants()}
    assert tenants[memory.tenant].users == 1 and tenants[memory.tenant].name == "Acme"


def test_refuse_policy_raises_before_anything_is_written(settings: Settings) -> None:
    rt = Runtime(settings.model_copy(update={"unknown_owner": "refuse"}))
    try:
        m = Memory(runtime=rt, tenant="nobody-" + settings.key_namespace, kicker=Kicks())
        with pytest.raises(UnknownTenant):
            m.record_turn(user_id="dave", session_id="s1", messages=TURN)
        m.admin.create_tenant(str(m.tenant))
        with pytest.raises(UnknownUser):
            m.record_turn(user_id="dave", session_id="s1", messages=TURN)
        assert not list(Path(settings.transcript_dir).rglob("*.jsonl"))
        m.admin.create_user("dave")
        assert m.record_turn(user_id="dave", session_id="s1", messages=TURN).message_ids
    finally:  # its own runtime, not the purging fixture's: the queued turn goes too
        _purge(rt.redis, settings.key_namespace)
        rt.close()


def test_bad_input_is_one_typed_error(memory: Memory) -> None:
    with pytest.raises(InvalidInput, match="query"):
        memory.recall("", user_id="u", session_id="s")
    with pytest.raises(InvalidInput, match="user_id"):
        memory.record_turn(user_id="x" * 200, session_id="s", messages=TURN)
    with pytest.raises(InvalidInput, match="role"):
        memory.record_turn(user_id="u", session_id="s", messages=[{"role": "robot"}])


def test_erase_removes_the_user_everywhere(memory: Memory, res: Runtime) -> None:
    memory.record_turn(user_id="eve@example.com", session_id="s1", messages=TURN)
    drain(res)
    assert memory.inspect(user_id="eve@example.com")
    dry = memory.erase("eve@example.com", dry_run=True)
    assert dry.dry_run and dry.found and not dry.removed
    done = memory.admin.erase_user("eve@example.com")
    assert done.finished and done.key == user_key("eve@example.com")
    assert memory.inspect(user_id="eve@example.com") == []
    with pytest.raises(UnknownUser):
        memory.admin.get_user("eve@example.com")


def test_async_memory_embedded(res: Runtime) -> None:
    async def run() -> None:
        tenant = "as-" + res.settings.key_namespace
        async with AsyncMemory(runtime=res, tenant=tenant, kicker=Kicks()) as m:
            await m.record_turn(user_id="f@x.io", session_id="s1", messages=TURN)
            drain(res)
            out = await m.recall("does it still time out?", user_id="f@x.io", session_id="s1")
            assert "database is not the cause" in out.text
            assert await m.inspect(user_id="f@x.io")
            # no session ended yet: no long-term card; a bad kind is the same typed error
            assert await m.cards(user_id="f@x.io") == []
            with pytest.raises(InvalidInput, match="memory_type"):
                await m.cards(user_id="f@x.io", memory_type="Bad Kind")

    asyncio.run(run())
