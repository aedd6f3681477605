"""Benchmark modules for ``bench all``'s tests: the interface (``run``, ``markdown``)
with no measuring, importable by name in the child process ``bench all`` spawns."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

PARENT_ONLY = "memstrata_bench_stub_parent_only"


def run(quick: bool) -> dict[str, Any]:
    """Where it ran, and whether it saw a module only the parent had imported."""
    if os.environ.get("BENCH_STUB_FAIL") == "raise":
        raise RuntimeError("stub benchmark broke")
    if os.environ.get("BENCH_STUB_FAIL") == "die":
        os._exit(3)  # the interpreter ends without an exception
    if marker := os.environ.get("BENCH_STUB_HANG"):  # a long benchmark, its clean-up seen
        Path(marker + ".tmp").write_text(str(os.getpid()))
        os.replace(marker + ".tmp", marker)  # the test never reads it half written
        try:
            time.sleep(120)
        finally:
            Path(marker + ".cleaned").write_text("stopped")
    return {"pid": os.getpid(), "quick": quick, "saw_parent_module": PARENT_ONLY in sys.modules}


def markdown(figures: dict[str, Any]) -> str:
    return f"## stub\n\nran in {figures['pid']}\n"
