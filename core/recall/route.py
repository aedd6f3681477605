"""Rule routing (seed 九): which layers a query needs, and how to search LTM (seed 七.4).

The defaults are the seed's rules verbatim; :class:`RoutingPolicy` makes the intent sets
configurable.  Routing is decided before any store is touched, and again after the STM
pass when that pass turned out insufficient (the LTM fallback).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from memstrata.core.ltm.text import exact_terms
from memstrata.core.recall.profile import (
    QueryLexicon,
    QueryProfile,
    default_query_lexicon,
    query_intent,
)


class LtmMode(StrEnum):
    LEXICAL = "lexical"
    VECTOR = "vector"
    HYBRID = "hybrid"


class RoutingPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    pg_intents: frozenset[str] = frozenset({"profile_query", "permission_query", "config_query"})
    redis_intents: frozenset[str] = frozenset(
        {"continue_task", "debug_continue", "verify_current_state"}
    )
    min_redis_results: int = Field(
        2, ge=0, description="fewer relevant STM hits than this = insufficient"
    )
    min_relevance: float = Field(
        0.5, ge=0, le=1, description="query-term coverage that makes an STM hit relevant"
    )
    history_without_task: bool = Field(
        True,
        description="a general question asked outside any task also searches LTM: with no "
        "task state to answer from, the answer is the user's history (seed 2 四)",
    )


class Route(BaseModel):
    model_config = ConfigDict(frozen=True)

    need_pg: bool
    need_redis: bool
    need_ltm: bool
    ltm_mode: LtmMode | None
    reasons: dict[str, list[str]]


def ltm_mode(p: QueryProfile) -> LtmMode:
    """Identifiers/error codes → lexical; vague similarity → vector; both, or a plain
    question (names of people and things included: they are words, not identifiers, and
    the vector index matches their paraphrases) → hybrid (seed 七.4)."""
    if p.entities and (p.has_similarity_request or p.fuzzy_history_reference):
        return LtmMode.HYBRID
    if p.exact_identifiers:
        return LtmMode.LEXICAL
    return (
        LtmMode.VECTOR
        if (p.has_similarity_request or p.fuzzy_history_reference)
        else LtmMode.HYBRID
    )


def decide_route(
    p: QueryProfile, policy: RoutingPolicy | None = None, *, ltm_available: bool = False
) -> Route:
    """The layers a query needs.  ``ltm_available``: a long-term store is configured (the
    no-task history rule only applies then, so a deployment without LTM is not flagged
    degraded for every general question)."""
    pol = policy or RoutingPolicy()
    why: dict[str, list[str]] = {"pg": [], "redis": [], "ltm": []}
    for flag, name in (
        (p.profile_cache_missing, "profile_cache_missing"),
        (p.profile_cache_stale, "profile_cache_stale"),
        (p.intent in pol.pg_intents, f"intent={p.intent}"),
        (p.needs_exact_metadata, "needs_exact_metadata"),
    ):
        if flag:
            why["pg"].append(name)
    for flag, name in (
        (p.has_reference, "has_reference"),
        (
            p.active_task_id is not None and p.intent in pol.redis_intents,
            f"active task + {p.intent}",
        ),
        (p.recent_entity_overlap > 0, f"recent_entity_overlap={p.recent_entity_overlap}"),
    ):
        if flag:
            why["redis"].append(name)
    for flag, name in (
        (p.has_similarity_request, "has_similarity_request"),
        (p.fuzzy_history_reference, "fuzzy_history_reference"),
        (p.redis_result_insufficient, "redis_result_insufficient"),
        (
            ltm_available
            and pol.history_without_task
            and p.active_task_id is None
            and p.intent == "general",
            "general question outside a task",
        ),
    ):
        if flag:
            why["ltm"].append(name)
    need_ltm = bool(why["ltm"])
    return Route(
        need_pg=bool(why["pg"]),
        need_redis=bool(why["redis"]),
        need_ltm=need_ltm,
        ltm_mode=ltm_mode(p) if need_ltm else None,
        reasons=why,
    )


def expects_ltm(
    text: str,
    *,
    active_task: bool,
    policy: RoutingPolicy | None = None,
    lexicon: QueryLexicon | None = None,
) -> bool:
    """Whether :func:`decide_route` asks long-term memory for ``text`` whatever the state:
    its LTM rules that read nothing but the text and whether a task is active (a
    similarity request, a fuzzy reference to the past, a general question outside a
    task).  Known before any store is read, so recall starts the query's embedding then;
    the state's rules (an insufficient STM pass, PG's fallback) can only add LTM later."""
    lx = lexicon or default_query_lexicon()
    if _asks_for_the_past(text, lx):
        return True
    pol = policy or RoutingPolicy()
    if active_task or not pol.history_without_task:
        return False
    return query_intent(text, active_task=False, lexicon=lx) == "general"


def ltm_searches_vectors(text: str, *, lexicon: QueryLexicon | None = None) -> bool:
    """Whether :func:`ltm_mode` asks the vector index for ``text``: every mode but
    LEXICAL, which a text gets when it names identifiers and asks for no similar case."""
    return _asks_for_the_past(text, lexicon or default_query_lexicon()) or not exact_terms(text)


def _asks_for_the_past(text: str, lx: QueryLexicon) -> bool:
    """A similarity request or a fuzzy reference to the past (the profile's two flags)."""
    return lx.hit("similarity", text) or lx.hit("fuzzy_history", text)


def with_pg_fallback(route: Route, p: QueryProfile, pg_hits: int) -> Route:
    """A question routed to PostgreSQL alone that no authoritative fact answers asks
    long-term memory too (and with it the raw-history floor, seed 十五.4).

    "What is my favourite style of dance?" is a preference question, but a preference
    said in passing lives in the conversation, not in PG until it is promoted: with no
    fact of PG matching the question (``pg_hits``), routing to PG alone returned nothing
    at all (7 of 100 BEAM dev questions, docs/QUALITY.md, third wave)."""
    if route.need_ltm or route.need_redis or not route.need_pg or pg_hits > 0:
        return route
    reasons = {k: list(v) for k, v in route.reasons.items()}
    reasons["ltm"].append("pg_result_insufficient (no authoritative fact matches)")
    return route.model_copy(update={"need_ltm": True, "ltm_mode": ltm_mode(p), "reasons": reasons})


def with_ltm_fallback(route: Route, p: QueryProfile, stm_hits: int, policy: RoutingPolicy) -> Route:
    """After the STM pass: too few hits makes the LTM pass necessary (seed 九.3)."""
    if route.need_ltm or stm_hits >= policy.min_redis_results:
        return route
    reasons = {k: list(v) for k, v in route.reasons.items()}
    reasons["ltm"].append(f"redis_result_insufficient ({stm_hits} < {policy.min_redis_results})")
    return route.model_copy(update={"need_ltm": True, "ltm_mode": ltm_mode(p), "reasons": reasons})
