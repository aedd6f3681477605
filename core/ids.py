"""Validation of every id that becomes part of a Redis key, a file path or a filter.

Ids are restricted to ``[A-Za-z0-9_.-]{1,128}`` and may not be ``.`` or ``..``: no ``:``
(our key separator), no glob characters, no whitespace or unicode look-alikes, no path
traversal.  Validating once at the boundary lets the rest of the code build keys by
plain formatting.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import AfterValidator, Strict

from memstrata.core.errors import InvalidId

_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_ENTITY_SAFE_RE = re.compile(r"[\w.\-/]{1,64}")


def is_valid_id(value: object) -> bool:
    """Whether ``value`` is a safe id (what :func:`validate_id` accepts)."""
    return isinstance(value, str) and bool(_ID_RE.fullmatch(value)) and value not in {".", ".."}


def validate_id(value: str, *, kind: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`InvalidId` naming ``kind``."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or value in {".", ".."}:
        shown = value[:40] if isinstance(value, str) else type(value).__name__
        raise InvalidId(f"invalid {kind} {shown!r}: expected 1-128 chars of [A-Za-z0-9_.-]")
    return value


def _checked(value: str) -> str:
    return validate_id(value)


SafeId = Annotated[str, Strict(), AfterValidator(_checked)]
"""A pydantic string type that only admits safe ids (a ``str``: ``b"alice"`` is refused)."""

DEFAULT_TENANT = "default"
"""The tenant of every record written or read without one, in every layer.

"No tenant" is not a scope of its own: L0 paths, Redis keys, PostgreSQL rows, LTM card
ids and filters all use this tenant, so ``tenant_id=None`` and ``tenant_id="default"``
name one owner (DESIGN §8, docs/KEYS.md "Owner identity").
"""


def owner_tenant(tenant_id: str | None) -> str:
    """The validated tenant that owns a record: ``tenant_id``, or :data:`DEFAULT_TENANT`."""
    if tenant_id is None:
        return DEFAULT_TENANT
    return validate_id(tenant_id, kind="tenant_id")


def entity_key_part(entity: str) -> str:
    """Map an entity name to a key-safe, case-folded index key part.

    Entities are free text (``createOrder``, ``payment-service``, ``数据库``); most map to
    themselves in lower case.  Anything with separators, globs or whitespace is replaced
    by a short stable hash, so the index still works and no key can be forged.
    """
    folded = entity.strip().casefold()
    if _ENTITY_SAFE_RE.fullmatch(folded) and ":" not in folded:
        return folded
    return "h_" + hashlib.sha1(folded.encode("utf-8")).hexdigest()[:16]
