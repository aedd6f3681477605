"""Text normalisation for lexical search: one function, used for cards and for queries.

Every lexical backend (Milvus BM25, Elasticsearch) indexes the output of
:func:`normalise` with a plain whitespace tokenizer, so they all see the same tokens
and a query matches a card exactly when their normalised tokens meet:

* lower-casing;
* identifiers split and kept whole: ``createOrder`` -> ``create order createorder``,
  ``payment-service`` -> ``payment service payment-service``;
* error codes kept whole and never split (``ERR_CONN_RESET``, ``ORA-00942``, ``E1234``,
  ``HTTP504``, ``0x80070005``), because they are searched verbatim;
* English words stemmed (Snowball, PyStemmer): "painted" finds "paint", "timeouts"
  finds "timeout", as Elasticsearch's english analyzer would; identifiers are split
  into stemmed parts and kept whole (stemmed when purely alphabetic);
* Lucene's English stop words dropped (:data:`ENGLISH_STOP_WORDS`, the set of
  Elasticsearch's english analyzer): a long query (a whole dialogue) otherwise matches
  every message on "the", "and", "to", and BM25 ranks by those (docs/QUALITY.md: hybrid
  search over raw messages on MADial-Bench en, R@10 0.675 with them, 0.737 without);
* Chinese runs segmented with jieba (precise mode), other punctuation dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\-/]*[A-Za-z0-9])?")
_ERROR_CODE = re.compile(
    r"0x[0-9a-f]+"  # hex status codes
    r"|[a-z]{1,10}[-_]?\d{2,}[a-z0-9]*"  # ORA-00942, E1234, HTTP504, ERR42
    r"|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+",  # ERR_CONN_RESET (upper snake case)
    re.IGNORECASE,
)
_SEPARATORS = re.compile(r"[_.\-/]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

_jieba_ready = False

ENGLISH_STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
    "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there",
    "these", "they", "this", "to", "was", "will", "with",
})  # fmt: skip
"""Lucene's ``EnglishAnalyzer`` stop set (33 words), matched on the lower-cased word."""


def warm() -> None:
    """Load the Chinese segmenter's dictionary now (0.6 s, once per process).

    Otherwise the first Chinese text normalised pays it: inside a recall, that is the
    long-term search's time budget (core.ltm.runtime.LtmRuntime.warm).
    """
    global _jieba_ready
    import jieba  # imported lazily: most processes never see a Chinese run

    if not _jieba_ready:
        jieba.setLogLevel(60)
        jieba.initialize()
        _jieba_ready = True


def _segment(run: str) -> list[str]:
    import jieba

    warm()
    return [w for w in jieba.lcut(run) if w.strip()]


def _is_error_code(word: str) -> bool:
    if not _ERROR_CODE.fullmatch(word):
        return False
    # upper snake case counts only when written in capitals (thread_pool is an identifier)
    return "_" not in word or word.isupper() or any(c.isdigit() for c in word)


@lru_cache(maxsize=1)
def _english() -> Any:
    # imported on first use: the remote client reaches this module (recall's result
    # models) in an install without PyStemmer
    import Stemmer

    return Stemmer.Stemmer("english")


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The Snowball English stem of a lower-case alphabetic word (others unchanged)."""
    return str(_english().stemWord(word)) if word.isalpha() and word.isascii() else word


def identifier_tokens(word: str) -> list[str]:
    """Tokens of one latin word: its parts (split on case and separators), then itself,
    lower-cased and stemmed (words with digits or separators are never stemmed)."""
    if _is_error_code(word):
        return [word.lower()]
    parts: list[str] = []
    for chunk in _SEPARATORS.split(word):
        parts.extend(stem(p.lower()) for p in _CAMEL.findall(chunk))
    whole = stem(word.lower())  # stemmed too: "createorder" typed alone must meet it
    if len(parts) <= 1:
        return [whole]
    return [*parts, whole]


def tokens(text: str, *, keep_stop_words: bool = False) -> Iterator[str]:
    """Normalised tokens of ``text`` in order (may repeat, as term frequency should)."""
    stop = frozenset() if keep_stop_words else ENGLISH_STOP_WORDS
    pos = 0
    for match in _CJK_RUN.finditer(text):
        yield from _latin_tokens(text[pos : match.start()], stop)
        yield from _segment(match.group())
        pos = match.end()
    yield from _latin_tokens(text[pos:], stop)


def query_length(text: str) -> int:
    """How many words a query has, stop words included: the short / long split of
    :func:`core.ltm.search.weights_for` was tuned on this count."""
    return sum(1 for _ in tokens(text, keep_stop_words=True))


def _latin_tokens(text: str, stop: frozenset[str]) -> Iterator[str]:
    for match in _WORD.finditer(text):
        word = match.group()
        if word.lower() not in stop:
            yield from identifier_tokens(word)


_CASE_CHANGE = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")


def exact_terms(text: str) -> list[str]:
    """Words a user types to be matched verbatim: error codes, camelCase, snake_case and
    dotted or slashed names (seed 七.4: such queries lean on the lexical index).
    Hyphenated words are left out: English compounds ("well-known") look the same."""
    out = []
    for match in _WORD.finditer(text):
        word = match.group()
        if (
            _is_error_code(word)
            or _CASE_CHANGE.search(word)
            or "_" in word
            or (("." in word or "/" in word) and any(c.isalpha() for c in word))
        ):
            out.append(word)
    return out


def normalise(text: str, *, max_bytes: int | None = None) -> str:
    """Whitespace-joined tokens of ``text``, cut at a token boundary under ``max_bytes``."""
    out = " ".join(tokens(text))
    return out if max_bytes is None else cut_tokens(out, max_bytes)


def cut_tokens(joined: str, max_bytes: int) -> str:
    """Whitespace-joined tokens cut at a token boundary under ``max_bytes`` (UTF-8)."""
    if len(joined.encode("utf-8")) <= max_bytes:
        return joined
    cut = joined.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    return cut.rsplit(" ", 1)[0] if " " in cut else cut
