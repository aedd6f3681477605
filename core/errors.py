"""One exception tree for memstrata.

    MemstrataError
    ├── TransientError            retry with backoff (store unreachable, timeout)
    │   └── StoreUnavailable
    └── PermanentError            retrying cannot help; record the reason and stop
        ├── InvalidInput          bad ids, oversized text, malformed payloads
        │   ├── InvalidId
        │   └── PayloadTooLarge
        ├── NotFound
        └── CorruptRecord         stored data that no longer parses

Adapters translate vendor exceptions into these (``raise ... from exc``) so that tasks
decide retry-or-fail on our types only.
"""

from __future__ import annotations


class MemstrataError(Exception):
    """Root of every error raised on purpose by memstrata."""


class TransientError(MemstrataError):
    """A failure that may pass: the caller should retry with backoff."""


class StoreUnavailable(TransientError):
    """A backing store (Redis, PostgreSQL, Milvus, ...) did not answer in time."""


class PermanentError(MemstrataError):
    """A failure that a retry cannot fix."""


class InvalidInput(PermanentError, ValueError):
    """Input that fails validation; nothing has been written."""


class InvalidId(InvalidInput):
    """An id that may not become part of a key or a filter."""


class PayloadTooLarge(InvalidInput):
    """A text or record over its configured size limit."""


class NotFound(PermanentError, LookupError):
    """The thing asked for does not exist (or no longer exists)."""


class CorruptRecord(PermanentError):
    """Stored data could not be parsed back."""
