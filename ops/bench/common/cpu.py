"""CPU seconds from /proc: of one process, of a process tree, of the whole machine; and
of a Redis server, from its own count."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import redis


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat.

    The ratio of two differences is how saturated the machine was over an interval,
    whoever used it (this benchmark or the other jobs sharing the machine).
    """
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return (math.nan, math.nan)
    ticks = [int(x) for x in first]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    hz = os.sysconf("SC_CLK_TCK")
    return ((sum(ticks) - idle) / hz, sum(ticks) / hz)


def busy_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Fraction of all cores busy between two :func:`machine_busy` readings."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total > 0 else math.nan


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process (not its children) has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def children_cpu_seconds(root_pid: int) -> float:
    """CPU seconds of ``root_pid`` and every descendant still alive (a worker + its pool)."""
    return alive_cpu_seconds([*_descendants(root_pid), root_pid])


def descendants_cpu_seconds(root_pid: int) -> float:
    """CPU seconds of every descendant of ``root_pid`` still alive, not the root itself
    (the servers a benchmark started as its own children)."""
    return alive_cpu_seconds(_descendants(root_pid))


def alive_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds of those of ``pids`` still alive (a gone process counts nothing)."""
    return sum(c for c in map(cpu_seconds, pids) if not math.isnan(c))


def redis_cpu_seconds(client: redis.Redis) -> float:
    """User + system CPU seconds the Redis server has used so far (``INFO cpu``), every
    client's work included."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(Path(entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    stack = [root]
    while stack:
        for child in parents.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out
