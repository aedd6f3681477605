"""Tenants, users and API keys as the public surfaces return them (no storage client: the
remote client imports these without SQLAlchemy; :mod:`memstrata.core.owners` and
:mod:`memstrata.core.apikeys` read and write the rows)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

Scope = Literal["read", "write", "admin"]


class TenantInfo(BaseModel):
    """A tenant row."""

    tenant_id: str
    name: str
    users: int = 0
    created_at: datetime | None = None


class UserInfo(BaseModel):
    """A user row: ``user_id`` is the external id, ``key`` the key part it is stored under."""

    tenant_id: str
    user_id: str
    key: str
    display_name: str | None = None
    authority_version: int
    created_at: datetime | None = None


class ApiKeyInfo(BaseModel):
    """A key as listed (never the secret)."""

    key_id: str
    tenant_id: str
    name: str
    scopes: list[Scope]
    created_at: float
    revoked_at: float | None = None


class NewApiKey(BaseModel):
    """A key just made: ``secret`` is the whole token, shown this once."""

    info: ApiKeyInfo
    secret: str
