"""What travels between :class:`memstrata.Memory` and the REST service: bodies, results and
typed errors as ``application/problem+json`` (RFC 9457).

One definition serves both sides, so the embedded and the remote client return the same
models and raise the same exception classes.  User ids here are *external* ids (any
string, :func:`memstrata.core.ids.user_key` maps them to key parts at the boundary).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from memstrata.core.authority import errors as _authority_errors
from memstrata.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MemstrataError,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    StoreUnavailable,
    TransientError,
    Unauthorized,
)
from memstrata.core.models.owners import Scope

MAX_EXTERNAL_ID_CHARS = 128
ExternalUserId = Field(min_length=1, max_length=MAX_EXTERNAL_ID_CHARS)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    """``POST /v1/turns``: the arguments of ``record_turn`` (the tenant comes from the key)."""

    user_id: str = ExternalUserId
    session_id: str = Field(min_length=1, max_length=128)
    # checked message by message by record_turn (roles, sizes, tool calls)
    messages: list[dict[str, JsonValue]] = Field(max_length=10_000)
    task_id: str | None = Field(None, min_length=1, max_length=128)
    turn_id: str | None = Field(None, min_length=1, max_length=128)
    at: float | None = None


class RecallIn(_Body):
    """``POST /v1/recall``: the arguments of ``recall``."""

    query: str = Field(min_length=1, max_length=8000)
    user_id: str = ExternalUserId
    session_id: str = Field(min_length=1, max_length=128)
    task_id: str | None = Field(None, min_length=1, max_length=128)
    project_id: str | None = Field(None, min_length=1, max_length=128)
    workspace_id: str | None = Field(None, min_length=1, max_length=128)
    top_k: int = Field(8, ge=1, le=100)
    token_budget: int = Field(600, ge=32, le=32_000)
    explain: bool = False
    as_of: float | None = Field(
        None, description="memory as it stood at this time (seconds since the epoch), not now"
    )


class TenantIn(_Body):
    tenant_id: str = Field(min_length=1, max_length=128)
    name: str | None = Field(None, min_length=1, max_length=256)


def _reader_writer() -> list[Scope]:
    return ["read", "write"]


class ApiKeyIn(_Body):
    """``POST /v1/tenants/{tenant_id}/apikeys``: a key for a tenant (deployment admin)."""

    name: str = Field("default", min_length=1, max_length=256)
    scopes: list[Scope] = Field(default_factory=_reader_writer, min_length=1, max_length=3)


class UserIn(_Body):
    user_id: str = ExternalUserId
    display_name: str | None = Field(None, min_length=1, max_length=256)


class EraseResult(BaseModel):
    """What an erase found (dry run) or removed, per layer (``core.erase.EraseReport``)."""

    tenant_id: str
    user_id: str
    key: str
    dry_run: bool
    found: dict[str, int] = Field(default_factory=dict)
    removed: dict[str, int] = Field(default_factory=dict)
    skipped: dict[str, str] = Field(default_factory=dict)
    resumed: bool = False
    finished: bool = False


Verdict = Literal["written", "refused"]


class Problem(BaseModel):
    """An error body (``application/problem+json``); ``type`` names the exception class."""

    type: str
    title: str
    status: int
    detail: str


PROBLEM_PREFIX = "urn:memstrata:error:"


def status_of(exc: MemstrataError) -> int:
    """The HTTP status of a typed error (most specific first)."""
    table: list[tuple[type[MemstrataError], int]] = [
        (Unauthorized, 401),
        (Forbidden, 403),
        (_authority_errors.ScopeDenied, 403),  # a filter names a project the user may not read
        (PayloadTooLarge, 413),
        (Conflict, 409),
        (InvalidInput, 422),
        (NotFound, 404),
        (TransientError, 503),
    ]
    for cls, status in table:
        if isinstance(exc, cls):
            return status
    return 500


def problem_of(exc: MemstrataError, *, detail: str | None = None) -> Problem:
    name = type(exc).__name__
    return Problem(
        type=PROBLEM_PREFIX + name,
        title=name,
        status=status_of(exc),
        detail=str(exc) if detail is None else detail,
    )


def _registry() -> dict[str, type[MemstrataError]]:
    _ = _authority_errors  # its classes join the tree when imported
    out: dict[str, type[MemstrataError]] = {}
    todo: list[type[MemstrataError]] = [MemstrataError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return out


_BY_STATUS: dict[int, type[MemstrataError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
    503: StoreUnavailable,
}


def error_from(status: int, body: Any) -> MemstrataError:
    """The exception a problem body stands for: the same class when known, else by status."""
    detail = f"HTTP {status}"
    cls: type[MemstrataError] | None = None
    if isinstance(body, dict):
        detail = str(body.get("detail") or body.get("title") or detail)
        kind = str(body.get("type", ""))
        if kind.startswith(PROBLEM_PREFIX):
            cls = _registry().get(kind.removeprefix(PROBLEM_PREFIX))
    if cls is None:
        transient = status in {502, 503, 504}
        cls = _BY_STATUS.get(status, StoreUnavailable if transient else PermanentError)
    try:
        return cls(detail)
    except TypeError:  # a class with another constructor: fall back to its base by status
        return _BY_STATUS.get(status, PermanentError)(detail)
