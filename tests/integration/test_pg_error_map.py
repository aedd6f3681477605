"""The PostgreSQL error map (``core.adapters.pg``) against a real server, row by row.

Every error is produced by the real PostgreSQL on 127.0.0.1:5432 (or a closed port):
bad SQL, constraint violations, a bad value, a statement timeout, a read-only
transaction, a serialization failure, a deadlock between two real sessions, a killed
backend, an exhausted pool, a program limit.  Each case asserts the memstrata type, its
retry class, and that ``__cause__`` is the SQLAlchemy error (with the psycopg error
under it).  The tables live in a scratch database, dropped at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy import exc as sa

from memstrata.core.adapters.pg import ConstraintRule, PgErrorMap, pg_errors
from memstrata.core.authority.errors import AuthorityUnavailable, ConcurrentFactWrite
from memstrata.core.errors import (
    ConcurrentWrite,
    Conflict,
    InvalidInput,
    MemstrataError,
    NotFound,
    PermanentError,
    StoreRejected,
    StoreUnavailable,
    TransientError,
)
from memstrata.core.ltm.milvus_server import free_port
from tests.integration.authority_db import PG_HOST, PG_USER, scratch_database

pytestmark = pytest.mark.integration


THINGS = """
CREATE TABLE things (
    id int CONSTRAINT pk_things PRIMARY KEY,
    n int NOT NULL CONSTRAINT ck_things_n CHECK (n >= 0),
    parent int CONSTRAINT fk_things_parent_things REFERENCES things (id)
)
"""


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_database("memstrata_pgerr_") as url:
        eng = create_engine(url)
        with eng.begin() as conn:
            conn.execute(text(THINGS))
        eng.dispose()
        yield url


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    eng = create_engine(pg_url, pool_size=2, max_overflow=0)
    with eng.begin() as conn:
        conn.execute(text("TRUNCATE things"))
        conn.execute(text("INSERT INTO things (id, n) VALUES (1, 1), (2, 2)"))
    yield eng
    eng.dispose()


def mapped(call: Callable[[], object], errors: PgErrorMap = pg_errors) -> MemstrataError:
    with pytest.raises(MemstrataError) as info, errors("test"):
        call()
    return info.value


def assert_mapped(
    err: MemstrataError, ours: type[MemstrataError], vendor: type[sa.DBAPIError]
) -> None:
    assert type(err) is ours, f"{type(err).__name__}: {err}"
    assert isinstance(err.__cause__, vendor), repr(err.__cause__)
    assert str(err).startswith("test: ")


def run(engine: Engine, *statements: str) -> Callable[[], None]:
    def call() -> None:
        with engine.begin() as conn:
            for stmt in statements:
                conn.execute(text(stmt))

    return call


# ---------------------------------------------------------------- permanent, never retried


@pytest.mark.parametrize(
    ("sql", "state"),
    [
        ("SELECT * FROM no_such_table", "42P01"),
        ("SELEC 1", "42601"),
        ("SELECT no_such_column FROM things", "42703"),
    ],
    ids=["missing table", "syntax error", "missing column"],
)
def test_a_programming_error_is_rejected_permanently(engine: Engine, sql: str, state: str) -> None:
    err = mapped(run(engine, sql))
    assert_mapped(err, StoreRejected, sa.ProgrammingError)
    assert isinstance(err, PermanentError) and not isinstance(err, TransientError)
    assert isinstance(err.__cause__, sa.DBAPIError) and err.__cause__.orig is not None
    assert getattr(err.__cause__.orig, "sqlstate", None) == state


def test_a_statement_in_a_failed_transaction_is_rejected_permanently(engine: Engine) -> None:
    with engine.connect() as conn:
        with pytest.raises(sa.ProgrammingError):
            conn.execute(text("SELECT * FROM no_such_table"))
        err = mapped(lambda: conn.execute(text("SELECT 1")))
        conn.rollback()
    assert_mapped(err, StoreRejected, sa.InternalError)  # 25P02 in_failed_sql_transaction


def test_a_program_limit_is_rejected_permanently(engine: Engine) -> None:
    columns = ", ".join(f"c{i} int" for i in range(1700))  # at most 1600 columns
    err = mapped(run(engine, f"CREATE TEMP TABLE wide ({columns})"))
    assert_mapped(err, StoreRejected, sa.OperationalError)  # 54011, an OperationalError
    assert "1600" in str(err)


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("INSERT INTO things (id, n) VALUES (1, 5)", "it already exists (pk_things)"),
        ("INSERT INTO things (id, n) VALUES (3, -1)", "refused by ck_things_n"),
        ("INSERT INTO things (id, n) VALUES (3, NULL)", "refused by a constraint"),
        ("INSERT INTO things (id, n, parent) VALUES (3, 1, 99)", "fk_things_parent_things"),
    ],
    ids=["unique", "check", "not null", "foreign key"],
)
def test_a_constraint_violation_is_a_permanent_conflict(
    engine: Engine, sql: str, fragment: str
) -> None:
    err = mapped(run(engine, sql))
    assert_mapped(err, Conflict, sa.IntegrityError)
    assert isinstance(err, InvalidInput) and fragment in str(err)


def test_a_component_gives_its_own_constraints_a_meaning(engine: Engine) -> None:
    errors = PgErrorMap(constraints=(ConstraintRule("fk_things_*", NotFound, "no parent {name}"),))
    err = mapped(run(engine, "INSERT INTO things (id, n, parent) VALUES (3, 1, 99)"), errors)
    assert_mapped(err, NotFound, sa.IntegrityError)
    assert str(err) == "test: no parent fk_things_parent_things"
    # a constraint it does not name still gets the generic row
    other = mapped(run(engine, "INSERT INTO things VALUES (1, 1)"), errors)
    assert_mapped(other, Conflict, sa.IntegrityError)


def test_a_value_the_column_refuses_is_invalid_input(engine: Engine) -> None:
    for sql in ("SELECT 'abc'::int", "SELECT 2147483647::int + 1"):
        err = mapped(run(engine, sql))
        assert_mapped(err, InvalidInput, sa.DataError)


# ---------------------------------------------------------------- transient


def test_a_closed_port_is_unavailable() -> None:
    eng = create_engine(f"postgresql+psycopg://{PG_USER}@127.0.0.1:{free_port()}/nowhere")
    try:
        err = mapped(run(eng, "SELECT 1"))
    finally:
        eng.dispose()
    assert_mapped(err, StoreUnavailable, sa.OperationalError)
    assert isinstance(err, TransientError)


def test_the_statement_timeout_is_unavailable(engine: Engine) -> None:
    err = mapped(run(engine, "SET LOCAL statement_timeout = 50", "SELECT pg_sleep(2)"))
    assert_mapped(err, StoreUnavailable, sa.OperationalError)
    assert isinstance(err.__cause__, sa.DBAPIError)
    assert isinstance(err.__cause__.orig, psycopg.errors.QueryCanceled)


def test_a_read_only_transaction_is_unavailable(engine: Engine) -> None:
    # what a hot standby answers to a write while a failover is under way
    err = mapped(run(engine, "SET TRANSACTION READ ONLY", "UPDATE things SET n = 5"))
    assert_mapped(err, StoreUnavailable, sa.InternalError)
    assert isinstance(err.__cause__, sa.DBAPIError)
    assert isinstance(err.__cause__.orig, psycopg.errors.ReadOnlySqlTransaction)


def test_a_killed_backend_is_unavailable(engine: Engine) -> None:
    with engine.connect() as victim:
        pid = victim.execute(text("SELECT pg_backend_pid()")).scalar_one()
        victim.commit()
        run(engine, f"SELECT pg_terminate_backend({pid})")()
        err = mapped(lambda: victim.execute(text("SELECT 1")))
    assert_mapped(err, StoreUnavailable, sa.OperationalError)
    assert isinstance(err.__cause__, sa.DBAPIError) and err.__cause__.connection_invalidated


def test_an_exhausted_pool_is_unavailable(pg_url: str) -> None:
    eng = create_engine(pg_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        with eng.connect():
            err = mapped(lambda: eng.connect())
    finally:
        eng.dispose()
    assert type(err) is StoreUnavailable and isinstance(err.__cause__, sa.TimeoutError)


def test_a_serialization_failure_is_a_concurrent_write(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as late:
        late.execute(text("SELECT n FROM things WHERE id = 1"))  # takes its snapshot
        run(engine, "UPDATE things SET n = 10 WHERE id = 1")()
        err = mapped(lambda: late.execute(text("UPDATE things SET n = 20 WHERE id = 1")))
        late.rollback()
    assert_mapped(err, ConcurrentWrite, sa.OperationalError)
    assert isinstance(err, TransientError)


def test_a_deadlock_is_a_concurrent_write(engine: Engine) -> None:
    # Given two sessions that each lock one row, then want the other's
    both_locked = threading.Barrier(2, timeout=10)
    outcomes: dict[int, Any] = {}

    def session(first: int, second: int) -> None:
        try:
            with pg_errors("test"), engine.begin() as conn:
                conn.execute(text("SET LOCAL deadlock_timeout = '100ms'"))
                conn.execute(text(f"UPDATE things SET n = n + 1 WHERE id = {first}"))
                both_locked.wait()
                conn.execute(text(f"UPDATE things SET n = n + 1 WHERE id = {second}"))
            outcomes[first] = "committed"
        except MemstrataError as exc:
            outcomes[first] = exc

    threads = [threading.Thread(target=session, args=ab) for ab in ((1, 2), (2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    # Then PostgreSQL breaks the cycle: one commits, the other is told to retry
    errors = [o for o in outcomes.values() if isinstance(o, MemstrataError)]
    assert sorted(outcomes) == [1, 2] and len(errors) == 1, outcomes
    assert_mapped(errors[0], ConcurrentWrite, sa.OperationalError)
    assert isinstance(errors[0].__cause__, sa.DBAPIError)
    assert isinstance(errors[0].__cause__.orig, psycopg.errors.DeadlockDetected)


# ---------------------------------------------------------------- one map, several components


def test_the_authority_map_raises_the_authority_leaves(engine: Engine) -> None:
    from memstrata.core.authority.db import translated

    down = create_engine(f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{free_port()}/x")
    try:
        err = mapped(run(down, "SELECT 1"), translated)
    finally:
        down.dispose()
    assert_mapped(err, AuthorityUnavailable, sa.OperationalError)
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as late:
        late.execute(text("SELECT n FROM things WHERE id = 1"))
        run(engine, "UPDATE things SET n = 10 WHERE id = 1")()
        update = text("UPDATE things SET n = 20 WHERE id = 1")
        raced = mapped(lambda: late.execute(update), translated)
        late.rollback()
    assert_mapped(raced, ConcurrentFactWrite, sa.OperationalError)
    assert isinstance(raced, ConcurrentWrite)


def test_errors_that_are_not_database_errors_pass_through(engine: Engine) -> None:
    with engine.connect() as conn, pytest.raises(sa.NoResultFound), pg_errors("test"):
        conn.execute(text("SELECT 1 WHERE false")).one()


def test_the_cause_chain_keeps_the_driver_error(engine: Engine) -> None:
    err = mapped(run(engine, "SELECT * FROM no_such_table"))
    cause = err.__cause__
    assert isinstance(cause, sa.ProgrammingError)
    assert isinstance(cause.orig, psycopg.errors.UndefinedTable)
