"""Text signals for dependency rules: which specifics of a tool result a reply quotes.

Two measures, both cheap and language-neutral:

* *specifics*: identifiers, paths, numbers, hashes and CJK words of the reply that also
  occur in the tool result.  A reply that repeats several of them (and they were not
  already in the call that asked for the result) consumes the result.
* *word overlap*: the share of the reply's words that also appear in the result; a
  reply that explains a result borrows much of its vocabulary.
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache

_SPECIFIC = re.compile(
    r"[A-Za-z_][\w.\-/:]*[\d_./:][\w.\-/:]*"  # paths, dotted names, snake_case, ids with digits
    r"|[a-z]+[A-Z]\w*"  # camelCase
    r"|\d+(?:[.,:]\d+)*%?"  # numbers, versions, times
    r"|[\u4e00-\u9fff]{2,8}"  # CJK runs
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}|\d{2,}|[\u4e00-\u9fff]")
_TRIVIAL_NUMBERS = frozenset({str(i) for i in range(0, 11)})
SCAN_CHARS = 60_000  # a result longer than this is scanned at head and tail only


def _sample(text: str) -> str:
    if len(text) <= SCAN_CHARS:
        return text
    half = SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


@lru_cache(maxsize=4096)
def specifics(text: str) -> frozenset[str]:
    """Distinctive tokens of ``text`` (lower-cased; tiny numbers dropped)."""
    out = set()
    for m in _SPECIFIC.finditer(_sample(text)):
        tok = m.group(0).strip(".,:/-").casefold()
        if len(tok) >= 2 and tok not in _TRIVIAL_NUMBERS:
            out.add(tok)
    return frozenset(out)


@lru_cache(maxsize=4096)
def words(text: str) -> frozenset[str]:
    """Content words (4+ letters, numbers, single CJK characters as bigram seeds)."""
    toks = [m.group(0).casefold() for m in _WORD.finditer(_sample(text))]
    out = {t for t in toks if not ("\u4e00" <= t[0] <= "\u9fff")}
    cjk = [t for t in toks if "\u4e00" <= t[0] <= "\u9fff"]
    out.update(a + b for a, b in itertools.pairwise(cjk))
    return frozenset(out)


@lru_cache(maxsize=1024)
def _folded(text: str) -> str:
    return _sample(text).casefold()


def quoted(reply: str, result: str, known: str = "") -> list[str]:
    """Specifics of ``reply`` found in ``result`` that ``known`` (the call) did not hold.

    The reply is short and the result long, so the reply's specifics are searched for
    in the result as substrings (fast C search) instead of tokenising the whole result.
    """
    if not reply or not result:
        return []
    body = _folded(result)
    wanted = specifics(reply) - (specifics(known) if known else frozenset())
    return sorted((s for s in wanted if s in body), key=lambda s: (-len(s), s))


def overlap(reply: str, result: str, known: str = "") -> float:
    """Share of the reply's content words that come from the result (not from the call)."""
    reply_words = words(reply) - (words(known) if known else frozenset())
    if not reply_words or not result:
        return 0.0
    body = _folded(result)
    return sum(1 for w in reply_words if w in body) / len(reply_words)


def cjk_share(text: str) -> float:
    """Share of CJK characters among the letters of ``text`` (picks the view language)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum(1 for c in letters if "\u4e00" <= c <= "\u9fff") / len(letters)


def clear_caches() -> None:
    """Forget memoised token sets (benchmarks measure the cold path with it)."""
    specifics.cache_clear()
    words.cache_clear()
    _folded.cache_clear()
