"""One candidate pool for STM and LTM results (seed 十 and 十五).

Merge → the long-term layers' votes fused by source message (:func:`corroborate`) →
dedup by canonical_fact_key, then fingerprint (source priority Redis STM > LTM > raw
history; on a tie the newer wins) → drop what the authority layer overrides → rescore
(similarity, importance, recency, entity overlap, source priority, said on a date the
question names) → top-K → fit a token budget.  Every candidate leaves with a verdict and
a reason (explain mode).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from memstrata.core.ltm.text import stem
from memstrata.core.recall.text import (
    FUNCTION_TERMS,
    coverage,
    line_terms,
    named_terms,
    question_topic,
    stemmed,
)
from memstrata.core.recall.when import Window, date_window, said_within

if TYPE_CHECKING:
    from memstrata.core.recall.wordsim import WordVectors


class SourceType(StrEnum):
    REDIS_STM = "redis_stm"
    LTM = "ltm"
    RAW_HISTORY = "raw_history"


SOURCE_PRIORITY = {SourceType.REDIS_STM: 100, SourceType.LTM: 50, SourceType.RAW_HISTORY: 10}


class PoolCandidate(BaseModel):
    """A memory from any layer, in the one shape the pool ranks."""

    model_config = ConfigDict(frozen=True)

    memory_id: str
    source_type: SourceType
    summary: str
    canonical_fact_key: str
    fingerprint: str
    memory_type: str
    similarity: float = Field(0.0, ge=0.0, le=1.0)
    importance: float = Field(0.5, ge=0.0, le=1.0)
    updated_at: float
    entities: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    task_id: str | None = None
    # 0-based place in its layer's relevance order (LTM cards, raw history): the pool fuses
    # the layers' orders by source message (:func:`corroborate`); None: similarity as given
    layer_rank: int | None = Field(None, ge=0)
    tenant_id: str | None = None  # LTM cards carry their scope; STM keys already are scoped
    project_id: str | None = None
    # when what it says was said (a raw message, a dated card): its line shows the date,
    # and the budget pays for it as printed
    said_at: float | None = None
    # a raw message no curated card holds: the long-term layer cannot vote for it, so its
    # silence is no evidence against it (:func:`corroborate`)
    uncurated: bool = False

    @property
    def source_priority(self) -> int:
        return SOURCE_PRIORITY[self.source_type]


class RescoreWeights(BaseModel):
    model_config = ConfigDict(frozen=True)

    # relevance first, the priors below break near-ties: with 0.45 they outweighed the
    # layers' own order and moved the right message down (docs/QUALITY.md, third wave)
    similarity: float = 0.7
    importance: float = 0.2
    recency: float = 0.15
    entity_overlap: float = 0.1
    source_priority: float = 0.1
    # STM is the current task: a day-old item is stale.  Long-term memory and raw history
    # span months: with a day's half-life the last session's messages would outrank every
    # earlier one whatever the question asked.
    recency_half_life_s: float = Field(24 * 3600.0, gt=0)
    long_term_half_life_s: float = Field(30 * 24 * 3600.0, gt=0)
    # reciprocal-rank constant of :func:`corroborate` (the LTM search's for long queries)
    rank_fusion_k: int = Field(10, ge=1)
    # the share of an uncurated raw message's own vote that stands in for the long-term
    # layer's, which holds no card of it (docs/QUALITY.md, seventh wave)
    uncurated_vote: float = Field(0.5, ge=0.0, le=1.0)
    # the share of a long-term or raw line's similarity that is its coverage of the
    # question's topic words (:func:`line_topic_coverage`); the rest is the layers' fused
    # order (docs/QUALITY.md, tenth wave).  0 since the topic rank below, which counts
    # the same exact matches and the near ones besides (fourteenth wave)
    topic_coverage: float = Field(0.0, ge=0.0, le=1.0)
    # the share of a long-term or raw line's similarity that is its place in the pool's
    # order by soft topic coverage (:func:`topic_ranks`: each topic word of the question
    # met by the same word, or by its nearest word of the line in a static word-vector
    # table), as a reciprocal rank with constant ``topic_rank_k`` (fourteenth wave)
    topic_rank: float = Field(0.3, ge=0.0, le=1.0)
    topic_rank_k: int = Field(10, ge=1)
    # a line said inside the window of the dates the question spells out ("on 16 November,
    # 2023", "between August 11 and August 15"; :func:`~core.recall.when.date_window`): 0
    # when it names none (docs/QUALITY.md, twelfth wave)
    named_date: float = Field(0.3, ge=0.0, le=1.0)


class PoolPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    top_k: int = Field(8, ge=1, le=200)
    # what the memory lines may cost; the recall service passes what its request's budget
    # leaves after the profile block, which may be nothing
    token_budget: int = Field(600, ge=0)
    weights: RescoreWeights = RescoreWeights()
    # active constraints bind whatever the question: they rank first (seed 三: "当前约束")
    pinned_types: frozenset[str] = frozenset({"constraint"})


class Verdict(StrEnum):
    KEPT = "kept"
    DUPLICATE = "duplicate"
    OVERRIDDEN = "overridden_by_authority"
    BELOW_TOP_K = "below_top_k"
    OVER_BUDGET = "over_token_budget"


class Scored(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidate: PoolCandidate
    score: float
    parts: dict[str, float]
    verdict: Verdict
    reason: str
    # what its line costs: as rendered (:class:`LineCost`) for the candidates the budget
    # weighed, the cheap estimate (:func:`line_tokens`) for those it never reached
    tokens: int


class LineCost(Protocol):
    """Tokens a kept candidate adds to the rendered block: its line, plus its section's
    title when it is the first line of its section (``opens_section``), plus its day's
    heading when it is the first line of that day in its section (``opens_day``)."""

    def __call__(self, c: PoolCandidate, opens_section: bool, opens_day: bool = False) -> int: ...


_CJK = re.compile(r"[\u4e00-\u9fff]")


DATE_TOKENS = 8
"""What a day's heading, ``2023-05-08:`` and its line break, costs in cl100k tokens (the
digits split: 8 tokens, where :func:`estimate_tokens`' four characters a token would say
3), for the estimate of a pool built without a renderer; recall pays the printed block
(``core.recall.render.RenderCost``)."""


def day_of(source: SourceType, said_at: float | None) -> int | None:
    """The UTC day (days since the epoch) a long-term or raw line said at ``said_at`` is
    printed under; None for STM lines (never dated) and lines without a time.  Lines said
    the same day share one heading, so a day costs its tokens once (``core.recall.render``,
    which groups its lines by this same function)."""
    if source is SourceType.REDIS_STM or said_at is None or said_at <= 0:
        return None
    return int(said_at // 86_400)


def said_day(c: PoolCandidate) -> int | None:
    """:func:`day_of` a candidate."""
    return day_of(c.source_type, c.said_at)


def line_tokens(c: PoolCandidate) -> int:
    """A candidate's estimated cost alone: its text, and its day's heading when dated."""
    return estimate_tokens(c.summary) + (DATE_TOKENS if said_day(c) is not None else 0)


def estimated_cost(c: PoolCandidate, opens_section: bool, opens_day: bool = False) -> int:
    """The :class:`LineCost` of a pool built without a renderer: the line's estimate, its
    day's heading only for the day's first line."""
    return estimate_tokens(c.summary) + (DATE_TOKENS if opens_day else 0)


@lru_cache(maxsize=16_384)
def estimate_tokens(text: str) -> int:
    """Cheap token estimate for budgeting: ~1 per CJK character, ~1 per 4 other chars.

    Cached: recall budgets the same STM summaries on every call of a session."""
    cjk = len(_CJK.findall(text))
    return cjk + max(1, (len(text) - cjk) // 4) + 2


def corroborate(
    candidates: Sequence[PoolCandidate], k: int, uncurated_vote: float = 0.0
) -> list[PoolCandidate]:
    """The long-term candidates' similarity from every layer's vote for their messages.

    LTM cards and raw-history messages come as two ranked lists over mostly the same
    source messages.  Each layer votes ``1 / (k + rank + 1)`` for the messages of its
    ``rank``-th result (its best rank per message).  A candidate's relevance is its own
    vote plus, for the best of its messages, the other layers' votes for that message;
    scaled so the pool's best is 1.  A message both layers found high beats one that
    only one did: reciprocal rank fusion (Cormack et al., 2009) by message instead of by
    id, so a card and the raw message it came from support each other instead of
    competing.  A card never borrows the vote of a better card of its own layer that
    shares a message (a session summary holding the top card's message stays where its
    layer put it).  Candidates without a ``layer_rank`` (STM) keep their similarity.

    A raw message that no curated card holds (``uncurated``: an assistant's answer, a
    statement the write path did not keep) can get no vote from the long-term layer, so
    the sum would halve it against a message that has a card: it gets ``uncurated_vote``
    times its own vote for the layer that cannot see it."""
    ranked = [c for c in candidates if c.layer_rank is not None]
    if not ranked:
        return list(candidates)
    best: dict[tuple[SourceType, str], int] = {}
    for c in ranked:
        rank = c.layer_rank or 0
        for m in c.message_ids:
            key = (c.source_type, m)
            if rank < best.get(key, rank + 1):
                best[key] = rank
    layers = {layer for layer, _ in best}
    relevance: dict[str, float] = {}
    for c in ranked:
        own = 1.0 / (k + (c.layer_rank or 0) + 1)
        others = [layer for layer in layers if layer is not c.source_type]
        support = 0.0
        for m in c.message_ids:
            votes = sum(1.0 / (k + best[(o, m)] + 1) for o in others if (o, m) in best)
            support = max(support, votes)
        if c.uncurated and not support and others:
            support = uncurated_vote * own
        relevance[c.memory_id] = max(own + support, relevance.get(c.memory_id, 0.0))
    top = max(relevance.values())
    out = []
    for c in candidates:
        rel = relevance.get(c.memory_id) if c.layer_rank is not None else None
        if rel is not None:  # a copy with the fused similarity, already-valid fields
            c = trusted(PoolCandidate, {**c.__dict__, "similarity": rel / top})
        out.append(c)
    return out


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
    candidates = list(candidates)
    n = len(candidates)
    if (
        len({c.canonical_fact_key for c in candidates}) == n
        and len({c.fingerprint for c in candidates}) == n
        and len({_wording(c) for c in candidates}) == n
    ):
        return candidates, []  # nothing to merge, a recall's usual pool: three set builds
    dropped: list[tuple[PoolCandidate, str]] = []
    for key in ("canonical_fact_key", "fingerprint", "wording"):
        best: dict[str, PoolCandidate] = {}
        key_of = _wording if key == "wording" else attrgetter(key)
        for c in candidates:
            k = key_of(c)
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
    return _words(c.summary)


@lru_cache(maxsize=16_384)
def _words(summary: str) -> str:
    return " ".join(summary.casefold().split())


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


_M = TypeVar("_M", bound=BaseModel)
_new = object.__new__
_setattr = object.__setattr__
_LN2 = math.log(2)


def trusted(cls: type[_M], fields: dict[str, Any]) -> _M:
    """An instance of ``cls`` from values already of the field types, every field given.

    What ``model_construct`` does for a model without aliases, extras or post-init, at a
    fraction of its cost: the recall hot path builds one candidate and one verdict per
    STM hit (≈50 per call).  ``tests/unit/test_recall_pool_oracle.py`` checks the result
    equals a validated instance.
    """
    m = _new(cls)
    _setattr(m, "__dict__", fields)
    _setattr(m, "__pydantic_fields_set__", set(fields))
    _setattr(m, "__pydantic_extra__", None)
    _setattr(m, "__pydantic_private__", None)
    return m


@lru_cache(maxsize=16_384)
def _overlap(entities: tuple[str, ...], q: frozenset[str], folded_query: str) -> float:
    """Entity overlap of :func:`rescore`; cached, as a session's recalls score the same
    items against the same few queries."""
    mine = {e.casefold() for e in entities}
    overlap = len(q & mine) / len(q) if q else 0.0
    if overlap < 1.0 and folded_query and any(named_in(e, folded_query) for e in mine - q):
        overlap = 1.0
    return overlap


_PARTS = (
    "similarity", "importance", "recency", "entity_overlap", "source_priority", "named_date"
)  # fmt: skip
_Features = tuple[float, float, float, float, float, float]


def _named(features: _Features) -> dict[str, float]:
    return dict(zip(_PARTS, features, strict=True))


@lru_cache(maxsize=1024)
def _line_stems(summary: str, entities: tuple[str, ...]) -> frozenset[str]:
    """A line's terms as :func:`line_topic_coverage` compares them; cached, as a user's
    recalls meet the same cards and messages again (bounded: a Chinese raw-history
    snippet is thousands of characters and bigrams)."""
    return stemmed(line_terms(summary, entities))


def line_topic_coverage(topic: frozenset[str], c: PoolCandidate) -> float:
    """Share of the question's topic words (stemmed) that the line says.

    The long-term layers' fused order is a rank, not a match: on LoCoMo the vector list
    is nearly flat, and the lexical one ranks a raw question ("What did it look like?")
    high on its rare interrogatives.  A line that says what the question asks about,
    beside whom it names (:func:`memstrata.core.recall.text.question_topic`), should win a
    near-tie; Lucene's old coordination factor, the same idea."""
    return coverage(topic, _line_stems(c.summary, c.entities)) if topic else 0.0


@lru_cache(maxsize=1024)
def _line_vector_words(summary: str, entities: tuple[str, ...]) -> tuple[str, ...]:
    """A line's words that :func:`topic_ranks` looks vectors up for, without the names
    it carries: the question's names are not topic words, and a name is as near to
    "activities" in the table (0.15 for "caroline") as "camping" is (0.14).  Cached as
    :func:`_line_stems` is."""
    from memstrata.core.recall.wordsim import vector_words  # numpy: never in the client

    return tuple(
        vector_words(line_terms(summary, entities) - FUNCTION_TERMS - named_terms(entities))
    )


def soft_coverages(
    topic: Sequence[str], lines: Sequence[PoolCandidate], table: WordVectors | None
) -> list[float]:
    """Each line's soft coverage of the question's ``topic`` words (unstemmed), in [0, 1].

    A topic word the line says (the same stem) counts 1, as in :func:`line_topic_coverage`;
    one it does not say counts its best cosine similarity with the line's words in
    ``table`` (0 without a table, or for a word with no vector: Chinese, digits).  One
    matrix product and one segmented max for the whole pool, no loop over word pairs."""
    if not topic or not lines:
        return [0.0] * len(lines)
    # numpy here, not at the top: the remote client imports this module (Scored) alone
    import numpy as np

    from memstrata.core.recall.wordsim import best_matches, vector_words

    topic = list(dict.fromkeys(topic))  # each word once: rows are looked up by word
    said = [_line_stems(c.summary, c.entities) for c in lines]
    cover = np.array([[stem(t) in s for s in said] for t in topic], dtype=np.float32)
    near = vector_words(topic) if table is not None else []
    words = [_line_vector_words(c.summary, c.entities) for c in lines] if near else []
    vocab = sorted({w for ws in words for w in ws})
    if table is not None and vocab:
        col = {w: i for i, w in enumerate(vocab)}
        # one column of zeros after the vocabulary: what a line without words points at
        sims = np.hstack([best_matches(near, vocab, table), np.zeros((len(near), 1), np.float32)])
        flat: list[int] = []
        starts: list[int] = []
        for ws in words:
            starts.append(len(flat))
            flat.extend([col[w] for w in ws] or [len(vocab)])
        best = np.maximum.reduceat(sims[:, flat], starts, axis=1)  # near words × lines
        rows = [topic.index(t) for t in near]
        cover[rows] = np.maximum(cover[rows], best)
    return [float(x) for x in cover.mean(axis=0)]


def topic_ranks(
    topic: Sequence[str],
    lines: Sequence[PoolCandidate],
    table: WordVectors | None,
    k: int,
    *,
    placed: Sequence[PoolCandidate] = (),
) -> dict[str, float]:
    """Each line's reciprocal rank in the pool's order by :func:`soft_coverages`, scaled
    so the first is 1: ``(k + 1) / (k + rank + 1)``, equal coverages sharing the best
    rank of their run ("1224"), so an arbitrary order among ties moves nothing.
    ``placed`` (the pool's duplicates, for ``explain``): the rank their coverage would
    take among ``lines``, without taking a place themselves.

    A rank, not the coverage itself: cosines of unrelated words sit near 0.1 and of
    related ones near 0.3, a scale no other feature shares; the order is what they say
    (docs/QUALITY.md, fourteenth wave: the coverage blended as a value moved nothing)."""
    scores = soft_coverages(topic, [*lines, *placed], table)
    above = sorted(-x for x in scores[: len(lines)])  # bisect: how many score higher

    def rank(score: float) -> float:
        return (k + 1) / (k + bisect_left(above, -score) + 1)

    out: dict[str, float] = {}
    for c, score in zip(lines, scores, strict=False):
        out[c.memory_id] = max(out.get(c.memory_id, 0.0), rank(score))
    for c, score in zip(placed, scores[len(lines) :], strict=True):
        out.setdefault(c.memory_id, rank(score))
    return out


class _Rescorer:
    """:func:`rescore` with what depends on the query alone worked out once per pool."""

    __slots__ = (
        "entities", "folded", "now", "q", "query", "ranks", "topic", "w", "window", "windowed"
    )  # fmt: skip

    def __init__(
        self, query_entities: Sequence[str], now: float, weights: RescoreWeights, query: str
    ) -> None:
        self.q = frozenset(e.casefold() for e in query_entities)
        self.folded = query.casefold() if query else ""
        self.now = now
        self.w = weights
        self.query, self.entities = query, tuple(query_entities)
        # worked out on the first long-term line: STM-only pools, the hot path, never need it
        self.topic: frozenset[str] | None = None
        self.window: Window | None = None  # on the first dated line, likewise
        self.windowed = False
        # memory id -> topic rank (:func:`topic_ranks`), set by :func:`build_pool`
        self.ranks: dict[str, float] = {}

    def rank_topics(
        self,
        lines: Sequence[PoolCandidate],
        table: WordVectors | None,
        placed: Sequence[PoolCandidate] = (),
    ) -> None:
        """Work out :attr:`ranks` for the pool's long-term and raw ``lines`` (and
        ``placed`` among them: :func:`topic_ranks`)."""
        if not (self.w.topic_rank and self.query and lines):
            return
        topic = sorted(question_topic(self.query, self.entities))
        if topic:
            self.ranks = topic_ranks(topic, lines, table, self.w.topic_rank_k, placed=placed)

    def _window(self) -> Window | None:
        if not self.windowed:
            self.window = date_window(self.query, self.now) if self.query else None
            self.windowed = True
        return self.window

    def _topic(self) -> frozenset[str]:
        if self.topic is None:
            wanted = self.query and self.w.topic_coverage
            topic = question_topic(self.query, self.entities) if wanted else set()
            self.topic = stemmed(topic)
        return self.topic

    def features(self, c: PoolCandidate) -> _Features:
        """The weighted features in :data:`_PARTS` order (their sum is the score); a
        tuple, as only the lines that get a verdict need them by name."""
        w = self.w
        age = max(0.0, self.now - c.updated_at)
        stm = c.source_type is SourceType.REDIS_STM
        half_life = w.recency_half_life_s if stm else w.long_term_half_life_s
        recency = math.exp(-_LN2 * age / half_life)
        overlap = _overlap(c.entities, self.q, self.folded)
        similarity = c.similarity
        if not stm and (topic := self._topic()):  # STM's is its term coverage already
            share = w.topic_coverage
            similarity = (1 - share) * similarity + share * line_topic_coverage(topic, c)
        if not stm and self.ranks:
            share = w.topic_rank
            similarity = (1 - share) * similarity + share * self.ranks.get(c.memory_id, 0.0)
        dated = 0.0
        if c.said_at is not None and w.named_date:
            dated = w.named_date if said_within(c.said_at, self._window()) else 0.0
        return (
            w.similarity * similarity,
            w.importance * c.importance,
            w.recency * recency,
            w.entity_overlap * overlap,
            w.source_priority * SOURCE_PRIORITY[c.source_type] / 100.0,
            dated,
        )


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
    project the extractor has no pattern for ("what did Caroline say…") still matches.
    The topic rank is a place among a pool's lines: a candidate alone has none (it is
    scored as if ``weights.topic_rank`` were 0, which :func:`build_pool` is not)."""
    f = _Rescorer(query_entities, now, weights, query).features(c)
    return sum(f), _named(f)


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
    cost: LineCost = estimated_cost,
    report: bool = True,
    words: WordVectors | None = None,
) -> list[Scored]:
    """Rank the pool; the result lists every candidate, kept ones first in rank order.

    ``cost``: what a line costs as rendered (the recall service's counts cl100k tokens of
    the printed line and section title), so the kept lines fit ``policy.token_budget``.
    ``report=False``: the kept ones only, the same as the head of the full list, without
    building a verdict for each of the others (recall without ``explain``: ~50 STM hits
    for 8 lines; issue 17).  ``words``: the word vectors of the topic rank
    (:func:`topic_ranks`); without them it counts exact matches only."""
    w = policy.weights
    unique, dups = dedup(corroborate(list(candidates), w.rank_fusion_k, w.uncurated_vote))
    rescorer = _Rescorer(query_entities, now, policy.weights, query)
    rescorer.rank_topics(
        [c for c in unique if c.source_type is not SourceType.REDIS_STM],
        words,
        # a duplicate's verdict shows the rank it would have had: only when reported
        [c for c, _ in dups if c.source_type is not SourceType.REDIS_STM] if report else (),
    )
    overridden: list[Scored] = []
    live: list[tuple[float, _Features, PoolCandidate]] = []
    for c in unique:
        f = rescorer.features(c)
        why = authority(c) if authority else None
        if not why:
            live.append((sum(f), f, c))
        elif report:
            overridden.append(_scored(c, sum(f), f, Verdict.OVERRIDDEN, why))
    pinned = policy.pinned_types
    live.sort(
        key=lambda x: (x[2].memory_type not in pinned, -x[0], -x[2].updated_at, x[2].memory_id)
    )
    kept, rest = _fit(live, policy, cost, report)
    if report:
        for c, why in dups:
            f = rescorer.features(c)
            rest.append(_scored(c, sum(f), f, Verdict.DUPLICATE, why))
    return kept + rest + overridden


def _fit(
    live: list[tuple[float, _Features, PoolCandidate]],
    policy: PoolPolicy,
    cost: LineCost,
    report: bool,
) -> tuple[list[Scored], list[Scored]]:
    """Top-K, then the token budget, down the ranked ``live`` candidates: (kept, the
    others' verdicts, empty unless ``report``)."""
    kept: list[Scored] = []
    rest: list[Scored] = []
    used = 0
    rank = -1
    covered: set[str] = set()  # source messages of what is kept so far
    opened: set[SourceType] = set()  # sections with a kept line (their title is paid)
    days: set[tuple[SourceType, int]] = set()  # day headings paid, per section
    top_k, budget = policy.top_k, policy.token_budget
    for score, f, c in live:
        raw = c.source_type is SourceType.RAW_HISTORY
        if raw and c.message_ids and covered.issuperset(c.message_ids):
            # the fallback only adds what the curated memories above it do not say
            if report:
                rest.append(_scored(c, score, f, Verdict.DUPLICATE,
                                    "its message is already in a kept memory"))  # fmt: skip
            continue
        rank += 1
        if rank >= top_k:  # never rendered: not worth an exact count
            if not report:
                break  # nothing further down can be kept
            tokens = line_tokens(c)
            verdict, reason = Verdict.BELOW_TOP_K, f"rank {rank + 1} > top_k {top_k}"
        elif used + (tokens := _cost(cost, c, opened, days)) > budget:
            verdict, reason = Verdict.OVER_BUDGET, f"{used}+{tokens} > {budget} tokens"
        else:
            used += tokens
            covered.update(c.message_ids)
            opened.add(c.source_type)
            if (day := said_day(c)) is not None:
                days.add((c.source_type, day))
            kept.append(_scored(c, score, f, Verdict.KEPT, f"rank {rank + 1}", tokens))
            continue
        if report:
            rest.append(_scored(c, score, f, verdict, reason, tokens))
    return kept, rest


def _cost(
    cost: LineCost,
    c: PoolCandidate,
    opened: set[SourceType],
    days: set[tuple[SourceType, int]],
) -> int:
    """What keeping ``c`` adds, given the sections and day headings already printed."""
    day = said_day(c)
    opens_day = day is not None and (c.source_type, day) not in days
    return cost(c, c.source_type not in opened, opens_day)


def _scored(
    c: PoolCandidate,
    score: float,
    features: _Features,
    verdict: Verdict,
    reason: str,
    tokens: int | None = None,
) -> Scored:
    """A verdict from values the pool computed itself (no re-validation of the candidate)."""
    if tokens is None:
        tokens = line_tokens(c)
    return trusted(Scored, {"candidate": c, "score": score, "parts": _named(features),
                            "verdict": verdict, "reason": reason, "tokens": tokens})  # fmt: skip
