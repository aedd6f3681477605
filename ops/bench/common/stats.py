"""Percentiles and rounding of the reported figures."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def r3(value: float) -> float:
    """Round for reporting (3 decimals, NaN kept as NaN)."""
    return value if math.isnan(value) else round(value, 3)
