"""The Grafana dashboard asks only for metrics memstrata exports, and shows each of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from memstrata.core.exposition import STATE_METRICS
from memstrata.core.metrics import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "ops" / "grafana" / "memstrata.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def _exported() -> set[str]:
    names = set(STATE_METRICS)
    for metric in vars(metrics()).values():
        for family in metric.describe():
            names.add(family.name)
    return names


def _asked() -> set[str]:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    out = set()
    for name in re.findall(r"memstrata_[a-z_]+", " ".join(exprs)):
        for suffix in SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        out.add(name)
    return out


def test_the_dashboard_uses_every_exported_metric_and_no_other() -> None:
    assert _asked() == _exported()
