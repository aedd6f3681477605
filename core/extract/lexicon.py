"""Loading of the rule and entity lexicons (JSON data files, extensible without code)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache, partial
from importlib import import_module, resources
from pathlib import Path
from typing import Any

# the stdlib's regex parser (no stubs; ``sre_parse`` is its deprecated alias): a pattern's
# parse tree says which literals every match must contain
sre_parse: Any = import_module("re._parser")

# Characters that ``re.IGNORECASE`` matches to an ASCII letter although ``str.lower`` does
# not map them to it (or maps them to two characters): İ ı ſ K.  A text holding one is
# searched without the literal pre-filter.
_FOLD_SPECIAL = re.compile("[\u0130\u0131\u017f\u212a]")


def _literal_char_ok(c: str) -> bool:
    """A character whose case-insensitive match ``str.lower`` reproduces exactly."""
    o = ord(c)
    return c.isascii() or 0x3000 <= o <= 0x9FFF or (0xFF00 <= o <= 0xFFEF and not c.isalpha())


def _best(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    """Of two sets of required literals, the more selective (longest shortest member)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if min(map(len, a)) >= min(map(len, b)) else b


def _required(items: Sequence[tuple[object, object]], fold: bool) -> set[str] | None:
    """Strings one of which every match of the parsed sequence ``items`` contains."""
    best: set[str] | None = None
    run: list[str] = []

    def flush() -> None:
        nonlocal best
        if run:
            best = _best(best, {"".join(run)})
            run.clear()

    for op, av in items:
        if op is sre_parse.LITERAL and isinstance(av, int) and _literal_char_ok(chr(av)):
            run.append(chr(av).lower() if fold else chr(av))
            continue
        flush()
        if op is sre_parse.SUBPATTERN and isinstance(av, tuple) and not av[1] and not av[2]:
            best = _best(best, _required(av[3], fold))
        elif op is sre_parse.ASSERT and isinstance(av, tuple):  # (?=…) (?<=…): in the text too
            best = _best(best, _required(av[1], fold))
        elif op is sre_parse.BRANCH and isinstance(av, tuple):
            alts = [_required(b, fold) for b in av[1]]
            if all(a is not None for a in alts):
                best = _best(best, {s for a in alts if a is not None for s in a})
        elif (
            op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT)
            and isinstance(av, tuple)
            and av[0] >= 1
        ):
            best = _best(best, _required(av[2], fold))
    flush()
    return best


def required_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which occurs in every text ``pattern`` matches (lower-cased when
    the pattern ignores case), or ``None`` when its shape gives none."""
    fold = bool(pattern.flags & re.IGNORECASE)
    try:
        tree = sre_parse.parse(pattern.pattern, pattern.flags)
    except re.error:
        return None
    found = _required(list(tree), fold)
    return tuple(sorted(found)) if found else None


def _fold(text: str) -> str | None:
    """``text`` lower-cased for the literal pre-filter, ``None`` when it holds a character
    ``str.lower`` does not fold as ``re.IGNORECASE`` does."""
    return None if _FOLD_SPECIAL.search(text) else text.lower()


_fold_clause = lru_cache(maxsize=1024)(_fold)  # every clause is tested against a dozen rules
CACHED_FOLD_CHARS = 512  # a clause is at most 300; whole messages are folded uncached


def folded_text(text: str) -> str | None:
    """``text`` lower-cased for a literal pre-filter (``None``: do not pre-filter it)."""
    return _fold_clause(text) if len(text) <= CACHED_FOLD_CHARS else _fold(text)


def rule_literals(patterns: Sequence[re.Pattern[str]]) -> tuple[str, ...] | None:
    """Lower-cased literals one of which every text any of the (case-insensitive)
    ``patterns`` matches contains; ``None`` when one pattern gives none."""
    out: set[str] = set()
    for p in patterns:
        lits = required_literals(p) if p.flags & re.IGNORECASE else None
        if lits is None:
            return None
        out.update(lits)
    return tuple(sorted(out, key=len))


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def stands_as_word(text: str, pos: int, end: int) -> bool:
    """Whether ``text[pos:end]`` is a whole word there: a latin name must not touch a
    letter, digit or ``_`` on either side; a CJK one needs no boundary."""
    if not text[pos:end].isascii():
        return True
    return (pos == 0 or not _word_char(text[pos - 1])) and (
        end == len(text) or not _word_char(text[end])
    )


def automaton_of(words: Iterable[tuple[str, object]]) -> Any:
    """An Aho-Corasick automaton (``pyahocorasick``, a server dependency, imported here)
    over non-empty ``(word, value)`` pairs; ``iter(text)`` yields ``(end, value)``."""
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for word, value in words:
        automaton.add_word(word, value)
    automaton.make_automaton()
    return automaton


class LiteralScan:
    """Which groups of literals occur in a text, found in one pass.

    Every clause is tested against a dozen rules of 10–40 literals each; testing them one
    ``in`` at a time was a third of extraction's CPU (issue 17 profile).  One Aho-Corasick
    automaton over all of them (``pyahocorasick``, C) reads the text once and answers for
    every group: the result is a bit mask, bit ``bit(name)`` set when one of ``name``'s
    literals occurs in the text: the same answer as ``any(lit in text for lit in lits)``
    (an empty literal is in every text: its group's bit is always set)."""

    def __init__(self, groups: Mapping[str, Iterable[str]]) -> None:
        self._bits = {name: 1 << i for i, name in enumerate(groups)}
        self._all = (1 << len(self._bits)) - 1
        self._always = 0
        masks: dict[str, int] = {}
        for name, literals in groups.items():
            for lit in literals:
                if lit:
                    masks[lit] = masks.get(lit, 0) | self._bits[name]
                else:
                    self._always |= self._bits[name]
        self._masks = masks
        self._automaton: Any = None  # built at the first scan: importing this module (the
        # remote client does, for the query profile's types) needs no server dependency

    def _built(self) -> Any:
        if self._automaton is None:
            self._automaton = automaton_of(self._masks.items())
        return self._automaton

    def bit(self, name: str) -> int:
        """The bit of group ``name`` in :meth:`present`'s mask."""
        return self._bits[name]

    def present(self, text: str) -> int:
        """The mask of the groups one of whose literals occurs in ``text``."""
        mask = self._always
        if self._masks and mask != self._all:
            for _end, found in self._built().iter(text):
                mask |= found
                if mask == self._all:  # every group answered: the rest cannot change it
                    break
        return mask


def _scan_folded(scan: LiteralScan, text: str) -> int | None:
    """``scan.present`` of ``text`` lower-cased, ``None`` when it must not be pre-filtered."""
    folded = _fold(text)
    return None if folded is None else scan.present(folded)


@dataclass(frozen=True)
class Lexicon:
    """Compiled rule patterns (both languages merged) and the entity dictionary."""

    rules: dict[str, tuple[re.Pattern[str], ...]]
    reasoning_markers: tuple[str, ...]
    aliases: dict[str, str]
    topics: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    # per rule, literals one of which every text it matches contains (None: no filter)
    literals: dict[str, tuple[str, ...] | None] = field(init=False, repr=False, compare=False)
    _scan: LiteralScan = field(init=False, repr=False, compare=False)
    _rules_present: Callable[[str], int | None] = field(init=False, repr=False, compare=False)
    _alias_scan: Any = field(init=False, repr=False, compare=False)
    _topic_scans: dict[str, LiteralScan] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lits = {name: rule_literals(pats) for name, pats in self.rules.items()}
        object.__setattr__(self, "literals", lits)
        scan = LiteralScan({name: found for name, found in lits.items() if found is not None})
        object.__setattr__(self, "_scan", scan)
        # a clause is tested against up to a dozen rules: scanned once for all of them (the
        # cache holds the scan, not the lexicon: no reference cycle through it)
        cached = lru_cache(maxsize=1024)(partial(_scan_folded, scan))
        object.__setattr__(self, "_rules_present", cached)
        # an empty alias names nothing (a find loop over it never ended)
        surfaces = [(s, (s, canonical)) for s, canonical in self.aliases.items() if s]
        object.__setattr__(self, "_alias_scan", automaton_of(surfaces) if surfaces else None)
        topic_scans = {kind: LiteralScan(table) for kind, table in self.topics.items()}
        object.__setattr__(self, "_topic_scans", topic_scans)

    def matches(self, rule: str, text: str) -> bool:
        """Whether one of the rule's patterns matches ``text``.

        The extractor's hottest call (12 rules of up to 24 patterns, for every clause).
        A rule none of whose literals is in the text cannot match, so its patterns are not
        run; the answer is the same as running them all (issue 17 profile)."""
        if self.literals.get(rule) is not None:
            present = (
                self._rules_present(text)
                if len(text) <= CACHED_FOLD_CHARS
                else _scan_folded(self._scan, text)
            )
            if present is not None and not present & self._scan.bit(rule):
                return False
        for pattern in self.rules.get(rule, ()):  # noqa: SIM110 (cheaper than any(genexpr))
            if pattern.search(text):
                return True
        return False

    def alias_hits(self, folded: str) -> list[tuple[int, int, str]]:
        """``(start, end, canonical)`` of every dictionary alias in ``folded`` (the text
        case-folded) that stands as a word (a latin alias must not touch a letter, digit or
        ``_`` on either side; a CJK one needs no boundary), found in one pass.  Like a
        left-to-right ``str.find`` per alias: an occurrence overlapping the previous one of
        the same alias is not another."""
        hits: list[tuple[int, int, str]] = []
        if self._alias_scan is None:
            return hits
        last_end: dict[str, int] = {}
        for last, (surface, canonical) in self._alias_scan.iter(folded):
            end = last + 1
            pos = end - len(surface)
            if pos < last_end.get(surface, 0):
                continue
            last_end[surface] = end
            if stands_as_word(folded, pos, end):
                hits.append((pos, end, canonical))
        return hits

    def topic_of(self, text: str, kind: str) -> str | None:
        """The first topic of ``kind`` (in the lexicon's order) one of whose words occurs
        in ``text`` (case-folded), or ``None``."""
        scan = self._topic_scans.get(kind)
        if scan is None:
            return None
        present = scan.present(text.casefold())
        if not present:
            return None
        for topic in self.topics[kind]:
            if present & scan.bit(topic):
                return topic
        return None  # pragma: no cover - a set bit is always one of the topics


def _load_json(path: Path | None, name: str) -> dict[str, Any]:
    if path is not None:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
        return data
    lexicons = resources.files("memstrata.core.extract") / "lexicons"
    raw = (lexicons / name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(raw)
    return loaded


def build_lexicon(rules_path: Path | None = None, entities_path: Path | None = None) -> Lexicon:
    """Compile lexicons from the bundled files, or from the given replacements."""
    rules_raw = _load_json(rules_path, "rules.json")
    ent_raw = _load_json(entities_path, "entities.json")
    rules: dict[str, tuple[re.Pattern[str], ...]] = {}
    for name, langs in rules_raw.items():
        if name.startswith("_") or not isinstance(langs, dict):
            continue
        pats = [p for lang in ("en", "zh") for p in langs.get(lang, [])]
        rules[name] = tuple(re.compile(p, re.IGNORECASE) for p in pats)
    aliases = {k.casefold(): v for k, v in ent_raw.get("aliases", {}).items()}
    topics = {
        kind: {topic: tuple(w.casefold() for w in words) for topic, words in table.items()}
        for kind, table in ent_raw.get("topics", {}).items()
    }
    return Lexicon(
        rules=rules,
        reasoning_markers=tuple(rules_raw.get("reasoning_markers", [])),
        aliases=aliases,
        topics=topics,
    )


@cache
def default_lexicon() -> Lexicon:
    """The bundled lexicon, compiled once per process."""
    return build_lexicon()
