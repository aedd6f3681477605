"""The recall pool and STM candidate scoring as they were before the hot-path rewrite
(commit eee24db), kept only as a test oracle: ``test_recall_pool_oracle.py`` checks the
new code ranks every fixed pool exactly as this one does.  Do not use outside tests."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence

from memstrata.core.recall.pool import (
    PoolCandidate,
    PoolPolicy,
    RescoreWeights,
    Scored,
    SourceType,
    Verdict,
)
from memstrata.core.recall.when import date_window, said_within
from memstrata.core.stm.store import StmHit

_CJK = re.compile(r"[\u4e00-\u9fff]")


def estimate_tokens(text: str) -> int:
    """Cheap token estimate for budgeting: ~1 per CJK character, ~1 per 4 other chars."""
    cjk = len(_CJK.findall(text))
    return cjk + max(1, (len(text) - cjk) // 4) + 2


def _better(a: PoolCandidate, b: PoolCandidate) -> bool:
    if a.source_priority != b.source_priority:
        return a.source_priority > b.source_priority
    return a.updated_at > b.updated_at


def dedup(
    candidates: Iterable[PoolCandidate],
) -> tuple[list[PoolCandidate], list[tuple[PoolCandidate, str]]]:
    """Keep one candidate per canonical key, then per fingerprint, then per wording; report
    the losers.

    The kept candidate inherits the losers' source messages: the same words from two
    places (an episode and a one-item session summary) are one memory with both
    provenances, and the one without provenance must not erase the other's."""
    dropped: list[tuple[PoolCandidate, str]] = []
    for key in ("canonical_fact_key", "fingerprint", "wording"):
        best: dict[str, PoolCandidate] = {}
        for c in candidates:
            k = _wording(c) if key == "wording" else getattr(c, key)
            cur = best.get(k)
            if cur is None:
                best[k] = c
                continue
            win, lose = (c, cur) if _better(c, cur) else (cur, c)
            dropped.append((lose, f"same {key} as {win.memory_id} ({win.source_type.value})"))
            best[k] = _with_provenance(win, lose)
        candidates = list(best.values())
    return list(candidates), dropped


def _wording(c: PoolCandidate) -> str:
    return " ".join(c.summary.casefold().split())


def _with_provenance(win: PoolCandidate, lose: PoolCandidate) -> PoolCandidate:
    extra = [m for m in lose.message_ids if m not in win.message_ids]
    if not extra:
        return win
    return win.model_copy(update={"message_ids": (*win.message_ids, *extra)})


def named_in(entity: str, folded_query: str) -> bool:
    """Whether the query names ``entity`` as a whole word (CJK: as a substring)."""
    e = entity.casefold()
    if len(e) < 2 or e not in folded_query:  # the cheap test first: most entities miss
        return False
    if _CJK.search(e):
        return True
    return re.search(rf"(?<![\w-]){re.escape(e)}(?![\w-])", folded_query) is not None


def rescore(
    c: PoolCandidate,
    *,
    query_entities: Sequence[str],
    now: float,
    weights: RescoreWeights,
    query: str = "",
) -> tuple[float, dict[str, float]]:
    """Weighted features of one candidate.  Entity overlap counts the query's extracted
    entities, and also the candidate's own entities that the query names: a person or
    project the extractor has no pattern for ("what did Caroline say…") still matches."""
    age = max(0.0, now - c.updated_at)
    half_life = (
        weights.recency_half_life_s
        if c.source_type is SourceType.REDIS_STM
        else weights.long_term_half_life_s
    )
    recency = math.exp(-math.log(2) * age / half_life)
    q = {e.casefold() for e in query_entities}
    mine = {e.casefold() for e in c.entities}
    overlap = len(q & mine) / len(q) if q else 0.0
    if overlap < 1.0 and query:
        folded = query.casefold()
        if any(named_in(e, folded) for e in mine - q):
            overlap = 1.0
    parts = {
        "similarity": weights.similarity * c.similarity,
        "importance": weights.importance * c.importance,
        "recency": weights.recency * recency,
        "entity_overlap": weights.entity_overlap * overlap,
        "source_priority": weights.source_priority * c.source_priority / 100.0,
        "named_date": weights.named_date * said_within(c.said_at, date_window(query, now)),
    }
    return sum(parts.values()), parts


Override = Callable[[PoolCandidate], str | None]
"""Returns a reason when the authority layer overrides the candidate, else None."""


def build_pool(
    candidates: Iterable[PoolCandidate],
    *,
    query_entities: Sequence[str],
    now: float,
    policy: PoolPolicy,
    authority: Override | None = None,
    query: str = "",
) -> list[Scored]:
    """Rank the pool; the result lists every candidate, kept ones first in rank order."""
    unique, dups = dedup(candidates)
    out: list[Scored] = []
    live: list[tuple[float, dict[str, float], PoolCandidate]] = []
    for c in unique:
        score, parts = rescore(
            c, query_entities=query_entities, now=now, weights=policy.weights, query=query
        )
        why = authority(c) if authority else None
        if why:
            out.append(Scored(candidate=c, score=score, parts=parts, verdict=Verdict.OVERRIDDEN,
                              reason=why, tokens=estimate_tokens(c.summary)))  # fmt: skip
        else:
            live.append((score, parts, c))
    pinned = policy.pinned_types
    live.sort(
        key=lambda x: (x[2].memory_type not in pinned, -x[0], -x[2].updated_at, x[2].memory_id)
    )
    kept: list[Scored] = []
    rest: list[Scored] = []
    used = 0
    rank = -1
    covered: set[str] = set()  # source messages of what is kept so far
    for score, parts, c in live:
        tokens = estimate_tokens(c.summary)
        raw = c.source_type is SourceType.RAW_HISTORY
        if raw and c.message_ids and covered.issuperset(c.message_ids):
            # the fallback only adds what the curated memories above it do not say
            rest.append(
                Scored(
                    candidate=c,
                    score=score,
                    parts=parts,
                    verdict=Verdict.DUPLICATE,
                    reason="its message is already in a kept memory",
                    tokens=tokens,
                )
            )
            continue  # fmt: skip
        rank += 1
        if rank >= policy.top_k:
            verdict, reason = Verdict.BELOW_TOP_K, f"rank {rank + 1} > top_k {policy.top_k}"
        elif used + tokens > policy.token_budget:
            verdict, reason = Verdict.OVER_BUDGET, f"{used}+{tokens} > {policy.token_budget} tokens"
        else:
            used += tokens
            covered.update(c.message_ids)
            verdict, reason = Verdict.KEPT, f"rank {rank + 1}"
        s = Scored(
            candidate=c, score=score, parts=parts, verdict=verdict, reason=reason, tokens=tokens
        )
        (kept if verdict is Verdict.KEPT else rest).append(s)
    for c, why in dups:
        score, parts = rescore(
            c, query_entities=query_entities, now=now, weights=policy.weights, query=query
        )
        rest.append(Scored(candidate=c, score=score, parts=parts, verdict=Verdict.DUPLICATE,
                           reason=why, tokens=estimate_tokens(c.summary)))  # fmt: skip
    return kept + rest + out


_WORD = re.compile(r"[a-z0-9_]+|[\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def terms(text: str) -> set[str]:
    folded = text.casefold()
    out = set(_WORD.findall(folded))
    if any(c.isupper() for c in text):
        out.update(_WORD.findall(_CAMEL.sub(" ", text).casefold()))
    for run in _CJK_RUN.findall(folded):
        out.update(a + b for a, b in itertools.pairwise(run))
    return out


def coverage(query: set[str], doc: set[str]) -> float:
    return len(query & doc) / len(query) if query else 0.0


def stm_candidate(hit: StmHit, q_terms: set[str]) -> PoolCandidate:
    doc = terms(hit.summary + " " + " ".join(hit.entities))
    return PoolCandidate.model_construct(
        memory_id=hit.memory_id,
        source_type=SourceType.REDIS_STM,
        summary=hit.summary,
        canonical_fact_key=hit.canonical_fact_key,
        fingerprint=hit.fingerprint,
        memory_type=hit.memory_type,
        similarity=coverage(q_terms, doc),
        importance=hit.importance,
        updated_at=hit.updated_at,
        entities=hit.entities,
        message_ids=hit.message_ids,
        task_id=hit.task_id,
        tenant_id=None,
        project_id=None,
    )
