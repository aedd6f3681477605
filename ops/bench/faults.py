"""``memstrata bench faults``: acknowledged turns through worker kills and Redis restarts.

Each fault runs on its own throwaway ``redis-server`` (free port, AOF with
``appendfsync always``), never the configured Redis, with a real prefork worker and
Beat (for the ingest reclaim).  Marker turns flow from this process; the fault is
injected mid-load several times; then the run waits (bounded) until every turn that
``record_turn`` acknowledged is in STM.  Per fault: ``acknowledged``, ``refused`` (raised
``StoreUnavailable`` during a Redis outage: not acknowledged, re-queued only by the L0
reconciler), ``lost``, ``duplicated``, ``converge_s`` and whether the first worker
survived.  The fault suite (``tests/faults``) asserts the same figures at a small scale.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstrata.core.api import MemoryClient
from memstrata.core.errors import StoreUnavailable
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.env import REPO, patched_env, scratch_dir
from memstrata.ops.bench.common.machine import machine
from memstrata.ops.bench.common.scratch_redis import RedisServer
from memstrata.ops.bench.common.workers import WorkerGroup, celery_follow_env

CONVERGE_LIMIT_S = 180.0


def letters(n: int) -> str:
    """``n`` spelled in letters: the extractor's fingerprint folds digits, not letters."""
    out = ""
    while True:
        n, r = divmod(n, 26)
        out = chr(ord("a") + r) + out
        if n == 0:
            return out


def marker(tag: str) -> str:
    return f"mk{tag}z"


def marker_turn(tag: str) -> list[dict[str, str]]:
    """One user message the rule extractor always turns into one STM fact item."""
    return [{"role": "user",
             "content": f"My neighbour keeps a parrot named {marker(tag)} in the garden shed",
             "message_id": f"m-{tag}"}]  # fmt: skip


@dataclass
class Ledger:
    """Markers acknowledged (``record_turn`` returned) and refused (it raised)."""

    acknowledged: list[tuple[str, str]] = field(default_factory=list)  # (user, tag)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def counts(self, res: Runtime) -> dict[str, int]:
        """``in_l0``, ``processed``, ``lost`` and ``duplicated`` over acknowledged markers."""
        l0 = "".join(p.read_text(encoding="utf-8")
                     for p in sorted(res.settings.transcript_dir.rglob("*.jsonl")))  # fmt: skip
        stm: dict[str, list[str]] = {}
        processed = lost = duplicated = in_l0 = 0
        for user, tag in self.acknowledged:
            if user not in stm:
                stm[user] = stm_items(res, user)
            m = f"named {marker(tag)} in"  # whole word: mkabz is inside mkabzz
            in_l0 += 1 if m in l0 else 0
            hits = sum(m in v for v in stm[user])
            processed += 1 if hits else 0
            lost += 0 if hits else 1
            duplicated += 1 if hits > 1 or l0.count(m) > 1 else 0
        return {"acknowledged": len(self.acknowledged), "refused": len(self.refused),
                "in_l0": in_l0, "processed": processed, "lost": lost,
                "duplicated": duplicated}  # fmt: skip


def stm_items(res: Runtime, user: str) -> list[str]:
    """Each STM item of ``user`` as one text (its hash values joined)."""
    prefix = res.stm.keys(user).prefix
    return [" ".join(str(v) for v in res.redis.hgetall(key).values())
            for key in res.redis.scan_iter(match=f"{prefix}item:*", count=1000)]  # fmt: skip


def produce(client: MemoryClient, ledger: Ledger, phase: str, count: int, users: int = 3) -> None:
    """``count`` marker turns over ``users`` users; StoreUnavailable counts as refused."""
    for k in range(count):
        user, tag = f"u{k % users}", f"{phase}x{letters(k)}"
        try:
            client.record_turn(user_id=user, session_id=f"s{phase}", messages=marker_turn(tag),
                               turn_id=f"t-{tag}")  # fmt: skip
        except StoreUnavailable:
            ledger.refused.append((user, tag))
        else:
            ledger.acknowledged.append((user, tag))


def wait_converged(ledger: Ledger, res: Runtime, timeout_s: float) -> float | None:
    """Seconds until every acknowledged marker is processed, or ``None`` at the limit."""
    t0 = time.monotonic()
    while ledger.counts(res)["lost"]:
        if time.monotonic() - t0 > timeout_s:
            return None
        time.sleep(0.5)
    return round(time.monotonic() - t0, 1)


class _Kicker:
    def __call__(self, shard: int) -> None:
        from memstrata.tasks._options import DRAIN
        from memstrata.tasks.app import app

        app.send_task(DRAIN, args=[shard])


def _fault(name: str, turns: int, faults: int, folder: Path) -> dict[str, Any]:
    server = RedisServer(folder / "redis")
    server.start()
    settings = load_settings(redis_url=server.url, key_namespace=f"bf{uuid.uuid4().hex[:8]}",
                             transcript_dir=folder / "l0", ingest_claim_idle_ms=1000)  # fmt: skip
    env = {"MEMSTRATA_REDIS_URL": server.url, "MEMSTRATA_KEY_NAMESPACE": settings.key_namespace,
           "MEMSTRATA_TRANSCRIPT_DIR": str(settings.transcript_dir),
           "MEMSTRATA_INGEST_CLAIM_IDLE_MS": "1000", "MEMSTRATA_LTM__ENABLED": "false",
           "MEMSTRATA_LTM__HISTORY_ENABLED": "false", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    res = Runtime(settings)
    beat: subprocess.Popen[bytes] | None = None
    group = WorkerGroup(env=env, pool="prefork", concurrency=2, queues="ingest,ltm,maintenance")
    try:
        with patched_env(env):
            celery_follow_env()
            group.start(60)
            beat_cmd = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "memstrata.tasks.app",
                "beat",
                "-s",
                str(folder / "beat-schedule"),
                "--pidfile",
                "",
                "-l",
                "WARNING",
            ]
            beat = subprocess.Popen(beat_cmd, cwd=REPO, env={**os.environ, **env},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
            client = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=_Kicker())
            ledger = Ledger()
            per = max(1, turns // (faults + 1))
            inject: Callable[[int], None] = {
                "worker_sigkill": lambda n: _kill_worker(group),
                "redis_sigterm": lambda n: _restart(server, signal.SIGTERM, client, ledger, n),
                "redis_sigkill": lambda n: _restart(server, signal.SIGKILL, client, ledger, n),
            }[name]
            for n in range(faults):
                produce(client, ledger, f"p{letters(n)}", per)
                inject(n)
            produce(client, ledger, "end", per)
            converge = wait_converged(ledger, res, CONVERGE_LIMIT_S)
            counts = ledger.counts(res)
            alive = all(p.poll() is None for p in group.procs) if name != "worker_sigkill" else None
            return {**counts, "faults": faults, "converge_s": converge,
                    "first_worker_survived": alive}  # fmt: skip
    finally:
        if beat is not None:
            beat.terminate()
            beat.wait(15)
        group.stop()
        res.close()
        server.kill(signal.SIGTERM)
        celery_follow_env()


def _kill_worker(group: WorkerGroup) -> None:
    for p in group.procs:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
    group.procs.clear()
    group.names.clear()
    group.start(60)  # a replacement, as a supervisor would start one


def _restart(server: RedisServer, sig: signal.Signals, client: MemoryClient, ledger: Ledger,
             n: int, outage_s: float = 3.0) -> None:  # fmt: skip
    server.kill(sig)
    produce(client, ledger, f"d{letters(n)}", 3)  # during the outage: refused
    time.sleep(outage_s)
    server.start()


FAULTS = ("worker_sigkill", "redis_sigterm", "redis_sigkill")


def run(quick: bool) -> dict[str, Any]:
    turns, faults = (60, 2) if quick else (600, 4)
    figures: dict[str, Any] = {"machine": machine(), "quick": quick, "turns": turns}
    with scratch_dir("memstrata-bench-faults-") as folder:
        for name in FAULTS:
            figures[name] = _fault(name, turns, faults, folder / name)
    return figures


def markdown(figures: dict[str, Any]) -> str:
    lines = [
        "### Faults (`memstrata bench faults" + (" --quick" if figures.get("quick") else "") + "`)",
        "",
        "Marker turns through a prefork worker (-c 2) and Beat on a throwaway AOF Redis; each "
        "fault injected mid-load; `converge_s` is the time from the last turn until every "
        "acknowledged turn was in STM. `refused` turns raised `StoreUnavailable` during a "
        "Redis outage and were not acknowledged.",
        "",
        "| fault | injections | acknowledged | refused | lost | duplicated | converge_s "
        "| first worker survived |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in FAULTS:
        f = figures[name]
        survived = "n/a (killed)" if f["first_worker_survived"] is None else str(
            f["first_worker_survived"]).lower()  # fmt: skip
        lines.append(
            f"| {name} | {f['faults']} | {f['acknowledged']} | {f['refused']} | "
            f"{f['lost']} | {f['duplicated']} | {f['converge_s']} | {survived} |"
        )
    return "\n".join(lines) + "\n"
