"""memstrata: layered memory for LLM agents.

Everything importable lives under this one namespace: ``memstrata.core`` (domain logic and
storage adapters), ``memstrata.tasks`` (the Celery app and its thin tasks),
``memstrata.ops`` (CLI, benchmarks, operations) and ``memstrata.beat_schedule``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("memstrata")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
