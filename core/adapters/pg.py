"""The PostgreSQL error map: SQLAlchemy/psycopg exceptions onto :mod:`core.errors`.

One table, read top to bottom; the first row that matches wins.  Rows match on the
SQLSTATE of the driver error first (it is more precise than the DB-API class: a
serialization failure and a lost connection are both ``OperationalError``), then on
the SQLAlchemy class.

=================================  =========================  ===============================
matches                            memstrata                  why
=================================  =========================  ===============================
connection invalidated             ``unavailable``            SQLAlchemy saw the link drop
SQLSTATE 40001, 40P01              ``concurrent``             serialization failure, deadlock:
                                                              retry the whole transaction
SQLSTATE 25006                     ``unavailable``            read-only transaction: a hot
                                                              standby answered (failover)
SQLSTATE 25P03                     ``unavailable``            idle-in-transaction timeout
                                                              closed the session
SQLSTATE class 54                  StoreRejected              program limit exceeded: a
                                                              statement too large or complex
``IntegrityError``                 a ``constraints`` rule,    a constraint refused the row;
                                   else Conflict              never retried
``DataError``                      InvalidInput               a value the column refuses
``OperationalError``,              ``unavailable``            unreachable, timed out (connect
``InterfaceError``, pool timeout                              or ``statement_timeout``), lock
                                                              timeout, server shutting down,
                                                              out of connections or disk
``ProgrammingError``,              StoreRejected              bad SQL, a missing table or
``InternalError``,                                            column, a failed transaction
``NotSupportedError``, any other                              reused: a bug or an unmigrated
``DBAPIError``                                                schema, NEVER retried
=================================  =========================  ===============================

A component picks the leaves it raises with a :class:`PgErrorMap`: the authority
raises ``AuthorityUnavailable`` and names its constraints (``core.authority.db``);
everything else uses :data:`pg_errors` (plain ``StoreUnavailable`` and
``ConcurrentWrite``).  SQLAlchemy errors that are not driver errors (a closed result,
``NoResultFound``) are bugs in our code and are left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase

from sqlalchemy import exc as sa

from memstrata.core.errors import (
    ConcurrentWrite,
    Conflict,
    InvalidInput,
    MemstrataError,
    StoreRejected,
    StoreUnavailable,
    TransientError,
)

# SQLSTATEs that decide before the exception class does
SERIALIZATION_FAILURE = "40001"
DEADLOCK_DETECTED = "40P01"
READ_ONLY_TRANSACTION = "25006"
IDLE_IN_TRANSACTION_TIMEOUT = "25P03"
UNIQUE_VIOLATION = "23505"
PROGRAM_LIMIT_CLASS = "54"


@dataclass(frozen=True)
class ConstraintRule:
    """A constraint (``fnmatch`` pattern over its name) that means something to a component."""

    pattern: str
    error: type[MemstrataError]
    message: str  # after "<what>: "; may use {name}


def sqlstate(exc: sa.DBAPIError) -> str:
    """The SQLSTATE of the driver error under ``exc`` ('' when there is none)."""
    return str(getattr(exc.orig, "sqlstate", "") or "")


def constraint_name(exc: sa.DBAPIError) -> str:
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "constraint_name", "") or "")


@dataclass(frozen=True)
class PgErrorMap:
    """The table above, with the classes one component raises for the generic rows."""

    unavailable: type[StoreUnavailable] = StoreUnavailable
    concurrent: type[TransientError] = ConcurrentWrite
    constraints: tuple[ConstraintRule, ...] = ()

    def translate(self, exc: sa.SQLAlchemyError, what: str) -> MemstrataError | None:
        """The memstrata error for ``exc``, or None when it is not a database error."""
        if isinstance(exc, sa.TimeoutError):  # the pool had no connection to give in time
            return self.unavailable(f"{what}: PostgreSQL pool exhausted: {exc}")
        if not isinstance(exc, sa.DBAPIError):
            return None
        orig = exc.orig
        state = sqlstate(exc)
        if exc.connection_invalidated:
            return self.unavailable(f"{what}: PostgreSQL connection lost: {orig}")
        if state in {SERIALIZATION_FAILURE, DEADLOCK_DETECTED}:
            return self.concurrent(f"{what}: lost a race to another transaction: {orig}")
        if state in {READ_ONLY_TRANSACTION, IDLE_IN_TRANSACTION_TIMEOUT}:
            return self.unavailable(f"{what}: PostgreSQL cannot take this now: {orig}")
        if state.startswith(PROGRAM_LIMIT_CLASS):
            return StoreRejected(f"{what}: over a PostgreSQL limit: {orig}")
        if isinstance(exc, sa.IntegrityError):
            return self._integrity(exc, what, state)
        if isinstance(exc, sa.DataError):
            return InvalidInput(f"{what}: PostgreSQL refused a value: {orig}")
        if isinstance(exc, sa.OperationalError | sa.InterfaceError):
            return self.unavailable(f"{what}: PostgreSQL unavailable: {orig}")
        return StoreRejected(f"{what}: PostgreSQL rejected the statement: {orig}")

    def _integrity(self, exc: sa.IntegrityError, what: str, state: str) -> MemstrataError:
        name = constraint_name(exc)
        for rule in self.constraints:
            if name and fnmatchcase(name, rule.pattern):
                return rule.error(f"{what}: " + rule.message.format(name=name))
        if state == UNIQUE_VIOLATION:
            return Conflict(f"{what}: it already exists ({name or 'a unique constraint'})")
        return Conflict(f"{what}: refused by {name or 'a constraint'}: {exc.orig}")

    @contextmanager
    def __call__(self, what: str) -> Iterator[None]:
        """Translate database errors raised inside the block (``raise ... from exc``)."""
        try:
            yield
        except sa.SQLAlchemyError as exc:
            mapped = self.translate(exc, what)
            if mapped is None:
                raise
            raise mapped from exc


pg_errors = PgErrorMap()
"""The map for every component without leaves of its own (LTM ledger, lifecycle, migrations)."""
