"""A clock that only moves when told to: breakers and rules take ``now`` from a callable."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FixedClock:
    t: float = field(default=1_700_000_000.0)

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
