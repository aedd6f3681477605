"""The pool's topic rank (docs/QUALITY.md, fourteenth wave): long-term and raw lines
ranked by how closely they say the question's topic words, exactly or by a near word in
the static word-vector table, and that rank blended into their similarity."""

from __future__ import annotations

import random
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memstrata.core.recall.pool import (
    PoolCandidate,
    PoolPolicy,
    RescoreWeights,
    Scored,
    SourceType,
    build_pool,
    soft_coverages,
    topic_ranks,
)
from memstrata.core.recall.wordsim import (
    StaticWordVectors,
    best_matches,
    read_wordllama,
    vector_words,
)

NOW = 1_780_000_000.0


def line(mid: str, summary: str, *, similarity: float = 0.5, source: SourceType = SourceType.LTM,
         entities: tuple[str, ...] = ()) -> PoolCandidate:  # fmt: skip
    return PoolCandidate(
        memory_id=mid, source_type=source, summary=summary, canonical_fact_key=f"k:{mid}",
        fingerprint=f"f:{mid}", memory_type="fact", similarity=similarity,
        updated_at=NOW - 60, entities=entities,
    )  # fmt: skip


class TableOf:
    """A hand-made word table: each word's unit vector as given, zeros for the rest."""

    def __init__(self, rows: dict[str, Sequence[float]]) -> None:
        self.rows = {
            w: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for w, v in rows.items()
        }
        self.asked: list[list[str]] = []

    def vectors(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        self.asked.append(list(words))
        return np.stack([self.rows.get(w, np.zeros(2, dtype=np.float32)) for w in words])


@cache
def real_table() -> StaticWordVectors:
    return StaticWordVectors.from_package()


def by_id(scored: list[Scored]) -> dict[str, Scored]:
    return {s.candidate.memory_id: s for s in scored}


def test_a_line_that_says_a_near_word_of_the_question_wins_a_near_tie() -> None:
    # Given a question about Caroline's pets, small talk a little higher in the layers'
    # order, and a line about her dog that shares no word with the question
    q = "What pets does Caroline have?"
    chat = line("ltm_chat", "Caroline: Thanks, talk to you soon!", similarity=0.40,
                entities=("Caroline",))  # fmt: skip
    dog = line("ltm_dog", "Caroline: my dog Oscar loves the park", similarity=0.38,
               entities=("Caroline",))  # fmt: skip
    kw = {"query_entities": ["Caroline"], "now": NOW, "policy": PoolPolicy(), "query": q}
    # When the pool ranks them with the real word vectors
    ranked = by_id(build_pool([chat, dog], words=real_table(), **kw))  # type: ignore[arg-type]
    # Then the dog line is first: "pets" meets "dog" (cosine ~0.4), small talk nothing near
    assert ranked["ltm_dog"].score > ranked["ltm_chat"].score
    # And its similarity is 0.7 × (0.7 × its layers' order + 0.3 × its topic rank: 1 for
    # the first of the pool's order by soft coverage, 11 / 12 for the second)
    assert ranked["ltm_dog"].parts["similarity"] == pytest.approx(0.7 * (0.7 * 0.38 + 0.3))
    chat_rank = 0.3 * 11 / 12
    assert ranked["ltm_chat"].parts["similarity"] == pytest.approx(0.7 * (0.7 * 0.40 + chat_rank))
    # And without word vectors neither line says "pets": they tie, the layers' order decides
    plain = by_id(build_pool([chat, dog], **kw))  # type: ignore[arg-type]
    assert plain["ltm_chat"].score > plain["ltm_dog"].score


def test_the_pets_question_finds_the_dog_and_not_the_weather_by_the_real_table() -> None:
    table = real_table()
    sims = best_matches(["pets"], ["dog", "weather", "tuesday"], table)
    assert sims.shape == (1, 3)
    assert sims[0, 0] > 0.3 > max(sims[0, 1], sims[0, 2])


def test_equal_coverages_share_their_best_rank_so_ties_move_nothing() -> None:
    # Given three lines: one says the topic word, two say nothing near it
    table = TableOf({"camping": [1.0, 0.0], "tent": [0.9, 0.1], "soup": [0.0, 1.0]})
    lines = [line("a", "we bought a tent"), line("b", "lovely soup"), line("c", "more soup"),
             line("d", "we went camping")]  # fmt: skip
    # When they are ranked for the topic word "camping", in two orders
    ranks = topic_ranks(["camping"], lines, table, k=10)
    assert topic_ranks(["camping"], lines[::-1], table, k=10) == ranks
    # Then the exact word is first (1.0), the near word second, and the two soups share
    # the third place: (k + 1) / (k + 2 + 1), whatever order they came in
    assert ranks["d"] == 1.0
    assert ranks["a"] == pytest.approx(11 / 12)
    assert ranks["b"] == ranks["c"] == pytest.approx(11 / 13)
    # And the whole pool's words were looked up once, in one product
    assert len(table.asked) == 4  # per call: the topic words, then the pool's vocabulary


def test_a_line_without_words_and_a_topic_word_without_a_vector_count_nothing_near() -> None:
    # Given a topic of a number (no vector) and a word, and a line with no English word
    table = TableOf({"camping": [1.0, 0.0], "tent": [0.8, 0.6]})
    lines = [line("a", "tent"), line("b", "2023 42"), line("c", "2023 camping")]
    cov = soft_coverages(["2023", "camping"], lines, table)
    # Then "2023" counts only where said, "camping" its match: the tent's 0.8, not the
    # number's row; a line of digits points at no word of another line
    assert cov == pytest.approx([(0 + 0.8) / 2, (1 + 0) / 2, (1 + 1) / 2])


def test_a_memory_id_met_twice_keeps_its_better_rank_and_a_duplicate_is_placed() -> None:
    table = TableOf({"camping": [1.0, 0.0], "soup": [0.0, 1.0]})
    best, worse = line("x", "camping"), line("x", "soup")
    other = line("y", "soup")
    assert topic_ranks(["camping"], [worse, other, best], table, k=10)["x"] == 1.0
    # a placed line takes the rank its coverage would have, and no place from the others
    ranks = topic_ranks(["camping"], [other], table, k=10, placed=[line("z", "camping")])
    assert ranks == {"y": 1.0, "z": 1.0}


def test_names_on_the_line_are_not_near_words() -> None:
    # "caroline" is as near to "activities" in the table as "camping" is: a line's own
    # names must not rank another speaker's small talk above an activity
    table = real_table()
    chat = line("chat", "Caroline: Thanks, talk to you soon!", entities=("Caroline",))
    camp = line("camp", "Melanie: We went camping with the kids", entities=("Melanie",))
    cov = soft_coverages(["activities"], [chat, camp], table)
    assert cov[1] > cov[0]


def test_at_the_default_weights_a_line_that_says_what_is_asked_wins_a_near_tie() -> None:
    # Given a pool of small talk a little higher in the layers' order than the line that
    # says "camped" (0.40 against 0.38: a near tie of the fused order)
    q = "Where has Melanie camped?"
    talk = [line(f"ltm_{i}", f"Melanie: {w}!", similarity=0.40, entities=("Melanie",))
            for i, w in enumerate(["Great chatting with you", "See you soon", "Thanks so much",
                                   "Take care", "Love that", "Sounds good"])]  # fmt: skip
    camp = line("ltm_camp", "Melanie: We camped at the beach", similarity=0.38,
                entities=("Melanie",))  # fmt: skip
    pool = build_pool([*talk, camp], query_entities=["Melanie"], now=NOW, policy=PoolPolicy(),
                      query=q, words=real_table())  # fmt: skip
    # Then it is kept first: the first topic rank is worth 0.3 × (1 − 11/12) = 0.025 more
    # than the second, the most any small talk can have; a wider gap of the layers' order
    # (0.7 × 0.036) is theirs to keep, a rank says nothing of how much better a line is
    assert pool[0].candidate.memory_id == "ltm_camp"


def test_a_duplicate_verdict_shows_the_topic_rank_it_would_have_had() -> None:
    table = TableOf({"camping": [1.0, 0.0]})
    kept = line("ltm_1", "we went camping", similarity=0.5)
    twin = line("raw_1", "we went camping", similarity=0.5, source=SourceType.RAW_HISTORY)
    pool = by_id(build_pool([kept, twin], query_entities=[], now=NOW, policy=PoolPolicy(),
                            query="camping?", words=table))  # fmt: skip
    assert pool["raw_1"].verdict.value == "duplicate"
    assert pool["raw_1"].parts["similarity"] == pool["ltm_1"].parts["similarity"]


def test_soft_coverage_counts_exact_words_whole_and_near_words_by_their_cosine() -> None:
    table = TableOf({"hike": [1.0, 0.0], "trail": [0.6, 0.8], "museum": [0.0, 1.0]})
    lines = [line("a", "a long trail"), line("b", "the hike was long"), line("c", "museum")]
    cov = soft_coverages(["hike", "long"], lines, table)
    # "a long trail": "long" exactly (1), "hike" meets "trail" at cosine 0.6
    assert cov[0] == pytest.approx((1.0 + 0.6) / 2)
    assert cov[1] == pytest.approx(1.0)  # both words exactly
    assert cov[2] == pytest.approx(0.0)  # orthogonal: clipped at 0, no word in common
    # stems count as the same word, with or without a table ("hikes" → "hike")
    assert soft_coverages(["hikes"], [line("d", "one hike")], None) == [1.0]


def test_without_a_table_only_exact_words_count() -> None:
    lines = [line("a", "a long trail"), line("b", "the hike was long")]
    assert soft_coverages(["hike"], lines, None) == [0.0, 1.0]


def test_chinese_topic_words_are_matched_exactly_and_never_looked_up() -> None:
    table = TableOf({})
    lines = [line("a", "数据库 超时 了"), line("b", "今天 天气 不错")]
    cov = soft_coverages(["超时"], lines, table)
    assert cov == [1.0, 0.0]
    assert table.asked == []  # no English topic word: no vector asked for
    assert vector_words({"超时", "x1", "ok", "timeout", "a" * 41, "o'neil"}) == [
        "o'neil", "timeout",
    ]  # fmt: skip


def test_stm_items_and_questions_without_a_topic_keep_their_similarity() -> None:
    table = TableOf({"camping": [1.0, 0.0]})
    stm = line("m1", "camping trip planned", similarity=0.25, source=SourceType.REDIS_STM)
    ltm = line("ltm_1", "Caroline: thanks!", similarity=0.4, entities=("Caroline",))
    # an STM item's similarity is its own term coverage already: never blended
    pool = by_id(build_pool([stm, ltm], query_entities=[], now=NOW, policy=PoolPolicy(),
                            query="camping?", words=table))  # fmt: skip
    assert pool["m1"].parts["similarity"] == pytest.approx(0.7 * 0.25)
    # a question that is only a name has no topic: the layers' order alone
    pool = by_id(build_pool([ltm], query_entities=["Caroline"], now=NOW, policy=PoolPolicy(),
                            query="Caroline?", words=table))  # fmt: skip
    assert pool["ltm_1"].parts["similarity"] == pytest.approx(0.7 * 0.4)
    # and a weight of 0 turns the rank off
    off = PoolPolicy(weights=RescoreWeights(topic_rank=0.0))
    pool = by_id(build_pool([ltm], query_entities=[], now=NOW, policy=off, query="thanks",
                            words=table))  # fmt: skip
    assert pool["ltm_1"].parts["similarity"] == pytest.approx(0.7 * 0.4)


def test_word_vectors_are_unit_rows_with_zeros_for_words_without_tokens() -> None:
    table = real_table()
    v = table.vectors(["camping", "camping", "pottery"])
    assert v.shape == (3, table.dim) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(v[0], v[1])
    assert not table.vectors([""]).any()  # no token: a zero row, never NaN


def test_the_word_cache_is_bounded_and_starts_over_when_full() -> None:
    loaded = real_table()
    small = StaticWordVectors(loaded._table[:-1], loaded._tokenizer, capacity=3)
    first = small.vectors(["alpha", "beta", "gamma"])
    assert small.cached == 3
    # a fourth word does not fit: the cache starts over with it, and every vector is the same
    again = small.vectors(["delta", "alpha"])
    assert small.cached == 2
    assert np.array_equal(again[1], first[0])
    # more new words than it holds at once: computed, not kept, the same vectors
    many = small.vectors(["alpha", "beta", "gamma", "delta", "epsilon"])
    assert np.array_equal(many[:3], first)
    assert small.cached == 2


def test_threads_sharing_one_table_get_the_vectors_one_thread_gets() -> None:
    loaded = real_table()
    shared = StaticWordVectors(loaded._table[:-1], loaded._tokenizer, capacity=50)
    alone = StaticWordVectors(loaded._table[:-1], loaded._tokenizer, capacity=10_000)
    words = [f"word{i}" for i in range(40)] + ["camping", "pottery", "dog", "pets"]
    rng = random.Random(5)
    batches = [rng.sample(words, 12) for _ in range(200)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(shared.vectors, batches))  # the cache starts over again and again
    for batch, vectors in zip(batches, got, strict=True):
        assert np.array_equal(vectors, alone.vectors(batch))


def test_unreadable_word_vector_files_are_an_os_error(tmp_path: Path) -> None:
    # Given a package folder whose tokenizer and weights are not what they should be
    (tmp_path / "tokenizers").mkdir()
    (tmp_path / "weights").mkdir()
    (tmp_path / "tokenizers" / "l2_supercat_tokenizer_config.json").write_text("{")
    (tmp_path / "weights" / "l2_supercat_256.safetensors").write_bytes(b"\0" * 16)
    # Then reading it is an OSError naming the folder (the runtime falls back on it)
    with pytest.raises(OSError, match="cannot read the word vectors"):
        read_wordllama(root=tmp_path)


def test_word_similarities_are_the_same_whatever_blas_threads_compute_them(blas: Any) -> None:
    # A float32 product's last bit depends on how BLAS splits it among its threads; near
    # ties of the topic rank followed that bit (LoCoMo questions moved with the count)
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(4, 9))) for _ in range(700)]
    topic, vocab = words[:16], words[16:]
    table = real_table()
    table.vectors(words)  # the vectors themselves are read once, outside the comparison
    got = {}
    for threads in (1, 2):
        blas.limit(limits=threads)
        if {c["num_threads"] for c in blas.info()} != {threads}:
            pytest.skip(f"BLAS cannot run {threads} threads here")
        got[threads] = best_matches(topic, vocab, table)
    assert np.array_equal(got[1], got[2])
