"""bm25_text normalisation: the same tokens for every lexical backend and for queries."""

from __future__ import annotations

import pytest

from memstrata.core.ltm.text import ENGLISH_STOP_WORDS, exact_terms, normalise, query_length


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("createOrder", "creat order createord"),
        ("payment-service", "payment servic payment-service"),
        ("thread_pool", "thread pool thread_pool"),
        ("XMLParser", "xml parser xmlparser"),
        ("Timeout", "timeout"),
        ("Timeouts", "timeout"),  # English words are stemmed: plural finds singular
    ],
)
def test_identifiers_are_split_and_kept_whole(raw: str, expected: str) -> None:
    assert normalise(raw) == expected


@pytest.mark.parametrize("code", ["ERR_CONN_RESET", "ORA-00942", "E1234", "HTTP504", "0x80070005"])
def test_error_codes_stay_one_token(code: str) -> None:
    assert normalise(f"got {code} again") == f"got {code.lower()} again"


def test_chinese_is_segmented_with_jieba_and_mixed_text_keeps_identifiers() -> None:
    out = normalise("createOrder超时，数据库正常时常见根因是线程池饱和").split()
    assert out[:3] == ["creat", "order", "createord"]
    assert {"超时", "数据库", "根因"} <= set(out)
    assert "，" not in out


def test_a_query_normalises_like_the_card_it_should_find() -> None:
    card = set(normalise("历史上多次出现 createOrder timeout").split())
    assert set(normalise("createOrder 超时").split()) & card >= {"createord", "creat", "order"}


def test_long_text_is_cut_at_a_token_boundary_within_the_byte_limit() -> None:
    out = normalise("数据库 " * 5000 + "createOrder", max_bytes=100)
    assert len(out.encode("utf-8")) <= 100
    assert all(tok == "数据库" for tok in out.split())


def test_exact_terms_are_codes_and_identifiers_not_english_compounds() -> None:
    assert exact_terms("createOrder 超时 ERR_CONN_RESET thread_pool api/v1") == [
        "createOrder",
        "ERR_CONN_RESET",
        "thread_pool",
        "api/v1",
    ]
    assert exact_terms("a well-known 100-meter race. Mr. Smith") == []


def test_inflections_meet_at_their_stem_in_card_and_query() -> None:
    card = set(normalise("Melanie: I painted that lake sunrise last year").split())
    assert set(normalise("When did Melanie paint a sunrise?").split()) >= {"paint", "sunris"}
    assert {"paint", "sunris", "melani"} <= card


def test_english_stop_words_are_not_indexed_nor_searched() -> None:
    # a long query (a whole dialogue) would otherwise match every message on "the", "and"
    assert normalise("The trip to the lake is on Friday and it was planned") == (
        "trip lake friday plan"
    )
    assert normalise("IT is THE plan") == "plan"  # matched on the lower-cased word
    assert normalise("the") == ""
    assert not set(normalise(" ".join(sorted(ENGLISH_STOP_WORDS))).split())


def test_a_stop_word_inside_an_identifier_or_code_is_kept() -> None:
    assert normalise("is_active") == "is activ is_active"
    assert normalise("IT-1234 broke") == "it-1234 broke"


def test_query_length_counts_stop_words_as_the_short_query_rule_was_tuned() -> None:
    assert query_length("what is the plan for the trip") == 7
    assert len(normalise("what is the plan for the trip").split()) == 3
