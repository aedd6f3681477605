"""recall() against real PostgreSQL (authority) and Redis (STM): routing, blocks, pool."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlalchemy import Engine

from memstrata.core.authority.admin import create_tenant, create_user
from memstrata.core.authority.cache import ProfileCache
from memstrata.core.models.transcript import MessageIn
from memstrata.core.recall.config import RecallLimits
from memstrata.core.recall.pool import PoolCandidate, Verdict
from memstrata.core.recall.service import Recaller, RecallRequest, RecallSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings
from memstrata.core.stm.store import StmStore
from tests.integration import authority_db
from tests.integration.authority_db import World

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world
cache = authority_db.cache

T0 = 1_700_000_000.0


@pytest.fixture
def recaller(res: Runtime, engine: Engine, cache: ProfileCache) -> Iterator[Recaller]:
    r = Recaller(stm=res.stm, profile_cache=cache, engine=engine)
    yield r
    r.close()


def ingest(
    res: Runtime, world: World, user: str, session: str, turns: list[list[dict[str, Any]]]
) -> None:
    for n, msgs in enumerate(turns):
        appended = res.transcript.append_turn(
            user_id=user,
            session_id=session,
            tenant_id=world.tenant_id,
            task_id="bug456",
            messages=[MessageIn.model_validate(m) for m in msgs],
            turn_id=f"{session}-{n}",
            at=T0 + n * 60,
        )
        res.pipeline.process([(appended.pointer, list(appended.records))])


ZH_DEBUG: list[list[dict[str, Any]]] = [
    [
        {"role": "user", "content": "createOrder 在 prod-k8s 超时了。不要重启生产数据库。"},
        {"role": "assistant", "content": "我先看数据库指标。",
         "tool_calls": [{"id": "c1", "name": "query_db", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": "slow queries: 0\ncreateOrder p99 latency 2300ms\n"
                    "线程池 active_threads 200/200 已打满"},
        {"role": "assistant", "content": "数据库没问题，不是数据库的问题。下一步重点看线程池。"},
    ],
]  # fmt: skip


def req(world: World, query: str, **kw: object) -> RecallRequest:
    base: dict[str, object] = {
        "tenant_id": world.tenant_id,
        "user_id": world.alice,
        "session_id": "s1",
        "task_id": "bug456",
        "query": query,
        "now": T0 + 600,
    }
    base.update(kw)
    return RecallRequest.model_validate(base)


def test_continuing_a_debug_task_recalls_its_short_term_state(
    res: Runtime, world: World, recaller: Recaller
) -> None:
    # Given a Chinese debugging turn ingested through the real write path
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    # When the user continues with "那个接口还是超时"
    out = recaller.recall(req(world, "那个接口还是超时", explain=True))
    # Then STM is routed, and the task's state comes back in the seed's Chinese structure
    assert out.route.need_redis
    assert out.language == "zh"
    assert "当前任务短期记忆：" in out.text
    assert "- 当前任务：bug456" in out.text
    assert "不要重启生产数据库" in out.text
    assert "数据库没问题" in out.text or "不是数据库的问题" in out.text
    assert {m.memory_type for m in out.memory.short_term} >= {"constraint", "fact", "decision"}
    assert out.explain is not None
    assert out.explain.profile.has_reference
    # STM answered: the task's own state is enough, whatever words the question uses
    assert "stm" not in out.degraded
    assert not out.route.need_ltm and "ltm" not in out.degraded
    # the same words outside the task: few items share them, so LTM is asked too (and
    # this Recaller has none, which is flagged rather than failing)
    outside = recaller.recall(req(world, "那个接口还是超时", task_id=None))
    assert outside.route.need_ltm and "ltm" in outside.degraded
    assert "redis_result_insufficient" in outside.route.reasons["ltm"][0]


def test_a_preference_question_is_answered_from_postgresql(
    res: Runtime, world: World, recaller: Recaller
) -> None:
    out = recaller.recall(req(world, "我的回答偏好是什么？", task_id=None, project_id="shop"))
    assert out.route.need_pg
    assert out.blocks is not None
    assert out.blocks.compact() == {
        "language": "zh-CN",
        "answer_style": "brief_first",
        "permission": "read_only",
        "project_default_env": "prod-cn",
    }
    assert out.text.startswith("用户/环境画像")


def test_pg_overrides_a_short_term_preference_in_its_domain(
    res: Runtime, world: World, recaller: Recaller
) -> None:
    # Given the STM holds "answer in English" while PG says zh-CN
    ingest(
        res, world, world.alice, "s1", [[{"role": "user", "content": "Please answer in English."}]]
    )
    out = recaller.recall(
        req(world, "Back to this task: per my preference, which language?", explain=True)
    )
    # Then the preference candidate is overridden by the authority and never injected
    assert out.explain is not None
    overridden = [s for s in out.explain.candidates if s.verdict is Verdict.OVERRIDDEN]
    assert [s.candidate.summary for s in overridden] == ["Please answer in English."]
    assert "profile.language" in overridden[0].reason
    assert "Please answer in English" not in out.text
    assert out.blocks is not None and out.blocks.profile.language == "zh-CN"


def test_with_the_profile_cache_warm_an_item_pg_covers_is_replaced_by_pgs_block(
    res: Runtime, world: World, recaller: Recaller
) -> None:
    # Given a short-term preference in an authoritative domain, and a warm profile cache
    ingest(res, world, world.alice, "s1", [[{"role": "user", "content": "请用中文回答。"}]])
    recaller.recall(req(world, "我的回答偏好是什么？"))  # a PG question fills the cache
    # When a task question that needs no PG read recalls it (review D3)
    out = recaller.recall(req(world, "那个接口还是超时", explain=True))
    assert out.explain is not None and out.explain.cache == "hit"
    assert not out.route.need_pg
    # Then the item PG covers gives way to PG's own block, which is rendered, and the
    # reason says PG covers it rather than that it disagrees
    overridden = [s for s in out.explain.candidates if s.verdict is Verdict.OVERRIDDEN]
    assert [s.candidate.summary for s in overridden] == ["请用中文回答。"]
    assert "covered_by_authority" in overridden[0].reason
    assert out.blocks is not None and out.blocks.profile.language == "zh-CN"
    assert out.text.startswith("用户/环境画像")


class EmptyLongTerm:
    """A long-term layer that holds nothing (the LtmSearcher port, no store behind it)."""

    def search(self, **_: object) -> list[PoolCandidate]:
        return []


def test_a_general_question_outside_a_task_also_reads_matching_stm_items(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache
) -> None:
    # Given a short-term item, and a recall with a long-term layer (empty here)
    ingest(res, world, world.alice, "s1", [[{
        "role": "user", "content": "We will hold the standup on Thursday mornings from now on."
    }]])  # fmt: skip
    r = Recaller(stm=res.stm, profile_cache=cache, engine=engine, ltm=EmptyLongTerm())
    try:
        # When a general question outside any task asks about it (routed to long-term)
        out = r.recall(req(world, "When do we hold the standup?", task_id=None, explain=True))
    finally:
        r.close()
    assert out.route.need_ltm and "general question outside a task" in out.route.reasons["ltm"]
    # Then the STM item whose words match is a candidate all the same (review: it was not)
    assert any("standup on Thursday" in m.text for m in out.memory.short_term)


class CountingLongTerm:
    """A long-term layer that holds nothing and notes how many candidates each search
    asked for (the LtmSearcher port, no store behind it)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def search(self, *, k: int, **_: object) -> list[PoolCandidate]:
        self.asked.append(k)
        return []


def test_recall_asks_long_term_memory_for_its_candidates_or_the_callers_top_k(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache
) -> None:
    # Given a recaller whose limits ask long-term memory for 45 candidates
    ltm = CountingLongTerm()
    limits = RecallSettings(ltm_candidates=45)
    r = Recaller(stm=res.stm, profile_cache=cache, engine=engine, ltm=ltm, settings=limits)
    try:
        # When a similarity question (routed to LTM) asks for 8 lines, then for 60
        for top_k in (8, 60):
            out = r.recall(req(world, "以前有没有类似的超时案例？", top_k=top_k))
            assert out.route.need_ltm
    finally:
        r.close()
    # Then the search is asked for the limit, or for the caller's top_k when it is more
    assert ltm.asked == [45, 60]


def test_the_recall_limits_come_from_the_environment(
    res: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given MEMSTRATA_RECALL__* in the environment of a process
    monkeypatch.setenv("MEMSTRATA_RECALL__LTM_CANDIDATES", "50")
    monkeypatch.setenv("MEMSTRATA_RECALL__HISTORY_CANDIDATES", "30")
    monkeypatch.setenv("MEMSTRATA_RECALL__LTM_TIMEOUT_S", "0.5")
    loaded = Settings(key_namespace=res.settings.key_namespace)
    rt = Runtime(loaded)
    try:
        # When the runtime builds a recaller, then one with limits of the caller's own
        made = rt.recaller(ltm=False)
        own = rt.recaller(ltm=False, settings=RecallSettings(ltm_candidates=7))
        made.close()
        own.close()
    finally:
        rt.close()
    # Then the first follows the environment and the caller's settings win over it
    assert (made.settings.ltm_candidates, made.settings.history_candidates) == (50, 30)
    assert made.settings.ltm_timeout_s == 0.5
    assert made.settings.stm_per_index == RecallLimits().stm_per_index
    assert own.settings.ltm_candidates == 7
    # And a value out of range stops the process with the setting's name
    monkeypatch.setenv("MEMSTRATA_RECALL__LTM_CANDIDATES", "500")
    with pytest.raises(ValidationError, match=r"recall\.ltm_candidates"):
        Settings()


def test_a_similarity_question_without_an_ltm_backend_is_flagged_not_failed(
    res: Runtime, world: World, recaller: Recaller
) -> None:
    out = recaller.recall(req(world, "以前有没有类似的超时案例？"))
    assert out.route.need_ltm
    assert "ltm" in out.degraded


def test_stm_down_degrades_to_the_other_layers(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache
) -> None:
    # Given an STM whose Redis does not answer (nothing listens on port 1)
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, decode_responses=True)
    stm = StmStore(dead, namespace=res.settings.key_namespace)
    r = Recaller(stm=stm, profile_cache=cache, engine=engine)
    try:
        out = r.recall(req(world, "那个接口还是超时"))
    finally:
        r.close()
    # Then recall still answers, with the STM layer flagged
    assert "stm" in out.degraded
    assert out.memory.short_term == ()


def test_unknown_scope_and_bad_ids_are_refused(world: World, recaller: Recaller) -> None:
    from memstrata.core.authority.errors import ScopeDenied
    from memstrata.core.errors import InvalidInput, NotFound

    with pytest.raises(NotFound):
        recaller.recall(req(world, "hi", user_id="nobody"))
    with pytest.raises(ScopeDenied):
        recaller.recall(req(world, "hi", project_id="blog"))  # alice has no role on blog
    with pytest.raises(ValueError):
        RecallRequest(tenant_id=world.tenant_id, user_id="a:b", session_id="s", query="x")
    with pytest.raises(ValueError):
        req(world, "x" * 5000)
    assert issubclass(ScopeDenied, Exception) and issubclass(InvalidInput, ValueError)


def test_the_answer_fits_top_k_and_the_token_budget(
    res: Runtime, world: World, recaller: Recaller
) -> None:
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    out = recaller.recall(req(world, "那个接口还是超时", top_k=2, token_budget=64, explain=True))
    assert len(out.memory.short_term) <= 2
    assert out.explain is not None
    kept = [s for s in out.explain.candidates if s.verdict is Verdict.KEPT]
    assert sum(s.tokens for s in kept) <= 64
    assert any(
        s.verdict in (Verdict.BELOW_TOP_K, Verdict.OVER_BUDGET) for s in out.explain.candidates
    )


@pytest.mark.parametrize("budget", [32, 48, 64, 96, 160, 600])
def test_the_printed_block_fits_the_token_budget_profile_included(
    res: Runtime, world: World, recaller: Recaller, budget: int
) -> None:
    from memstrata.core.compress.tokens import default_counter

    # Given a Chinese task state in STM and a profile in PG (cl100k spends more than one
    # token on many CJK characters: an estimate of one let a block overflow by a quarter)
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    # When a question asks for both within a token budget
    q = "我的回答偏好是什么？那个接口还是超时"
    out = recaller.recall(req(world, q, project_id="shop", token_budget=budget, explain=True))
    assert out.route.need_pg and out.route.need_redis
    count = default_counter().count
    profile = out.blocks.render("zh") if out.blocks else ""
    assert profile and out.text.startswith(profile)
    # explain says how the budget was split: the profile first, the rest for the lines
    assert out.explain is not None and out.explain.budget is not None
    split = out.explain.budget
    assert (split.requested, split.profile) == (budget, count(profile) + 2)
    assert split.lines == max(0, budget - split.profile)
    kept = [s for s in out.explain.candidates if s.verdict is Verdict.KEPT]
    assert sum(s.tokens for s in kept) <= split.lines
    if count(profile) + 2 > budget:
        # Then a profile (authority: permissions, constraints) is never cut: alone over
        # the budget, it is printed whole and no memory line is
        assert out.text == profile and not out.memory.short_term
    else:
        # Then the block as printed, profile and titles included, fits the budget
        assert count(out.text) <= budget
    # ... the profile is paid first, and the room left goes to memory lines
    if budget >= 160:
        assert out.memory.short_term and "当前任务短期记忆：" in out.text


@pytest.mark.parametrize("budget", [48, 96, 600])
def test_recall_prints_the_same_block_with_or_without_explain(
    res: Runtime, world: World, recaller: Recaller, budget: int
) -> None:
    # Given a Chinese task state in STM and a profile in PG
    ingest(res, world, world.alice, "s1", ZH_DEBUG)
    q = "我的回答偏好是什么？那个接口还是超时"

    def ask(explain: bool) -> Any:  # as of a moment: no bookkeeping between the two calls
        return recaller.recall(req(world, q, project_id="shop", token_budget=budget, top_k=2,
                                   as_of=T0 + 600, explain=explain))  # fmt: skip

    # When it is asked without explain (the pool builds verdicts for kept lines only),
    # then with it (every candidate's verdict)
    plain, explained = ask(False), ask(True)
    # Then both print the same block from the same memories
    assert plain.text == explained.text and plain.memory == explained.memory
    assert plain.explain is None and explained.explain is not None
    verdicts = [s.verdict for s in explained.explain.candidates]
    assert set(verdicts) - {Verdict.KEPT}  # some were left out: the two paths differ there
    if budget >= 96:  # at 48 the profile alone fills the budget
        assert Verdict.KEPT in verdicts and plain.memory.short_term


# ---------------------------------------------------------------- scope isolation


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    query=st.text(min_size=1, max_size=60).filter(lambda q: q.strip() != ""),
    asker=st.integers(min_value=0, max_value=3),
)
def test_recall_never_returns_another_scopes_memory(
    res: Runtime, engine: Engine, recaller: Recaller, query: str, asker: int
) -> None:
    # Given two tenants with a user of the same name each, plus a second user, all holding
    # memories that name their owner in the text (reused across examples)
    scopes = _scopes(res, engine)
    tenant, user = scopes[asker]
    # When any text is recalled by one of them
    out = recaller.recall(
        RecallRequest(tenant_id=tenant, user_id=user, session_id="s1", task_id="bug456",
                      query=query, now=T0 + 600, explain=True)
    )  # fmt: skip
    # Then every candidate considered, and every line injected, is the asker's own
    owner = f"owner-{tenant}-{user}"
    assert out.explain is not None
    stm_read = out.route.need_redis or not (out.route.need_pg or out.route.need_ltm)
    assert out.explain.candidates or not stm_read  # STM was read: it found the asker's items
    assert all(owner in s.candidate.summary for s in out.explain.candidates)
    for t, u in scopes:
        if (t, u) != (tenant, user):
            assert f"owner-{t}-{u}" not in out.text


_SCOPES: dict[str, list[tuple[str, str]]] = {}


def _scopes(res: Runtime, engine: Engine) -> list[tuple[str, str]]:
    ns = res.settings.key_namespace
    if ns in _SCOPES:
        return _SCOPES[ns]
    tenants = [f"t{uuid.uuid4().hex[:8]}" for _ in range(2)]
    scopes = [(tenants[0], "u1"), (tenants[0], "u2"), (tenants[1], "u1"), (tenants[1], "u2")]
    with engine.begin() as conn:
        for t in tenants:
            create_tenant(db=conn, tenant={"id": t, "name": t})
            for u in ("u1", "u2"):
                create_user(db=conn, user={"tenant_id": t, "id": u})
    for t, u in scopes:
        w = World(tenant_id=t)
        owner = f"owner-{t}-{u}"
        ingest(res, w, u, "s1", [[
            {"role": "user",
             "content": f"createOrder times out for {owner}. Don't restart prod for {owner}."},
            {"role": "assistant",
             "content": f"The database looks fine for {owner}. "
                        f"Next, check the thread pool of {owner}."},
        ]])  # fmt: skip
    _SCOPES[ns] = scopes
    return scopes


def test_the_first_recall_of_a_process_reads_again_when_a_project_name_changes_the_entities(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache
) -> None:
    from memstrata.core.models.memory import MemoryItem
    from tests.integration.test_stm_store import item

    # Given an item about project "shop" reachable only through its entity index: 25
    # newer items fill the recent index, and it shares neither session nor task
    def stm_item(mid: str, entities: tuple[str, ...], at: float) -> MemoryItem:
        return item(mid, user=world.alice, session="s9", task=None, entities=entities, at=at,
                    ttl=86_400, tenant_id=world.tenant_id, summary=f"{mid} 发布卡住")  # fmt: skip

    res.stm.upsert(stm_item("m_shop", ("shop",), T0))
    for i in range(25):
        res.stm.upsert(stm_item(f"m_{i:02d}", ("gc",), T0 + 1 + i))
    # When a Recaller new to alice is asked about "shop" (a project only her snapshot
    # names, so the one round trip read without that entity), then asked again
    r = Recaller(stm=res.stm, profile_cache=cache, engine=engine)
    try:
        first = r.recall(req(world, "shop 的发布还卡着吗", task_id=None, session_id="s1"))
        second = r.recall(req(world, "shop 的发布还卡着吗", task_id=None, session_id="s1"))
    finally:
        r.close()
    # Then both found it through the "shop" entity index, with the same memories
    ids = [m.memory_id for m in first.memory.short_term]
    assert "m_shop" in ids
    assert [m.memory_id for m in second.memory.short_term] == ids


def test_the_recall_read_refuses_a_key_of_another_owner(res: Runtime, world: World) -> None:
    from memstrata.core.errors import InvalidInput

    bob = res.stm.keys(world.bob, world.tenant_id)
    with pytest.raises(InvalidInput, match="is not a key of"):
        res.stm.read_for_recall(world.alice, tenant_id=world.tenant_id, session_id="s1",
                                task_id=None, entities=[], limit=5, now=T0,
                                also_get=[bob.last_recall("s1")])  # fmt: skip


def test_a_name_the_question_shares_with_every_item_does_not_make_them_relevant(
    res: Runtime, world: World, engine: Engine, cache: ProfileCache
) -> None:
    from tests.integration.test_stm_store import item

    # Given the last session's items, each about Caroline, one about her research
    said = {
        "m_thanks": "Caroline thanked Melanie for the support of her friends",
        "m_photo": "Caroline loved the photo of the family picnic",
        "m_research": "Caroline did research on adoption agencies this month",
    }
    for n, (mid, summary) in enumerate(said.items()):
        res.stm.upsert(item(mid, user=world.alice, session="s9", task=None, summary=summary,
                            entities=("Caroline",), at=T0 + n, ttl=86_400,
                            tenant_id=world.tenant_id))  # fmt: skip
    r = Recaller(stm=res.stm, profile_cache=cache, engine=engine)  # no long-term layer
    try:
        # When a question names her (its entity routes it to these items) and asks one thing
        out = r.recall(req(world, "What did Caroline research?", task_id=None, explain=True))
    finally:
        r.close()
    assert out.explain is not None
    assert "Caroline" in out.explain.profile.entities
    sim = {s.candidate.memory_id: s.parts["similarity"] for s in out.explain.candidates}
    # Then only the item that says what she researched is similar to the question: the
    # name is the entity feature, not also half of the words asked (it was 0.5 for each)
    assert sim["m_research"] > 0
    assert sim["m_thanks"] == sim["m_photo"] == 0
    assert out.memory.short_term[0].memory_id == "m_research"
    # and one relevant item is too few: the long-term layer would be asked as well
    assert any("redis_result_insufficient" in why for why in out.route.reasons["ltm"])
