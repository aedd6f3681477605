"""Query profile, routing and the candidate pool: pure rules, both languages."""

from __future__ import annotations

import time
from typing import Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memstrata.core.ltm.text import stem
from memstrata.core.recall.pool import (
    PoolCandidate,
    PoolPolicy,
    RescoreWeights,
    Scored,
    SourceType,
    Verdict,
    build_pool,
    dedup,
    estimate_tokens,
    rescore,
)
from memstrata.core.recall.profile import RuntimeState, build_query_profile
from memstrata.core.recall.route import (
    LtmMode,
    RoutingPolicy,
    decide_route,
    expects_ltm,
    ltm_mode,
    ltm_searches_vectors,
    with_ltm_fallback,
)
from memstrata.core.recall.text import (
    CJK_FUNCTION_CHARS,
    FUNCTION_WORDS,
    coverage,
    query_terms,
    question_topic,
    terms,
    topic_terms,
)

NOW = 1_700_000_000.0
DEBUGGING = RuntimeState(
    active_task_id="bug456",
    now=NOW,
    last_turn_at=NOW - 120,
    recent_entities=("createOrder", "database", "thread_pool"),
)
NEW_SESSION = RuntimeState(now=NOW)


@pytest.mark.parametrize(
    "text",
    ["那个接口还是超时", "createOrder still times out", "Continue with the second one"],
)
def test_continuing_a_debug_task_routes_to_short_term_memory(text: str) -> None:
    # Given an active task and a message that refers back to it
    profile = build_query_profile(text, DEBUGGING)
    route = decide_route(profile)
    # Then STM is queried and neither PG nor LTM is needed
    assert route.need_redis
    assert not route.need_pg
    assert not route.need_ltm
    assert profile.intent in {"debug_continue", "continue_task"}


def test_the_seed_example_profile_fields_are_all_derived() -> None:
    profile = build_query_profile("createOrder 还是超时，数据库已经排除了", DEBUGGING)
    assert profile.model_dump() == {
        "intent": "debug_continue",
        "has_reference": True,
        "has_profile_request": False,
        "has_similarity_request": False,
        "entities": ["createOrder", "database"],
        "active_task_id": "bug456",
        "session_recent": True,
        "topic_shift": False,
        "needs_exact_metadata": False,
        "recent_entity_overlap": 2,
        "profile_cache_missing": False,
        "profile_cache_stale": False,
        "redis_result_insufficient": False,
        "fuzzy_history_reference": False,
        "exact_identifiers": True,  # createOrder: matched verbatim, lexically
    }


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("我的回答偏好是什么？", "profile_query"),
        ("What is my preferred answer style?", "profile_query"),
        ("我有没有生产环境的写权限？", "permission_query"),
        ("Am I allowed to deploy?", "permission_query"),
        ("这个项目的默认环境是哪个？", "config_query"),
        ("Which environment is the project's default?", "config_query"),
    ],
)
def test_profile_permission_and_config_questions_route_to_postgresql(
    text: str, intent: str
) -> None:
    profile = build_query_profile(text, NEW_SESSION)
    route = decide_route(profile)
    assert profile.intent == intent
    assert route.need_pg
    assert route.reasons["pg"]


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("以前有没有类似的超时案例？", LtmMode.VECTOR),
        ("Have we seen something similar before?", LtmMode.VECTOR),
        ("Have we seen HTTP 504 on payment-service before?", LtmMode.HYBRID),
        ("上次那个缓存的问题是怎么解决的", LtmMode.HYBRID),
    ],
)
def test_similar_case_questions_route_to_long_term_memory(text: str, mode: LtmMode) -> None:
    route = decide_route(build_query_profile(text, NEW_SESSION))
    assert route.need_ltm
    assert route.ltm_mode is mode


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("When did Caroline go to the support group?", LtmMode.HYBRID),
        ("Why does createOrder time out?", LtmMode.LEXICAL),
        ("What broke ORA-00001 last week?", LtmMode.LEXICAL),
    ],
)
def test_identifiers_search_lexically_and_plain_questions_search_both_indexes(
    text: str, mode: LtmMode
) -> None:
    profile = build_query_profile(text, NEW_SESSION).model_copy(update={"entities": ["x"]})
    assert ltm_mode(profile) is mode


def test_an_insufficient_stm_result_triggers_the_ltm_pass() -> None:
    profile = build_query_profile("createOrder still times out", DEBUGGING)
    route = decide_route(profile)
    assert not route.need_ltm
    # When the STM pass comes back with one hit only
    after = with_ltm_fallback(route, profile, stm_hits=1, policy=RoutingPolicy(min_redis_results=2))
    # Then LTM is queried, lexically because the query names an entity
    assert after.need_ltm
    assert after.ltm_mode is LtmMode.LEXICAL
    assert "redis_result_insufficient" in after.reasons["ltm"][0]
    # And enough STM hits leave the route unchanged
    assert with_ltm_fallback(route, profile, stm_hits=3, policy=RoutingPolicy()) == route


def test_profile_cache_state_forces_the_pg_read() -> None:
    state = NEW_SESSION.model_copy(update={"profile_cache_stale": True})
    route = decide_route(build_query_profile("hello", state))
    assert route.need_pg
    assert route.reasons["pg"] == ["profile_cache_stale"]


def test_a_new_entity_without_reference_is_a_topic_shift() -> None:
    profile = build_query_profile("kafka consumer lag on orders-service", DEBUGGING)
    assert profile.topic_shift
    assert profile.recent_entity_overlap == 0


def test_routing_intents_are_configurable() -> None:
    profile = build_query_profile("What is my preferred answer style?", NEW_SESSION)
    assert not decide_route(profile, RoutingPolicy(pg_intents=frozenset())).need_pg


# ---------------------------------------------------------------- candidate pool


def cand(mid: str, source: SourceType, key: str, fp: str, **kw: object) -> PoolCandidate:
    base: dict[str, object] = {
        "memory_id": mid,
        "source_type": source,
        "summary": f"summary of {mid}",
        "canonical_fact_key": key,
        "fingerprint": fp,
        "memory_type": "fact",
        "updated_at": NOW - 60,
    }
    base.update(kw)
    return PoolCandidate.model_validate(base)


def test_stm_wins_over_ltm_for_the_same_fact() -> None:
    stm = cand("m1", SourceType.REDIS_STM, "bug456:excluded:database", "fpA")
    ltm = cand("ltm_1", SourceType.LTM, "bug456:excluded:database", "fpB", similarity=0.99)
    kept, dropped = dedup([ltm, stm])
    assert [c.memory_id for c in kept] == ["m1"]
    assert dropped[0][0].memory_id == "ltm_1"
    assert "canonical_fact_key" in dropped[0][1]


def test_fingerprint_dedup_catches_the_same_text_under_another_key() -> None:
    a = cand("m1", SourceType.REDIS_STM, "k1", "same", updated_at=NOW - 10)
    b = cand("m2", SourceType.REDIS_STM, "k2", "same", updated_at=NOW - 99)
    kept, dropped = dedup([b, a])
    assert [c.memory_id for c in kept] == ["m1"]  # the newer one of equal priority
    assert "fingerprint" in dropped[0][1]


def test_pool_keeps_top_k_within_the_token_budget_and_explains_the_rest() -> None:
    cands = [
        cand(
            f"m{i}",
            SourceType.REDIS_STM,
            f"k{i}",
            f"f{i}",
            importance=i / 10,
            summary=f"{i}{'x' * 39}",
        )
        for i in range(6)
    ]
    cands.append(cand("ltm_9", SourceType.LTM, "k1", "g1"))
    pool = build_pool(
        cands,
        query_entities=[],
        now=NOW,
        policy=PoolPolicy(top_k=3, token_budget=30),
        authority=lambda c: "PG says permission=read_only" if c.memory_id == "m5" else None,
    )
    verdicts = {s.candidate.memory_id: s.verdict for s in pool}
    assert verdicts["m5"] is Verdict.OVERRIDDEN
    assert verdicts["ltm_9"] is Verdict.DUPLICATE
    kept = [s for s in pool if s.verdict is Verdict.KEPT]
    assert [s.candidate.memory_id for s in kept] == ["m4", "m3"]  # the third is over budget
    assert sum(s.tokens for s in kept) <= 30
    assert {s.verdict for s in pool} >= {Verdict.OVER_BUDGET, Verdict.BELOW_TOP_K}
    assert all(s.reason for s in pool)


def test_entity_overlap_and_similarity_raise_the_score() -> None:
    plain = cand("m1", SourceType.LTM, "k1", "f1")
    better = cand("m2", SourceType.LTM, "k2", "f2", entities=("createOrder",), similarity=0.8)
    pool = build_pool([plain, better], query_entities=["createOrder"], now=NOW, policy=PoolPolicy())
    assert [s.candidate.memory_id for s in pool] == ["m2", "m1"]
    assert pool[0].parts["entity_overlap"] > 0


def test_a_line_said_on_the_day_the_question_names_beats_newer_and_higher_ranked_ones() -> None:
    # "on 16 November, 2023" names when it was said: the line of that day wins a near-tie
    # of the layers' order, and a newer one's recency (twelfth wave)
    from datetime import UTC, datetime

    from memstrata.core.recall.ltm_adapter import rank_similarity

    day = datetime(2023, 11, 16, 15, tzinfo=UTC).timestamp()
    now = day + 40 * 86400

    def line(mid: str, said_at: float | None, rank: int) -> PoolCandidate:
        return cand(mid, SourceType.RAW_HISTORY, mid, mid, summary=f"Tim: my knee hurts ({mid})",
                    said_at=said_at, updated_at=said_at or now - 86400, layer_rank=rank,
                    similarity=rank_similarity(rank))  # fmt: skip

    lines = [line("newer", now - 86400, 0), line("that_day", day, 3), line("undated", None, 1)]
    pool = build_pool(lines, query_entities=[], now=now, policy=PoolPolicy(),
                      query="What did Tim say about his injury on 16 November, 2023?")  # fmt: skip
    assert pool[0].candidate.memory_id == "that_day"
    assert pool[0].parts["named_date"] == RescoreWeights().named_date
    assert {s.candidate.memory_id: s.parts["named_date"] for s in pool[1:]} == {
        "newer": 0.0, "undated": 0.0,
    }  # fmt: skip
    # a question that names no date leaves the order to the layers and to recency
    plain = build_pool(lines, query_entities=[], now=now, policy=PoolPolicy(),
                       query="What did Tim say about his injury?")  # fmt: skip
    assert plain[0].candidate.memory_id == "newer"
    assert all(s.parts["named_date"] == 0.0 for s in plain)


@given(st.text(max_size=300))
def test_token_estimate_is_positive_and_monotone_in_cjk(text: str) -> None:
    assert estimate_tokens(text) >= 1
    assert estimate_tokens(text + "线程池") >= estimate_tokens(text)


def test_a_candidate_whose_entity_the_query_names_scores_the_entity_feature() -> None:
    from memstrata.core.recall.pool import (
        PoolCandidate,
        RescoreWeights,
        SourceType,
        named_in,
        rescore,
    )

    def cand(entities: tuple[str, ...]) -> PoolCandidate:
        return PoolCandidate(memory_id="c", source_type=SourceType.LTM, summary="went hiking",
                             canonical_fact_key="k", fingerprint="f", memory_type="episode",
                             similarity=0.5, updated_at=0.0, entities=entities)  # fmt: skip

    w = RescoreWeights()
    q = "When did Caroline go hiking?"
    _, named = rescore(cand(("Caroline",)), query_entities=(), now=0.0, weights=w, query=q)
    _, other = rescore(cand(("Melanie",)), query_entities=(), now=0.0, weights=w, query=q)
    assert named["entity_overlap"] == w.entity_overlap and other["entity_overlap"] == 0.0
    # whole words only (and CJK by substring)
    assert not named_in("car", "when did caroline go?") and named_in("caroline", "caroline's")
    assert named_in("小王", "小王昨天去哪了") and not named_in("x", "x y")


def test_a_general_question_outside_a_task_also_searches_long_term_memory() -> None:
    profile = build_query_profile("What does Melanie like to paint?", NEW_SESSION)
    assert profile.intent == "general" and profile.active_task_id is None
    # only when a long-term store exists (no degraded flag for deployments without one)
    assert not decide_route(profile).need_ltm
    route = decide_route(profile, ltm_available=True)
    assert route.need_ltm and route.ltm_mode is LtmMode.HYBRID
    assert route.reasons["ltm"] == ["general question outside a task"]
    # inside a task, STM answers first and LTM is the fallback
    in_task = build_query_profile("What does the checkout service log?", DEBUGGING)
    assert not decide_route(in_task, ltm_available=True).need_ltm
    off = RoutingPolicy(history_without_task=False)
    assert not decide_route(profile, off, ltm_available=True).need_ltm


def test_a_duplicate_dropped_from_the_pool_leaves_its_provenance_to_the_kept_one() -> None:
    from memstrata.core.recall.pool import PoolCandidate, SourceType, dedup

    def cand(mid: str, ids: tuple[str, ...], at: float) -> PoolCandidate:
        return PoolCandidate(memory_id=mid, source_type=SourceType.LTM, summary="went hiking",
                             canonical_fact_key=mid, fingerprint="same-words",
                             memory_type="episode", updated_at=at, message_ids=ids)  # fmt: skip

    kept, dropped = dedup([cand("episode", ("m7",), 1.0), cand("summary", (), 2.0)])
    # the newer one wins the slot, the older one's source message is not lost
    assert [c.memory_id for c in kept] == ["summary"] and kept[0].message_ids == ("m7",)
    assert [c.memory_id for c, _why in dropped] == ["episode"]


def test_a_raw_message_already_in_a_kept_memory_is_a_duplicate_and_costs_no_rank() -> None:
    # Given a card that stands for message d1 and two raw messages, d1 and d2
    card = cand("ltm_1", SourceType.LTM, "k1", "f1", similarity=0.9, message_ids=("d1",))
    raw_d1 = cand("raw_1", SourceType.RAW_HISTORY, "raw:d1", "f2", similarity=0.8,
                  importance=0.0, message_ids=("d1",))  # fmt: skip
    raw_d2 = cand("raw_2", SourceType.RAW_HISTORY, "raw:d2", "f3", similarity=0.7,
                  importance=0.0, message_ids=("d2",))  # fmt: skip
    # When the pool keeps two
    pool = build_pool([raw_d2, raw_d1, card], query_entities=[], now=NOW,
                      policy=PoolPolicy(top_k=2, token_budget=1000))  # fmt: skip
    verdicts = {s.candidate.memory_id: (s.verdict, s.reason) for s in pool}
    # Then the raw copy of d1 adds nothing and d2 takes the second place
    assert verdicts["raw_1"] == (Verdict.DUPLICATE, "its message is already in a kept memory")
    assert verdicts["ltm_1"][0] is Verdict.KEPT and verdicts["raw_2"][0] is Verdict.KEPT


def test_raw_history_renders_last_with_the_date_it_was_said() -> None:
    from memstrata.core.recall.render import RenderedMemory, render

    card = cand("ltm_1", SourceType.LTM, "k1", "f1", summary="likes hiking")
    at = 1_683_500_000.0
    raw = cand("raw_1", SourceType.RAW_HISTORY, "raw:d1", "f2", summary="Caroline: I ran 5k",
               updated_at=at, message_ids=("d1",), said_at=at)  # fmt: skip
    memory = RenderedMemory.from_candidates([raw, card], task_id=None)
    text = render("", memory, "en")
    assert text == (
        "Related long-term experience:\n- likes hiking\n\n"
        "From earlier conversations:\n2023-05-07:\n- Caroline: I ran 5k"
    )


def test_a_dated_card_shows_when_it_was_said_and_the_budget_counts_the_date() -> None:
    from memstrata.core.recall.pool import DATE_TOKENS, estimate_tokens, line_tokens
    from memstrata.core.recall.render import RenderedMemory, render

    # Given an episode card said on 2023-05-07 and an undated card
    said = cand("ltm_1", SourceType.LTM, "k1", "f1", summary="Caroline: I went to a support "
                "group yesterday", said_at=1_683_500_000.0)  # fmt: skip
    plain = cand("ltm_2", SourceType.LTM, "k2", "f2", summary="likes hiking")
    text = render("", RenderedMemory.from_candidates([said, plain], task_id=None), "en")
    # Then the dated line stands under its day ("yesterday" of that day), the undated one
    # above every day, where it cannot read as said on the day above it
    assert text == (
        "Related long-term experience:\n- likes hiking\n"
        "2023-05-07:\n- Caroline: I went to a support group yesterday"
    )
    # ... and the token budget is charged for the day's heading it shows
    assert line_tokens(said) == estimate_tokens(said.summary) + DATE_TOKENS
    assert line_tokens(plain) == estimate_tokens(plain.summary)
    from memstrata.core.compress.tokens import Cl100kCounter

    cl100k = Cl100kCounter()  # a day's heading and its break as charged, counted for real
    assert cl100k.count("2023-05-07:") + 1 == DATE_TOKENS
    # ... which bounds what printing it above a line adds (":\n" may fold into one token)
    line = "- Caroline: I ran 5k"
    assert cl100k.count(f"2023-05-07:\n{line}") - cl100k.count(line) <= DATE_TOKENS


def test_lines_said_the_same_day_share_one_heading_and_pay_for_it_once() -> None:
    from memstrata.core.compress.tokens import default_counter
    from memstrata.core.recall.render import RenderCost, RenderedMemory, render

    # Given three long-term lines, two said on 2023-05-07 around one said the day after,
    # and a raw message of the first day
    day1, day2 = 1_683_500_000.0, 1_683_500_000.0 + 86_400
    a = cand("ltm_a", SourceType.LTM, "ka", "fa", summary="Caroline: I ran 5k",
             similarity=0.9, said_at=day1)  # fmt: skip
    b = cand("ltm_b", SourceType.LTM, "kb", "fb", summary="Mel: I paint", similarity=0.8,
             said_at=day2)  # fmt: skip
    c = cand("ltm_c", SourceType.LTM, "kc", "fc", summary="Caroline: my knee hurts",
             similarity=0.7, said_at=day1 + 600)  # fmt: skip
    raw = cand("raw_d", SourceType.RAW_HISTORY, "raw:d", "fd", summary="Mel: nice run",
               similarity=0.6, said_at=day1, message_ids=("d",))  # fmt: skip
    counter = default_counter()
    cost = RenderCost(counter, "en", None)
    # When the pool keeps all four by their printed cost
    scored = build_pool([a, b, c, raw], query_entities=(), now=NOW, cost=cost,
                        policy=PoolPolicy(top_k=10, token_budget=1000))  # fmt: skip
    kept = [s for s in scored if s.verdict is Verdict.KEPT]
    text = render("", RenderedMemory.from_candidates([s.candidate for s in kept],
                                                    task_id=None), "en")  # fmt: skip
    # Then each day is headed once per section, the days in the order of their best line
    assert text == (
        "Related long-term experience:\n"
        "2023-05-07:\n- Caroline: I ran 5k\n- Caroline: my knee hurts\n"
        "2023-05-08:\n- Mel: I paint\n\n"
        "From earlier conversations:\n2023-05-07:\n- Mel: nice run"
    )
    # ... and the kept lines' charges add up to what was printed: the second line of a
    # day pays no heading
    tokens = {s.candidate.memory_id: s.tokens for s in kept}
    assert tokens["ltm_c"] == counter.count("- Caroline: my knee hurts") + 1
    assert tokens["ltm_b"] == counter.count("2023-05-08:") + 1 + counter.count("- Mel: I paint") + 1
    assert counter.count(text) <= sum(tokens.values())


def test_each_layer_keeps_its_relevance_order_in_the_pool() -> None:
    from memstrata.core.recall.ltm_adapter import rank_similarity

    # a layer's first result is fully similar, the tenth half as much, and order is kept
    sims = [rank_similarity(r) for r in range(12)]
    assert sims[0] == 1.0 and sims[10] == pytest.approx(0.5)
    assert sims == sorted(sims, reverse=True) and len(set(sims)) == 12


def test_long_term_candidates_age_over_a_month_and_stm_over_a_day() -> None:
    from memstrata.core.recall.pool import RescoreWeights, rescore

    w = RescoreWeights()
    day = 24 * 3600.0
    stm = cand("m1", SourceType.REDIS_STM, "k1", "f1", updated_at=NOW - day)
    ltm = cand("l1", SourceType.LTM, "k2", "f2", updated_at=NOW - day)
    raw = cand("r1", SourceType.RAW_HISTORY, "k3", "f3", updated_at=NOW - 30 * day)
    part = {c.memory_id: rescore(c, query_entities=[], now=NOW, weights=w)[1]["recency"]
            for c in (stm, ltm, raw)}  # fmt: skip
    assert part["m1"] == pytest.approx(w.recency / 2)  # one STM half-life
    assert part["l1"] > 0.97 * w.recency  # a day is nothing to long-term memory
    assert part["r1"] == pytest.approx(w.recency / 2)  # its half-life is a month


def test_a_message_both_long_term_layers_found_outranks_one_found_by_one_layer() -> None:
    from memstrata.core.recall.pool import corroborate

    # Given the card layer's first result (message d1) and the raw index's first (d2), and
    # d2's card second in the card layer: d2 is the message both layers found high
    c1 = cand("ltm_1", SourceType.LTM, "k1", "f1", layer_rank=0, message_ids=("d1",))
    c2 = cand("ltm_2", SourceType.LTM, "k2", "f2", layer_rank=1, message_ids=("d2",))
    r2 = cand("raw_2", SourceType.RAW_HISTORY, "raw:d2", "f3", layer_rank=0, message_ids=("d2",))
    r1 = cand("raw_1", SourceType.RAW_HISTORY, "raw:d1", "f4", layer_rank=7, message_ids=("d1",))
    sim = {c.memory_id: c.similarity for c in corroborate([c1, c2, r2, r1], k=10)}
    # Then d2's card and raw copy carry the pool's best relevance, d1's the votes it had
    assert sim["ltm_2"] == sim["raw_2"] == 1.0
    assert sim["ltm_1"] == sim["raw_1"] == pytest.approx((1 / 11 + 1 / 18) / (1 / 12 + 1 / 11))
    # and in the pool d2's card comes first, its raw copy is a duplicate of it
    pool = build_pool([c1, c2, r2, r1], query_entities=[], now=NOW,
                      policy=PoolPolicy(top_k=5, token_budget=1000))  # fmt: skip
    kept = [s.candidate.memory_id for s in pool if s.verdict is Verdict.KEPT]
    assert kept == ["ltm_2", "ltm_1"]


def test_a_raw_message_no_card_holds_is_not_outvoted_by_the_layer_that_cannot_see_it() -> None:
    from memstrata.core.recall.pool import corroborate

    # Given the raw index's first result, an assistant answer no curated card holds (d9),
    # and a card with its raw copy at ranks 5 and 4 (d2)
    raw9 = cand("raw_9", SourceType.RAW_HISTORY, "raw:d9", "f1", layer_rank=0,
                message_ids=("d9",), uncurated=True)  # fmt: skip
    raw2 = cand("raw_2", SourceType.RAW_HISTORY, "raw:d2", "f2", layer_rank=4, message_ids=("d2",))
    card = cand("ltm_2", SourceType.LTM, "k2", "f3", layer_rank=5, message_ids=("d2",))
    # When the layers vote without standing in for the card layer, d2 wins on two votes
    plain = {c.memory_id: c.similarity for c in corroborate([raw9, raw2, card], k=10)}
    assert plain["raw_9"] < plain["ltm_2"] == 1.0
    # Then with half its own vote standing in for the layer that cannot see it, d9 leads
    fair = {c.memory_id: c.similarity for c in corroborate([raw9, raw2, card], 10, 0.5)}
    assert fair["raw_9"] == 1.0 > fair["ltm_2"]
    assert fair["ltm_2"] == pytest.approx((1 / 16 + 1 / 15) / (1.5 / 11))
    # And a raw message that is curated, or one with the card layer absent, gets no stand-in
    assert fair["raw_2"] == fair["ltm_2"]
    alone = {c.memory_id: c.similarity for c in corroborate([raw9, raw2], 10, 0.5)}
    assert alone == {"raw_9": 1.0, "raw_2": pytest.approx(11 / 15)}


def test_unranked_candidates_keep_their_similarity_a_card_without_sources_its_own_vote() -> None:
    from memstrata.core.recall.pool import corroborate

    stm = cand("m1", SourceType.REDIS_STM, "k1", "f1", similarity=0.42, message_ids=("d1",))
    assert corroborate([stm], k=10) == [stm]  # no long-term layer: nothing to fuse
    summary = cand("ltm_s", SourceType.LTM, "k2", "f2", layer_rank=0)  # no provenance
    raw = cand("raw_1", SourceType.RAW_HISTORY, "raw:d1", "f3", layer_rank=3, message_ids=("d1",))
    sim = {c.memory_id: c.similarity for c in corroborate([stm, summary, raw], k=10)}
    assert sim == {"m1": 0.42, "ltm_s": 1.0, "raw_1": pytest.approx(11 / 14)}


def test_a_card_never_borrows_the_vote_of_a_better_card_of_its_own_layer() -> None:
    from memstrata.core.recall.pool import corroborate

    # Given the top card (d1) and, ninth, a session card holding d1 among 29 messages
    top = cand("ltm_1", SourceType.LTM, "k1", "f1", layer_rank=0, message_ids=("d1",))
    wide = cand("ltm_9", SourceType.LTM, "k2", "f2", layer_rank=9,
                message_ids=tuple(f"d{i}" for i in range(1, 30)))  # fmt: skip
    raw = cand("raw_1", SourceType.RAW_HISTORY, "raw:d1", "f3", layer_rank=0, message_ids=("d1",))
    sim = {c.memory_id: c.similarity for c in corroborate([top, wide, raw], k=10)}
    # Then the top card and its raw copy carry the best relevance, the wide card its own
    # vote plus the raw layer's vote for d1, not the top card's vote as well
    assert sim["ltm_1"] == sim["raw_1"] == 1.0
    assert sim["ltm_9"] == pytest.approx((1 / 20 + 1 / 11) / (2 / 11))


def test_a_pg_only_question_that_no_fact_answers_also_asks_long_term_memory() -> None:
    from memstrata.core.recall.route import with_pg_fallback
    from memstrata.core.recall.service import facts_matching

    from .authority_snapshots import snapshot

    # Given a preference question, routed to PostgreSQL alone
    profile = build_query_profile("What is my favorite style of dance?", NEW_SESSION)
    route = decide_route(profile)
    assert route.need_pg and not (route.need_ltm or route.need_redis)
    # When PG holds no fact about it, long-term memory (and the raw-history floor) is asked
    nothing = snapshot(profile__language="en-GB")
    assert facts_matching(nothing, "What is my favorite style of dance?") == 0
    after = with_pg_fallback(route, profile, 0)
    assert after.need_ltm and after.need_pg and after.ltm_mode is not None
    assert "pg_result_insufficient" in after.reasons["ltm"][-1]
    # And a fact that matches a content word of the question keeps the route as it was
    dancer = snapshot(preference__dance_style="salsa")
    assert facts_matching(dancer, "What is my favorite style of dance?") == 1
    assert with_pg_fallback(route, profile, 1) == route
    # A route that already reads STM or LTM is never changed
    stm_route = route.model_copy(update={"need_redis": True})
    assert with_pg_fallback(stm_route, profile, 0) == stm_route


def test_facts_matching_counts_content_words_in_english_and_chinese() -> None:
    from memstrata.core.recall.service import facts_matching

    from .authority_snapshots import snapshot

    colours = snapshot(preference__favorite_color="green")
    # question words and "favorite" alone do not make a colour fact answer a dance question
    assert facts_matching(colours, "What is my favorite dance?") == 0
    assert facts_matching(colours, "What is my favorite color?") == 1
    # Chinese: two-character words match, a shared single character does not
    tea = snapshot(preference__drink="喜欢喝绿茶")
    assert facts_matching(tea, "我喜欢喝什么茶？") == 1
    assert facts_matching(tea, "我最喜爱的舞蹈风格是什么？") == 0


_LEXICON_TEXTS = st.text(
    alphabet=st.sampled_from(
        "那个接口还是超时以前有没有类似案例权限配置默认环境继续验证上次一样 abcEXPORTerror?"
    ),
    max_size=40,
)


@given(_LEXICON_TEXTS)
def test_a_query_lexicon_name_matches_as_one_alternation_exactly_when_one_pattern_does(
    text: str,
) -> None:
    """The profile asks each name's patterns as one compiled alternation: the same answer
    as trying every pattern of the data file in turn, for every name."""
    from memstrata.core.recall.profile import default_query_lexicon

    lx = default_query_lexicon()
    for name, patterns in lx.patterns.items():
        one_by_one = any(p.search(text) for p in patterns)
        assert lx.hit(name, text) is one_by_one, (name, text)
    assert set(lx._any) == set(lx.patterns)  # every name of the data file is combined


def _lexicon_words() -> list[str]:
    """Each query-lexicon pattern's literal words (regex syntax stripped)."""
    import re

    from memstrata.core.recall.profile import default_query_lexicon

    return [
        re.sub(r"\\[bBdwsS]|[\\^$.|?*+()\[\]{}]", " ", p.pattern).strip()
        for ps in default_query_lexicon().patterns.values()
        for p in ps
    ]


def test_every_lexicon_pattern_s_own_words_get_the_same_answer_combined() -> None:
    """Positive cases: each pattern's literal words as the text."""
    from memstrata.core.recall.profile import default_query_lexicon

    lx = default_query_lexicon()
    texts = _lexicon_words()
    assert sum(lx.hit(n, t) for n in lx.patterns for t in texts) > len(texts)  # many hit
    for name, patterns in lx.patterns.items():
        for text in texts:
            assert lx.hit(name, text) is any(p.search(text) for p in patterns), (name, text)


def test_function_words_do_not_make_an_unrelated_stm_item_relevant() -> None:
    # Given a question about a subscription, and an STM item about something else that
    # shares only how / my / to / the / i / m / for with it (BEAM chat 6: three such items
    # of the last session outranked the answer)
    question = (
        "How much does my subscription to the service I'm using for my resume cost each month?"
    )
    unrelated = terms(
        "I'm trying to manage my relocation logistics, how do I plan the move for it?"
    )
    related = terms("My Canva Pro subscription for the resume service costs $12.99 each month")
    # Then the question's terms are what it is about, and only the related item covers them
    q = query_terms(question)
    assert q == {"subscription", "service", "using", "resume", "cost", "month"}
    assert coverage(q, unrelated) == 0.0
    assert coverage(q, related) >= RoutingPolicy().min_relevance
    # And a question of function words alone keeps them: it still matches something
    assert query_terms("what did I do?") == terms("what did I do?")
    assert query_terms("是他吗？") == terms("是他吗？")


def test_chinese_function_characters_are_not_what_a_question_is_about() -> None:
    # Given a MemDaily question whose answer names neither 我 nor 那个 nor 怎么样, and a
    # distractor that shares exactly those characters with it
    question = "我住的那个小区怎么样啊？"
    distractor = terms("我的那个同事怎么样了？")
    answer = terms("我住的那个小区叫绿洲家园。")
    # Then its topic is what it asks about: no function character alone, no bigram of two
    q = query_terms(question)
    assert q == {"住", "小", "区", "我住", "住的", "个小", "小区", "区怎"}
    assert coverage(q, distractor) == 0.0
    assert coverage(q, answer) == 7 / 8
    # And a word with one function character in it is still a word of the question
    assert {"地址", "过敏"} <= query_terms("我的地址是什么？对什么过敏？")


def test_a_long_raw_message_is_injected_as_the_sentences_the_question_matched() -> None:
    from memstrata.core.recall.text import snippet

    answer = (
        "Certainly! Let's look at this together. The probability of drawing an ace is 4/52, "
        "which is 1/13. Drawing two cards changes things. You should also consider whether "
        "you replace the first card. Dice work the same way."
    )
    q = query_terms("What probability of drawing an ace did you give me?")
    # A message that fits is kept whole
    assert snippet(answer, q, len(answer)) == answer
    # A long one gives the matching sentence and its neighbours, marked where cut, in bounds
    short = snippet(answer, q, 120)
    assert "The probability of drawing an ace is 4/52, which is 1/13." in short
    assert short.startswith("… ") and short.endswith(" …") and len(short) <= 120
    # One sentence longer than the snippet gives its head; Chinese sentences split too
    assert snippet("x" * 500, q, 100) == "x" * 96 + " …"
    zh = snippet("第一句话。概率是四分之一。第三句话很长很长很长。", query_terms("概率是多少"), 12)
    assert zh == "… 概率是四分之一。 …"


_PIECES = st.sampled_from(
    ["数据库", "线程池", "打满了", "，", "。", "！", "createOrder", " p99", " 2300ms", "...",
     "?", " ", "  ", "\n", "🙂", "Caroline", " said", " yes", ":", "“引号”", "(", ")", "-", "42"]
)  # fmt: skip
_TEXTS = st.lists(_PIECES, min_size=1, max_size=40).map("".join)


@settings(deadline=None, max_examples=300)  # the first example loads the tokenizer
@given(
    texts=st.lists(_TEXTS, min_size=1, max_size=30),
    budget=st.integers(min_value=0, max_value=400),
    lang=st.sampled_from(["zh", "en"]),
    task=st.sampled_from([None, "bug456"]),
)
def test_the_printed_block_never_exceeds_the_token_budget(
    texts: list[str], budget: int, lang: Literal["zh", "en"], task: str | None
) -> None:
    from memstrata.core.compress.tokens import default_counter
    from memstrata.core.recall.render import RenderCost, RenderedMemory, render

    # Given candidates of every layer with any mix of scripts, punctuation and spaces
    sources = (SourceType.REDIS_STM, SourceType.LTM, SourceType.RAW_HISTORY)
    cands = [
        cand(f"m{i}", sources[i % 3], f"k{i}", f"f{i}", summary=t, similarity=1 / (i + 1),
             said_at=NOW - (i % 4) * 86_400 if i % 5 else None, message_ids=(f"d{i}",))
        for i, t in enumerate(texts)
    ]  # fmt: skip
    counter = default_counter()
    cost = RenderCost(counter, lang, task)
    # When the pool keeps lines by their printed cost
    scored = build_pool(cands, query_entities=(), now=NOW, cost=cost,
                        policy=PoolPolicy(top_k=30, token_budget=budget))  # fmt: skip
    kept = [s for s in scored if s.verdict is Verdict.KEPT]
    text = render("", RenderedMemory.from_candidates([s.candidate for s in kept], task_id=task),
                  lang)  # fmt: skip
    # Then the block as printed fits the budget, counted by the real tokenizer
    assert counter.count(text) <= budget
    assert counter.count(text) <= sum(s.tokens for s in kept)
    # ... and a line left out did not fit what the lines above it left
    used = sum(s.tokens for s in kept)
    for s in scored:
        if s.verdict is Verdict.OVER_BUDGET:
            assert used + s.tokens > budget


def test_chinese_lines_are_charged_their_real_tokens_not_the_estimate() -> None:
    from memstrata.core.compress.tokens import default_counter
    from memstrata.core.recall.render import RenderCost

    # Given a Chinese raw message (cl100k spends more than one token on many CJK characters)
    text = "我上周在杭州参加了一个关于机器学习的会议，认识了很多新朋友，下个月打算再去上海看展览。"
    c = cand("raw_1", SourceType.RAW_HISTORY, "raw:d1", "f1", summary=text, said_at=NOW)
    cost = RenderCost(default_counter(), "zh", None)
    # Then its cost is the printed line's count (plus its line break), above the estimate
    assert cost(c, opens_section=False) == default_counter().count("- " + text) + 1
    assert cost(c, opens_section=False) > estimate_tokens(text)
    # ... opening its day adds the day's heading and its break
    heading = default_counter().count(time.strftime("%Y-%m-%d:", time.gmtime(NOW))) + 1
    assert cost(c, False, opens_day=True) == cost(c, opens_section=False) + heading
    # ... and opening its section adds the title's tokens and the blank line before it
    title = default_counter().count("相关原始对话：") + 2
    assert cost(c, opens_section=True) == cost(c, opens_section=False) + title


def test_a_long_term_line_that_says_what_is_asked_wins_a_near_tie_of_the_layers_order() -> None:
    # Given two long-term lines about Melanie, the small talk a little higher in the
    # layers' order (LoCoMo: a flat vector list), and an STM item that names camping
    q = "Where has Melanie camped?"
    chat = cand("ltm_chat", SourceType.LTM, "k1", "f1", similarity=0.40,
                summary="Melanie: Great chatting with you!", entities=("Melanie",))  # fmt: skip
    camp = cand("raw_camp", SourceType.RAW_HISTORY, "k2", "f2", similarity=0.36,
                summary="Melanie: We camped at the beach", entities=("Melanie",))  # fmt: skip
    stm = cand("m1", SourceType.REDIS_STM, "k3", "f3", similarity=0.25,
               summary="camping trip planned")  # fmt: skip

    def ranked(weights: RescoreWeights) -> list[Scored]:
        return build_pool([chat, camp, stm], query_entities=["Melanie"], now=NOW,
                          policy=PoolPolicy(weights=weights), query=q)  # fmt: skip

    # Then, with the exact-word blend on (since the topic rank, off by default), the line
    # that says "camped" ("camp", stemmed) ranks first: its similarity is 0.8 × its order
    # + 0.2 × its coverage of the question's words beside the name
    exact = RescoreWeights(topic_coverage=0.2, topic_rank=0.0)
    blended = {s.candidate.memory_id: s for s in ranked(exact)}
    assert blended["raw_camp"].parts["similarity"] == pytest.approx(0.7 * (0.8 * 0.36 + 0.2))
    assert blended["ltm_chat"].parts["similarity"] == pytest.approx(0.7 * 0.8 * 0.40)
    assert blended["raw_camp"].score > blended["ltm_chat"].score
    # And STM keeps its own similarity (it already is its term coverage)
    assert blended["m1"].parts["similarity"] == pytest.approx(0.7 * 0.25)
    # And without the blend the layers' order alone decides, as before
    off = RescoreWeights(topic_coverage=0.0, topic_rank=0.0)
    plain = {s.candidate.memory_id: s for s in ranked(off)}
    assert plain["ltm_chat"].score > plain["raw_camp"].score


def test_the_topic_of_a_question_is_its_words_beside_the_entities_it_names() -> None:
    asked = query_terms("What did Caroline research?")
    assert topic_terms(asked, ["Caroline"]) == {"research"}
    # an identifier's parts are its terms too; CJK words beside it stay
    zh = topic_terms(query_terms("createOrder 超时了吗"), ["createOrder"])
    assert "超时" in zh and not zh & {"createorder", "create", "order"}
    # a question that is only the name keeps it: there is nothing else to match on
    assert topic_terms(query_terms("Caroline?"), ["Caroline"]) == {"caroline"}
    assert topic_terms(asked, []) == asked


def test_a_question_with_nothing_beside_its_names_leaves_the_layers_order_alone() -> None:
    # Given a long-term line that says the name and one that ranks higher without it
    named = cand("ltm_named", SourceType.LTM, "k1", "f1", similarity=0.30,
                 summary="Caroline: thanks!", entities=("Caroline",))  # fmt: skip
    other = cand("ltm_other", SourceType.LTM, "k2", "f2", similarity=0.40,
                 summary="Caroline went to a support group", entities=("Caroline",))  # fmt: skip
    for question in ("Caroline?", "What did Caroline do?"):
        # When the question is only the name (and function words)
        policy = PoolPolicy()
        pool = build_pool([named, other], query_entities=["Caroline"], now=NOW, policy=policy,
                          query=question)  # fmt: skip
        scored = {s.candidate.memory_id: s for s in pool}
        # Then neither line's relevance counts the name again: the layers' order decides
        assert scored["ltm_named"].parts["similarity"] == pytest.approx(0.7 * 0.30)
        assert scored["ltm_other"].parts["similarity"] == pytest.approx(0.7 * 0.40)
    # And the words beside the name are the whole topic, with no fallback to the name
    assert question_topic("Caroline?", ["Caroline"]) == set()
    assert question_topic("what did I do?", []) == set()
    assert question_topic("What did Caroline research?", ["Caroline"]) == {"research"}


_BLEND_WORDS = ["camping", "camped", "beach", "research", "researching", "the", "what",
                "did", "Melanie", "Caroline", "小区", "我", "的", "住", "timeout"]  # fmt: skip


def _expected_topic(query: str, names: list[str]) -> frozenset[str]:
    """The blend's topic worked out from the rules as documented, not through the pool."""
    named = set().union(*(terms(n) for n in names)) if names else set()
    content = {
        t for t in terms(query)
        if t not in FUNCTION_WORDS and not all(c in CJK_FUNCTION_CHARS for c in t)
    }  # fmt: skip
    return frozenset(stem(t) for t in content - named)


@settings(max_examples=150, deadline=None)
@given(
    query=st.lists(st.sampled_from(_BLEND_WORDS), max_size=6).map(" ".join),
    names=st.lists(st.sampled_from(["Melanie", "Caroline"]), max_size=2, unique=True),
    lines=st.lists(
        st.tuples(
            st.sampled_from(list(SourceType)),
            st.lists(st.sampled_from(_BLEND_WORDS), min_size=1, max_size=6).map(" ".join),
            st.floats(0.0, 1.0),
            st.lists(st.sampled_from(["Melanie", "Caroline"]), max_size=2, unique=True),
        ),
        min_size=1,
        max_size=6,
    ),
    share=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
)
def test_the_topic_blend_changes_only_a_long_term_lines_relevance_and_as_documented(
    query: str,
    names: list[str],
    lines: list[tuple[SourceType, str, float, list[str]]],
    share: float,
) -> None:
    topic = _expected_topic(query, names)
    for i, (source, summary, similarity, entities) in enumerate(lines):
        c = cand(f"c{i}", source, f"k{i}", f"f{i}", summary=summary, similarity=similarity,
                 entities=tuple(entities))  # fmt: skip
        _, blended = rescore(c, query_entities=names, now=NOW, query=query,
                             weights=RescoreWeights(topic_coverage=share))  # fmt: skip
        _, plain = rescore(c, query_entities=names, now=NOW, query=query,
                           weights=RescoreWeights(topic_coverage=0.0))  # fmt: skip
        # Every feature but relevance is untouched by the blend
        assert {k: v for k, v in blended.items() if k != "similarity"} == {
            k: v for k, v in plain.items() if k != "similarity"
        }
        line = {stem(t) for t in terms(summary + " " + " ".join(entities))}
        if source is SourceType.REDIS_STM or not topic:
            expected = similarity  # STM's relevance is its coverage already; no topic: none
        else:
            covered = len(topic & line) / len(topic)
            expected = (1 - share) * similarity + share * covered
        assert blended["similarity"] == pytest.approx(0.7 * expected)


def _terms_camel_pass_always(text: str) -> set[str]:
    """terms() as it was before the camel-case pass was skipped for text without a
    lower-to-upper boundary (the reference for the test below)."""
    import itertools
    import re

    word = re.compile(r"[a-z0-9_]+|[\u4e00-\u9fff]")
    folded = text.casefold()
    out = set(word.findall(folded))
    if any(c.isupper() for c in text):
        out.update(word.findall(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text).casefold()))
    for run in re.findall(r"[\u4e00-\u9fff]{2,}", folded):
        out.update(a + b for a, b in itertools.pairwise(run))
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="aZ9_ Ébcß.:-iPhone3D小区我createOrder", max_size=40))
def test_terms_are_the_same_whether_or_not_the_camel_case_pass_runs(text: str) -> None:
    assert terms(text) == _terms_camel_pass_always(text)


def test_an_identifiers_camel_case_parts_are_terms() -> None:
    assert terms("createOrder iPhone 3D") >= {"createorder", "create", "order", "i", "phone"}
    assert terms("Caroline went camping") == {"caroline", "went", "camping"}


_QUESTION_PARTS = ["我", "的", "那个", "小区", "怎么样", "地址", "过敏", "是", "what", "did", "I",
                   "live", "the", "camping", "Where", "has", "you", "？", " "]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_QUESTION_PARTS), max_size=12).map("".join))
def test_a_questions_words_are_its_terms_without_function_terms_by_the_documented_rule(
    text: str,
) -> None:
    found = terms(text)
    content = {
        t for t in found
        if t not in FUNCTION_WORDS and not all(c in CJK_FUNCTION_CHARS for c in t)
    }  # fmt: skip
    assert query_terms(text) == (content or found)


@settings(max_examples=300)
@example(words=["这个", "报错"], filler="", task=None, history_without_task=True)
@example(words=["the same", "error"], filler="createOrder ", task=None, history_without_task=True)
@given(
    words=st.lists(st.sampled_from(_lexicon_words()), max_size=3),
    filler=st.sampled_from(["", "createOrder ", "What did Caroline paint? ", "数据库 "]),
    task=st.sampled_from([None, "bug456"]),
    history_without_task=st.booleans(),
)
def test_the_early_ltm_guess_is_the_route_s_answer_before_any_state_is_read(
    words: list[str], filler: str, task: str | None, history_without_task: bool
) -> None:
    """Recall starts a query's embedding on ``expects_ltm`` before STM and PG are read:
    it must say what ``decide_route`` says for the same text and task when the state adds
    nothing (no insufficient STM pass, profile cache present), and the state can only add
    long-term memory, never take it away."""
    text = filler + " ".join(words)
    policy = RoutingPolicy(history_without_task=history_without_task)
    calm = RuntimeState(active_task_id=task, now=NOW)
    guess = expects_ltm(text, active_task=task is not None, policy=policy)
    route = decide_route(build_query_profile(text, calm), policy, ltm_available=True)
    assert guess is route.need_ltm, text
    if route.need_ltm:  # and whether the card search will want the query's vector
        assert ltm_searches_vectors(text) is (route.ltm_mode is not LtmMode.LEXICAL), text
    busy = calm.model_copy(
        update={"last_recall_insufficient": True, "profile_cache_missing": True,
                "recent_entities": ("createOrder",), "last_turn_at": NOW - 60}
    )  # fmt: skip
    later = decide_route(build_query_profile(text, busy), policy, ltm_available=True)
    assert later.need_ltm or not guess


def test_the_early_ltm_guess_covers_each_query_only_rule() -> None:
    assert expects_ltm("以前有没有类似案例？", active_task=True)  # similarity request
    assert expects_ltm("What does Melanie like to paint?", active_task=False)  # general
    assert not expects_ltm("What does Melanie like to paint?", active_task=True)
    assert not expects_ltm("那个接口还是超时", active_task=True)  # the task's state answers
    assert not expects_ltm("我有哪些权限？", active_task=False)  # a PG question
