"""``bench faults``' milvus_sigkill scenario end to end, small: it runs against the routed
(generation-aware) indexes of the composition root and reports every card in place.

The scenario once read a Milvus client off the lexical port, which the generation router
does not expose, so ``bench all`` printed FAILED for the whole faults section.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.ops.bench.faults import _milvus_fault

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_bench_milvus_sigkill_scenario_counts_every_card(tmp_path: Path) -> None:
    figures = _milvus_fault(cards=20, kills=1, down_s=1.0, folder=tmp_path)
    assert figures["acknowledged"] == 20, figures
    assert figures["lost"] == 0 and figures["duplicated"] == 0, figures
    assert figures["in_index"] == {"vector": 20, "lexical": 20}, figures
    assert figures["converge_s"] is not None, figures  # the reconciler settled in time
