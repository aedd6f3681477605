"""Typed errors of the authority layer, all under :mod:`core.errors`.

    NotFound
    ├── UnknownTenant
    ├── UnknownUser
    └── UnknownProject          also: a workspace or role that names a missing project
    InvalidInput
    ├── UnknownDomain           a fact domain outside :class:`FactDomain`
    ├── InvalidFactKey          a canonical key that does not fit its domain
    ├── InvalidFactValue        a value that is not JSON, or has the wrong shape
    └── PayloadTooLarge
        └── FactValueTooLarge
    PermanentError
    └── ScopeDenied             a filter asked for a project/workspace the user may not read
    StoreUnavailable
    └── AuthorityUnavailable    PostgreSQL did not answer
    ConcurrentWrite
    └── ConcurrentFactWrite     the one-current-row index refused a racing insert, or a
                                serialization failure / deadlock: retry the transaction

Any other constraint that refuses a row raises :class:`core.errors.Conflict`; the map
from PostgreSQL errors is ``core.authority.db.translated``.  Every write validates before
its first statement, and every failure inside the caller's transaction leaves it to the
caller to roll back, so "nothing written" holds either way.
"""

from __future__ import annotations

from memstrata.core.errors import (
    ConcurrentWrite,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    StoreUnavailable,
)


class UnknownTenant(NotFound):
    """No tenant with this id."""


class UnknownUser(NotFound):
    """No user with this id in this tenant."""


class UnknownProject(NotFound):
    """No project (or workspace) with this id in this tenant."""


class UnknownDomain(InvalidInput):
    """A fact domain that does not exist."""


class InvalidFactKey(InvalidInput):
    """A canonical fact key that is malformed or outside its domain."""


class InvalidFactValue(InvalidInput):
    """A fact value that is not plain JSON or does not have the shape its key needs."""


class FactValueTooLarge(PayloadTooLarge):
    """A fact value whose JSON encoding is over the size limit."""


class ScopeDenied(PermanentError):
    """A retrieval scope the user's roles do not grant."""


class AuthorityUnavailable(StoreUnavailable):
    """PostgreSQL could not be reached or timed out."""


class ConcurrentFactWrite(ConcurrentWrite):
    """Another writer made the same key current first; retrying reads its row."""
