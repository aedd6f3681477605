"""A circuit breaker per store layer: a down layer costs one failed call per cool-down.

    CLOSED ──``failures`` consecutive failures──▶ OPEN ──``cooldown_s`` passed──▶ HALF_OPEN
      ▲                                            ▲                                │
      └────────────── the probe succeeded ─────────┼──────── the probe failed ──────┘

While CLOSED every call goes through.  While OPEN none does: :meth:`CircuitBreaker.allow`
answers False at once, so recall skips the layer without paying its timeout and reports
:meth:`CircuitBreaker.status` ("circuit open since …").  Once the cool-down has passed, the
next ``allow()`` lets exactly one call through as the probe (HALF_OPEN); its outcome
closes or re-opens the circuit.  A probe that never reports (its caller died) is
replaced by a new one after another cool-down, so the breaker cannot stay half-open.

Pure: no I/O, the clock is injected (seconds since the epoch, so the status can name
the wall-clock time the circuit opened).  Thread-safe: one breaker serves every recall
thread of a process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum

from memstrata.core.errors import MemstrataError, TransientError
from memstrata.core.redact import redact

DEFAULT_COOLDOWN_S = 5.0
DEFAULT_FAILURES = 1


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """One layer's breaker; see the module docstring for the transitions.

    ``failures``: consecutive failures that open a closed circuit (>= 1).
    ``cooldown_s``: seconds an open circuit refuses calls before it lets one probe through.
    """

    def __init__(
        self,
        name: str,
        *,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        failures: int = DEFAULT_FAILURES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if cooldown_s <= 0:
            raise ValueError("cooldown_s must be > 0")
        if failures < 1:
            raise ValueError("failures must be >= 1")
        self.name = name
        self.cooldown_s = cooldown_s
        self.threshold = failures
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0  # when the circuit last opened (closed → open, or a failed probe)
        self._probe_at = 0.0  # when the cool-down's probe was let through
        self._reason = ""

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    @property
    def reason(self) -> str:
        """The failure that opened the circuit ("" while closed)."""
        with self._lock:
            return self._reason

    def allow(self) -> bool:
        """Whether this call may use the layer; True once per cool-down while open (the probe)."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            now = self._clock()
            waited_since = self._opened_at if self._state is BreakerState.OPEN else self._probe_at
            if now - waited_since < self.cooldown_s:
                return False
            self._state = BreakerState.HALF_OPEN  # a probe that never reports is replaced
            self._probe_at = now  # by the next one after another cool-down
            return True

    def success(self) -> None:
        """The call reached the layer and it answered: close the circuit."""
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._reason = ""

    def failure(self, reason: str) -> None:
        """The layer did not answer (down, timed out): count it, open at the threshold."""
        with self._lock:
            self._failures += 1
            if self._state is BreakerState.OPEN:  # a call let through before it opened
                self._reason = reason
                return
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.threshold:
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()
                self._reason = reason

    def status(self) -> str:
        """What recall reports for a layer it skipped: since when, and why."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return "circuit closed"
            since = datetime.fromtimestamp(self._opened_at, UTC).isoformat(timespec="seconds")
            return (
                f"circuit open since {since.replace('+00:00', 'Z')} "
                f"(retried every {self.cooldown_s:g} s): {self._reason}"
            )


class Breakers:
    """The breakers of one process, one per layer name, made on first use.

    Keep one instance per process (the composition root holds it), so every recall of
    the process shares what the others learnt about a down layer.
    """

    def __init__(
        self,
        *,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        failures: int = DEFAULT_FAILURES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cooldown_s = cooldown_s
        self.failures = failures
        self._clock = clock
        self._lock = threading.Lock()
        self._by_layer: dict[str, CircuitBreaker] = {}

    def __getitem__(self, layer: str) -> CircuitBreaker:
        with self._lock:
            breaker = self._by_layer.get(layer)
            if breaker is None:
                breaker = CircuitBreaker(
                    layer, cooldown_s=self.cooldown_s, failures=self.failures, clock=self._clock
                )
                self._by_layer[layer] = breaker
            return breaker

    def states(self) -> dict[str, BreakerState]:
        """Every breaker made so far and its state (for status pages and tests)."""
        with self._lock:
            layers = list(self._by_layer.items())
        return {name: b.state for name, b in layers}


@contextmanager
def tripping(breaker: CircuitBreaker) -> Iterator[None]:
    """Report the outcome of one call to ``breaker``: a transient error is a failure; any
    other answer, even a refusal (unknown user, bad request), shows the store is up.
    Exceptions outside the tree (bugs) pass untouched and report nothing."""
    try:
        yield
    except TransientError as exc:
        breaker.failure(describe(exc))
        raise
    except MemstrataError:
        breaker.success()
        raise
    else:
        breaker.success()


def describe(exc: BaseException) -> str:
    """How a failed layer is reported: the error type and message, passwords masked."""
    return redact(f"{type(exc).__name__}: {exc}")
