"""The Redis error map: every redis-py exception onto :mod:`core.errors`, from one table.

redis-py already sorts most server errors into classes by their code (``OOM``,
``READONLY``, ``NOSCRIPT``, ``LOADING``), also inside pipelines and Lua scripts, so
the table matches classes; the first row whose class fits wins, so subclasses come
before their bases (``BusyLoadingError`` is a ``ConnectionError``, ``NoScriptError``
a ``ResponseError``).

==========================  ====================  ==========================================
redis-py                    memstrata             why
==========================  ====================  ==========================================
``NoScriptError``           StoreUnavailable      script cache emptied (restart, flush,
                                                  failover); callers reload and retry
``OutOfMemoryError``        StoreFull             ``maxmemory`` reached under noeviction
``ReadOnlyError``           StoreReadOnly         a replica answered (failover under way)
``BusyLoadingError``        StoreUnavailable      the server is loading its dataset
``TryAgainError``,          StoreUnavailable      a cluster slot is moving or down
``ClusterDownError``
``WatchError``              ConcurrentWrite       a WATCHed key changed before EXEC
``ConnectionError``,        StoreUnavailable      unreachable, refused, reset, timed out
``TimeoutError``
``ResponseError``           StoreRejected         the server refused the command itself
                                                  (wrong type, syntax, a failing script)
``DataError``               StoreRejected         a command that cannot be encoded
``RedisError``              StoreUnavailable      protocol-level trouble: drop and retry
==========================  ====================  ==========================================
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis import exceptions as rx

from memstrata.core.errors import (
    ConcurrentWrite,
    MemstrataError,
    StoreFull,
    StoreReadOnly,
    StoreRejected,
    StoreUnavailable,
)

RULES: tuple[tuple[type[redis.RedisError], type[MemstrataError], str], ...] = (
    (rx.NoScriptError, StoreUnavailable, "script cache is empty (restart, flush or failover)"),
    (rx.OutOfMemoryError, StoreFull,
     "Redis is full (maxmemory reached; noeviction refuses writes): let the sweep run, "
     "lower MEMSTRATA_STM_USER_CAP / MEMSTRATA_STM_TENANT_CAP or raise maxmemory"),
    (rx.ReadOnlyError, StoreReadOnly, "read-only replica (failover in progress?)"),
    (rx.BusyLoadingError, StoreUnavailable, "loading its dataset"),
    (rx.TryAgainError, StoreUnavailable, "cluster busy, try again"),
    (rx.ClusterDownError, StoreUnavailable, "cluster down"),
    (rx.WatchError, ConcurrentWrite, "a watched key changed"),
    (rx.ConnectionError, StoreUnavailable, "unavailable"),
    (rx.TimeoutError, StoreUnavailable, "timed out"),
    (rx.ResponseError, StoreRejected, "refused the command"),
    (rx.DataError, StoreRejected, "cannot encode the command"),
    (rx.RedisError, StoreUnavailable, "error"),
)
"""(redis-py class, memstrata class, what it means), most specific first."""


def translate(exc: redis.RedisError, what: str = "redis") -> MemstrataError:
    """The memstrata error for ``exc`` (its ``__cause__`` is left to the caller)."""
    for vendor, ours, meaning in RULES:
        if isinstance(exc, vendor):
            return ours(f"{what}: {meaning}: {exc}")
    raise AssertionError("unreachable: RedisError is the last row")  # pragma: no cover


@contextmanager
def redis_errors(what: str = "redis") -> Iterator[None]:
    """Translate redis-py errors raised inside the block (``raise ... from exc``)."""
    try:
        yield
    except redis.RedisError as exc:
        raise translate(exc, what) from exc
