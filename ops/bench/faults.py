"""``memstrata bench faults``: what is acknowledged survives worker, Redis, PostgreSQL and
Milvus faults.

Each fault runs on its own throwaway servers, never the configured ones: a
``redis-server`` (free port, AOF with ``appendfsync always``), and for the PostgreSQL and
Milvus faults a fresh migrated PostgreSQL cluster and a milvus-lite server.  Every fault
reports ``acknowledged``, ``lost``, ``duplicated`` and ``converge_s`` (seconds from the
end of the last fault until everything acknowledged was in place; ``None`` at the limit):

* ``worker_sigkill``, ``redis_sigterm``, ``redis_sigkill``: marker turns through a real
  prefork worker and Beat, the fault injected mid-load several times.  ``acknowledged``
  counts turns ``record_turn`` returned for; ``refused`` those that raised
  ``StoreUnavailable`` during a Redis outage (not acknowledged); lost/duplicated are
  turns missing from STM / in STM or L0 more than once.
* ``postgres_stop``: the cluster is stopped (fast shutdown) while marker turns flow, a
  preference said in a second session waits for Beat's promotion scan (every second),
  and users never recalled before are recalled.  ``lost``/``duplicated`` count turns
  *and* promotions (a user whose preference never reached PostgreSQL / has more than one
  version of it); ``recall_raised`` (must be 0) and ``recall_degraded`` count the
  recalls made during the outage.
* ``milvus_sigkill``: ledger cards are written and projected in batches while the
  milvus-lite server is SIGKILLed mid-indexing several times; ``acknowledged`` counts
  cards the ledger accepted, lost/duplicated cards missing from / doubled in either
  collection once the reconciler has run.

The fault suite (``tests/faults``) asserts the same figures at a small scale.
"""

from __future__ import annotations

import contextlib
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
OWNERS = 5  # users the milvus_sigkill cards are spread over; the indexes are counted per owner


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
    """``count`` marker turns over ``users`` users; StoreUnavailable counts as refused.

    One session per user and phase: keep ``count / users`` under ``stm_session_cap`` (50),
    or the session's oldest items are evicted by design and counted as lost."""
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


def _base_env(redis_url: str, namespace: str, l0: Path) -> dict[str, str]:
    return {"MEMSTRATA_REDIS_URL": redis_url, "MEMSTRATA_KEY_NAMESPACE": namespace,
            "MEMSTRATA_TRANSCRIPT_DIR": str(l0), "MEMSTRATA_INGEST_CLAIM_IDLE_MS": "1000",
            "MEMSTRATA_LTM__ENABLED": "false", "MEMSTRATA_LTM__HISTORY_ENABLED": "false",
            "PYTHONUNBUFFERED": "1"}  # fmt: skip


def _start_beat(folder: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "celery", "-A", "memstrata.tasks.app", "beat",
           "-s", str(folder / "beat-schedule"), "--pidfile", "", "-l", "WARNING"]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _stop_beat(beat: subprocess.Popen[bytes] | None) -> None:
    if beat is not None:
        beat.terminate()
        try:
            beat.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(beat.pid, signal.SIGKILL)
            beat.wait(5)


def _fault(name: str, turns: int, faults: int, folder: Path) -> dict[str, Any]:
    server = RedisServer(folder / "redis")
    server.start()
    settings = load_settings(redis_url=server.url, key_namespace=f"bf{uuid.uuid4().hex[:8]}",
                             transcript_dir=folder / "l0", ingest_claim_idle_ms=1000)  # fmt: skip
    env = _base_env(server.url, settings.key_namespace, settings.transcript_dir)
    res = Runtime(settings)
    beat: subprocess.Popen[bytes] | None = None
    group = WorkerGroup(env=env, pool="prefork", concurrency=2, queues="ingest,ltm,maintenance")
    try:
        with patched_env(env):
            celery_follow_env()
            group.start(60)
            beat = _start_beat(folder, env)
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
        _stop_beat(beat)
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


PREF = "我喜欢先说结论再讲细节。"  # promoted to profile.answer_style once said in 2 sessions
PREF_KEY = "profile.answer_style"


def _pg_env(url: str) -> dict[str, str]:
    return {"MEMSTRATA_POSTGRES_URL": url, "MEMSTRATA_POSTGRES_TIMEOUT_S": "1.0",
            "MEMSTRATA_LIFECYCLE__SCAN_INTERVAL_S": "1"}  # fmt: skip


def _promoted(engine: Any, tenant: str, users: list[str]) -> dict[str, int]:
    """Versions of the preference in PostgreSQL per user (0 = not promoted yet)."""
    from memstrata.core.authority.facts import fact_history

    with engine.connect() as conn:
        return {u: len(fact_history(db=conn, tenant_id=tenant, user_id=u,
                                    canonical_fact_key=PREF_KEY)) for u in users}  # fmt: skip


def _stuck(res: Runtime) -> dict[str, Any]:
    """Where unprocessed turns sit: dead letters (with the first reasons) and backlogs."""
    from memstrata.core.ingest.deadletters import DeadLetters

    letters_ = DeadLetters(res.redis, namespace=res.settings.key_namespace)
    backlog = {s: res.queue.backlog(s) for s in range(res.settings.ingest_shards)}
    return {"dead_letters": letters_.count(),
            "dead_letter_reasons": sorted({d.reason[:160] for d in letters_.page(limit=50)}),
            "backlog": {s: b for s, b in backlog.items() if any(b)}}  # fmt: skip


def _say_pref(client: MemoryClient, tenant: str, users: list[str], session: str) -> None:
    for u in users:
        client.record_turn(user_id=u, tenant_id=tenant, session_id=session,
                           messages=[{"role": "user", "content": PREF}])  # fmt: skip


def _postgres_fault(turns: int, users: int, outage_s: float, folder: Path) -> dict[str, Any]:
    """PostgreSQL stopped during promotion and recall; ingest must not notice."""
    from memstrata.core.authority.admin import create_tenant, create_user
    from memstrata.core.recall.service import AUTHORITY, RecallRequest
    from memstrata.ops.bench.common.scratch_pg import migrated_cluster

    server = RedisServer(folder / "redis")
    server.start()
    beat: subprocess.Popen[bytes] | None = None
    try:
        with migrated_cluster() as cluster:
            url = cluster.url("memstrata")
            settings = load_settings(
                redis_url=server.url, key_namespace=f"bf{uuid.uuid4().hex[:8]}",
                transcript_dir=folder / "l0", ingest_claim_idle_ms=1000, postgres_url=url,
                postgres_timeout_s=1.0,
            )  # fmt: skip
            env = {**_base_env(server.url, settings.key_namespace, settings.transcript_dir),
                   **_pg_env(url)}  # fmt: skip
            res = Runtime(settings)
            group = WorkerGroup(env=env, pool="prefork", concurrency=2,
                                queues="ingest,ltm,maintenance", log_dir=folder)  # fmt: skip
            tenant, people = "bench", [f"p{letters(k)}" for k in range(users)]
            with res.engine.begin() as conn:
                create_tenant(db=conn, tenant={"id": tenant, "name": tenant})
                for u in people:
                    create_user(db=conn, user={"tenant_id": tenant, "id": u})
            try:
                with patched_env(env):
                    celery_follow_env()
                    group.start(60)
                    beat = _start_beat(folder, env)
                    client = MemoryClient(transcript=res.transcript, queue=res.queue,
                                          kicker=_Kicker())  # fmt: skip
                    ledger = Ledger()
                    per = max(1, turns // 3)
                    spread = max(3, per // 20)  # 20 markers a session: under the STM session
                    # cap (50 live items), so none is evicted by design and counted lost
                    produce(client, ledger, "before", per, users=spread)
                    _say_pref(client, tenant, people, "sp1")  # the first session of the preference
                    cluster.stop()
                    down = time.monotonic()
                    produce(client, ledger, "during", per, users=spread)
                    _say_pref(client, tenant, people, "sp2")  # promotion is due now; PG is down
                    raised = degraded = 0
                    recaller = res.recaller(ltm=False)
                    try:
                        for u in people:  # never recalled: no cached profile
                            try:
                                out = recaller.recall(RecallRequest(
                                    tenant_id=tenant, user_id=u, session_id="sp2",
                                    query="how do I like answers"))  # fmt: skip
                            except Exception:  # any exception is counted: it must be 0
                                raised += 1
                            else:
                                degraded += 1 if AUTHORITY in out.degraded else 0
                    finally:
                        recaller.close()
                    time.sleep(max(0.0, outage_s - (time.monotonic() - down)))
                    cluster.start()
                    t0 = time.monotonic()
                    produce(client, ledger, "after", per, users=spread)
                    deadline = t0 + CONVERGE_LIMIT_S
                    while True:
                        versions = _promoted(res.engine, tenant, people)
                        counts = ledger.counts(res)
                        if (counts["lost"] == 0 and all(versions.values())) or (
                            time.monotonic() > deadline
                        ):
                            break
                        time.sleep(0.5)
                    done = counts["lost"] == 0 and all(versions.values())
                    converge = round(time.monotonic() - t0, 1) if done else None
                    p_lost = sum(1 for v in versions.values() if v == 0)
                    p_dup = sum(1 for v in versions.values() if v > 1)
                    return {
                        "acknowledged": counts["acknowledged"] + len(people),
                        "lost": counts["lost"] + p_lost,
                        "duplicated": counts["duplicated"] + p_dup,
                        "converge_s": converge, "faults": 1, "outage_s": outage_s,
                        "turns": counts["acknowledged"], "turns_lost": counts["lost"],
                        "promotions": len(people), "promotions_lost": p_lost,
                        "promotions_duplicated": p_dup, "recalls": len(people),
                        "recall_raised": raised, "recall_degraded": degraded,
                        "refused": counts["refused"], **_stuck(res),
                        "first_worker_survived": all(p.poll() is None for p in group.procs),
                    }  # fmt: skip
            finally:
                _stop_beat(beat)
                group.stop()
                res.close()
                celery_follow_env()
    finally:
        server.kill(signal.SIGTERM)


def _milvus_fault(cards: int, kills: int, down_s: float, folder: Path) -> dict[str, Any]:
    """milvus-lite SIGKILLed mid-indexing ``kills`` times; the reconciler converges."""
    from memstrata.core.ltm.card import CardDraft
    from memstrata.core.ltm.config import LtmSettings
    from memstrata.core.ltm.embedding import CachedEmbedder, make_embedder
    from memstrata.core.ltm.indexer import plan_reconcile, reconcile
    from memstrata.core.ltm.milvus_server import MilvusServer, free_port
    from memstrata.core.runtime import build_ltm, make_ledger, make_postgres
    from memstrata.ops.bench.common.scratch_pg import migrated_cluster

    batch = 10
    batches = max(kills + 1, cards // batch)
    kill_at = {round((k + 1) * batches / (kills + 1)) for k in range(kills)}
    server = MilvusServer(folder / "milvus" / "ltm.db", f"127.0.0.1:{free_port()}")
    server.start()
    try:
        with migrated_cluster() as cluster:
            ltm_settings = LtmSettings(milvus_uri=server.uri, milvus_timeout_s=3.0,
                                       collection_prefix=f"bf{uuid.uuid4().hex[:8]}",
                                       reconcile_grace_s=0.0)  # fmt: skip
            app = load_settings(postgres_url=cluster.url("memstrata"), ltm=ltm_settings)
            embedder = CachedEmbedder(make_embedder("use-multilingual"), capacity=4 * cards)
            rt = build_ltm(ltm_settings, ledger=make_ledger(app, make_postgres(app)),
                           embedder=embedder).start()  # fmt: skip
            try:
                ids: list[str] = []
                last_up = time.monotonic()
                for n in range(batches):
                    if n in kill_at:  # mid-indexing: no clean shutdown
                        assert server.proc is not None
                        server.proc.send_signal(signal.SIGKILL)
                        server.proc.wait(15)
                    drafts = [CardDraft.model_validate({
                        "tenant_id": "bench", "user_id": f"u{k % OWNERS}", "project_id": "p1",
                        "canonical_key": f"case.b{letters(n)}x{letters(k)}",
                        "title": f"incident {n}/{k}",
                        "summary": f"bench card {n} {k}: the deploy of service {k} failed"})
                        for k in range(batch)]  # fmt: skip
                    written = [rt.ledger.write(d).memory_id for d in drafts]
                    ids += written
                    rt.projector.project(written)  # while down: stays pending, never raises
                    if n in kill_at:
                        time.sleep(down_s)
                        server.stop()  # releases the killed server's lock
                        server.start()
                        last_up = time.monotonic()
                deadline = last_up + CONVERGE_LIMIT_S
                while time.monotonic() < deadline:
                    plan = plan_reconcile(rt.ledger, now=time.time(), grace_s=0,
                                          max_attempts=50, limit=1000)  # fmt: skip
                    if not plan.memory_ids:
                        break
                    reconcile(rt.projector, plan)
                    time.sleep(0.2)
                counts = rt.ledger.counts()
                settled = not plan_reconcile(rt.ledger, now=time.time(), grace_s=0,
                                             max_attempts=50, limit=1).memory_ids  # fmt: skip
                converge = round(time.monotonic() - last_up, 1) if settled else None
                rt.lexical.refresh()
                in_index = {"vector": _indexed_count(rt.vector, OWNERS),
                            "lexical": _indexed_count(rt.lexical, OWNERS)}
                indexed = {k: counts[k].get("indexed", 0) for k in ("vector", "lexical")}
                lost = max(len(ids) - min(indexed.values()), len(ids) - min(in_index.values()))
                dup = max(0, max(in_index.values()) - len(ids))
                return {"acknowledged": len(ids), "lost": max(0, lost), "duplicated": dup,
                        "converge_s": converge, "faults": len(kill_at), "down_s": down_s,
                        "ledger": counts, "in_index": in_index}  # fmt: skip
            finally:
                with contextlib.suppress(Exception):
                    rt.lexical.drop()
                    rt.vector.drop()
                rt.close()
                rt.engine.dispose()
    finally:
        server.stop()


def _indexed_count(index: Any, owners: int) -> int:
    """Cards one index holds for the bench's owners, through the port (generations included)."""
    return sum(index.count_owner("bench", f"u{k}") for k in range(owners))


def run(quick: bool) -> dict[str, Any]:
    turns, faults = (60, 2) if quick else (600, 4)
    figures: dict[str, Any] = {"machine": machine(), "quick": quick, "turns": turns}
    with scratch_dir("memstrata-bench-faults-") as folder:
        for name in FAULTS:
            figures[name] = _fault(name, turns, faults, folder / name)
        figures["postgres_stop"] = _postgres_fault(
            turns, users=5 if quick else 20, outage_s=10.0 if quick else 20.0,
            folder=folder / "postgres_stop")  # fmt: skip
        figures["milvus_sigkill"] = _milvus_fault(
            cards=60 if quick else 400, kills=faults, down_s=3.0 if quick else 10.0,
            folder=folder / "milvus_sigkill")  # fmt: skip
    return figures


def markdown(figures: dict[str, Any]) -> str:
    lines = [
        "### Faults (`memstrata bench faults" + (" --quick" if figures.get("quick") else "") + "`)",
        "",
        "Every fault on its own throwaway servers (AOF Redis, a migrated PostgreSQL cluster, a "
        "milvus-lite server). Redis and worker faults: marker turns through a prefork worker "
        "(-c 2) and Beat, the fault injected mid-load; `refused` turns raised "
        "`StoreUnavailable` during a Redis outage and were not acknowledged. `postgres_stop`: "
        "the cluster stopped while turns flow, a preference waits for Beat's promotion scan "
        "and unrecalled users are recalled; lost/duplicated count turns and promotions. "
        "`milvus_sigkill`: ledger cards written and projected while milvus-lite is SIGKILLed "
        "mid-indexing; lost/duplicated count cards missing from or doubled in either index. "
        "`converge_s`: seconds until everything acknowledged was in place, from the last "
        "turn (worker and Redis faults), the PostgreSQL restart, or the last milvus-lite "
        "restart.",
        "",
        "| fault | injections | acknowledged | refused | lost | duplicated | converge_s "
        "| first worker survived |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in (*FAULTS, "postgres_stop", "milvus_sigkill"):
        f = figures.get(name)
        if f is None:
            continue
        alive = f.get("first_worker_survived")
        survived = "n/a" if alive is None or name == "milvus_sigkill" else str(alive).lower()
        if name == "worker_sigkill":
            survived = "n/a (killed)"
        lines.append(
            f"| {name} | {f['faults']} | {f['acknowledged']} | {f.get('refused', 0)} | "
            f"{f['lost']} | {f['duplicated']} | {f['converge_s']} | {survived} |"
        )
    pg = figures.get("postgres_stop")
    if pg is not None:
        lines += ["", f"`postgres_stop` ({pg['outage_s']:g} s down): {pg['turns']} turns "
                  f"({pg['turns_lost']} lost), {pg['promotions']} promotions "
                  f"({pg['promotions_lost']} lost, {pg['promotions_duplicated']} duplicated); "
                  f"{pg['recalls']} recalls of uncached users during the outage: "
                  f"{pg['recall_raised']} raised, {pg['recall_degraded']} degraded "
                  "(`authority`)."]  # fmt: skip
    mv = figures.get("milvus_sigkill")
    if mv is not None:
        ledger = ", ".join(f"{k} {v}" for k, v in sorted(mv["ledger"].items()))
        index = ", ".join(f"{k} {v}" for k, v in sorted(mv["in_index"].items()))
        lines += ["", f"`milvus_sigkill` ({mv['down_s']:g} s down per kill): ledger states "
                  f"{ledger}; records in the collections: {index}."]  # fmt: skip
    return "\n".join(lines) + "\n"
