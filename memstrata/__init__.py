"""memstrata: layered memory for LLM agents.

    from memstrata import Memory
    memory = Memory()                       # in-process; Memory(url=..., api_key=...) remotely

``pip install memstrata`` is the remote client alone (httpx, pydantic); the in-process
client, the CLI, the workers and the REST service need ``memstrata[server]``.

Everything importable lives under this one namespace: the client (:class:`Memory`,
:class:`AsyncMemory`, their result models and typed errors, exported here),
``memstrata.core`` (domain logic and storage adapters), ``memstrata.tasks`` (the Celery
app and its thin tasks), ``memstrata.ops`` (CLI, REST service, benchmarks, operations) and
``memstrata.beat_schedule``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

# Exported lazily (PEP 562): every ``import memstrata.core.x`` runs this file first, and the
# pure rule modules must not load SQLAlchemy, Redis or httpx with it (lint-imports).
_EXPORTS = {
    "AsyncMemory": "memstrata.client",
    "Memory": "memstrata.client",
    "EraseResult": "memstrata.wire",
    "TenantInfo": "memstrata.core.models.owners",
    "UserInfo": "memstrata.core.models.owners",
    "TurnReceipt": "memstrata.core.models.transcript",
    "MemoryItem": "memstrata.core.models.memory",
    "MemoryView": "memstrata.core.models.memory",
    "CardView": "memstrata.core.ltm.card",
    "WriteDecision": "memstrata.core.models.candidate",
    "UnknownTenant": "memstrata.core.authority.errors",
    "UnknownUser": "memstrata.core.authority.errors",
    **{
        name: "memstrata.core.errors"
        for name in (
            "Conflict", "Forbidden", "InvalidId", "InvalidInput", "MemstrataError", "MissingExtra",
            "NotFound", "PayloadTooLarge", "PermanentError", "StoreUnavailable", "TransientError",
            "Unauthorized",
        )
    },
}  # fmt: skip

if TYPE_CHECKING:
    from memstrata.client import AsyncMemory, Memory
    from memstrata.core.authority.errors import UnknownTenant, UnknownUser
    from memstrata.core.errors import (
        Conflict,
        Forbidden,
        InvalidId,
        InvalidInput,
        MemstrataError,
        MissingExtra,
        NotFound,
        PayloadTooLarge,
        PermanentError,
        StoreUnavailable,
        TransientError,
        Unauthorized,
    )
    from memstrata.core.ltm.card import CardView
    from memstrata.core.models.candidate import WriteDecision
    from memstrata.core.models.memory import MemoryItem, MemoryView
    from memstrata.core.models.owners import TenantInfo, UserInfo
    from memstrata.core.models.transcript import TurnReceipt
    from memstrata.wire import EraseResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memstrata' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


try:
    __version__ = version("memstrata")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "AsyncMemory",
    "CardView",
    "Conflict",
    "EraseResult",
    "Forbidden",
    "InvalidId",
    "InvalidInput",
    "Memory",
    "MemoryItem",
    "MemoryView",
    "MemstrataError",
    "MissingExtra",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "StoreUnavailable",
    "TenantInfo",
    "TransientError",
    "TurnReceipt",
    "Unauthorized",
    "UnknownTenant",
    "UnknownUser",
    "UserInfo",
    "WriteDecision",
    "__version__",
]
