"""Cheap lexical similarity for STM candidates (STM has no vectors; items are short)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from memstrata.core.ltm.text import ENGLISH_STOP_WORDS, stem

_WORD = re.compile(r"[a-z0-9_]+|[\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# a sentence ends at . ! ? ; (and their CJK forms) before a space, or at a line break
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")
ELLIPSIS = "…"


def terms(text: str) -> set[str]:
    """Lower-cased words, camelCase parts, and CJK characters plus their bigrams."""
    folded = text.casefold()
    out = set(_WORD.findall(folded))
    if _CAMEL.search(text):  # only a lower-to-upper boundary adds parts: most prose has none
        out.update(_WORD.findall(_CAMEL.sub(" ", text).casefold()))
    for run in _CJK_RUN.findall(folded):
        out.update(a + b for a, b in itertools.pairwise(run))
    return out


# English words that say how a question is asked, not what it is about: Lucene's stop set
# (core.ltm.text.ENGLISH_STOP_WORDS) plus pronouns, auxiliaries, question words and
# quantifiers.  Counted as query terms, they made an unrelated STM item "relevant": "How
# much does my subscription to the service cost each month?" and "I'm trying to manage my
# relocation logistics…" share how / my / to / the / i / m, half the question's terms.
FUNCTION_WORDS = ENGLISH_STOP_WORDS | frozenset({
    "i", "m", "s", "t", "d", "ll", "ve", "re", "me", "my", "mine", "myself", "we", "us",
    "our", "you", "your", "yours", "he", "him", "his", "she", "her", "its", "them", "those",
    "what", "when", "where", "which", "who", "whom", "whose", "why", "how",
    "am", "been", "being", "were", "do", "does", "did", "have", "has", "had", "can",
    "could", "would", "should", "shall", "may", "might", "must",
    "about", "from", "any", "some", "all", "each", "every", "much", "many", "more", "most",
    "so", "just", "also", "very", "too", "than", "up", "out", "over", "again", "ever",
})  # fmt: skip


# Chinese characters that say how a question is asked (pronouns, demonstratives,
# particles, question words, the measure word 个, the copula): 我住的那个小区怎么样啊 is
# about 住 / 小区, and a statement sharing 我 的 那 个 么 样 says nothing on it.  Such a
# character alone, or a bigram of two of them (那个, 怎么, 我们), is not a topic term of a
# question; a bigram with one content character stays (地址, 过敏, 了解, 个人 are words).
CJK_FUNCTION_CHARS = frozenset("我你您他她它们咱这那哪的地得了着过吗呢吧啊呀哦嘛么怎什谁几个是样")


# Every term that says how a question is asked, not what it is about: the English function
# words, and each Chinese character or bigram (the only CJK terms :func:`terms` makes) of
# function characters alone; one set difference per question (issue 17: the hot path)
FUNCTION_TERMS = (
    FUNCTION_WORDS
    | CJK_FUNCTION_CHARS
    | frozenset(a + b for a in CJK_FUNCTION_CHARS for b in CJK_FUNCTION_CHARS)
)


def query_terms(text: str) -> set[str]:
    """What a question is about: :func:`terms` without :data:`FUNCTION_WORDS` and Chinese
    function characters, or all its terms when nothing else is left ("what did I do?")."""
    found = terms(text)
    content = found - FUNCTION_TERMS
    return content or found


def topic_terms(q_terms: AbstractSet[str], entities: Sequence[str]) -> set[str]:
    """The question's terms without those of the entities it names, when any are left.

    The entity is already the pool's entity-overlap feature, and it is what put the item
    in front of recall (the entity's STM index, or the recent items that route the
    question to STM).  Counted again as term coverage, a name said in most of a person's
    memories made every one of them half relevant to "what did Caroline research?"
    (docs/QUALITY.md, ninth wave); the words beside the name say what is asked."""
    rest = set(q_terms) - named_terms(entities)
    return rest or set(q_terms)


def question_topic(text: str, entities: Sequence[str]) -> set[str]:
    """What a question asks about beside whom it names: its terms without function words
    and without the entities' terms, with no fallback.

    Empty for "Caroline?" or "what did I do?": a long-term line's coverage of the name
    would count the entity-overlap feature twice, its coverage of function words is noise,
    so the pool leaves the layers' order alone (docs/QUALITY.md, tenth wave)."""
    content = terms(text) - FUNCTION_TERMS
    return content - named_terms(entities)


def named_terms(entities: Sequence[str]) -> set[str]:
    """The terms of the names ``entities`` spell."""
    named: set[str] = set()
    for e in entities:
        named |= terms(e)
    return named


def line_terms(summary: str, entities: Sequence[str]) -> set[str]:
    """A memory line's terms: its words and its entities', what a question's are matched
    against (STM relevance, the long-term topic blend)."""
    return terms(summary + " " + " ".join(entities))


def stemmed(words: AbstractSet[str]) -> frozenset[str]:
    """Words as the lexical index reads them (Snowball English stems; others as they are):
    "camping" meets "camped"."""
    return frozenset(map(stem, words))


def coverage(query: AbstractSet[str], doc: AbstractSet[str]) -> float:
    """Share of the query's terms that the document contains, in [0, 1]."""
    return len(query & doc) / len(query) if query else 0.0


def snippet(text: str, query: AbstractSet[str], max_chars: int) -> str:
    """The run of sentences of ``text`` around the one that covers most of ``query``,
    within ``max_chars``, with ``…`` where text was left out; ``text`` when it fits.

    A raw message is the lowest layer's evidence, not a memory: a long assistant answer
    injected whole cost the agent up to 500 tokens for the one sentence a question
    matched (seed 1 第0层: never injected whole)."""
    if len(text) <= max_chars:
        return text
    parts = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    if not parts:
        return text[: max_chars - 1] + ELLIPSIS
    hits = [len(query & terms(p)) for p in parts]
    best = max(range(len(parts)), key=lambda i: (hits[i], -i))
    room = max_chars - 4  # what the two "… " marks leave
    lo = hi = best
    size = len(parts[best])
    while True:  # grow towards the neighbour that matches more, the earlier on a tie
        options = [i for i in (lo - 1, hi + 1) if 0 <= i < len(parts)]
        options = [i for i in options if size + 1 + len(parts[i]) <= room]
        if not options:
            break
        nxt = max(options, key=lambda i: (hits[i], -i))
        size += 1 + len(parts[nxt])
        lo, hi = min(lo, nxt), max(hi, nxt)
    body = " ".join(parts[lo : hi + 1])
    cut = len(body) > room  # one sentence longer than the snippet: its head
    if cut:
        body = body[:room].rstrip()
    head = ELLIPSIS + " " if lo > 0 else ""
    tail = " " + ELLIPSIS if cut or hi < len(parts) - 1 else ""
    return head + body + tail
