"""The circuit breaker state machine, on a clock that only moves when told to, and the
password masking of messages that leave the process."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstrata.core.authority.filters import filters_for
from memstrata.core.authority.snapshot import owner_only
from memstrata.core.breaker import Breakers, BreakerState, CircuitBreaker, describe, tripping
from memstrata.core.errors import NotFound, StoreUnavailable
from memstrata.core.redact import redact
from tests.clock import FixedClock

T0 = 1_700_000_000.0


def breaker(clock: FixedClock, **kw: float) -> CircuitBreaker:
    return CircuitBreaker("ltm", clock=clock.now, **kw)  # type: ignore[arg-type]


def state(b: CircuitBreaker) -> BreakerState:
    """The state, read through a call (so a type checker does not pin it between steps)."""
    return b.state


def test_a_closed_breaker_lets_every_call_through() -> None:
    b = breaker(FixedClock(T0))
    assert b.state is BreakerState.CLOSED
    assert all(b.allow() for _ in range(5))
    b.success()
    assert b.state is BreakerState.CLOSED and b.status() == "circuit closed"


def test_one_failure_opens_it_and_an_open_breaker_refuses_until_the_cooldown() -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    # When the layer fails once
    b.failure("IndexUnavailable: milvus down")
    # Then every call is refused at once for the cool-down, and the status says since when
    assert b.state is BreakerState.OPEN
    clock.advance(4.9)
    assert not any(b.allow() for _ in range(100))
    assert b.status() == (
        "circuit open since 2023-11-14T22:13:20Z (retried every 5 s): IndexUnavailable: milvus down"
    )


def test_after_the_cooldown_exactly_one_probe_goes_through() -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    b.failure("down")
    clock.advance(5.0)
    # Then the first caller is the probe, the others are still refused
    assert b.allow()
    assert b.state is BreakerState.HALF_OPEN
    assert not b.allow() and not b.allow()
    assert "circuit open since 2023-11-14T22:13:20Z" in b.status()


def test_a_successful_probe_closes_the_circuit() -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    b.failure("down")
    clock.advance(6)
    assert b.allow()
    b.success()
    assert b.state is BreakerState.CLOSED
    assert b.allow() and b.allow()
    assert b.reason == ""


def test_a_failed_probe_reopens_it_for_another_full_cooldown() -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    b.failure("down")
    clock.advance(6)
    assert b.allow()
    b.failure("still down")
    assert b.state is BreakerState.OPEN
    assert b.reason == "still down"
    clock.advance(4.9)
    assert not b.allow()
    clock.advance(0.1)
    assert b.allow()


def test_a_probe_that_never_reports_is_replaced_after_another_cooldown() -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    b.failure("down")
    clock.advance(5)
    assert b.allow()  # this probe's caller dies without reporting
    clock.advance(4.9)
    assert not b.allow()
    clock.advance(0.1)
    assert b.allow() and b.state is BreakerState.HALF_OPEN


def test_a_late_failure_of_an_older_call_does_not_extend_the_open_period() -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    b.failure("first")
    clock.advance(3)
    b.failure("a call let through before it opened")
    clock.advance(2)
    assert b.allow()  # cool-down counted from the first failure


def test_with_a_threshold_only_consecutive_failures_open_it() -> None:
    b = breaker(FixedClock(T0), failures=3)
    b.failure("1")
    b.failure("2")
    b.success()  # the run is broken
    b.failure("1")
    b.failure("2")
    closed = b.state
    b.failure("3")
    assert (closed, b.state) == (BreakerState.CLOSED, BreakerState.OPEN)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker("x", cooldown_s=0)
    with pytest.raises(ValueError):
        CircuitBreaker("x", failures=0)


@given(st.lists(st.sampled_from(["allow", "success", "failure", "tick"]), max_size=60))
def test_an_open_breaker_never_lets_a_call_through_within_its_cooldown(ops: list[str]) -> None:
    clock = FixedClock(T0)
    b = breaker(clock, cooldown_s=5.0)
    opened_at: float | None = None
    for op in ops:
        before = b.state
        if op == "allow":
            allowed = b.allow()
            if before is BreakerState.OPEN and opened_at is not None:
                assert allowed == (clock.t - opened_at >= 5.0)
        elif op == "success":
            b.success()
            opened_at = None
        elif op == "failure":
            b.failure("x")
            if before is not BreakerState.OPEN:
                opened_at = clock.t
        else:
            clock.advance(1.5)


def test_breakers_keep_one_breaker_per_layer_on_one_clock() -> None:
    clock = FixedClock(T0)
    breakers = Breakers(cooldown_s=2.0, clock=clock.now)
    assert breakers["ltm"] is breakers["ltm"]
    breakers["ltm"].failure("down")
    assert breakers.states() == {"ltm": BreakerState.OPEN}
    assert breakers["stm"].allow()
    clock.advance(2)
    assert breakers["ltm"].allow()
    assert breakers["ltm"].cooldown_s == 2.0


def test_tripping_counts_outages_as_failures_and_any_answer_as_success() -> None:
    b = breaker(FixedClock(T0))
    # When a call raises a transient store error, Then the breaker opens and it propagates
    with pytest.raises(StoreUnavailable), tripping(b):
        raise StoreUnavailable("redis://:pw@h:1 refused")
    assert state(b) is BreakerState.OPEN
    assert b.reason == "StoreUnavailable: redis://:***@h:1 refused"
    # When the store answers with a refusal (a permanent error), Then it is up again
    with pytest.raises(NotFound), tripping(b):
        raise NotFound("no such user")
    assert state(b) is BreakerState.CLOSED
    # ... and a bug outside the error tree reports nothing either way
    b.failure("down")
    with pytest.raises(KeyError), tripping(b):
        raise KeyError("bug")
    assert state(b) is BreakerState.OPEN
    assert describe(ValueError("x")) == "ValueError: x"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "Redis is not reachable at redis://:S3cretRedisPw@127.0.0.1:6399/0 (Error 111)",
            "Redis is not reachable at redis://:***@127.0.0.1:6399/0 (Error 111)",
        ),
        (
            "postgresql+psycopg://memstrata:pw@db:5432/memstrata failed",
            "postgresql+psycopg://memstrata:***@db:5432/memstrata failed",
        ),
        ("rediss://user:p%40ss@h/0 and redis://:x@y", "rediss://user:***@h/0 and redis://:***@y"),
        ("redis://127.0.0.1:6379/0 is fine", "redis://127.0.0.1:6379/0 is fine"),
        ("postgresql://postgres@127.0.0.1:5432/test", "postgresql://postgres@127.0.0.1:5432/test"),
    ],
)
def test_passwords_in_urls_are_masked_and_nothing_else_changes(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_owner_only_snapshot_scopes_reads_to_the_owner_outside_any_project() -> None:
    # Given the snapshot recall falls back to when PostgreSQL cannot be read
    filters = filters_for(owner_only("t1", "alice"))
    # Then its filters name the owner, grant no project, and admit no project's record
    assert (filters.tenant_id, filters.user_id) == ("t1", "alice")
    assert filters.project_ids == () and filters.project_id is None
    assert filters.allows(tenant_id="t1")
    assert not filters.allows(tenant_id="t1", project_id="shop")
    assert not filters.allows(tenant_id="t2")
    assert not filters.can_write()
