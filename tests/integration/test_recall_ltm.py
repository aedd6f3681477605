"""recall() with the real long-term layer: milvus-lite server + ledger + embedder."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from memstrata.core.authority.cache import ProfileCache
from memstrata.core.breaker import BreakerState
from memstrata.core.lifecycle.policy import Decision, ItemView, Route
from memstrata.core.lifecycle.promote import card_for
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.recall.ltm_adapter import LedgerBackedSearcher
from memstrata.core.recall.pool import SourceType, Verdict
from memstrata.core.recall.service import Recaller, RecallRequest
from memstrata.core.runtime import Runtime
from tests.integration import authority_db, ltm_env
from tests.integration.authority_db import World
from tests.integration.test_recall import T0, ZH_DEBUG, ingest

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world
cache = authority_db.cache
milvus_server = ltm_env.milvus_server
ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
ltm = ltm_env.ltm


def _cards(rt: LtmRuntime, w: World) -> dict[str, str]:
    """A similar past case, and a card holding the same fact as an STM item."""
    drafts = [
        ltm_env.card_draft(
            w.tenant_id, "case.createorder.timeout", "createOrder timeout 常见排查经验",
            "历史上多次出现 createOrder 超时，数据库正常时常见根因是线程池饱和",
            user_id=w.alice, project_id=w.shop, entities=["createOrder", "thread_pool"],
        ),
        ltm_env.card_draft(
            w.tenant_id, "bug456:excluded:database", "数据库已排除",
            "createOrder 超时与数据库无关（旧卡片）", user_id=w.alice, project_id=w.shop,
        ),
        ltm_env.card_draft(  # another user's card: must never come back
            w.tenant_id, "case.other", "createOrder 超时 other user",
            "createOrder 超时 线程池 other user", user_id=w.bob, project_id=w.shop,
        ),
    ]  # fmt: skip
    ids = {d.canonical_key: rt.ledger.write(d).memory_id for d in drafts}
    rt.projector.project(list(ids.values()))
    rt.lexical.refresh()
    return ids


@pytest.fixture
def recaller(
    res: Runtime, engine: Engine, cache: ProfileCache, ltm: LtmRuntime
) -> Iterator[Recaller]:
    r = Recaller(
        stm=res.stm, profile_cache=cache, engine=engine,
        ltm=LedgerBackedSearcher(ltm.search, ltm.ledger),
    )  # fmt: skip
    yield r
    r.close()


def test_similar_cases_come_from_ltm_and_the_stm_copy_of_a_fact_wins(
    res: Runtime, world: World, ltm: LtmRuntime, recaller: Recaller
) -> None:
    # Given the debugging turn in STM and cards in LTM (one holding the same fact)
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    ids = _cards(ltm, world)
    # When the user asks for similar past cases about the same interface
    out = recaller.recall(
        RecallRequest(
            tenant_id=world.tenant_id, user_id=world.alice, session_id="s1", task_id="bug456",
            project_id=world.shop, query="以前有没有类似的 createOrder 超时案例？",
            now=T0 + 600, explain=True,
        )
    )  # fmt: skip
    # Then LTM is searched (hybrid: an entity plus a similarity request)
    assert out.route.need_ltm and out.route.ltm_mode is not None
    assert out.degraded == {}
    assert out.explain is not None
    by_id = {s.candidate.memory_id: s for s in out.explain.candidates}
    # the similar case is injected under "相关长期经验"
    assert by_id[ids["case.createorder.timeout"]].verdict is Verdict.KEPT
    assert "相关长期经验：" in out.text
    assert "线程池饱和" in out.text
    # the LTM copy of an STM fact is dropped as a duplicate: STM wins (seed 十五.4)
    dup = by_id[ids["bug456:excluded:database"]]
    assert dup.verdict is Verdict.DUPLICATE
    assert "redis_stm" in dup.reason
    # another user's card never reaches the pool
    assert ids["case.other"] not in by_id
    assert all(
        s.candidate.source_type in (SourceType.REDIS_STM, SourceType.LTM)
        for s in out.explain.candidates
    )


def test_milvus_down_degrades_to_stm_and_pg(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache,
    ltm_pg_url: str, embedder: CachedEmbedder, tmp_path: Path,
) -> None:  # fmt: skip
    # Given an LTM runtime whose Milvus server is then stopped
    server = MilvusServer(tmp_path / "down.db", f"127.0.0.1:{free_port()}")
    server.start()
    rt = ltm_env.make_runtime(server.uri, ltm_pg_url, embedder).start()
    server.stop()
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    r = Recaller(
        stm=res.stm, profile_cache=cache, engine=engine,
        ltm=LedgerBackedSearcher(rt.search, rt.ledger),
    )  # fmt: skip
    try:
        out = r.recall(
            RecallRequest(
                tenant_id=world.tenant_id, user_id=world.alice, session_id="s1",
                task_id="bug456", query="那个接口还是超时，以前有类似案例吗", now=T0 + 600,
            )
        )  # fmt: skip
    finally:
        r.close()
        rt.close()
        rt.engine.dispose()  # its own pool (the generation pointer was read through it)
    # Then recall still answers from STM, and names the layer that failed
    assert "ltm" in out.degraded
    assert "stm" not in out.degraded
    assert "不要重启生产数据库" in out.text


def test_an_stm_item_and_the_card_promoted_from_it_are_one_candidate(
    res: Runtime, world: World, ltm: LtmRuntime, recaller: Recaller
) -> None:
    # Given a fact in STM and the path-B card the promotion made of that very item
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    items = res.stm.by_session(world.alice, "s1", tenant_id=world.tenant_id, now=T0 + 600)
    item = next(i for i in items if "数据库" in i.summary)
    view = ItemView(
        memory_id=item.id, user_id=item.user_id, tenant_id=world.tenant_id,
        session_id=item.session_id, memory_type=item.memory_type.value, subtype=item.subtype,
        summary=item.summary, canonical_fact_key=item.canonical_fact_key,
        fingerprint=item.fingerprint, importance=item.importance,
        created_at=item.created_at, updated_at=item.updated_at,
        entities=tuple(item.entities), message_ids=tuple(item.source.message_ids),
    )  # fmt: skip
    draft = card_for(view, Decision(route=Route.PATH_B, reason="test", topic="db"), world.tenant_id)
    card_id = ltm.ledger.write(draft.model_copy(update={"project_id": world.shop})).memory_id
    ltm.projector.project([card_id])
    ltm.lexical.refresh()
    # When one recall finds both
    out = recaller.recall(
        RecallRequest(
            tenant_id=world.tenant_id, user_id=world.alice, session_id="s1", task_id="bug456",
            project_id=world.shop, query=f"以前有没有类似的情况？{item.summary}",
            now=T0 + 600, explain=True, top_k=20,
        )
    )  # fmt: skip
    assert out.explain is not None
    by_id = {s.candidate.memory_id: s for s in out.explain.candidates}
    assert item.id in by_id and card_id in by_id, "both layers must return their copy"
    # Then they are one memory: the STM item is kept, its own card is a duplicate of it
    assert by_id[item.id].verdict is Verdict.KEPT
    assert by_id[card_id].verdict is Verdict.DUPLICATE
    assert by_id[card_id].candidate.fingerprint == item.fingerprint
    assert by_id[card_id].candidate.canonical_fact_key == item.canonical_fact_key
    kept = [s for s in out.explain.candidates if s.verdict is Verdict.KEPT]
    assert sum(item.summary in s.candidate.summary for s in kept) == 1


def test_a_merged_card_is_recalled_as_the_members_the_query_asks_for(
    world: World, ltm: LtmRuntime
) -> None:
    """Consolidation (issue 13.3): a merged card indexed in Milvus is injected as the
    member statements that match the query, with those members' message ids only."""
    from memstrata.core.authority.domain import PermissionScope
    from memstrata.core.authority.filters import RetrievalFilters
    from memstrata.core.ltm.card import CONSOLIDATED, member_line
    from memstrata.core.recall.route import LtmMode

    members = [(["m_adopt"], "Alice adopted a beagle puppy named Max from the shelter"),
               (["m_shoes", "m_shoes2"], "Max the beagle puppy chewed my red running shoes"),
               (["m_vet"], "Took Max the beagle puppy to the vet for his shots")]  # fmt: skip
    draft = ltm_env.card_draft(
        world.tenant_id, f"{CONSOLIDATED}:ltm_x", "beagle puppy max: 3 memories",
        " | ".join(t for _, t in members), user_id=world.alice, project_id=world.shop,
        memory_type=CONSOLIDATED, source_type=CONSOLIDATED,
        content="\n".join(member_line(ids, t) for ids, t in members),
        source_message_ids=[i for ids, _ in members for i in ids],
    )  # fmt: skip
    mid = ltm.ledger.write(draft).memory_id
    ltm.projector.project([mid])
    ltm.lexical.refresh()
    searcher = LedgerBackedSearcher(ltm.search, ltm.ledger)
    filters = RetrievalFilters(tenant_id=world.tenant_id, user_id=world.alice,
                               project_ids=(world.shop,), project_id=world.shop,
                               permission_scope=PermissionScope.READ_WRITE)  # fmt: skip
    got = searcher.search(query="which running shoes did Max chew", mode=LtmMode.HYBRID,
                          filters=filters, k=5)  # fmt: skip
    [cand] = [c for c in got if c.memory_id == mid]
    # the two members sharing most terms with the query, in the card's (time) order
    assert set(cand.message_ids) == {"m_adopt", "m_shoes", "m_shoes2"}
    assert "running shoes" in cand.summary and "vet" not in cand.summary


def test_a_question_that_routes_to_ltm_has_its_embedding_started_before_stm_and_pg(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache, ltm: LtmRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The early embedding (``prepare_query``) is submitted before the STM read, only
    when the text alone routes to LTM, and the search then takes that one vector."""
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    _cards(ltm, world)
    order: list[str] = []
    asked: list[str] = []

    def prepare(query: str) -> None:
        asked.append(query)
        ltm.search.prepare(query)

    class Recording(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            order.append("prepare" if fn is prepare else "search")
            return super().submit(fn, *args, **kwargs)

    read = res.stm.read_for_recall

    def read_stm(*args: Any, **kwargs: Any) -> Any:
        order.append("stm")
        return read(*args, **kwargs)

    monkeypatch.setattr(res.stm, "read_for_recall", read_stm)
    r = Recaller(
        stm=res.stm, profile_cache=cache, engine=engine,
        ltm=LedgerBackedSearcher(ltm.search, ltm.ledger), prepare_query=prepare,
        executor=Recording(max_workers=4),
    )  # fmt: skip
    base = {"tenant_id": world.tenant_id, "user_id": world.alice, "session_id": "s1",
            "task_id": "bug456", "project_id": world.shop, "now": T0 + 600}  # fmt: skip
    try:
        similar = "以前有没有类似的 createOrder 超时案例？（早嵌入）"
        misses, hits = ltm.embedder.misses, ltm.embedder.hits
        out = r.recall(RecallRequest(query=similar, **base))
        assert asked == [similar]
        assert order[:2] == ["prepare", "stm"] and "search" in order
        assert out.route.need_ltm and "线程池饱和" in out.text
        # one model call: the search took the prepared vector (or waited for it)
        assert ltm.embedder.misses == misses + 1 and ltm.embedder.hits == hits + 1
        # a continuation of the active task is STM's: nothing is embedded ahead
        order.clear()
        out = r.recall(RecallRequest(query="那个接口还是超时", **base))
        assert asked == [similar] and order == ["stm"] and not out.route.need_ltm
        # an open LTM breaker: the search is skipped, so is its preparation
        breaker = r.breakers["ltm"]
        while breaker.state is BreakerState.CLOSED:
            breaker.failure("test: milvus down")
        r.recall(RecallRequest(query=similar + "？", **base))
        assert asked == [similar]
    finally:
        r.close()


def test_a_deleted_card_a_late_index_row_still_finds_is_never_recalled(
    res: Runtime, world: World, ltm: LtmRuntime, recaller: Recaller
) -> None:
    """A slower projection may land a card's row after the card was deleted (its row
    goes at the next purge, core/ltm/rows.py): the ledger says deleted, so recall drops
    it whatever the index found."""
    ids = _cards(ltm, world)
    gone = ids["case.createorder.timeout"]
    ltm.ledger.delete(gone)  # tombstoned; its rows not deleted yet
    out = recaller.recall(
        RecallRequest(
            tenant_id=world.tenant_id, user_id=world.alice, session_id="s9",
            project_id=world.shop, query="以前有没有类似的 createOrder 超时案例？",
            now=T0 + 600, explain=True,
        )
    )  # fmt: skip
    assert out.route.need_ltm and out.degraded == {}
    assert out.explain is not None
    found = {s.candidate.memory_id for s in out.explain.candidates}
    assert ids["bug456:excluded:database"] in found  # the search did run and find cards
    assert gone not in found
    assert "线程池饱和" not in out.text
