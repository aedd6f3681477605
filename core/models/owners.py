"""Tenants and users as the public surfaces return them (no storage client: the remote
client imports these without SQLAlchemy; :mod:`memstrata.core.owners` reads the rows)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


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
