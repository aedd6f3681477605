"""One owner's lifecycle jobs never interleave (core.lifecycle.owner_lock), on real PG/Redis.

Each test pauses one job inside its critical section (its hand-over of changed cards to
the indexer, ``on_cards``, runs while the job holds the owner) and runs another job for
the same owner from a second thread: a Beat job skips the owner, an explicit command
waits (bounded) or raises :class:`OwnerBusy`, and another owner is never held up.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine

from memstrata.core.keys import GlobalKeys
from memstrata.core.lifecycle.consolidate import OwnerReport, consolidate, consolidate_owner
from memstrata.core.lifecycle.finalise import finalise, finalise_idle, idle_sessions
from memstrata.core.lifecycle.owner_lock import OwnerBusy, owner_key, owner_lock
from memstrata.core.lifecycle.retract import retract_card
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import CONSOLIDATED, CardDraft, CardStatus
from memstrata.core.runtime import Runtime
from tests.integration.test_lifecycle_env import (
    BEAGLE,
    NOW,
    Tenant,
    item,
    kicks,
    lc,
    lc_engine,
    lifecycle_pg,
    settings,
    tenant,
    user_cards,
)

pytestmark = pytest.mark.integration
__all__ = ["kicks", "lc", "lc_engine", "lifecycle_pg", "settings", "tenant"]  # fixtures

WAIT = 10.0  # seconds a paused job or a waiting thread is given at most (never reached)


def _write(lc: Lifecycle, t: Tenant, n: int, text: str, user: str | None = None) -> str:
    draft = CardDraft(
        tenant_id=t.id, user_id=user or t.user, canonical_key=f"episode:k{n}",
        memory_type="episode", title=text[:80], summary=text, source_type="session_episode",
        source_message_ids=[f"msg_{n}"],
    )  # fmt: skip
    return lc.ledger.write(draft, now=NOW + n).memory_id


def _merged(engine: Engine, t: Tenant, user: str | None = None) -> list[str]:
    return [c.memory_id for c in user_cards(engine, t.id, user or t.user)
            if c.memory_type == CONSOLIDATED and c.status is CardStatus.ACTIVE]  # fmt: skip


class Paused:
    """An ``on_cards`` that stops its job inside the critical section until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, _ids: Sequence[str]) -> None:
        self.entered.set()
        assert self.release.wait(WAIT)


class Background:
    """One call on a thread; its result or its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = fn()
            except BaseException as exc:  # handed to the test
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(WAIT)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


@contextmanager
def paused(lc: Lifecycle, job: Callable[[Lifecycle], Any]) -> Iterator[Background]:
    """``job`` running on a thread, stopped inside its critical section for the block."""
    gate = Paused()
    bg = Background(lambda: job(dataclasses.replace(lc, on_cards=gate)))
    try:
        assert gate.entered.wait(WAIT), "the job never reached its critical section"
        yield bg
    finally:
        gate.release.set()
    bg.join()


def _mine(reports: Sequence[OwnerReport], t: Tenant) -> OwnerReport:
    [r] = [r for r in reports if (r.tenant_id, r.user_id) == (t.id, t.user)]
    return r


def test_consolidation_skips_or_waits_for_an_owner_a_retraction_holds(
    lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    beagle = [_write(lc, tenant, n, s) for n, s in enumerate(BEAGLE)]
    wrong = _write(lc, tenant, 9, "The pottery class glazed clay bowls today")
    _write(lc, tenant, 20, BEAGLE[0], user="bob")  # another owner of the tenant
    _write(lc, tenant, 21, BEAGLE[1], user="bob")
    _write(lc, tenant, 22, BEAGLE[2], user="bob")

    def retract(x: Lifecycle) -> object:
        return retract_card(x, card_id=wrong, now=NOW + 60, reason="not true")

    with paused(lc, retract):
        # the Beat run skips the busy owner and reports it; bob's cards are merged
        done = consolidate(lc, now=NOW + 90, since=NOW - 1)
        assert _mine(done, tenant).skipped and not _mine(done, tenant).merged
        assert _mine(done, Tenant(tenant.id, "bob")).merged
        # an explicit run for the owner waits: nothing merged while the retraction runs
        waiting = Background(
            lambda: consolidate_owner(
                lc, tenant_id=tenant.id, user_id=tenant.user, now=NOW + 90, wait_s=WAIT
            )
        )
        waiting.thread.join(0.5)
        assert waiting.thread.is_alive() and _merged(lc_engine, tenant) == []
    report = waiting.join()  # ran once the retraction had committed and let go
    assert report.merged == tuple(_merged(lc_engine, tenant)) and len(report.merged) == 1
    cards = {c.memory_id: c for c in user_cards(lc_engine, tenant.id, tenant.user)}
    assert cards[wrong].status is CardStatus.SUPERSEDED
    assert {cards[i].status for i in beagle} == {CardStatus.SUPERSEDED}


def test_a_retraction_waits_a_bounded_time_for_a_finalise_then_raises(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    card = _write(lc, tenant, 1, "My sister Anna lives in Lisbon near the old harbour")
    res.stm.upsert(item(u, t, "s1", "Rollback fixed the checkout timeouts.", "s1:rollback",
                        subtype="conclusion"))  # fmt: skip

    def end(x: Lifecycle) -> object:
        return finalise(x, user_id=u, session_id="s1", now=NOW + 3600, tenant_id=t)

    with paused(lc, end) as fin:
        with pytest.raises(OwnerBusy, match=r"busy for 0\.3 s"):
            retract_card(lc, card_id=card, now=NOW + 3601, reason="not true", wait_s=0.3)
        assert {c.memory_id: c for c in user_cards(lc_engine, t, u)}[card].status is (
            CardStatus.ACTIVE
        )
        # a consolidation asked to wait no longer than that fails the same way
        with pytest.raises(OwnerBusy):
            consolidate_owner(lc, tenant_id=t, user_id=u, now=NOW + 3601, wait_s=0.3)
    assert fin.join().card_id is not None
    # once the session is finalised the retraction goes through
    assert retract_card(lc, card_id=card, now=NOW + 3700, reason="not true").changed


def test_the_idle_job_skips_a_busy_owner_and_takes_the_session_later(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    res.stm.upsert(item(u, t, "s1", "Rollback fixed the checkout timeouts.", "s1:rollback",
                        subtype="conclusion"))  # fmt: skip
    scope = res.stm.keys(u, t).scope
    res.redis.zadd(GlobalKeys(lc.stm.namespace).compress_active, {f"{scope}|s1": NOW})
    with owner_lock(lc.engine, t, u, wait_s=1.0):  # another job holds the owner
        [busy] = finalise_idle(lc, now=NOW + 2400, limit=10, max_s=30)
        assert busy.skipped and busy.card_id is None
        assert idle_sessions(lc, now=NOW + 2400, idle_s=1800, limit=10) == [(u, t, "s1")]
    [done] = finalise_idle(lc, now=NOW + 2500, limit=10, max_s=30)
    assert not done.skipped and done.card_id is not None
    assert idle_sessions(lc, now=NOW + 2500, idle_s=1800, limit=10) == []


def test_the_lock_key_is_stable_and_per_owner() -> None:
    # a documented hash, not Python's (salted per process): every worker agrees on it
    assert owner_key("acme", "alice") == owner_key("acme", "alice") == -1500836946504775156
    assert owner_key("acme", "alice") != owner_key("acme", "bob")
    assert owner_key("acme", "bob") != owner_key("acmeb", "ob")
    assert -(2**63) <= owner_key("acme", "alice") < 2**63
