"""Extraction and write-policy output stay the same while the write path gets faster.

The expected output was produced by the implementation before the hot-path work of
issue 17 (``tests/unit/extract_oracle.py`` made ``tests/data/extract_golden.json``);
an intentional change of output regenerates it and says so in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.core.extract.lexicon import LiteralScan, default_lexicon
from memstrata.ops.replay.formats import DEFAULT_ROOT
from tests.unit import extract_oracle as oracle

GOLDEN: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "data" / oracle.GOLDEN).read_text(encoding="utf-8")
)


def test_bench_turns_extract_and_judge_as_before() -> None:
    outcomes = oracle.bench_outcomes()
    assert outcomes[: oracle.BENCH_SHOWN] == GOLDEN["bench_shown"]
    turns, sha = oracle.digest(outcomes)
    assert {"turns": turns, "sha256": sha} == GOLDEN["bench"]
    assert sum(len(o["candidates"]) for o in outcomes) > 5 * turns  # the mix proposes


@pytest.mark.parametrize("source", oracle.SESSION_SOURCES)
def test_real_agent_sessions_extract_and_judge_as_before(source: str) -> None:
    if not (DEFAULT_ROOT / source).is_dir():
        pytest.skip(f"shared bench data {DEFAULT_ROOT / source} not present")
    turns, sha = oracle.session_digest(source)
    assert {"turns": turns, "sha256": sha} == GOLDEN["sessions"][source]


def test_lexicon_prefilter_answers_as_every_pattern_would() -> None:
    """The literal pre-filter of ``Lexicon.matches`` only skips searches that find nothing,
    including for characters ``re.IGNORECASE`` folds differently from ``str.lower``."""
    from memstrata.core.extract.rules import split_clauses
    from memstrata.ops.bench.common.fixtures import turn_messages

    lx = default_lexicon()
    assert sum(v is not None for v in lx.literals.values()) >= len(lx.rules) - 2
    texts = [c for n in range(40) for m in turn_messages(n) for c in split_clauses(m["content"])]
    texts += ["The API İS ſLOW again", "It keeps timing out", "KEEP IN MIND: prod", "不要重启", ""]
    hits = 0
    for rule, patterns in lx.rules.items():
        for text in texts:
            expected = any(p.search(text) for p in patterns)
            assert lx.matches(rule, text) is expected, (rule, text)
            hits += expected
    assert hits > len(texts)


def test_entity_prefilter_finds_what_every_pattern_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.core.extract import entities
    from memstrata.core.extract.rules import split_clauses
    from memstrata.ops.bench.common.fixtures import turn_messages

    lx = default_lexicon()
    texts = [c for n in range(40) for m in turn_messages(n) for c in split_clauses(m["content"])]
    texts += [
        "PRODUCTION-eu is down", "call foo_bar(1) on /api/v1/x", "ORA-01555 and HTTP 504",
        "NullPointerException in payment-service", "İSTANBUL prod-ſ", "ſtaging-eu",
    ]  # fmt: skip
    filtered = [entities.extract_entities(t, lx) for t in texts]
    # no literal scan and no guard: every pattern runs on every text
    monkeypatch.setattr(entities, "_LITERALS", tuple((None, False) for _ in entities._PATTERNS))
    monkeypatch.setattr(entities, "_GUARDS", {})
    assert filtered == [entities.extract_entities(t, lx) for t in texts]
    assert sum(map(len, filtered)) > len(texts)


# pieces that make the entity patterns, the rules' literals and the aliases fire, and the
# characters around them that decide a match (word boundaries, case folding)
_PIECES = [
    "prod", "PROD", "staging-eu", "payment-service", "fooBar", "x2Y", "foo.bar(", "do_it(",
    "/api/v1/x", "/v2/y", "NullPointerException", "IOError", "ERROR", "EACCES", "ORA-01555",
    "HTTP 504", "HTTP404", "BUG-12", "JIRA-123", "issue#77", "db", "DB", "database", "k8s",
    "thread pool", "连接池", "数据库", "don't", "must", "always", "prefer", "remember",
    "next", "decided", "not the cause", "maybe", "İ", "ſ", "K", "_", "-", ".", "/", "(",
    "1", "42", "kafka", "kafkafka", "deadlock", "lock", "postgresql", "gc", "死锁",
]  # fmt: skip
_texts = st.lists(
    st.tuples(st.sampled_from(_PIECES), st.sampled_from(["", " ", "-", "_", ".", "a", "，"])),
    max_size=12,
).map(lambda parts: "".join(p + sep for p, sep in parts))


@settings(max_examples=300, deadline=None)
@given(text=_texts)
def test_entity_scans_and_guards_skip_only_patterns_that_find_nothing(text: str) -> None:
    from memstrata.core.extract import entities

    lx = default_lexicon()
    for (kind, pattern), (lits, fold) in zip(entities._PATTERNS, entities._LITERALS, strict=True):
        guard = entities._GUARDS.get(kind)
        if pattern.search(text) is not None:
            assert guard is None or guard.search(text) is not None, (kind, text)
            if lits is not None:
                hay = text.lower() if fold else text
                assert any(lit in hay for lit in lits) or not text.isascii(), (kind, text)
    assert lx.matches("user_constraint", text) is any(
        p.search(text) for p in lx.rules["user_constraint"]
    )


@settings(max_examples=300, deadline=None)
@given(text=_texts)
def test_alias_hits_are_those_of_a_find_per_alias(text: str) -> None:
    lx = default_lexicon()
    folded = text.casefold()
    expected: list[tuple[int, int, str]] = []
    for surface, canonical in lx.aliases.items():
        start = 0
        while (pos := folded.find(surface, start)) >= 0:
            end = pos + len(surface)
            before = folded[pos - 1] if pos > 0 else " "
            after = folded[end] if end < len(folded) else " "
            if not surface.isascii() or not (
                before.isalnum() or before == "_" or after.isalnum() or after == "_"
            ):
                expected.append((pos, end, canonical))
            start = end
    assert sorted(lx.alias_hits(folded)) == sorted(expected)


@settings(max_examples=200, deadline=None)
@given(text=_texts)
def test_topic_of_is_the_first_topic_with_a_word_in_the_text(text: str) -> None:
    lx = default_lexicon()
    for kind, table in lx.topics.items():
        folded = text.casefold()
        expected = next((t for t, words in table.items() if any(w in folded for w in words)), None)
        assert lx.topic_of(text, kind) == expected


@given(
    groups=st.dictionaries(
        st.sampled_from("abcdefgh"), st.lists(st.text("xyz", max_size=3), max_size=4), max_size=6
    ),
    text=st.text("xyzw", max_size=20),
)
def test_literal_scan_sets_the_bit_of_each_group_with_a_literal_in_the_text(
    groups: dict[str, list[str]], text: str
) -> None:
    scan = LiteralScan(groups)
    mask = scan.present(text)
    for name, literals in groups.items():
        assert bool(mask & scan.bit(name)) is any(lit in text for lit in literals)


def test_an_empty_alias_or_known_entity_names_nothing_and_does_not_hang() -> None:
    """An empty alias (a custom lexicon) or an empty known entity is in every text; the
    per-alias find loop never ended on it.  It names nothing; the others are still found."""
    from dataclasses import replace

    from memstrata.core.extract.entities import extract_entities

    lx = default_lexicon()
    odd = replace(lx, aliases={"": "nothing", **lx.aliases})
    assert extract_entities("kafka lag on prod", odd, extra=("", "lag")) == ["kafka", "lag", "prod"]


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(["ß", "İ", "ﬁ", "Σ", *_PIECES]), max_size=10).map(" ".join))
def test_dictionary_hits_are_placed_in_the_text_itself(text: str) -> None:
    """Case folding lengthens some characters ("ß" → "ss"): a name found in the folded
    text is placed where it stands in the text, beside the patterns' hits."""
    from memstrata.core.extract.entities import _dictionary_hits

    lx = default_lexicon()
    surfaces: dict[str, set[str]] = {canonical: set() for canonical in lx.aliases.values()}
    for surface, canonical in lx.aliases.items():
        surfaces[canonical].add(surface)
    for start, end, name in _dictionary_hits(text, lx, ()):
        assert text[start:end].casefold() in surfaces[name], (text, start, end, name)


def test_a_name_after_a_lengthened_character_is_not_taken_for_part_of_the_next_one() -> None:
    from memstrata.core.extract.entities import extract_entities

    # each "ß" folds to two characters: the dictionary's "redis" was placed six characters
    # late, on top of "createOrder", and dropped as a part of it
    assert extract_entities("ßßßßßß redis createOrder", default_lexicon()) == [
        "redis",
        "createOrder",
    ]
