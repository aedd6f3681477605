"""Validation of every id that becomes part of a Redis key, a file path or a filter.

Ids are restricted to ``[A-Za-z0-9_.-]{1,128}`` and may not be ``.`` or ``..``: no ``:``
(our key separator), no glob characters, no whitespace or unicode look-alikes, no path
traversal.  Validating once at the boundary lets the rest of the code build keys by
plain formatting.

**External user ids** (``alice@example.com``, ``user:42``, ``张三``) are not rejected: the
public surfaces (``memstrata.Memory``, the REST service, the CLI) map them once, with
:func:`user_key`, to a *key part*: a safe id maps to itself (so existing data stays
addressable), anything else to ``~`` + the lower-case base32 of its UTF-8 bytes.  ``~`` is
outside the safe alphabet, so the two forms cannot meet, and base32 is reversible
(:func:`external_user_id`), so the map is injective: no two external ids share a key
part.  The encoded form (``~[a-z2-7]+``) has no separator, glob, quote, brace, slash or
dot, so it is as safe in a Redis key, an L0 path, a PostgreSQL value or a Milvus filter
as a safe id, and :func:`validate_id` accepts it.  Key parts are at most 128 characters
(the PostgreSQL and Milvus columns), so an external id outside the safe alphabet may be
at most :data:`MAX_EXTERNAL_USER_BYTES` (79) UTF-8 bytes: 79 ASCII characters or 26 CJK
characters; a safe id up to 128 characters.  Ids are compared code point by code point
(no case folding or Unicode normalisation).
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Annotated

from pydantic import AfterValidator, Strict

from memstrata.core.errors import InvalidId

_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}|~[a-z2-7]{1,127}")
_SAFE_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_ENCODED_RE = re.compile(r"~[a-z2-7]{1,127}")
MAX_EXTERNAL_USER_BYTES = 79
"""UTF-8 bytes of an external user id outside the safe alphabet (base32 fits 127 chars)."""
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


def user_key(user_id: str) -> str:
    """The key part of an external user id (see the module docstring); injective.

    Raises :class:`InvalidId` for a non-string, an empty id, a safe id over 128
    characters, an id that is not valid Unicode, or an encoded id over
    :data:`MAX_EXTERNAL_USER_BYTES` bytes.
    """
    if not isinstance(user_id, str) or not user_id:
        shown = user_id if isinstance(user_id, str) else type(user_id).__name__
        raise InvalidId(f"invalid user_id {shown!r}: expected a non-empty string")
    if _SAFE_RE.fullmatch(user_id) and user_id not in {".", ".."}:
        return user_id
    try:
        raw = user_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidId("invalid user_id: not valid Unicode (a lone surrogate)") from exc
    if len(raw) > MAX_EXTERNAL_USER_BYTES:
        raise InvalidId(
            f"invalid user_id {user_id[:40]!r}: an id with characters outside [A-Za-z0-9_.-] "
            f"may be at most {MAX_EXTERNAL_USER_BYTES} UTF-8 bytes (this one has {len(raw)})"
        )
    return "~" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def external_user_id(key_part: str) -> str:
    """The external user id a key part was made from (the inverse of :func:`user_key`)."""
    if _ENCODED_RE.fullmatch(key_part):
        body = key_part[1:].upper()
        try:
            return base64.b32decode(body + "=" * (-len(body) % 8)).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidId(f"not an encoded user id: {key_part[:40]!r}") from exc
    return validate_id(key_part, kind="user_id")


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
