"""End-to-end ingest benchmark: ``record_turn()`` → Celery drain workers → item in STM.

Real worker subprocesses (``celery -A memstrata.tasks.app worker``) in a namespace of their
own, real
turns (user ask, assistant reply with a tool call, tool result; English and Chinese), and
an open-loop producer, so that a slow pipeline shows up as latency instead of politely
slowing the producer down.

How "visible in STM" is observed without touching the product: every turn is recorded
with ``at`` = the wall time of the call; the items it writes carry ``at`` as
``updated_at``, their score in the user's ``recent`` index.  A watcher *process* polls
those indexes and notes when each user's newest score rises; since a user's turns are
processed in order, a turn is visible once its user's newest score reaches its ``at``
(:func:`ops.bench.ingest.load.visibility`).  Same machine clock, no state shared with the
producer.

Phases: (a)+(b) steady 200 turns/s with 1 and 2 worker processes (and 50 turns/s, the
latency floor); the CPU price of a kick; (c) the drain rate of a backlog (the workers'
capacity, producers out of the way) with 1 and 2 worker processes, and an open-loop
ladder of offered rates from producer processes (what this machine sustains with
producers, workers and Redis sharing it).  Every phase records the CPU per turn of each
party and the cores other jobs used meanwhile, because the machine is shared.

:mod:`~ops.bench.ingest.load` generates the load and watches STM,
:mod:`~ops.bench.ingest.phases` runs the phases, :mod:`~ops.bench.ingest.report` turns
their figures into the summary and the markdown section; :func:`run` is the entry point.
"""

from __future__ import annotations

import os
from typing import Any

import redis

from memstrata.ops.bench.common.env import new_namespace, patched_env, purge, redis_url, scratch_dir
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.workers import celery_follow_env
from memstrata.ops.bench.ingest.phases import run_phases
from memstrata.ops.bench.ingest.report import markdown, summary

__all__ = ["markdown", "run"]


def run(quick: bool) -> dict[str, Any]:
    """Every phase in one namespace; workers, keys and temp files are removed on exit."""
    from memstrata.core.runtime import close_runtime, reset_runtime

    ns = new_namespace("benching")
    url = redis_url()
    figures: dict[str, Any] = {"quick": quick}
    with scratch_dir("memstrata-bench-") as tmp:
        env = {
            "MEMSTRATA_REDIS_URL": url,
            "MEMSTRATA_KEY_NAMESPACE": ns,
            "MEMSTRATA_TRANSCRIPT_DIR": str(tmp / "transcripts"),
        }
        for k, v in os.environ.items():  # settings under test (batch, shards, fsync, ...)
            if k.startswith("MEMSTRATA_") and k not in env:
                env[k] = v
        (tmp / "logs").mkdir()
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            with patched_env(env):
                celery_follow_env()
                res = reset_runtime()
                figures["machine"] = machine(client)
                figures["settings"] = {
                    "ingest_batch": res.settings.ingest_batch,
                    "ingest_shards": res.settings.ingest_shards,
                    "transcript_fsync": res.settings.transcript_fsync,
                }
                figures.update(summary(run_phases(env, client, tmp / "logs", quick)))
        finally:
            close_runtime()
            celery_follow_env()  # back to the caller's environment
            purge(client, ns)
            client.close()
    return figures
