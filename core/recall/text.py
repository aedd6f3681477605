"""Cheap lexical similarity for STM candidates (STM has no vectors; items are short)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Set as AbstractSet

_WORD = re.compile(r"[a-z0-9_]+|[\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def terms(text: str) -> set[str]:
    """Lower-cased words, camelCase parts, and CJK characters plus their bigrams."""
    folded = text.casefold()
    out = set(_WORD.findall(folded))
    if any(c.isupper() for c in text):
        out.update(_WORD.findall(_CAMEL.sub(" ", text).casefold()))
    for run in _CJK_RUN.findall(folded):
        out.update(a + b for a, b in itertools.pairwise(run))
    return out


def coverage(query: AbstractSet[str], doc: AbstractSet[str]) -> float:
    """Share of the query's terms that the document contains, in [0, 1]."""
    return len(query & doc) / len(query) if query else 0.0
