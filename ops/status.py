"""``memstrata status``: one look at a deployment, and whether anything needs attention.

Every check has a short timeout and reports its own failure, so the command answers even
when half the stack is down; ``attention`` lists what an operator should act on, and the
exit code is non-zero when it is not empty (usable as a health check).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import BaseModel, Field

from memstrata.core.errors import MemstrataError
from memstrata.core.keys import GlobalKeys
from memstrata.core.maintenance import last_runs
from memstrata.core.redact import redact
from memstrata.core.runtime import Runtime
from memstrata.core.stm.index_order import legacy_index_found

QUEUES = ("ingest", "ltm", "maintenance")


class Store(BaseModel):
    reachable: bool
    version: str | None = None
    error: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Shard(BaseModel):
    shard: int
    backlog: int
    pending: int
    lag_s: float


class Job(BaseModel):
    job: str
    interval_s: float
    last_finished: float | None = None
    age_s: float | None = None
    outcome: str | None = None
    error: str | None = None
    stale: bool = False


class Status(BaseModel):
    namespace: str
    at: float
    stores: dict[str, Store]
    schema_revision: dict[str, str] = Field(default_factory=dict)
    schema_heads: dict[str, str] = Field(default_factory=dict)
    workers: dict[str, list[str]] = Field(default_factory=dict)  # worker → its queues
    queues: dict[str, list[str]] = Field(default_factory=dict)  # queue → its workers
    jobs: list[Job] = Field(default_factory=list)
    ingest: list[Shard] = Field(default_factory=list)
    dead_letters: int | None = None
    ltm_ledger: dict[str, dict[str, int]] = Field(default_factory=dict)
    attention: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.attention


def _why(exc: BaseException) -> str:
    return " ".join(redact(f"{type(exc).__name__}: {exc}").split())[:300]


def _redis(rt: Runtime) -> Store:
    try:
        info = rt.redis.info("server")
        mem = rt.redis.info("memory")
        return Store(reachable=True, version=str(info.get("redis_version")), detail={
            "used_memory": mem.get("used_memory"), "maxmemory": mem.get("maxmemory"),
            "maxmemory_policy": mem.get("maxmemory_policy")})  # fmt: skip
    except Exception as exc:  # any client error: reported, never raised
        return Store(reachable=False, error=_why(exc))


def _postgres(rt: Runtime, out: Status) -> Store:
    from sqlalchemy import text

    from memstrata.core import migrations

    try:
        with rt.engine.connect() as conn:
            version = str(conn.execute(text("SHOW server_version")).scalar())
        out.schema_revision = migrations.current(rt.engine)
        out.schema_heads = migrations.heads()
        return Store(reachable=True, version=version)
    except Exception as exc:
        return Store(reachable=False, error=_why(exc))


def _milvus(rt: Runtime) -> Store:
    from memstrata.core.ltm.milvus import MilvusConnection, milvus_errors

    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)  # its own ERROR line per failure
    cfg = rt.settings.ltm
    token = cfg.milvus_token.get_secret_value() if cfg.milvus_token else ""
    conn = MilvusConnection(cfg.milvus_uri, timeout_s=min(cfg.milvus_timeout_s, 3.0), token=token)
    try:
        with milvus_errors("server version", conn):
            version = str(conn.client.get_server_version())
        return Store(reachable=True, version=version, detail={"uri": redact(cfg.milvus_uri)})
    except Exception as exc:
        return Store(reachable=False, error=_why(exc), detail={"uri": redact(cfg.milvus_uri)})
    finally:
        conn.close()


def _elasticsearch(rt: Runtime) -> Store:
    from memstrata.core.ltm.lexical_es import connect

    cfg = rt.settings.ltm
    key = cfg.es_api_key.get_secret_value() if cfg.es_api_key else None
    try:
        client = connect(cfg.es_url or "", timeout_s=min(cfg.es_timeout_s, 3.0), api_key=key)
        info = client.info()
        client.close()
        return Store(reachable=True, version=str(info["version"]["number"]))
    except Exception as exc:
        return Store(reachable=False, error=_why(exc))


def _workers(app: Any, timeout_s: float) -> dict[str, list[str]]:
    """Worker name → the queues it consumes (``celery inspect active_queues``)."""
    replies = app.control.inspect(timeout=timeout_s).active_queues() or {}
    return {name: sorted(q["name"] for q in queues) for name, queues in replies.items()}


def _ingest(rt: Runtime, out: Status) -> None:
    keys = GlobalKeys(rt.settings.key_namespace)
    now = time.time()
    for shard in range(rt.settings.ingest_shards):
        length, pending = rt.queue.backlog(shard)
        first = rt.redis.xrange(keys.ingest_stream(shard), count=1) if length else []
        oldest = int(str(first[0][0]).split("-")[0]) / 1000 if first else now
        out.ingest.append(Shard(shard=shard, backlog=length, pending=pending,
                                lag_s=round(max(0.0, now - oldest), 3)))  # fmt: skip
    out.dead_letters = int(rt.redis.xlen(keys.dead_letters))


def _jobs(rt: Runtime, schedule: dict[str, dict[str, Any]], out: Status) -> None:
    now = time.time()
    runs = last_runs(rt.redis, rt.settings.key_namespace, schedule)
    for job, entry in schedule.items():
        interval = float(entry["schedule"])
        run = runs.get(job)
        row = Job(job=job, interval_s=interval)
        if run is not None:
            row.last_finished, row.outcome = run.finished, run.outcome
            row.age_s = round(now - run.finished, 1)
            row.error = run.error or None
            # two intervals and a margin without a run: Beat (or the queue's worker) is gone
            row.stale = row.age_s > 2 * interval + 30
        out.jobs.append(row)


def collect(
    rt: Runtime, *, app: Any, schedule: dict[str, dict[str, Any]], timeout_s: float = 2.0,
    max_lag_s: float = 300.0,
) -> Status:  # fmt: skip
    """Every check; nothing raises (a failed check becomes an ``attention`` line)."""
    cfg = rt.settings
    out = Status(namespace=cfg.key_namespace, at=time.time(), stores={})
    out.stores["redis"] = _redis(rt)
    out.stores["postgres"] = _postgres(rt, out)
    if cfg.ltm.enabled:
        out.stores["milvus"] = _milvus(rt)
        if cfg.ltm.lexical_backend == "elasticsearch":
            out.stores["elasticsearch"] = _elasticsearch(rt)
    for name, store in out.stores.items():
        if not store.reachable:
            out.attention.append(f"{name} unreachable: {store.error}")
    if out.stores["redis"].reachable:
        _redis_checks(rt, out, app=app, schedule=schedule, timeout_s=timeout_s,
                      max_lag_s=max_lag_s)  # fmt: skip
    if out.stores["postgres"].reachable:
        _pg_checks(rt, out)
    return out


def _redis_checks(
    rt: Runtime, out: Status, *, app: Any, schedule: dict[str, dict[str, Any]],
    timeout_s: float, max_lag_s: float,
) -> None:  # fmt: skip
    need = out.attention
    try:
        out.workers = _workers(app, timeout_s)
    except Exception as exc:
        need.append(f"workers not inspected: {_why(exc)}")
    out.queues = {q: sorted(w for w, qs in out.workers.items() if q in qs) for q in QUEUES}
    need += [f"no worker consumes the {q} queue" for q, ws in out.queues.items() if not ws]
    try:
        _ingest(rt, out)
        _jobs(rt, schedule, out)
    except MemstrataError as exc:
        need.append(f"ingest state not read: {_why(exc)}")
    need += [f"ingest shard {s.shard}: oldest turn waits {s.lag_s:.0f} s"
             for s in out.ingest if s.lag_s > max_lag_s]  # fmt: skip
    if out.dead_letters:
        need.append(f"{out.dead_letters} dead letters: memstrata dead-letters list")
    for job in out.jobs:
        if job.stale:
            need.append(f"Beat job {job.job} last ran {job.age_s:.0f} s ago "
                        f"(every {job.interval_s:g} s): is Beat running?")  # fmt: skip
        elif job.outcome == "failed":
            need.append(f"Beat job {job.job} failed: {job.error}")
    try:
        if legacy_index_found(rt.redis, rt.settings.key_namespace):
            need.append("STM indexes of the order before 2026-12-07 (the sweep skips them): "
                        "run memstrata migrate")  # fmt: skip
    except MemstrataError as exc:
        need.append(f"STM index order not read: {_why(exc)}")


def _pg_checks(rt: Runtime, out: Status) -> None:
    behind = sorted(b for b, rev in out.schema_heads.items() if out.schema_revision.get(b) != rev)
    if behind:
        out.attention.append(f"schema not at head for {', '.join(behind)}: run memstrata migrate")
    try:
        out.ltm_ledger = rt.ledger.counts()
    except MemstrataError as exc:
        out.attention.append(f"LTM ledger not read: {_why(exc)}")
    failed = sum(states.get("failed", 0) for states in out.ltm_ledger.values())
    if failed:
        out.attention.append(f"{failed} LTM projections failed: memstrata ltm requeue")


def render_text(s: Status) -> str:
    """The human form: one line per fact, the attention list last."""
    lines = [f"memstrata status  namespace={s.namespace}"]
    for name, st in s.stores.items():
        state = f"up {st.version}" if st.reachable else f"DOWN ({st.error})"
        lines.append(f"  {name:<14} {state}")
    if s.schema_heads:
        at = ", ".join(f"{b}={s.schema_revision.get(b, 'empty')}" for b in sorted(s.schema_heads))
        lines.append(f"  {'schema':<14} {at}")
    for queue, workers in s.queues.items():
        lines.append(f"  queue {queue:<8} {', '.join(workers) or 'NO WORKER'}")
    for sh in s.ingest:
        lines.append(f"  shard {sh.shard:<8} backlog={sh.backlog} pending={sh.pending} "
                     f"lag={sh.lag_s:.1f}s")  # fmt: skip
    if s.dead_letters is not None:
        lines.append(f"  {'dead letters':<14} {s.dead_letters}")
    for index, states in s.ltm_ledger.items():
        counts = " ".join(f"{k}={v}" for k, v in sorted(states.items()))
        lines.append(f"  ledger {index:<7} {counts}")
    for job in s.jobs:
        when = f"{job.age_s:.0f}s ago ({job.outcome})" if job.age_s is not None else "never"
        lines.append(f"  job {job.job:<26} every {job.interval_s:g}s, last {when}")
    lines.append("attention:" if s.attention else "ok: nothing needs attention")
    lines += [f"  - {a}" for a in s.attention]
    return "\n".join(lines)
