"""The ``/metrics`` exposition: work counters from every process, state read at scrape time.

* Work metrics (:mod:`core.metrics`) come from this process, or, in multiprocess mode
  (``PROMETHEUS_MULTIPROC_DIR``), from the files of every process that shares the folder
  (a prefork worker's children, the CLI commands run there).
* State is read from Redis and PostgreSQL through the :class:`~core.runtime.Runtime` when
  scraped (:class:`StateCollector`): ingest backlog and lag per shard, dead letters, STM
  items, LTM ledger states and each Beat job's last run.  A store that does not answer
  yields ``memstrata_state_up{source="…"} 0`` instead of failing the scrape.

An API server mounts it in one line::

    from memstrata.core.exposition import metrics_asgi_app
    app.mount("/metrics", metrics_asgi_app())

(or serves :func:`render` from a route); ``memstrata metrics --port N`` serves the same
from :func:`serve`, and a worker started with ``--metrics-port`` serves its pool's
counters without the state (one exporter per deployment should read the state).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from memstrata.core.errors import MemstrataError
from memstrata.core.keys import GlobalKeys
from memstrata.core.maintenance import known_jobs, last_runs
from memstrata.core.metrics import metrics, multiprocess_enabled

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

    from memstrata.core.runtime import Runtime

log = logging.getLogger(__name__)

STATE_CACHE_S = 2.0  # two scrapes within this reuse one read of the stores
MAX_TENANT_KEYS = 100_000  # STM items: at most this many tenants' counters are summed
STATE_METRICS = (
    "memstrata_ingest_backlog_turns", "memstrata_ingest_lag_seconds", "memstrata_dead_letters",
    "memstrata_stm_items", "memstrata_job_last_run_seconds", "memstrata_ltm_projection_state",
    "memstrata_state_up",
)  # fmt: skip


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, doc, labels=list(labels))


class StateCollector:
    """Gauges that are state, read through ``runtime()`` at most every ``cache_s`` seconds."""

    def __init__(self, runtime: Callable[[], Runtime], *, cache_s: float = STATE_CACHE_S) -> None:
        self._runtime = runtime
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._at = 0.0
        self._last: list[Metric] = []

    def describe(self) -> list[Metric]:
        return []  # no names registered up front: the registry never calls collect() early

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._at > self._cache_s:
                self._last = self._read()
                self._at = time.monotonic()
            yield from self._last

    def _read(self) -> list[Metric]:
        rt = self._runtime()
        up = _gauge("memstrata_state_up", "1 when the store answered the scrape's reads",
                    ["source"])  # fmt: skip
        out: list[Metric] = []
        for source, read in (("redis", self._redis_state), ("postgres", self._pg_state)):
            try:
                out += read(rt)
                up.add_metric([source], 1.0)
            except (MemstrataError, OSError) as exc:
                log.warning("metrics: %s state not read: %s", source, type(exc).__name__)
                up.add_metric([source], 0.0)
        return [*out, up]

    def _redis_state(self, rt: Runtime) -> list[Metric]:
        from memstrata.core.adapters.redis import redis_errors

        cfg = rt.settings
        keys = GlobalKeys(cfg.key_namespace)
        backlog = _gauge("memstrata_ingest_backlog_turns",
                         "Turns on the shard's ingest stream not yet drained", ["shard"])
        lag = _gauge("memstrata_ingest_lag_seconds",
                     "Age of the shard's oldest undrained turn (0 when empty)", ["shard"])
        dead = _gauge("memstrata_dead_letters", "Turns the ingest drain gave up on")
        stm = _gauge("memstrata_stm_items", "Live STM items (sum of the per-tenant counts)")
        jobs = _gauge("memstrata_job_last_run_seconds",
                      "Epoch seconds a Beat job last finished", ["job", "outcome"])  # fmt: skip
        now = time.time()
        with redis_errors():
            pipe = rt.redis.pipeline(transaction=False)
            for shard in range(cfg.ingest_shards):
                pipe.xlen(keys.ingest_stream(shard))
                pipe.xrange(keys.ingest_stream(shard), count=1)
            pipe.xlen(keys.dead_letters)
            replies = pipe.execute()
            for shard in range(cfg.ingest_shards):
                length, first = replies[2 * shard], replies[2 * shard + 1]
                backlog.add_metric([str(shard)], float(length))
                oldest = int(first[0][0].split("-")[0]) / 1000 if length and first else now
                lag.add_metric([str(shard)], max(0.0, now - oldest))
            dead.add_metric([], float(replies[-1]))
            stm.add_metric([], float(_stm_items(rt)))
        names = known_jobs(rt.redis, cfg.key_namespace)
        for job, run in last_runs(rt.redis, cfg.key_namespace, names).items():
            if run is not None:
                jobs.add_metric([job, run.outcome], run.finished)
        return [backlog, lag, dead, stm, jobs]

    def _pg_state(self, rt: Runtime) -> list[Metric]:
        ledger = _gauge("memstrata_ltm_projection_state",
                        "LTM card projections per index and state", ["index", "state"])
        for index, states in rt.ledger.counts().items():
            for state in ("pending", "indexed", "failed"):
                ledger.add_metric([index, state], float(states.get(state, 0)))
        return [ledger]


def _stm_items(rt: Runtime) -> int:
    """The sum of the tenants' item counters (kept by the per-tenant cap's accounting)."""
    pattern = f"{rt.settings.key_namespace}:tenant:*:items"
    keys = []
    for key in rt.redis.scan_iter(match=pattern, count=1000):
        keys.append(key)
        if len(keys) >= MAX_TENANT_KEYS:
            break
    total = 0
    for i in range(0, len(keys), 500):
        total += sum(int(v or 0) for v in rt.redis.mget(keys[i : i + 500]))
    return total


class _Union:
    """Collectors rendered as one exposition (the registry API ``generate_latest`` needs)."""

    def __init__(self, parts: Iterable[Any]) -> None:
        self.parts = list(parts)

    def collect(self) -> Iterator[Metric]:
        for part in self.parts:
            yield from part.collect()


def registry(*, state: Collector | None = None) -> Any:
    """What to expose: this process's metrics (or the multiprocess folder's), plus ``state``."""
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    metrics()  # declare every work metric, so a scrape shows them at zero before any work
    if multiprocess_enabled():
        work: Any = CollectorRegistry()
        MultiProcessCollector(work)  # type: ignore[no-untyped-call]
    else:
        work = REGISTRY
    return _Union([work, *([state] if state is not None else [])])


def default_state() -> StateCollector:
    """State read through this process's runtime."""
    from memstrata.core.runtime import get_runtime

    return StateCollector(get_runtime)


def render(*, state: bool = True) -> tuple[bytes, str]:
    """The exposition body and its content type (for a framework's own route)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(registry(state=default_state() if state else None)), CONTENT_TYPE_LATEST


def metrics_asgi_app(*, state: bool = True) -> Any:
    """An ASGI app serving the exposition (``app.mount("/metrics", metrics_asgi_app())``)."""
    from prometheus_client import make_asgi_app

    return make_asgi_app(registry=registry(state=default_state() if state else None))


def serve(port: int, *, address: str = "127.0.0.1", state: bool = True) -> Any:
    """Serve the exposition on ``address:port`` from a daemon thread; returns the server."""
    from prometheus_client import start_http_server

    reg = registry(state=default_state() if state else None)
    server, _thread = start_http_server(port, addr=address, registry=reg)
    return server
