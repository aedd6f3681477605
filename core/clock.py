"""Injectable clock: rules take ``now`` from a Clock so tests and simulations control time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (float, UTC)."""
        ...


class SystemClock:
    """Wall clock."""

    def now(self) -> float:
        return time.time()


@dataclass
class FixedClock:
    """A clock that only moves when told to (tests, simulated benchmark runs)."""

    t: float = field(default=1_700_000_000.0)

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
