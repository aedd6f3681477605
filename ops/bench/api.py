"""``memstrata bench api``: what the REST service adds to ``record_turn`` and ``recall``.

Set-up: a scratch PostgreSQL database (migrated), a fresh Redis namespace and L0 folder,
LTM off (recall answers from PostgreSQL + STM), one tenant with an API key.  The same
turn (4 messages, distinct turn ids) and the same recall are measured

* in-process, through :class:`memstrata.Memory` on this process's runtime, and
* over HTTP, through ``Memory(url=..., api_key=...)`` (httpx, keep-alive) against a
  ``memstrata api`` started with one uvicorn worker per core.

Latencies are wall time around each call (p50/p99), the in-process and the HTTP call
alternating so that both see the same machine load; ``turns_per_s`` is the throughput
of 4 keep-alive clients in threads recording turns for the whole turn budget.  A few
turns are drained inline first so that recall has STM items to read.  No worker runs:
drain kicks go to the bench namespace's queue and are purged with it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from memstrata.client import Memory
from memstrata.core import migrations
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.db import scratch_postgres
from memstrata.ops.bench.common.env import (
    REPO,
    new_namespace,
    patched_env,
    purge,
    redis_url,
    scratch_dir,
)
from memstrata.ops.bench.common.fixtures import turn_messages
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.stats import median, percentile, r3

TENANT = "bench"
USER = "alice@example.com"
CLIENTS = 4


def _figures(prefix: str, turns: list[float], recalls: list[float], per_s: float) -> dict[str, Any]:
    return {
        f"{prefix}turns_p50_ms": r3(median(turns)),
        f"{prefix}turns_p99_ms": r3(percentile(turns, 99)),
        f"{prefix}recall_p50_ms": r3(median(recalls)),
        f"{prefix}recall_p99_ms": r3(percentile(recalls, 99)),
        f"{prefix}turns_per_s": round(per_s, 1),
    }


def _throughput(make: Callable[[], Memory], n: int, tag: str) -> float:
    clients = [make() for _ in range(CLIENTS)]

    def work(c: int) -> None:
        m = clients[c]
        for i in range(n // CLIENTS):
            m.record_turn(user_id=USER, session_id=f"tp{c}", messages=turn_messages(i),
                          turn_id=f"{tag}-{c}-{i}")  # fmt: skip

    t0 = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(work, range(CLIENTS)))
    elapsed = time.perf_counter() - t0
    for m in clients:
        m.close()
    return (n // CLIENTS) * CLIENTS / elapsed


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _measure(
    makes: dict[str, Callable[[], Memory]], n: int, floor: Callable[[], object]
) -> tuple[dict[str, tuple[list[float], list[float]]], list[float]]:
    """Turn and recall latencies of each client, calls interleaved: on a shared machine
    the load drifts during a run, and alternating makes both sides see the same load.
    ``floor`` (a keep-alive ``GET /healthz``) is timed between them: what one HTTP round
    trip costs at that moment, before any route does work."""
    clients = {tag: make() for tag, make in makes.items()}
    floors: list[float] = []
    turns: dict[str, list[float]] = {tag: [] for tag in clients}
    recalls: dict[str, list[float]] = {tag: [] for tag in clients}
    msgs = turn_messages(4)
    for i in range(n):
        for tag, m in clients.items():
            t0 = time.perf_counter()
            m.record_turn(user_id=USER, session_id="s1", messages=msgs, turn_id=f"{tag}-{i}")
            turns[tag].append(_ms_since(t0))
        t0 = time.perf_counter()
        floor()
        floors.append(_ms_since(t0))
    for i in range(n):
        query = f"does createOrder still time out? ({i})"
        for tag, m in clients.items():
            t0 = time.perf_counter()
            m.recall(query, user_id=USER, session_id="s0")
            recalls[tag].append(_ms_since(t0))
    for m in clients.values():
        m.close()
    return {tag: (turns[tag], recalls[tag]) for tag in clients}, floors


@contextlib.contextmanager
def _service(env: dict[str, str], workers: int) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstrata.ops.cli", "api", "--port", str(port), "--workers",
         str(workers), "--no-access-log", "--log-level", "warning"],
        cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"memstrata api did not start: {err[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(quick: bool = False) -> dict[str, Any]:
    n = 200 if quick else 1000
    workers = os.cpu_count() or 1
    with scratch_postgres("memstrata_bench_api_") as pg, scratch_dir("memstrata-bench-api-") as d:
        migrations.upgrade(pg)
        ns = new_namespace("benchapi")
        env = {
            "MEMSTRATA_REDIS_URL": redis_url(), "MEMSTRATA_POSTGRES_URL": pg,
            "MEMSTRATA_KEY_NAMESPACE": ns, "MEMSTRATA_TRANSCRIPT_DIR": str(d / "transcripts"),
            "MEMSTRATA_LTM__ENABLED": "false",
        }  # fmt: skip
        with patched_env(env):
            rt = Runtime(load_settings())
        try:
            rt.owners.create_tenant(TENANT)
            key = rt.api_keys.create(TENANT, name="bench", scopes=["read", "write"]).secret

            def local() -> Memory:
                return Memory(runtime=rt, tenant=TENANT, kicker=lambda shard: None)

            seed = local()
            for i in range(8):
                seed.record_turn(user_id=USER, session_id="s0", messages=turn_messages(i),
                                 turn_id=f"seed-{i}")  # fmt: skip
            for shard in range(rt.settings.ingest_shards):
                drain_shard(shard, queue=rt.queue, transcript=rt.transcript, batch=200,
                            pipeline=rt.pipeline, consumer="bench", max_run_s=30)  # fmt: skip
            seed.close()
            with _service(env, workers) as url:
                remote = lambda: Memory(url=url, api_key=key)  # noqa: E731
                with httpx.Client(base_url=url) as probe:
                    lat, floors = _measure({"in": local, "http": remote}, n,
                                           lambda: probe.get("/healthz"))  # fmt: skip
                inproc = (*lat["in"], _throughput(local, n, "in-tp"))
                http = (*lat["http"], _throughput(remote, n, "http-tp"))
        finally:
            purge(rt.redis, ns)
            rt.close()
    out: dict[str, Any] = {"calls": n, "api_workers": workers, "clients": CLIENTS}
    out.update(_figures("", *http))
    out.update(_figures("inproc_", *inproc))
    out["http_adds_turns_p50_ms"] = r3(out["turns_p50_ms"] - out["inproc_turns_p50_ms"])
    out["http_adds_recall_p50_ms"] = r3(out["recall_p50_ms"] - out["inproc_recall_p50_ms"])
    out["healthz_p50_ms"] = r3(median(floors))  # one bare round trip, same run, same load
    out["machine"] = machine()
    return out


def markdown(f: dict[str, Any]) -> str:
    rows = [("record_turn", "turns"), ("recall", "recall")]
    lines = [
        "## REST service overhead (`memstrata api`)",
        "",
        f"Command: `memstrata bench api` — {f.get('calls')} calls each, LTM off, "
        f"{f.get('api_workers')} uvicorn worker(s), {f.get('clients')} keep-alive clients "
        "for throughput; target: HTTP adds ≤ 1.5 ms p50.",
        "",
        "| call | HTTP p50 ms | HTTP p99 ms | in-process p50 ms | in-process p99 ms "
        "| HTTP adds p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, key in rows:
        lines.append(
            f"| {label} | {f[f'{key}_p50_ms']} | {f[f'{key}_p99_ms']} | "
            f"{f[f'inproc_{key}_p50_ms']} | {f[f'inproc_{key}_p99_ms']} | "
            f"{f[f'http_adds_{key}_p50_ms']} |"
        )
    lines += ["", f"Turns per second: {f['turns_per_s']} over HTTP, "
              f"{f['inproc_turns_per_s']} in-process ({f.get('clients')} threads). "
              f"A bare keep-alive `GET /healthz` took {f.get('healthz_p50_ms')} ms p50 "
              "in the same run: the round trip itself, before any route works."]  # fmt: skip
    return "\n".join(lines)
