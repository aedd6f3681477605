"""Helpers shared by the benchmarks: percentiles, machine description, namespaces,
Celery worker subprocesses and realistic turns.

The machine these run on is small (2 cores) and shared, so every benchmark reports
medians and high percentiles measured side by side within one run, never a single
best figure, and records what else was competing for the CPU.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[2]


def redis_url() -> str:
    return os.environ.get("MEMSTRATA_REDIS_URL", "redis://127.0.0.1:6379/0")


def new_namespace(prefix: str = "bench") -> str:
    """A key namespace no other run (tests, demo, other benches) uses."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def r3(value: float) -> float:
    """Round for reporting (3 decimals, NaN kept as NaN)."""
    return value if math.isnan(value) else round(value, 3)


def purge(client: redis.Redis, namespace: str) -> int:
    """Delete every key of a namespace (STM, ingest streams, Celery queues)."""
    n = 0
    batch: list[str] = []
    for key in client.scan_iter(match=f"{namespace}:*", count=2000):
        batch.append(key)
        if len(batch) >= 1000:
            n += int(client.unlink(*batch))
            batch = []
    if batch:
        n += int(client.unlink(*batch))
    return n


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
    total = 0.0
    for pid in [*_descendants(root_pid), root_pid]:
        value = cpu_seconds(pid)
        if not math.isnan(value):
            total += value
    return total


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


@dataclass
class WorkerGroup:
    """Celery worker subprocesses of one namespace, each in its own process group.

    Started with ``start()`` (waits until every node answers a ping) and always stopped
    with ``stop()`` (SIGTERM to the group, SIGKILL after a grace period), also when the
    benchmark fails, so no worker outlives its namespace.
    """

    env: Mapping[str, str]
    count: int = 1
    pool: str = "solo"
    concurrency: int = 1
    queues: str = "ingest,maintenance"
    log_dir: Path | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def start(self, timeout_s: float = 30.0, *, wait: bool = True) -> float:
        """Start the workers; returns seconds until all answered a ping (if ``wait``)."""
        t0 = time.perf_counter()
        tag = uuid.uuid4().hex[:6]
        for i in range(self.count):
            name = f"bench{tag}w{i}@%h"
            cmd = [
                sys.executable, "-m", "celery", "-A", "tasks.app", "worker",
                "-Q", self.queues, "-P", self.pool, "-c", str(self.concurrency),
                "-n", name, "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                "--without-heartbeat",
            ]  # fmt: skip
            log = (
                open(self.log_dir / f"worker{i}.log", "wb")  # noqa: SIM115 - closed by the child
                if self.log_dir
                else subprocess.DEVNULL
            )
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.procs.append(proc)
            self.names.append(name.replace("%h", platform.node()))
        if wait:
            self._wait_ready(timeout_s)
        return time.perf_counter() - t0

    def _wait_ready(self, timeout_s: float) -> None:
        from tasks.app import app

        deadline = time.monotonic() + timeout_s
        want = set(self.names)
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"celery worker exited early with code {p.returncode}")
            replies = app.control.ping(destination=list(want), timeout=0.5) or []
            seen = {name for reply in replies for name in reply}
            if want <= seen:
                return
        raise TimeoutError(f"workers {sorted(want)} not ready after {timeout_s:.0f} s")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def cpu_seconds(self) -> float:
        return sum(children_cpu_seconds(pid) for pid in self.pids)

    def stop(self, grace_s: float = 5.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        # the pool children of a prefork worker share its group: make sure none is left
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        self.procs.clear()
        self.names.clear()


@contextlib.contextmanager
def workers(env: Mapping[str, str], **kwargs: Any) -> Iterator[WorkerGroup]:
    group = WorkerGroup(env=env, **kwargs)
    try:
        group.start()
        yield group
    finally:
        group.stop()


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder under the system temp dir, removed afterwards."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def patched_env(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a run (children inherit them)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def celery_follow_env() -> None:
    """Point this process's Celery app at the settings of the current environment.

    The app reads its configuration once per process; a benchmark that changes the key
    namespace (and so the broker's key prefix) must reconfigure it, and hand it back
    afterwards, or ``memstrata bench all`` would send one benchmark's tasks to another's
    queues.  Connections are pooled per broker options, so dropping the pools is enough.
    """
    from core.settings import load_settings
    from tasks.app import app, celery_config

    app.conf.update(celery_config(load_settings()))
    app._pool = None
    app.amqp._producer_pool = None


# ---------------------------------------------------------------------- realistic content
_SERVICES = ("order-service", "payment-api", "inventory-svc", "checkout-gateway", "auth-service",
             "search-api", "billing-worker", "notify-service")  # fmt: skip
_ENVS = ("prod", "staging", "prod-eu", "canary", "uat")
_CAUSES = ("database", "cache", "network", "DNS", "GC", "disk", "connection pool", "load balancer")


def turn_messages(n: int) -> list[dict[str, Any]]:
    """A realistic agent turn (user ask, assistant reply with a tool call, a tool result),
    English or Chinese by turn number, with turn-specific entities and numbers so that the
    extractor finds new facts (and some restated ones) rather than one fact again and again.
    """
    svc = _SERVICES[n % len(_SERVICES)]
    env = _ENVS[(n // 3) % len(_ENVS)]
    cause = _CAUSES[(n // 2) % len(_CAUSES)]
    ticket = f"BUG-{1000 + n}"
    p99 = 180 + (n * 37) % 900
    call_id = f"call_{n}"
    if n % 2 == 0:
        user = (
            f"{ticket}: checkout on {env} is slow again, p99 around {p99} ms. "
            f"Please don't restart {svc} during business hours."
        )
        if n % 4 == 0:
            user += f" Remember that {ticket} is the ticket for this incident."
        assistant = (
            f"I'll look at the {svc} metrics first. "
            f"The {cause} looks healthy, so it is not the cause. "
            f"Next step: inspect the thread pool of {svc} on {env}."
        )
        tool = (
            f"2026-11-30T09:{n % 60:02d}:01Z INFO {svc} started request id=r{n}\n"
            f"2026-11-30T09:{n % 60:02d}:02Z WARN {svc} active_threads=200 max_threads=200\n"
            f"2026-11-30T09:{n % 60:02d}:03Z ERROR {svc} TimeoutException after {p99} ms "
            f"calling inventory-svc /api/v1/stock\n"
            f"2026-11-30T09:{n % 60:02d}:04Z INFO {svc} p99 latency {p99} ms"
        )
        name = "grep_logs"
    else:
        user = (
            f"{ticket}：{env} 环境的 {svc} 又超时了，延迟 {p99} ms。"
            f"不要动 {env} 的数据库配置。请用中文回答，先说结论。"
        )
        assistant = (
            f"已排除{cause}问题，{cause}指标正常。"
            f"确认根因是 {svc} 的连接池耗尽。"
            f"下一步：我们先把 {svc} 的连接池从 {20 + n % 30} 调到 {50 + n % 50}。"
        )
        tool = (
            f"[{svc}] pool.active=50 pool.max=50 waiting={n % 17}\n"
            f"[{svc}] 获取连接超时 {p99} ms，请求失败\n"
            f"[{svc}] HikariPool-1 - Connection is not available, request timed out after "
            f"{p99}ms\n"
            f"[{svc}] GC pause 12 ms"
        )
        name = "query_metrics"
    return [
        {"role": "user", "content": user},
        {
            "role": "assistant",
            "content": assistant,
            "tool_calls": [{"id": call_id, "name": name, "arguments": f'{{"service": "{svc}"}}'}],
        },
        {"role": "tool", "content": tool, "tool_call_id": call_id, "name": name},
    ]


@contextlib.contextmanager
def scratch_postgres(prefix: str = "memstrata_bench_") -> Iterator[str]:
    """A fresh database on the configured PostgreSQL server, dropped (FORCE) afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo
    from sqlalchemy.engine import make_url

    from core.settings import load_settings

    base = make_url(os.environ.get("MEMSTRATA_POSTGRES_URL") or load_settings().postgres_url)
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = make_conninfo(
        host=base.host or "127.0.0.1",
        port=base.port or 5432,
        user=base.username or "postgres",
        password=base.password,
        dbname="postgres",
        connect_timeout=5,
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
