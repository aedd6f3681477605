"""One owner's card jobs, one at a time: a PostgreSQL transaction-level advisory lock.

Consolidation, retraction and session finalisation each read an owner's cards (and the
consolidation audit), decide, and write them back.  Two of them for one (tenant, user) at
once - two Celery workers, or Beat overlapping a ``memstrata`` command - would interleave
those read-modify-writes (a retraction restoring sources a concurrent merge is hiding; an
episode card written active while a merge that holds it commits).  The cards and the audit
live in PostgreSQL, so the lock does too: ``pg_advisory_xact_lock`` on :func:`owner_key`,
held by the transaction :func:`owner_lock` opens and released when it ends (commit,
rollback, or a lost connection: a crashed worker never leaves an owner locked).

Who waits and who skips:

* Beat jobs (the consolidation run, idle-session finalisation) *try* the lock
  (``wait_s=0``) and skip a busy owner, reporting it; the owner is taken again by a later
  run (the consolidation reads owners changed in the last two intervals; an idle session
  is not marked finalised, so it stays idle).
* Explicit commands (``retract``, ``memstrata consolidate --user``, ending a session) wait
  at most ``LifecycleSettings.owner_lock_wait_s`` seconds, then raise :class:`OwnerBusy`
  (a :class:`ConcurrentWrite`: transient, a task retries it, the REST API answers 503).

The lock is not reentrant across connections: code holding an owner's lock never asks for
it again (the jobs' inner transactions run on other connections, lock-free).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text
from sqlalchemy import exc as sa

from memstrata.core.adapters.pg import pg_errors, sqlstate
from memstrata.core.errors import ConcurrentWrite

LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout expired
QUERY_CANCELED = "57014"  # statement_timeout expired
KEY_DOMAIN = b"memstrata:owner-lock:v1"
"""Hashed in front of every key, so memstrata's keys do not collide with another
application's advisory locks on the same database by accident."""


class OwnerBusy(ConcurrentWrite):
    """Another lifecycle job holds this owner's lock: retry later."""

    def __init__(self, tenant_id: str, user_id: str, wait_s: float) -> None:
        how = "is busy" if wait_s <= 0 else f"stayed busy for {wait_s:g} s"
        super().__init__(f"owner {tenant_id}/{user_id} {how}: another lifecycle job holds it")
        self.tenant_id = tenant_id
        self.user_id = user_id


def owner_key(tenant_id: str, user_id: str) -> int:
    """The owner's advisory lock key: the first 8 bytes of SHA-256 over the domain, tenant
    and user (``\\x1f``-separated; ids cannot hold it), as a signed 64-bit integer (the
    type of ``pg_advisory_xact_lock(bigint)``).  Stable across processes, versions and
    Python hash seeds; two owners share a key with probability ~2^-64 per pair, which
    only serialises them."""
    raw = b"\x1f".join((KEY_DOMAIN, tenant_id.encode("utf-8"), user_id.encode("utf-8")))
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big", signed=True)


def lock_owner(conn: Connection, tenant_id: str, user_id: str, *, wait_s: float) -> None:
    """Take the owner's lock in ``conn``'s transaction (held until it ends).

    ``wait_s <= 0`` tries once; otherwise, when the first try finds it held, waits at most
    ``wait_s`` seconds (a local ``lock_timeout``, and a ``statement_timeout`` no shorter,
    both restored after).
    Raises :class:`OwnerBusy` when the lock stays held."""
    key = owner_key(tenant_id, user_id)
    got = conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": key}).scalar()
    if got:  # the common case, one round trip, whether or not the caller would wait
        return
    if wait_s <= 0:
        raise OwnerBusy(tenant_id, user_id, wait_s)
    ms = str(max(1, int(wait_s * 1000)))
    old = conn.execute(
        text("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
    ).one()
    conn.execute(
        text("SELECT set_config('lock_timeout', :ms, true), "
             "set_config('statement_timeout', :st, true)"),
        {"ms": ms, "st": str(int(ms) + 1000)},
    )  # fmt: skip
    try:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
    except sa.OperationalError as exc:
        if sqlstate(exc) in {LOCK_NOT_AVAILABLE, QUERY_CANCELED}:
            raise OwnerBusy(tenant_id, user_id, wait_s) from exc
        raise
    conn.execute(
        text("SELECT set_config('lock_timeout', :lt, true), "
             "set_config('statement_timeout', :st, true)"),
        {"lt": old[0], "st": old[1]},
    )  # fmt: skip


@contextmanager
def owner_lock(
    engine: Engine, tenant_id: str, user_id: str, *, wait_s: float
) -> Iterator[Connection]:
    """A transaction holding the owner's lock for the block; the block may do its own
    reads and writes on the connection it yields (one transaction, committed at the end)
    or use it only as the guard of work done in other transactions."""
    with pg_errors("owner lock"), engine.begin() as conn:
        lock_owner(conn, tenant_id, user_id, wait_s=wait_s)
        yield conn
