"""Entity extraction: API/service/environment/ticket/error-code patterns plus a dictionary.

Entities feed the STM entity index, candidate canonical keys and recall scoring, so they
are normalised (dictionary aliases → one canonical name) and returned in text order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memstrata.core.extract.lexicon import (
    Lexicon,
    LiteralScan,
    folded_text,
    required_literals,
    stands_as_word,
)

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "ticket",
        re.compile(
            r"(?<![\w-])(?:bug|issue|ticket|BUG|ISSUE|TICKET|[A-Z]{2,10})[-_#]?\d{2,7}(?![\w-])"
        ),
    ),
    (
        "env",
        re.compile(
            r"(?<![\w-])(?:prod|production|staging|stage|dev|qa|uat|canary|test)(?:[-_][a-z0-9]+)+(?![\w-])|(?<![\w-])(?:prod|production|staging|uat|canary)(?![\w-])",
            re.IGNORECASE,
        ),
    ),
    (
        "service",
        re.compile(
            r"(?<![\w-])[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?:service|svc|api|gateway|worker|server|proxy|db)(?![\w-])"
        ),
    ),
    ("api", re.compile(r"(?<![\w/])[a-z][a-z0-9]*(?:[A-Z][a-z0-9]+)+(?![\w])")),
    (
        "call",
        re.compile(
            r"(?<![\w.])[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+(?=\()|(?<![\w.])[a-z]+_[a-z0-9_]+(?=\()"
        ),
    ),
    ("path", re.compile(r"(?<![\w/])/(?:api|v\d+)(?:/[\w\-{}.]+)+")),
    (
        "error",
        re.compile(
            r"(?<![\w-])(?:[A-Z][a-zA-Z]+(?:Exception|Error)|(?!ERROR\b)E[A-Z]{4,}|ORA-\d{4,5}"
            r"|HTTP ?[45]\d\d)(?![\w])"
        ),
    ),
)

# the literals one of which every match of each pattern contains (None: no pre-filter),
# so that a clause is scanned only by the patterns that can match it (issue 17), found in
# one pass per text: the case-insensitive patterns' in the folded text, the others' in it
_LITERALS = tuple((required_literals(p), bool(p.flags & re.IGNORECASE)) for _kind, p in _PATTERNS)


def _literal_scan(folded: bool) -> LiteralScan:
    pairs = zip(_PATTERNS, _LITERALS, strict=True)
    return LiteralScan({kind: lits for (kind, _p), (lits, f) in pairs if lits and f is folded})


_FOLDED_SCAN, _RAW_SCAN = _literal_scan(True), _literal_scan(False)
# what every match of a pattern holds that its literals above do not say, cheaper to look
# for than the pattern, checked when its literals are present or it has none: a camelCase
# name has a lower-case letter or digit before a capital; a ticket number two digits; a
# call an opening parenthesis; a path "/api" or "/v<digit>"; an error name one of these
_GUARDS = {
    "api": re.compile(r"[a-z0-9][A-Z]"),
    "ticket": re.compile(r"\d\d"),
    "call": re.compile(r"\("),
    "path": re.compile(r"/(?:api|v\d)"),
    "error": re.compile(r"rror|xception|E[A-Z]|ORA-\d|HTTP ?[45]"),
}


def _dictionary_hits(
    text: str, lexicon: Lexicon, extra: Iterable[str]
) -> list[tuple[int, int, str]]:
    """Dictionary and ``extra`` names in ``text``, found in its case-folded form, with
    their positions in ``text`` itself (where the patterns' hits are)."""
    folded = text.casefold()
    hits = lexicon.alias_hits(folded)
    for surface, canonical in ((e.casefold(), e) for e in extra):
        if not surface or surface not in folded:  # "" is in every text and names nothing
            continue
        start = 0
        while (pos := folded.find(surface, start)) >= 0:
            start = pos + len(surface)
            if stands_as_word(folded, pos, start):
                hits.append((pos, start, canonical))
    if len(folded) == len(text) or not hits:
        return hits
    at = _origins(text)
    return [(at[s], at[e - 1] + 1, name) for s, e, name in hits]


def _origins(text: str) -> list[int]:
    """For each character of ``text.casefold()``, the index in ``text`` it comes from.

    Case folding lengthens some characters ("ß" → "ss", "İ" → "i̇"), which would shift
    every later position of the folded text; it is per character, so the map is exact."""
    return [i for i, c in enumerate(text) for _ in c.casefold()]


def extract_entities(
    text: str, lexicon: Lexicon, *, extra: Iterable[str] = (), limit: int = 16
) -> list[str]:
    """Entities in order of first appearance, de-duplicated case-insensitively."""
    found: list[tuple[int, int, str]] = []
    folded = folded_text(text)
    in_folded = _FOLDED_SCAN.present(folded) if folded is not None else None
    in_text = _RAW_SCAN.present(text)
    for (kind, pattern), (lits, fold) in zip(_PATTERNS, _LITERALS, strict=True):
        if lits is not None:
            if fold:
                if in_folded is not None and not in_folded & _FOLDED_SCAN.bit(kind):
                    continue
            elif not in_text & _RAW_SCAN.bit(kind):
                continue
        guard = _GUARDS.get(kind)
        if guard is not None and guard.search(text) is None:
            continue
        for m in pattern.finditer(text):
            found.append((m.start(), m.end(), m.group(0).replace("HTTP ", "HTTP")))
    found.extend(_dictionary_hits(text, lexicon, extra))
    # leftmost first, longest first: a hit inside a longer one ("k8s" in "prod-k8s",
    # "downstream" in "downstream latency") is part of that entity, not another one
    found.sort(key=lambda x: (x[0], -x[1]))
    out: list[str] = []
    seen: set[str] = set()
    covered = 0
    for start, end, name in found:
        if start < covered and end <= covered:
            continue
        covered = max(covered, end)
        key = name.casefold()
        if key not in seen:
            seen.add(key)
            out.append(name)
        if len(out) >= limit:
            break
    return out


def topic_of(text: str, kind: str, lexicon: Lexicon) -> str | None:
    """The first topic of ``kind`` (preference / constraint) whose words occur in ``text``."""
    return lexicon.topic_of(text, kind)
