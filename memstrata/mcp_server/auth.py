"""Who is calling over HTTP: a bearer API key, checked by a :class:`KeyVerifier`.

The tenant of every HTTP request comes from its key, never from the arguments a client
sends (a tool's ``tenant`` argument does not exist over HTTP).  The verifier is a narrow
protocol so that the per-tenant key store (hashed keys in PostgreSQL, ``memstrata apikey
create``) can replace :class:`StaticKeyVerifier` without touching the server; until it
lands on this branch the one key comes from settings (``MEMSTRATA_MCP__API_KEY``, bound
to ``MEMSTRATA_MCP__TENANT``).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Protocol

from memstrata.core.ids import validate_id

SCOPES = ("read", "write", "admin")
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


class StaticKeyVerifier:
    """One key from settings, for one tenant, with every scope (compared in constant time)."""

    def __init__(
        self, key: str, *, tenant_id: str, scopes: frozenset[str] = frozenset(SCOPES)
    ) -> None:
        if len(key) < 16:
            raise ValueError("the MCP API key must be at least 16 characters")
        self._digest = hashlib.sha256(key.encode("utf-8")).digest()
        self._caller = Caller(validate_id(tenant_id, kind="tenant_id"), scopes)

    def verify(self, key: str) -> Caller | None:
        if not key or len(key) > MAX_KEY_CHARS:
            return None
        given = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        return self._caller if hmac.compare_digest(given, self._digest) else None


__all__ = ["MAX_KEY_CHARS", "SCOPES", "Caller", "KeyVerifier", "StaticKeyVerifier"]
