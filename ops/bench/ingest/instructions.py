"""Redis's instructions per drained turn, counted by callgrind (issue 17).

``python -m memstrata.ops.bench.ingest.instructions [--turns N] [--batch B] [--json]
[-- redis-server options]``.  The drain loop of :mod:`ops.bench.ingest.profile` (the bench
turn mix through L0 and the real pipeline, no Celery) talks to a throwaway
``redis-server`` with the shipped ``ops/redis.conf``, run under ``valgrind
--tool=callgrind``; the figure is the server's instructions (``Ir``) for the whole run,
its start and shutdown included (a few million, constant).  Instructions repeat from run
to run whatever else the shared machine is doing, which CPU seconds do not, so two
versions of the Lua scripts compare in one number each (docs/PERFORMANCE.md,
2026-12-07).  About a minute per 500 turns: the server runs ~50 times slower under
callgrind.  Options after ``--`` go to ``redis-server`` (e.g. ``--
--zset-max-listpack-entries 128``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from memstrata.ops.bench.common.scratch_redis import (
    SHIPPED_CONF,
    server_command,
    wait_until_up,
)
from memstrata.ops.bench.ingest.profile import _pass

_TOTAL = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("redis-server") is not None


def redis_instructions(
    turns: int = 2000, batch: int = 200, server_args: Sequence[str] = ()
) -> dict[str, Any]:
    """Drain ``turns`` bench turns in batches of ``batch`` against a ``redis-server`` under
    callgrind; the server's instructions in all and per turn."""
    if not available():
        raise RuntimeError("needs valgrind and redis-server on PATH")
    from memstrata.core.ltm.milvus_server import free_port

    folder = Path(tempfile.mkdtemp(prefix="memstrata-callgrind-"))
    out = folder / "callgrind.out"
    port = free_port()
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               *server_command(port, folder, *server_args, conf=SHIPPED_CONF)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=600)
    try:
        # valgrind takes seconds to start the server
        wait_until_up(client, proc, timeout_s=120, poll_s=0.2)
        _pass(client, turns, batch, "plain")
        # the server closes the connection as it stops
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=True)
        proc.wait(300)
        found = _TOTAL.search(out.read_text(encoding="utf-8"))
        if found is None:
            raise RuntimeError(f"no instruction total in {out}")
        total = int(found.group(1))
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
    return {"turns": turns, "batch": batch, "server_args": list(server_args),
            "redis_instructions": total,
            "redis_instructions_per_turn": round(total / turns)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("server_args", nargs="*", help="after --: redis-server options")
    args = parser.parse_args(argv)
    got = redis_instructions(args.turns, args.batch, args.server_args)
    print(json.dumps(got) if args.json else "\n".join(f"{k}: {v}" for k, v in got.items()))


if __name__ == "__main__":
    main()
