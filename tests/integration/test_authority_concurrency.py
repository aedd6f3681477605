"""Concurrent upserts of one canonical key leave exactly one current row (two real processes,
and many threads), with every change kept as history."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from sqlalchemy import Engine, func, select

from memstrata.core.authority.db import make_engine
from memstrata.core.authority.errors import AuthorityUnavailable, ConcurrentFactWrite
from memstrata.core.authority.facts import upsert_fact
from memstrata.core.authority.read import read_version
from memstrata.core.authority.tables import FACTS
from memstrata.core.errors import TransientError
from tests.integration import authority_db
from tests.integration.authority_db import World, race_in_process, race_upserts

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world


def _run_processes(url: str, w: World, key: str, plans: list[list[str]]) -> list[list[bool]]:
    """Spawn one writer process per plan, release them together, collect their results."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(plans))
    out = ctx.Queue()
    procs = [
        ctx.Process(target=race_in_process, args=(url, w.tenant_id, w.alice, key, p, barrier, out))
        for p in plans
    ]
    for proc in procs:
        proc.start()
    try:
        results = [out.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
    assert all(isinstance(r, list) for r in results), results
    assert all(proc.exitcode == 0 for proc in procs)
    return results


def _rows(engine: Engine, w: World, key: str) -> tuple[int, int]:
    """(current rows, all rows) of one key."""
    with engine.connect() as conn:
        base = (
            select(func.count())
            .select_from(FACTS)
            .where(
                FACTS.c.tenant_id == w.tenant_id,
                FACTS.c.user_id == w.alice,
                FACTS.c.canonical_fact_key == key,
            )
        )
        current = conn.execute(base.where(FACTS.c.superseded_at.is_(None))).scalar_one()
        total = conn.execute(base).scalar_one()
    return int(current), int(total)


def test_two_processes_racing_on_one_key_leave_one_current_row(
    pg_url: str, engine: Engine, world: World
) -> None:
    # Given two writer processes with their own connections, released at the same moment
    key = "config.default_env"
    plans = [[f"a{i}" for i in range(40)], [f"b{i}" for i in range(40)]]
    # When both upsert different values of the same key as fast as they can
    results = _run_processes(pg_url, world, key, plans)
    # Then exactly one row is current, and every change is a row of history
    current, total = _rows(engine, world, key)
    assert current == 1
    assert total == sum(sum(r) for r in results)


def test_two_processes_writing_the_same_new_value_create_one_row(
    pg_url: str, engine: Engine, world: World
) -> None:
    key = "preference.format"
    results = _run_processes(pg_url, world, key, [["table"], ["table"]])
    assert sorted(r[0] for r in results) == [False, True]  # one wrote, the other saw it current
    assert _rows(engine, world, key) == (1, 1)


def test_many_threads_racing_leave_one_current_row(
    pg_url: str, engine: Engine, world: World
) -> None:
    threads = 6
    barrier = Barrier(threads)
    key = "profile.answer_style"
    plans = [[f"style{t}_{i}" for i in range(15)] for t in range(threads)]
    with ThreadPoolExecutor(threads) as ex:
        futures = [
            ex.submit(race_upserts, pg_url, world.tenant_id, world.alice, key, p, barrier)
            for p in plans
        ]
        results = [f.result() for f in futures]
    current, total = _rows(engine, world, key)
    assert current == 1
    # the seed value "brief_first" plus one row per successful change
    assert total == 1 + sum(sum(r) for r in results)


def test_repeatable_read_loser_gets_a_transient_error(engine: Engine, world: World) -> None:
    # Given a REPEATABLE READ transaction that took its snapshot before another write
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as late:
        read_version(db=late, tenant_id=world.tenant_id, user_id=world.alice)
        with engine.begin() as first:
            upsert_fact(
                db=first,
                tenant_id=world.tenant_id,
                user_id=world.alice,
                canonical_fact_key="config.default_env",
                domain="config",
                value="one",
            )
        # When it writes the same user, Then it is told to retry (a transient error)
        with pytest.raises(ConcurrentFactWrite) as info:
            upsert_fact(
                db=late,
                tenant_id=world.tenant_id,
                user_id=world.alice,
                canonical_fact_key="config.default_env",
                domain="config",
                value="two",
            )
        assert isinstance(info.value, TransientError)
        late.rollback()


def test_a_write_stuck_behind_a_lock_times_out(pg_url: str, world: World) -> None:
    # Given a transaction holding alice's row lock, and an engine with a 1 s statement timeout
    impatient = make_engine(pg_url, connect_timeout_s=1, pool_size=1)
    blocker = make_engine(pg_url, pool_size=1)
    try:
        with blocker.connect() as holder:
            upsert_fact(
                db=holder,
                tenant_id=world.tenant_id,
                user_id=world.alice,
                canonical_fact_key="config.theme",
                domain="config",
                value="dark",
            )
            # When another writer needs the same lock, Then it gives up as unavailable
            with pytest.raises(AuthorityUnavailable), impatient.begin() as conn:
                upsert_fact(
                    db=conn,
                    tenant_id=world.tenant_id,
                    user_id=world.alice,
                    canonical_fact_key="config.theme",
                    domain="config",
                    value="light",
                )
            holder.rollback()
    finally:
        impatient.dispose()
        blocker.dispose()
