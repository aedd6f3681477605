"""One exception tree for memstrata.

    MemstrataError
    ├── TransientError            retry with backoff: the same call may succeed later
    │   ├── StoreUnavailable      a store did not answer, timed out, is loading or failing over
    │   │   ├── StoreFull         Redis at ``maxmemory`` refused a write (OOM)
    │   │   └── StoreReadOnly     the client reached a read-only replica (failover in progress)
    │   └── ConcurrentWrite       another transaction won a race (serialization failure,
    │                             deadlock, a WATCHed key changed): retry the transaction
    └── PermanentError            retrying cannot help; record the reason and stop
        ├── InvalidInput          bad ids, oversized text, malformed payloads (task input too)
        │   ├── InvalidId
        │   ├── PayloadTooLarge
        │   └── Conflict          a constraint refused the write (unique, foreign key, check)
        ├── NotFound
        ├── Unauthorized          no credentials, or an unknown / revoked API key
        ├── Forbidden             the key's scope does not allow the call
        ├── CorruptRecord         stored data that no longer parses
        ├── StoreRejected         the store answered and refused the command itself (bad SQL,
        │                         a Redis command on the wrong type, a failing script): a bug
        ├── IllegalTransition     a state change that a state machine forbids
        └── MissingExtra          a feature whose packages are not installed (also an
                                  ImportError); the message names the extra to install

Adapters translate vendor exceptions into these (``raise ... from exc``, so ``__cause__``
is the vendor error) with one table per vendor, most specific rule first:
:mod:`core.adapters.redis` and :mod:`core.adapters.pg`; the LTM indexes map Milvus and
Elasticsearch errors in :mod:`core.ltm.milvus` and :mod:`core.ltm.lexical_es`.  Tasks
retry on :class:`TransientError` and on nothing else, so a permanent error fails a task
once and is never retried.  Layers add their own leaves (``core.authority.errors``,
``core.ltm.errors``) under these classes, never beside them.
"""

from __future__ import annotations


class MemstrataError(Exception):
    """Root of every error raised on purpose by memstrata."""


class TransientError(MemstrataError):
    """A failure that may pass: the caller should retry with backoff."""


class StoreUnavailable(TransientError):
    """A backing store (Redis, PostgreSQL, Milvus, ...) did not answer in time."""


class StoreFull(StoreUnavailable):
    """A store at its memory limit refused a write; it passes once room is freed."""


class StoreReadOnly(StoreUnavailable):
    """The store reached is a read-only replica; it passes when the failover completes."""


class ConcurrentWrite(TransientError):
    """Another writer won a race for the same rows or keys; retrying the whole unit succeeds."""


class PermanentError(MemstrataError):
    """A failure that a retry cannot fix."""


class InvalidInput(PermanentError, ValueError):
    """Input that fails validation; nothing has been written."""


class InvalidId(InvalidInput):
    """An id that may not become part of a key or a filter."""


class PayloadTooLarge(InvalidInput):
    """A text or record over its configured size limit."""


class Conflict(InvalidInput):
    """A write that a database constraint refused (it exists already, or names a missing row)."""


class NotFound(PermanentError, LookupError):
    """The thing asked for does not exist (or no longer exists)."""


class Unauthorized(PermanentError):
    """The caller did not prove who it is (missing, unknown or revoked API key)."""


class Forbidden(PermanentError):
    """The caller is known but may not do this (the key's scope or tenant)."""


class CorruptRecord(PermanentError):
    """Stored data could not be parsed back."""


class StoreRejected(PermanentError):
    """The store answered but refused the request as malformed: fix the code or the schema."""


class IllegalTransition(PermanentError):
    """A state change that a state machine (card projection, promotion lifecycle) forbids."""


class MissingExtra(PermanentError, ImportError):
    """A feature needs packages this install lacks: ``pip install 'memstrata[<extra>]'``.

    ``pip install memstrata`` holds only the remote client (httpx, pydantic); the embedded
    client, the CLI and the service need ``[server]``, Elasticsearch ``[es]``.
    """


def missing_extra(extra: str, feature: str, exc: ImportError) -> MissingExtra:
    """The error for ``feature`` used without ``extra``, naming the module that is absent."""
    what = f" (no module {exc.name!r})" if exc.name else ""
    return MissingExtra(
        f"{feature} needs the {extra} extra: pip install 'memstrata[{extra}]'{what}"
    )
