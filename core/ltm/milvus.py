"""Shared pieces of the Milvus adapters: connecting, error translation, naming.

Clients are built per process after fork (gRPC channels hang across a fork), lazily,
by :class:`MilvusConnection`; every call carries ``timeout`` seconds.  After a call
finds the server unreachable the connection is dropped and rebuilt on the next call:
a gRPC channel that failed keeps backing off for up to two minutes after the server
is back, which would stall the reconciler long after an outage ended.  pymilvus raises
``MilvusException`` for both "server gone" and "request malformed"; the malformed kinds
are listed in ``_REJECTED`` and everything else from the wire counts as transient, but
only a failed channel (``_UNREACHABLE``) is dropped.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.errors import IndexRejected, IndexUnavailable

_NAME_RE = re.compile(r"[^A-Za-z0-9_]")
# what pymilvus says when the channel itself failed (as opposed to a server's refusal,
# e.g. milvus-lite's "NaN or Inf" for BM25 over an empty collection, after which the
# channel is fine and resetting it would break every other call in flight on it)
_UNREACHABLE = re.compile(
    r"connect|unavailable|deadline|closed channel|timed? ?out|socket|refused", re.IGNORECASE
)


def collection_name(prefix: str, suffix: str) -> str:
    """A Milvus-safe collection name (letters, digits, underscores; max 255)."""
    name = _NAME_RE.sub("_", f"{prefix}_{suffix}")
    if not name or not name[0].isalpha():
        name = "c_" + name
    if len(name) > 255:
        raise InvalidInput("collection name too long")
    return name


def _rejected_types() -> tuple[type[BaseException], ...]:
    from pymilvus import exceptions as exc

    return (
        exc.ParamError,
        exc.DataTypeNotMatchException,
        exc.DataNotMatchException,
        exc.PrimaryKeyException,
        exc.FieldTypeException,
        exc.FieldsTypeException,
        exc.CollectionNotExistException,
        exc.DataTypeNotSupportException,
    )


@contextmanager
def milvus_errors(what: str, conn: MilvusConnection | None = None) -> Iterator[None]:
    """Translate pymilvus / gRPC failures raised inside the block (resetting ``conn``
    when the server was unreachable)."""
    from pymilvus import MilvusException

    try:
        yield
    except _rejected_types() as exc:
        raise IndexRejected(f"milvus {what}: {exc}") from exc
    except MilvusException as exc:
        message = str(getattr(exc, "message", "") or exc)
        if "collection not found" in message or "can't find collection" in message:
            raise IndexRejected(f"milvus {what}: {message} (run ensure_schema)") from exc
        if conn is not None and _UNREACHABLE.search(message):
            conn.reset()  # only a broken channel: another thread's call may share this one
        raise IndexUnavailable(f"milvus {what}: {message[:300]}") from exc
    except Exception as exc:
        if type(exc).__module__.startswith("grpc"):
            if conn is not None:
                conn.reset()
            raise IndexUnavailable(f"milvus {what}: {exc}") from exc
        raise


def rpc_timeout(timeout_s: float) -> int:
    """Whole seconds: pymilvus bounds its retry loop by ``timeout`` only when it is an
    ``int``; a float leaves it at 75 retries (minutes against a stopped server)."""
    return max(1, math.ceil(timeout_s))


def connect(uri: str, *, timeout_s: float = 5.0, token: str = "") -> Any:
    """A ``MilvusClient`` with its own gRPC channel (pymilvus otherwise shares one per
    uri, so closing one client would close the others); raises
    :class:`IndexUnavailable` if the server is unreachable."""
    from pymilvus import MilvusClient

    with milvus_errors("connect"):
        return MilvusClient(
            uri=uri,
            token=token,
            timeout=rpc_timeout(timeout_s),
            alias=f"memstrata-{uuid.uuid4().hex}",
        )


class MilvusConnection:
    """A lazily (re)built ``MilvusClient``: what the Milvus adapters are given."""

    def __init__(self, uri: str, *, timeout_s: float = 5.0, token: str = "") -> None:
        self.uri = uri
        self.timeout_s = timeout_s
        self._token = token
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect(self.uri, timeout_s=self.timeout_s, token=self._token)
        return self._client

    def reset(self) -> None:
        """Drop the client; the next call connects afresh."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    close = reset


def count_rows(conn: MilvusConnection, collection: str, what: str, *, timeout: int,
               expr: str = "", strong: bool = False) -> int:  # fmt: skip
    """How many records of a collection match ``expr`` (every record by default);
    ``strong`` waits for every write acknowledged before the count."""
    consistency = {"consistency_level": "Strong"} if strong else {}
    with milvus_errors(f"count {what}", conn):
        rows = conn.client.query(collection, filter=expr, output_fields=["count(*)"],
                                 timeout=timeout, **consistency)  # fmt: skip
    return int(rows[0]["count(*)"]) if rows else 0


EMPTY_RECHECK_S = 1.0
"""How long a collection found empty is answered as empty without asking again: a row
another process projects meanwhile is found by search at most this much later."""


class RowPresence:
    """Whether a collection is known to hold a row, asked of Milvus only while it did not
    (a ``count(*)``, at most once per :data:`EMPTY_RECHECK_S`).

    An empty collection is not searched: milvus-lite fails BM25 over an empty corpus
    ("NaN or Inf") and still serves a vector search of one, which waits its turn behind
    the other collection's searches (it serves them about one at a time) for nothing.
    A fresh deployment's raw-history collections stay empty until L0 is projected."""

    def __init__(self, conn: MilvusConnection, collection: str, what: str, *, timeout: int) -> None:
        self._conn = conn
        self._collection = collection
        self._what = what
        self._timeout = timeout
        self._has_rows = False
        self._empty_at = -EMPTY_RECHECK_S

    def holds_rows(self) -> bool:
        if self._has_rows:
            return True
        now = time.monotonic()
        if now - self._empty_at < EMPTY_RECHECK_S:
            return False
        self._has_rows = count_rows(self._conn, self._collection, self._what,
                                    timeout=self._timeout) > 0  # fmt: skip
        if not self._has_rows:
            self._empty_at = now
        return self._has_rows

    def filled(self) -> None:
        """This process wrote a row: searched from now on, without a size check."""
        self._has_rows = True

    def emptied(self) -> None:
        """The server said the collection is empty (every row deleted since)."""
        self._has_rows, self._empty_at = False, time.monotonic()


def count_owner(conn: MilvusConnection, collection: str, tenant_id: str, user_id: str,
                what: str) -> int:  # fmt: skip
    """How many records of one owner a collection holds (0 if it does not exist)."""
    from memstrata.core.ltm.filters import milvus_expr, owner_filter

    timeout = rpc_timeout(conn.timeout_s)
    with milvus_errors(f"count {what} of an owner", conn):
        if not conn.client.has_collection(collection, timeout=timeout):
            return 0
    return count_rows(conn, collection, f"{what} of an owner", timeout=timeout,
                      expr=milvus_expr(owner_filter(tenant_id, user_id)), strong=True)  # fmt: skip


def delete_owner(conn: MilvusConnection, collection: str, tenant_id: str, user_id: str,
                 what: str) -> None:  # fmt: skip
    """Delete every record of one owner from a collection (erase)."""
    from memstrata.core.ltm.filters import milvus_expr, owner_filter

    timeout = rpc_timeout(conn.timeout_s)
    with milvus_errors(f"delete {what} of an owner", conn):
        if conn.client.has_collection(collection, timeout=timeout):
            conn.client.delete(
                collection, filter=milvus_expr(owner_filter(tenant_id, user_id)), timeout=timeout
            )
