"""What the figures were measured on (they mean nothing without it)."""

from __future__ import annotations

import contextlib
import math
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import redis


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def _mem_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return math.nan


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "-"


def load_average() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (math.nan, math.nan, math.nan)


def machine(client: redis.Redis | None = None) -> dict[str, Any]:
    """What the figures were measured on (they mean nothing without it)."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_gib": _mem_gib(),
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "celery": _version("celery"),
        "kombu": _version("kombu"),
        "redis_py": _version("redis"),
        "hiredis": _version("hiredis"),  # redis-py parses replies in C when present
        "pydantic": _version("pydantic"),
        "loadavg_at_start": [round(x, 2) for x in load_average()],
    }
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            server = client.info("server")
            persistence = client.info("persistence")
            info["redis_server"] = server.get("redis_version")
            info["redis_aof"] = bool(persistence.get("aof_enabled"))
    return info
