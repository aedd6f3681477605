"""Fact domains, canonical keys and value encoding: the validation every write passes first.

A canonical fact key is ``<domain>.<name>`` (``profile.language``,
``preference.code_style``, ``permission.project.<project_id>``,
``project_metadata.<project_id>.default_env``, ``config.default_env``,
``constraint.no_prod_restart``).  The prefix must be the fact's domain, so a key can never
be filed under a domain that would change who is authoritative for it (seed 十五.3).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from memstrata.core.authority.errors import (
    FactValueTooLarge,
    InvalidFactKey,
    InvalidFactValue,
    UnknownDomain,
)
from memstrata.core.ids import validate_id


class FactDomain(StrEnum):
    """Where a stable fact belongs; the first four are PG-authoritative (seed 十五.3)."""

    PROFILE = "profile"
    PERMISSION = "permission"
    CONFIG = "config"
    PROJECT_METADATA = "project_metadata"
    PREFERENCE = "preference"
    CONSTRAINT = "constraint"


AUTHORITATIVE_DOMAINS: frozenset[FactDomain] = frozenset(
    {FactDomain.PROFILE, FactDomain.PERMISSION, FactDomain.CONFIG, FactDomain.PROJECT_METADATA}
)


class FactOrigin(StrEnum):
    """How a fact reached PG: typed by an admin, saved on request, or promoted from STM."""

    ADMIN = "admin"
    EXPLICIT = "explicit"
    PROMOTION = "promotion"


class PermissionScope(StrEnum):
    READ_ONLY = "read_only"
    READ_WRITE = "read_write"
    ADMIN = "admin"


PROFILE_FIELDS: tuple[str, ...] = ("language", "answer_style", "timezone", "display_name")
PERMISSION_PROJECT_PREFIX = "permission.project."
MAX_KEY_CHARS = 256

_KEY_RE = re.compile(r"[a-z_]+\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
_TEXT_FIELD_CHARS = 128


class AuthorityLimits(BaseModel):
    """Size limits of authoritative writes (bytes of the UTF-8 JSON encoding, list lengths)."""

    model_config = ConfigDict(frozen=True)

    max_value_bytes: int = Field(16 * 1024, ge=64, le=1024 * 1024)
    max_sources: int = Field(256, ge=1, le=10_000)
    max_promotion_bytes: int = Field(16 * 1024, ge=64, le=1024 * 1024)


DEFAULT_LIMITS = AuthorityLimits()


class RoleValue(BaseModel):
    """The value of ``permission.project.<project_id>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    scope: PermissionScope


@dataclass(frozen=True)
class EncodedValue:
    """A validated value with its canonical JSON text and the hash used for idempotence."""

    value: JsonValue
    text: str
    digest: str


def parse_domain(domain: str | FactDomain) -> FactDomain:
    try:
        return FactDomain(domain)
    except ValueError as exc:
        allowed = ", ".join(d.value for d in FactDomain)
        raise UnknownDomain(f"unknown fact domain {str(domain)[:40]!r}; one of: {allowed}") from exc


def check_key(domain: FactDomain, key: str) -> str:
    """Return ``key`` if it is ``<domain>.<name>`` with safe segments, else raise."""
    if not isinstance(key, str) or len(key) > MAX_KEY_CHARS or not _KEY_RE.fullmatch(key):
        raise InvalidFactKey(f"malformed canonical fact key {str(key)[:60]!r}")
    if key.split(".", 1)[0] != domain.value:
        raise InvalidFactKey(f"key {key[:60]!r} is outside its domain {domain.value!r}")
    if key.startswith(PERMISSION_PROJECT_PREFIX):
        validate_id(key.removeprefix(PERMISSION_PROJECT_PREFIX), kind="project_id")
    return key


def encode_value(value: Any, *, limits: AuthorityLimits = DEFAULT_LIMITS) -> EncodedValue:
    """Canonical JSON (sorted keys, no NaN) so that equal values have equal digests."""
    try:
        text = json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidFactValue(f"fact value is not plain JSON: {exc}") from exc
    size = len(text.encode("utf-8"))
    if size > limits.max_value_bytes:
        raise FactValueTooLarge(f"fact value is {size} bytes; limit {limits.max_value_bytes}")
    return EncodedValue(json.loads(text), text, hashlib.sha256(text.encode()).hexdigest())


def check_value_shape(key: str, value: JsonValue) -> JsonValue:
    """Keys projected into typed tables need a typed value; everything else is free JSON."""
    if key.startswith(PERMISSION_PROJECT_PREFIX):
        try:
            return RoleValue.model_validate(value).model_dump(mode="json")
        except ValueError as exc:
            raise InvalidFactValue(f"{key}: expected {{role, scope}}: {exc}") from exc
    name = key.removeprefix("profile.")
    is_text = isinstance(value, str) and 0 < len(value) <= _TEXT_FIELD_CHARS
    if name in PROFILE_FIELDS and name != key and not is_text:
        raise InvalidFactValue(f"{key}: expected a string of 1-{_TEXT_FIELD_CHARS} chars")
    return value


def domain_of_key(key: str) -> FactDomain | None:
    """The domain a canonical key names, or None for keys of other layers (task_state.* ...)."""
    head = key.split(".", 1)[0] if "." in key else ""
    try:
        return FactDomain(head)
    except ValueError:
        return None
