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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from hiredis import pack_command
from redis import exceptions as rx
from redis.commands.core import Script

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


def run_script(
    client: redis.Redis, script: Script, keys: Sequence[str], args: Sequence[str | int | float]
) -> Any:
    """``script(keys=keys, args=args)``, packed by hiredis and sent and read on a pooled
    connection directly, for the hot paths (the ingest enqueue of ``record_turn``, the
    STM recall read): redis-py's per-command wrapper (retry loop, instrumentation) and
    its packer, which checks every argument's type in Python, were 3.5-8.7 % of those
    calls (docs/PERFORMANCE.md, 2026-12-07 fourth sitting).  The bytes sent are
    redis-py's (``tests/integration/test_redis_run_script.py`` compares them).

    Failures end as a plain call's do: a connection that cannot be made raises; a lost
    connection or reply goes through the connection's own retry policy (redis-py's
    ``Retry``; none for the runtime's client), dropping the connection before each new
    attempt, as ``execute_command`` does; an emptied script cache makes the plain call,
    which loads the script.  Errors are translated (:func:`redis_errors`), and a
    connection is never put back with a reply unread.  A single-connection client makes
    the plain call.
    """
    if client.connection is None:
        # hiredis packs in C; redis-py hands its own packer's checked arguments to it
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            packed = pack_command(command)  # type: ignore[arg-type]  # its stub: a 1-tuple
        except TypeError as exc:  # a bool, None, …: what redis-py refuses as DataError
            raise translate(rx.DataError(str(exc))) from exc
        pool = client.connection_pool
        try:
            conn = pool.get_connection()
        except redis.RedisError as exc:  # connecting was retried already, if configured
            raise translate(exc) from exc

        def call() -> Any:
            conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
            return client.parse_response(conn, "EVALSHA")  # type: ignore[no-untyped-call]

        def drop(_error: Exception) -> None:
            conn.disconnect()  # type: ignore[no-untyped-call]

        try:
            return conn.retry.call_with_retry(call, drop)
        except rx.NoScriptError:  # a restart or flush emptied the cache: the plain call
            pass
        except redis.RedisError as exc:  # a whole error reply read, or the conn dropped
            raise translate(exc) from exc
        except BaseException:  # interrupted mid-call: never reuse what is half-read
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            pool.release(conn)
    with redis_errors():
        return script(keys=list(keys), args=list(args), client=client)
