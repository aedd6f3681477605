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
    from memstrata.core.extract.lexicon import default_lexicon
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
    from memstrata.core.extract.lexicon import default_lexicon
    from memstrata.core.extract.rules import split_clauses
    from memstrata.ops.bench.common.fixtures import turn_messages

    lx = default_lexicon()
    texts = [c for n in range(40) for m in turn_messages(n) for c in split_clauses(m["content"])]
    texts += [
        "PRODUCTION-eu is down", "call foo_bar(1) on /api/v1/x", "ORA-01555 and HTTP 504",
        "NullPointerException in payment-service", "İSTANBUL prod-ſ", "ſtaging-eu",
    ]  # fmt: skip
    filtered = [entities.extract_entities(t, lx) for t in texts]
    monkeypatch.setattr(entities, "_LITERALS", tuple((None, False) for _ in entities._PATTERNS))
    assert filtered == [entities.extract_entities(t, lx) for t in texts]
    assert sum(map(len, filtered)) > len(texts)
