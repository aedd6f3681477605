"""Per-tenant API keys of the REST service, hashed in PostgreSQL (table ``api_keys``).

A key reads ``msk_<key_id>_<secret>``: ``key_id`` (12 hex digits) is public and finds the
row; ``secret`` (32 random bytes, URL-safe base64) is shown once, when the key is made,
and only its SHA-256 is stored.  The secret is random, not a password, so a plain digest
compared in constant time is enough (nothing to stretch against a dictionary).  Each key
belongs to one tenant (the service takes the tenant from the key, never from a request)
and carries scopes: ``read`` (recall, memories, decisions), ``write`` (record turns),
``admin`` (users, erase, keys' tenant info).  A revoked key stops working at once in a
new process and within ``MEMSTRATA_API_KEY_CACHE_S`` (30) seconds in a running one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time

from sqlalchemy import Column, Engine, Float, ForeignKeyConstraint, String, Table, select, update
from sqlalchemy.dialects.postgresql import JSONB

from memstrata.core.authority.db import translated
from memstrata.core.authority.errors import UnknownTenant
from memstrata.core.authority.tables import TENANTS, authority_metadata
from memstrata.core.errors import InvalidInput, NotFound, Unauthorized
from memstrata.core.ids import validate_id
from memstrata.core.models.owners import ApiKeyInfo, NewApiKey, Scope

SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
PREFIX = "msk_"
__all__ = ["PREFIX", "SCOPES", "ApiKeyInfo", "ApiKeys", "NewApiKey", "Scope"]

api_keys = Table(
    "api_keys",
    authority_metadata,
    Column("id", String(32), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("scopes", JSONB, nullable=False),
    Column("secret_sha256", String(64), nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
    Column("revoked_at", Float(precision=53), nullable=True),
    ForeignKeyConstraint(
        ["tenant_id"], ["tenants.id"], ondelete="CASCADE", name="fk_api_keys_tenant_id_tenants"
    ),
)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _info(row: object) -> ApiKeyInfo:
    m = dict(row._mapping)  # type: ignore[attr-defined]
    return ApiKeyInfo(
        key_id=m["id"], tenant_id=m["tenant_id"], name=m["name"], scopes=m["scopes"],
        created_at=m["created_at"], revoked_at=m["revoked_at"],
    )  # fmt: skip


class ApiKeys:
    """Make, list, revoke and verify keys on the process's one engine."""

    def __init__(self, engine: Engine, *, cache_s: float = 30.0) -> None:
        self.engine = engine
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, ApiKeyInfo, str]] = {}
        self._lock = threading.Lock()

    def create(self, tenant_id: str, *, name: str, scopes: list[str]) -> NewApiKey:
        validate_id(tenant_id, kind="tenant_id")
        if not 1 <= len(name) <= 256:
            raise InvalidInput("name: expected 1-256 characters")
        bad = [s for s in scopes if s not in SCOPES]
        if bad or not scopes:
            raise InvalidInput(f"scopes: expected some of {', '.join(SCOPES)}, got {scopes}")
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        wanted = [s for s in SCOPES if s in scopes]
        with translated(f"create api key for {tenant_id}"), self.engine.begin() as conn:
            if conn.execute(select(TENANTS.c.id).where(TENANTS.c.id == tenant_id)).first() is None:
                raise UnknownTenant(f"no tenant {tenant_id!r} (memstrata tenant create first)")
            row = conn.execute(
                api_keys.insert()
                .values(id=key_id, tenant_id=tenant_id, name=name, scopes=wanted,
                        secret_sha256=_digest(secret), created_at=time.time())
                .returning(*api_keys.c)
            ).one()  # fmt: skip
        return NewApiKey(info=_info(row), secret=f"{PREFIX}{key_id}_{secret}")

    def list(self, tenant_id: str | None = None) -> list[ApiKeyInfo]:
        stmt = select(api_keys).order_by(api_keys.c.tenant_id, api_keys.c.created_at)
        if tenant_id is not None:
            stmt = stmt.where(api_keys.c.tenant_id == validate_id(tenant_id, kind="tenant_id"))
        with translated("list api keys"), self.engine.connect() as conn:
            return [_info(r) for r in conn.execute(stmt).all()]

    def revoke(self, key_id: str) -> ApiKeyInfo:
        validate_id(key_id, kind="key_id")
        with translated(f"revoke api key {key_id}"), self.engine.begin() as conn:
            row = conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id)
                .values(revoked_at=time.time())
                .returning(*api_keys.c)
            ).first()
        if row is None:
            raise NotFound(f"no api key {key_id!r}")
        with self._lock:
            self._cache.pop(key_id, None)
        return _info(row)

    def cached(self, token: str) -> ApiKeyInfo | None:
        """The key, if this process verified it within ``cache_s`` (no I/O), else None."""
        body = token[len(PREFIX) :] if token.startswith(PREFIX) else ""
        key_id, _, secret = body.partition("_")
        hit = self._cache.get(key_id) if key_id and secret and len(token) <= 200 else None
        if hit is None or time.monotonic() - hit[0] >= self.cache_s:
            return None
        return hit[1] if hmac.compare_digest(_digest(secret), hit[2]) else None

    def verify(self, token: str) -> ApiKeyInfo:
        """The key a bearer token names, if its secret matches and it is not revoked."""
        body = token[len(PREFIX) :] if token.startswith(PREFIX) else ""
        key_id, _, secret = body.partition("_")
        if not key_id or not secret or len(token) > 200:
            raise Unauthorized("not a memstrata API key (expected msk_<id>_<secret>)")
        digest, now = _digest(secret), time.monotonic()
        cached = self._cache.get(key_id)
        fresh = cached is not None and now - cached[0] < self.cache_s
        if cached is not None and fresh and hmac.compare_digest(digest, cached[2]):
            return cached[1]
        with translated("verify api key"), self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).first()
        if row is None or not hmac.compare_digest(digest, row._mapping["secret_sha256"]):
            raise Unauthorized("unknown API key")
        info = _info(row)
        if info.revoked_at is not None:
            raise Unauthorized(f"API key {key_id} was revoked")
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key_id] = (now, info, digest)
        return info
