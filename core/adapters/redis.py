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
from redis.connection import Connection

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


class SentScript:
    """A Lua script call on the wire whose reply is read later (:meth:`reply`).

    Why: ``record_turn`` must both ``fsync`` its L0 file and put the turn's pointer on
    the stream; sent first, the script runs in Redis while the ``fsync`` waits on the
    disk, instead of after it.  The command is packed by hiredis and sent on a pooled
    connection directly, without redis-py's per-command wrapper.

    Failures end as a plain call's would, with one difference: when the early send
    cannot get a connection (redis-py has already retried connecting, per the client's
    settings), :meth:`reply` raises that error; when the send fails on the connection
    or the reply is lost (reset, timeout), or the script cache is empty, :meth:`reply`
    makes the call again through redis-py's own path, with its retries and its ``SCRIPT
    LOAD``.  So a lost reply costs one attempt more than the client's retry count, and
    the script may run twice: only for scripts that are safe to run twice (as redis-py's
    own retry of a lost reply assumes).  A caller that does not want the reply calls
    :meth:`abandon` (the connection is dropped, not reused with an answer still unread).
    """

    def __init__(
        self,
        client: redis.Redis,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | float],
    ) -> None:
        self._client = client
        self._script = script
        self._keys = keys
        self._args = args
        self._conn: Connection | None = None
        self._failed: redis.RedisError | None = None
        if client.connection is not None:  # a single-connection client: call in reply()
            return
        # hiredis packs the call in C, the same bytes as redis-py's packer (which checks
        # each argument's type in Python first: 19 µs of a 14-argument call)
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            packed = pack_command(command)  # type: ignore[arg-type]  # its stub: a 1-tuple
        except TypeError as exc:  # a bool, None, …: what redis-py refuses as DataError
            raise translate(rx.DataError(str(exc))) from exc
        pool = client.connection_pool
        try:
            conn = pool.get_connection()
        except redis.RedisError as exc:  # connecting was retried already: reply() raises
            self._failed = exc
            return
        try:
            conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
        except BaseException as exc:
            conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)
            if isinstance(exc, redis.RedisError):  # nothing to read back: reply() calls
                return
            raise
        self._conn = conn

    def reply(self) -> Any:
        """The script's reply (redis-py errors translated, :func:`redis_errors`)."""
        if self._failed is not None:
            raise translate(self._failed) from self._failed
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                with redis_errors():
                    try:
                        parse = self._client.parse_response
                        return parse(conn, "EVALSHA")  # type: ignore[no-untyped-call]
                    except (rx.ConnectionError, rx.TimeoutError):  # the reply is lost
                        conn.disconnect()  # type: ignore[no-untyped-call]
                    except rx.NoScriptError:  # a restart or flush emptied the cache
                        pass
            except MemstrataError:  # a whole error reply was read: the connection is clean
                raise
            except BaseException:  # interrupted mid-reply: never reuse what is half-read
                conn.disconnect()  # type: ignore[no-untyped-call]
                raise
            finally:
                self._client.connection_pool.release(conn)
        with redis_errors():
            return self._script(keys=list(self._keys), args=list(self._args), client=self._client)

    def abandon(self) -> None:
        """Give the call up unread: drop its connection (the script may have run)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.disconnect()  # type: ignore[no-untyped-call]
            self._client.connection_pool.release(conn)


def run_script(
    client: redis.Redis, script: Script, keys: Sequence[str], args: Sequence[str | int | float]
) -> Any:
    """``script(keys=keys, args=args)`` sent and read directly (:class:`SentScript`): for
    the hot paths, where redis-py's per-command wrapper and packer are a measurable part
    of the call (the STM recall read: 0.05–0.10 ms of CPU a recall, docs/PERFORMANCE.md).
    Errors are translated; a lost reply makes the call again (:class:`SentScript`)."""
    return SentScript(client, script, keys, args).reply()
