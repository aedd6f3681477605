"""Who is calling over HTTP: a bearer API key, checked by a :class:`KeyVerifier`.

The tenant of every HTTP request comes from its key, never from the arguments a client
sends (a tool's ``tenant`` argument does not exist over HTTP).  The keys are the
service's per-tenant API keys (:mod:`memstrata.core.apikeys`: hashed in PostgreSQL, made
with ``memstrata apikey create``, scopes ``read`` / ``write`` / ``admin``), the same ones
the REST service takes; :class:`ApiKeyVerifier` adapts them to the narrow protocol the
server is written against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memstrata.core.apikeys import SCOPES, ApiKeys
from memstrata.core.errors import Unauthorized

MAX_KEY_CHARS = 512


@dataclass(frozen=True)
class Caller:
    """A verified key: the tenant it acts for and what it may do."""

    tenant_id: str
    scopes: frozenset[str]


class KeyVerifier(Protocol):
    def verify(self, key: str) -> Caller | None:
        """The caller a key stands for, or ``None`` for an unknown / revoked key."""
        ...


class ApiKeyVerifier:
    """:class:`KeyVerifier` over :class:`ApiKeys` (its per-process cache included).

    An unknown, forged or revoked key is ``None``; a PostgreSQL outage is not hidden as
    "unauthorized" (it raises :class:`memstrata.core.errors.StoreUnavailable`).
    """

    def __init__(self, keys: ApiKeys) -> None:
        self.keys = keys

    def verify(self, key: str) -> Caller | None:
        if not key or len(key) > MAX_KEY_CHARS:
            return None
        try:
            info = self.keys.verify(key)
        except Unauthorized:
            return None
        return Caller(info.tenant_id, frozenset(info.scopes))


__all__ = ["MAX_KEY_CHARS", "SCOPES", "ApiKeyVerifier", "Caller", "KeyVerifier"]
