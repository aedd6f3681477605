"""Redis's instructions per drained turn under callgrind (issue 17): a figure that repeats."""

from __future__ import annotations

import pytest

from memstrata.ops.bench.ingest.instructions import available, redis_instructions

pytestmark = pytest.mark.skipif(not available(), reason="needs valgrind and redis-server")


def test_the_count_repeats_on_a_busy_machine_and_is_per_turn() -> None:
    # When the same 60 bench turns are drained twice against a server under callgrind
    first = redis_instructions(turns=60, batch=20)
    second = redis_instructions(turns=60, batch=20)
    # Then each run counts the server's instructions, tens of millions for a start, a
    # shutdown and 60 turns' scripts
    assert first["redis_instructions"] > 50_000_000
    assert first["redis_instructions_per_turn"] == round(first["redis_instructions"] / 60)
    # And the two counts agree to within a percent (CPU seconds on this machine do not:
    # docs/PERFORMANCE.md, 2026-12-07)
    a, b = first["redis_instructions"], second["redis_instructions"]
    assert abs(a - b) / a < 0.01
