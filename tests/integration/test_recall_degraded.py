"""recall() with a store taken down for real: it answers, names the layer, and skips it.

Each test starts the store it stops: a milvus-lite server, a throwaway PostgreSQL
cluster, a throwaway ``redis-server`` (never the shared 6379 / 5432).  The process's
breakers run on a clock the test moves, so "the cool-down passed" needs no sleeping.
Assertions are on ``degraded`` and the breaker state: a layer reported as ``circuit
open since …`` was not called at all, which is what makes a down layer cost ~0 ms
(the time itself belongs in benchmarks).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.core.authority.admin import create_project, create_tenant, create_user
from memstrata.core.authority.facts import grant_role, set_profile
from memstrata.core.breaker import Breakers, BreakerState
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.milvus import MilvusConnection
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.models.transcript import MessageIn
from memstrata.core.recall.pool import SourceType, Verdict
from memstrata.core.recall.result import RecallResult
from memstrata.core.recall.service import (
    AUTHORITY,
    HISTORY,
    LTM,
    STM,
    Recaller,
    RecallRequest,
    RecallSettings,
)
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.scratch_redis import RedisServer
from tests.clock import FixedClock
from tests.conftest import REDIS_URL, _purge
from tests.integration import ltm_env
from tests.integration.pg_cluster import PgCluster, migrated_cluster
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

milvus_server = ltm_env.milvus_server
embedder = ltm_env.embedder

COOLDOWN_S = 5.0
BUDGET = RecallSettings(ltm_timeout_s=10.0)  # generous: a loaded 2-core machine is slow
SIMILAR = "以前有没有类似的 createOrder 超时案例？"
PAST_CASE = "createOrder 超时的常见根因是线程池饱和"


def open_since(result: RecallResult, layer: str) -> bool:
    return result.degraded.get(layer, "").startswith("circuit open since ")


def with_clock(rt: Runtime) -> FixedClock:
    """Give the runtime's recallers breakers on a clock the test moves."""
    clock = FixedClock(time.time())
    rt.breakers = Breakers(cooldown_s=COOLDOWN_S, clock=clock.now)
    return clock


def say(rt: Runtime, tenant: str, user: str, text: str, *, history: bool = True) -> None:
    """One user turn through L0 and the ingest pipeline (and the raw-history index)."""
    t = rt.transcript.append_turn(
        user_id=user, tenant_id=tenant, session_id="s1", at=time.time(),
        messages=[MessageIn(role="user", content=text)],
    )  # fmt: skip
    rt.pipeline.process([(t.pointer, list(t.records))])
    if history:
        index = rt.ltm.history
        assert index is not None
        index.project(t.records)


def drop_ltm(rt: Runtime) -> None:
    if rt.ltm_started:
        ltm = rt.ltm
        if ltm.history is not None:
            ltm.history.drop()
        ltm.lexical.drop()
        ltm.vector.drop()


def summaries(result: RecallResult, *, kept: bool = True) -> list[tuple[SourceType, str]]:
    """The candidates recall kept (or, with ``kept=False``, every one it considered)."""
    assert result.explain is not None
    return [
        (s.candidate.source_type, s.candidate.summary)
        for s in result.explain.candidates
        if s.verdict is Verdict.KEPT or not kept
    ]


# ---------------------------------------------------------------- Milvus


@pytest.fixture
def milvus_down_stack(
    lifecycle_pg: str, embedder: CachedEmbedder, tmp_path: Path
) -> Iterator[tuple[Runtime, MilvusServer]]:
    """A runtime with LTM and raw history on a milvus-lite server of its own."""
    server = MilvusServer(tmp_path / "ltm.db", f"127.0.0.1:{free_port()}")
    server.start()
    ns = f"t{uuid.uuid4().hex[:10]}"
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL, key_namespace=ns, transcript_dir=tmp_path / "l0",
            postgres_url=lifecycle_pg,
            ltm=LtmSettings(milvus_uri=server.uri, collection_prefix=ns, milvus_timeout_s=3.0),
        ),
        embedder=embedder,
    )  # fmt: skip
    with rt.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": ns, "name": ns})
        create_user(db=conn, user={"tenant_id": ns, "id": "alice"})
    try:
        yield rt, server
    finally:
        server.start()  # no-op when running
        drop_ltm(rt)
        _purge(rt.redis, ns)
        rt.close()
        server.stop()


def test_milvus_down_is_paid_once_then_skipped_until_a_probe_finds_it_back(
    milvus_down_stack: tuple[Runtime, MilvusServer],
) -> None:
    rt, server = milvus_down_stack
    tenant = rt.settings.key_namespace
    clock = with_clock(rt)
    # Given a past case in LTM and a remark in the raw history, both alice's
    card = ltm_env.card_draft(tenant, "case.createorder", "createOrder 超时", PAST_CASE,
                              user_id="alice", project_id=None)  # fmt: skip
    card_id = rt.ltm.ledger.write(card).memory_id
    rt.ltm.projector.project([card_id])
    rt.ltm.lexical.refresh()
    say(rt, tenant, "alice", "上周 createOrder 超时那次是周五晚上发布之后")
    ask = RecallRequest(tenant_id=tenant, user_id="alice", session_id="s1", query=SIMILAR,
                        explain=True)  # fmt: skip
    recaller = rt.recaller(settings=BUDGET)
    try:
        up = recaller.recall(ask)
        assert LTM not in up.degraded and HISTORY not in up.degraded, up.degraded
        assert (SourceType.LTM, PAST_CASE) in summaries(up)

        # When the Milvus server stops
        server.stop()
        first = recaller.recall(ask)
        # Then the first recall pays for finding out, answers, and names both layers
        for layer in (LTM, HISTORY):
            assert layer in first.degraded and not open_since(first, layer), first.degraded
            assert rt.breakers[layer].state is BreakerState.OPEN
        assert all(source is SourceType.REDIS_STM for source, _ in summaries(first))
        # ... and the next ones do not call Milvus at all during the cool-down
        for _ in range(3):
            clock.advance(1.0)
            later = recaller.recall(ask)
            assert open_since(later, LTM) and open_since(later, HISTORY), later.degraded
            assert "IndexUnavailable" in later.degraded[LTM] or "timed out" in later.degraded[LTM]
        assert rt.breakers[LTM].state is BreakerState.OPEN

        # When the server is back and the cool-down has passed
        server.start()
        back = probe_until_closed(recaller, ask, clock, rt, LTM)
        # Then recall uses LTM again
        assert LTM not in back.degraded
        assert (SourceType.LTM, PAST_CASE) in summaries(back)
        assert rt.breakers[LTM].state is BreakerState.CLOSED
    finally:
        recaller.close()


def probe_until_closed(
    recaller: Recaller, ask: RecallRequest, clock: FixedClock, rt: Runtime, layer: str,
    attempts: int = 6,
) -> RecallResult:  # fmt: skip
    """Recall once per cool-down until ``layer``'s probe succeeds (a restarted server may
    refuse the very first call while its client reconnects, as in production)."""
    for _ in range(attempts):
        clock.advance(COOLDOWN_S)
        out = recaller.recall(ask)
        if rt.breakers[layer].state is BreakerState.CLOSED:
            return out
        time.sleep(0.5)
    pytest.fail(f"{layer} still degraded after {attempts} probes: {out.degraded}")


# ---------------------------------------------------------------- PostgreSQL


def test_postgres_on_a_closed_port_degrades_an_uncached_user_then_is_skipped(
    res: Runtime,
) -> None:
    # Given a runtime whose PostgreSQL URL points at a closed port, and alice's STM
    closed = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere"
    rt = Runtime(res.settings.model_copy(update={"postgres_url": closed}))
    clock = with_clock(rt)
    tenant = "default"
    say(rt, tenant, "alice", "createOrder 又超时了，先别重启生产数据库", history=False)
    ask = RecallRequest(tenant_id=tenant, user_id="alice", session_id="s1", explain=True,
                        query="那个 createOrder 超时还在吗", project_id="shop")  # fmt: skip
    recaller = rt.recaller(ltm=False)
    try:
        # When alice recalls with no snapshot cached
        first = recaller.recall(ask)
        # Then recall answers without the authority layer, and says why
        assert first.degraded[AUTHORITY].startswith("AuthorityUnavailable: "), first.degraded
        assert "project/workspace scope not verified" in first.degraded[AUTHORITY]
        assert first.blocks is None
        assert rt.breakers[AUTHORITY].state is BreakerState.OPEN
        # ... and the next recalls do not try PostgreSQL during the cool-down
        clock.advance(COOLDOWN_S / 2)
        later = recaller.recall(ask)
        assert open_since(later, AUTHORITY), later.degraded
        assert "AuthorityUnavailable" in later.degraded[AUTHORITY]
        assert STM not in later.degraded
    finally:
        recaller.close()
        _purge(rt.redis, rt.settings.key_namespace)
        rt.close()


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    with migrated_cluster() as c:
        yield c


ALICE_SAID = "alice: createOrder 超时那次是周五晚上发布之后"
BOB_SAID = "bob: createOrder 超时那次是支付网关证书过期"


def test_postgres_down_scopes_recall_to_the_owner_and_a_restart_brings_it_back(
    cluster: PgCluster, milvus_server: MilvusServer, embedder: CachedEmbedder, tmp_path: Path
) -> None:
    # Given a tenant whose authority and card ledger live on a cluster this test controls,
    # alice with a role on "shop" and a card there, and alice and bob with a remark each
    ns = f"t{uuid.uuid4().hex[:10]}"
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL, key_namespace=ns, transcript_dir=tmp_path / "l0",
            postgres_url=cluster.url("memstrata"), postgres_timeout_s=1.0,
            ltm=LtmSettings(milvus_uri=milvus_server.uri, collection_prefix=ns),
        ),
        embedder=embedder,
    )  # fmt: skip
    clock = with_clock(rt)
    with rt.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": ns, "name": ns})
        for user in ("alice", "bob"):
            create_user(db=conn, user={"tenant_id": ns, "id": user})
        create_project(db=conn, project={"tenant_id": ns, "id": "shop", "name": "Shop"})
        grant_role(db=conn, tenant_id=ns, user_id="alice", project_id="shop",
                   role="developer", scope="read_only")  # fmt: skip
        set_profile(db=conn, tenant_id=ns, user_id="alice", update={"language": "zh-CN"})
    card = ltm_env.card_draft(ns, "case.createorder", "createOrder 超时", PAST_CASE,
                              user_id="alice", project_id="shop")  # fmt: skip
    card_id = rt.ltm.ledger.write(card).memory_id
    rt.ltm.projector.project([card_id])
    rt.ltm.lexical.refresh()
    say(rt, ns, "alice", ALICE_SAID)
    say(rt, ns, "bob", BOB_SAID)
    ask = RecallRequest(tenant_id=ns, user_id="alice", session_id="s1", query=SIMILAR,
                        project_id="shop", explain=True, top_k=20)  # fmt: skip
    recaller = rt.recaller(settings=BUDGET)
    try:
        # When PostgreSQL stops before alice's snapshot was ever cached
        cluster.stop()
        first = recaller.recall(ask)
        # Then recall answers from the layers that need no PostgreSQL, scoped to alice
        assert first.degraded[AUTHORITY].startswith("AuthorityUnavailable: "), first.degraded
        assert LTM in first.degraded  # the cards' details live in the ledger (PostgreSQL)
        assert HISTORY not in first.degraded
        considered = summaries(first, kept=False)
        assert (SourceType.RAW_HISTORY, ALICE_SAID) in considered  # the history answered
        assert ALICE_SAID in [text for _source, text in summaries(first)]
        assert all("bob" not in text for _source, text in considered)
        assert first.blocks is None  # no profile block from a snapshot that was not read
        assert rt.breakers[AUTHORITY].state is BreakerState.OPEN
        # ... and during the cool-down PostgreSQL is not tried again
        clock.advance(1.0)
        later = recaller.recall(ask)
        assert open_since(later, AUTHORITY) and open_since(later, LTM), later.degraded
        assert (SourceType.RAW_HISTORY, ALICE_SAID) in summaries(later, kept=False)

        # When PostgreSQL is back and the cool-down has passed
        cluster.start()
        back = probe_until_closed(recaller, ask, clock, rt, AUTHORITY)
        # Then the snapshot, the project scope and the cards are back
        assert AUTHORITY not in back.degraded and LTM not in back.degraded, back.degraded
        assert back.blocks is not None and back.blocks.profile.language == "zh-CN"
        assert (SourceType.LTM, PAST_CASE) in summaries(back)
        assert all("bob" not in text for _source, text in summaries(back, kept=False))
    finally:
        recaller.close()
        if not cluster.running:
            cluster.start()
        drop_ltm(rt)
        _purge(rt.redis, ns)
        rt.close()


# ---------------------------------------------------------------- Redis


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def test_redis_down_degrades_stm_and_the_profile_cache_then_is_skipped(
    redis_server: RedisServer, lifecycle_pg: str, tmp_path: Path
) -> None:
    # Given STM and the profile cache on a Redis this test controls, alice's debugging
    # turn in STM and her answer style in PostgreSQL (not cached yet)
    ns = f"t{uuid.uuid4().hex[:10]}"
    rt = Runtime(
        load_settings(
            redis_url=f"redis://127.0.0.1:{redis_server.port}/0", key_namespace=ns,
            transcript_dir=tmp_path / "l0", postgres_url=lifecycle_pg,
            redis_socket_timeout_s=1.0, ltm=LtmSettings(enabled=False),
        )
    )  # fmt: skip
    clock = with_clock(rt)
    with rt.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": ns, "name": ns})
        create_user(db=conn, user={"tenant_id": ns, "id": "alice"})
        set_profile(db=conn, tenant_id=ns, user_id="alice",
                    update={"language": "zh-CN", "answer_style": "brief_first"})  # fmt: skip
    say(rt, ns, "alice", "createOrder 又超时了，不要重启生产数据库", history=False)
    task = RecallRequest(tenant_id=ns, user_id="alice", session_id="s1", explain=True,
                         query="那个接口还是超时")  # fmt: skip
    pref = RecallRequest(tenant_id=ns, user_id="alice", session_id="s1",
                         query="我的回答偏好是什么？")  # fmt: skip
    recaller = rt.recaller()
    try:
        # When Redis stops
        redis_server.stop()
        first = recaller.recall(pref)
        # Then the profile cache miss goes to PostgreSQL, and STM is named as degraded
        assert STM in first.degraded, first.degraded
        assert "StoreUnavailable" in first.degraded[STM]
        assert first.blocks is not None and first.blocks.profile.answer_style == "brief_first"
        assert rt.breakers[STM].state is BreakerState.OPEN
        # ... and the following recalls skip Redis entirely during the cool-down
        clock.advance(1.0)
        later = recaller.recall(task)
        assert open_since(later, STM), later.degraded
        assert later.memory.short_term == ()

        # When Redis is back (with its data) and the cool-down has passed
        redis_server.start()
        back = probe_until_closed(recaller, task, clock, rt, STM)
        # Then STM answers again
        assert STM not in back.degraded
        assert any("不要重启生产数据库" in m.text for m in back.memory.short_term)
    finally:
        recaller.close()
        if redis_server.proc is None:
            redis_server.start()
        _purge(rt.redis, ns)
        rt.close()


def test_a_failed_ltm_warm_up_opens_the_breakers_so_recall_does_not_build_again(
    lifecycle_pg: str, embedder: CachedEmbedder, tmp_path: Path
) -> None:
    # Given a runtime whose Milvus address has no server behind it (the CLI's case)
    ns = f"t{uuid.uuid4().hex[:10]}"
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL, key_namespace=ns, transcript_dir=tmp_path / "l0",
            postgres_url=lifecycle_pg,
            ltm=LtmSettings(milvus_uri=f"http://127.0.0.1:{free_port()}", collection_prefix=ns,
                            milvus_timeout_s=1.0),
        ),
        embedder=embedder,
    )  # fmt: skip
    with rt.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": ns, "name": ns})
        create_user(db=conn, user={"tenant_id": ns, "id": "alice"})
    with_clock(rt)
    recaller = rt.recaller(settings=BUDGET)
    try:
        # When the warm-up fails
        why = rt.warm_ltm()
        assert why is not None
        # Then both long-term layers are open, and the recall reports them without waiting
        assert rt.breakers.states() == {LTM: BreakerState.OPEN, HISTORY: BreakerState.OPEN}
        out = recaller.recall(RecallRequest(tenant_id=ns, user_id="alice", session_id="s1",
                                            query=SIMILAR))  # fmt: skip
        assert open_since(out, LTM) and open_since(out, HISTORY), out.degraded
        assert not rt.ltm_started
    finally:
        recaller.close()
        _purge(rt.redis, ns)
        rt.close()


def test_an_unreadable_generation_pointer_degrades_ltm_and_creates_no_collection(
    milvus_server: MilvusServer, embedder: CachedEmbedder, tmp_path: Path
) -> None:
    # Given Milvus up, but PostgreSQL (which names the serving generation) on a closed port
    ns = f"t{uuid.uuid4().hex[:10]}"
    closed = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere"
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL, key_namespace=ns, transcript_dir=tmp_path / "l0",
            postgres_url=closed,
            ltm=LtmSettings(milvus_uri=milvus_server.uri, collection_prefix=ns,
                            milvus_timeout_s=3.0, history_enabled=False),
        ),
        embedder=embedder,
    )  # fmt: skip
    with_clock(rt)
    recaller = rt.recaller(settings=BUDGET)
    try:
        # When LTM is warmed up and recalled from
        why = rt.warm_ltm()
        out = recaller.recall(RecallRequest(tenant_id="default", user_id="alice",
                                            session_id="s1", query=SIMILAR))  # fmt: skip
        # Then the warm-up says why, recall reports LTM degraded, and the base names (which
        # may no longer serve after a reindex) were not created empty in Milvus
        assert why is not None and "StoreUnavailable" in why and "pointer" in why, why
        assert LTM in out.degraded, out.degraded
        assert not rt.ltm_started
        milvus = MilvusConnection(milvus_server.uri, timeout_s=3.0)
        try:
            assert not [c for c in milvus.client.list_collections() if c.startswith(ns)]
        finally:
            milvus.close()
    finally:
        recaller.close()
        _purge(rt.redis, ns)
        rt.close()
