"""docs/CONFIGURATION.md is what ``ops.configref`` generates from ``Settings`` right now."""

from __future__ import annotations

from pathlib import Path

from memstrata.core.settings import Settings
from memstrata.ops.configref import render, rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONFIGURATION.md"


def test_the_configuration_reference_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/CONFIGURATION.md is stale: python -m memstrata.ops.configref > docs/CONFIGURATION.md"
    )


def test_every_setting_is_listed_once_with_its_nested_ones() -> None:
    envs = [r[1] for r in rows(Settings) if r[1]]
    assert len(envs) == len(set(envs))
    for name in ("MEMSTRATA_REDIS_URL", "MEMSTRATA_UNKNOWN_OWNER", "MEMSTRATA_TTL__FACT_S",
                 "MEMSTRATA_LTM__MILVUS_URI", "MEMSTRATA_API_MAX_BODY_BYTES"):  # fmt: skip
        assert f"| `{name}` |" in render()
    assert len(envs) >= len(Settings.model_fields)
