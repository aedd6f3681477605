"""The bundled demo: feed scripted debugging sessions through ``record_turn()`` and report.

Each ``ops/demo/<name>.json`` is a list of turns, ``{"task_id"?: str, "messages":
[MessageIn, ...]}`` (``ops/demo/README.md`` says what each turn is there to show).  A
session is replayed as user ``demo-<lang>`` (the file name's first part) and
session ``<name>``, after the demo users' earlier STM state and L0 files are removed, so
every run shows the same result.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstrata.core.api import MemoryClient
from memstrata.core.errors import InvalidInput
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.keys import UserKeys
from memstrata.core.models.candidate import Verdict
from memstrata.core.runtime import Runtime
from memstrata.ops.report import decisions_block, items_block

TURN_KEYS = {"task_id", "messages"}
DEMO_TENANT = "demo"
DEMO_PROJECT = "payments"
# follow-up questions asked through recall() once a session is in STM (seed 十七.1)
FOLLOW_UPS: dict[str, list[str]] = {
    "en": ["It still times out. What have we ruled out, and what is next?",
           "What is my preferred answer style and the project's default environment?"],
    "zh": ["那个接口还是超时，已经排除了什么？下一步查什么？",
           "我的回答偏好是什么？项目默认环境是哪个？"],
}  # fmt: skip
_PROFILES = {"en": {"language": "en", "answer_style": "conclusion_first"},
             "zh": {"language": "zh-CN", "answer_style": "brief_first"}}  # fmt: skip


@dataclass(frozen=True)
class DemoSession:
    name: str
    user_id: str
    session_id: str
    turns: list[dict[str, Any]]


DEMO_DIR = Path(__file__).resolve().parent / "demo"


def demo_names() -> list[str]:
    return sorted(p.stem for p in DEMO_DIR.glob("*.json"))


def parse_session(name: str, raw: Any) -> DemoSession:
    if not isinstance(raw, list) or not raw:
        raise InvalidInput(f"demo {name}: expected a non-empty list of turns")
    for i, turn in enumerate(raw):
        if not isinstance(turn, dict) or not isinstance(turn.get("messages"), list):
            raise InvalidInput(f"demo {name}: turn {i} needs a 'messages' list")
        extra = set(turn) - TURN_KEYS
        if extra:
            raise InvalidInput(f"demo {name}: turn {i} has unknown keys {sorted(extra)}")
    lang = name.split("_", 1)[0]
    return DemoSession(name=name, user_id=f"demo-{lang}", session_id=name, turns=raw)


def load_sessions(names: Sequence[str] | None = None) -> list[DemoSession]:
    available = demo_names()
    wanted = list(names) if names else available
    out = []
    for name in wanted:
        if name not in available:
            raise InvalidInput(f"no demo {name!r}; bundled: {', '.join(available)}")
        text = (DEMO_DIR / f"{name}.json").read_text(encoding="utf-8")
        out.append(parse_session(name, json.loads(text)))
    return out


def reset_user(res: Runtime, user_id: str) -> int:
    """Remove a demo user's STM keys, sweep hint and L0 files; returns keys deleted."""
    keys = UserKeys(res.settings.key_namespace, user_id, DEMO_TENANT)
    doomed = list(res.redis.scan_iter(match=keys.prefix + "*", count=1000))
    if doomed:
        res.redis.delete(*doomed)
    res.redis.zrem(res.stm.gkeys.sweep_users, keys.scope)
    folder = res.transcript.path(user_id=user_id, session_id="x", tenant_id=DEMO_TENANT).parent
    shutil.rmtree(folder, ignore_errors=True)
    return len(doomed)


@dataclass
class FeedResult:
    session: DemoSession
    shards: set[int]
    turn_ids: list[str]
    record_ms: list[float]


def feed(client: MemoryClient, session: DemoSession) -> FeedResult:
    """Hand every turn to ``record_turn()`` as an agent would, timing each call."""
    result = FeedResult(session, set(), [], [])
    for turn in session.turns:
        t0 = time.perf_counter()
        receipt = client.record_turn(
            user_id=session.user_id,
            tenant_id=DEMO_TENANT,
            session_id=session.session_id,
            task_id=turn.get("task_id"),
            messages=turn["messages"],
        )
        result.record_ms.append((time.perf_counter() - t0) * 1000)
        result.shards.add(receipt.shard)
        result.turn_ids.append(receipt.turn_id)
    return result


def drained(res: Runtime, shards: set[int]) -> bool:
    return all(res.queue.backlog(s) == (0, 0) for s in shards)


def wait_until_drained(
    res: Runtime,
    shards: set[int],
    *,
    timeout_s: float,
    alive: Callable[[], bool] | None = None,
) -> bool:
    """Wait for the workers to process every queued turn of ``shards``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if drained(res, shards):
            return True
        if alive is not None and not alive():
            return False
        time.sleep(0.1)
    return drained(res, shards)


def drain_inline(res: Runtime, shards: set[int]) -> None:
    """Process the queued turns in this process (``memstrata demo --inline``, no worker)."""
    for shard in sorted(shards):
        drain_shard(
            shard,
            queue=res.queue,
            transcript=res.transcript,
            pipeline=res.pipeline,
            consumer="demo-inline",
            batch=res.settings.ingest_batch,
            max_run_s=60.0,
        )


def dead_letters(res: Runtime, turn_ids: set[str]) -> list[tuple[str, str]]:
    """(turn id, reason) of the given turns found in the dead-letter stream (last 1000)."""
    out = []
    rows: Any = res.redis.xrevrange(res.queue.keys.dead_letters, count=1000)
    for _eid, fields in rows or []:
        try:
            turn_id = str(json.loads(fields.get("p", "{}")).get("turn_id"))
        except (ValueError, AttributeError):
            continue
        if turn_id in turn_ids:
            out.append((turn_id, str(fields.get("reason"))))
    return out


def session_report(res: Runtime, fed: FeedResult, *, verbose: bool = False) -> str:
    s = fed.session
    items = res.stm.by_session(
        s.user_id, s.session_id, limit=res.settings.stm_session_cap, tenant_id=DEMO_TENANT
    )
    decisions = read_decisions(res, s.user_id, s.session_id, tenant_id=DEMO_TENANT)
    refused = [d for d in decisions if d.verdict is Verdict.REFUSED]
    updates = [
        d
        for d in decisions
        if d.verdict is Verdict.WRITTEN
        and (d.reason.startswith("changed fact") or d.reason.startswith("restated"))
    ]
    ms = sorted(fed.record_ms)
    lines = [
        "",
        f"=== {s.name}: user {s.user_id}, session {s.session_id} ===",
        f"{len(s.turns)} turns recorded; record_turn() took {statistics.median(ms):.2f} ms "
        f"median, {ms[-1]:.2f} ms max (fsync-ed L0 append, one Redis call, a drain kick if needed)",
        f"{len(decisions)} candidates judged: "
        f"{len(decisions) - len(refused)} written, {len(refused)} refused",
        "",
        f"In short-term memory ({len(items)} items, newest first):",
        items_block(items) or "  (nothing)",
    ]
    if updates:
        lines += ["", f"Updates of items already in STM ({len(updates)}):"]
        lines.append(decisions_block(updates))
    lines += ["", f"Refused ({len(refused)}), with the reason:"]
    lines.append(decisions_block(refused, verbose=verbose) or "  (nothing)")
    return "\n".join(lines)


def ensure_demo_authority(res: Runtime, sessions: Sequence[DemoSession]) -> None:
    """Migrate PostgreSQL and register the demo tenant, users, profiles and project.

    Idempotent: rows that already exist are left as they are, so the demo can run again.
    """
    from memstrata.core import migrations
    from memstrata.core.authority.admin import create_project, create_tenant, create_user
    from memstrata.core.authority.facts import grant_role, set_profile

    migrations.upgrade(res.settings.postgres_url)  # every branch: promotion needs the audit
    steps: list[Callable[..., object]] = [
        lambda c: create_tenant(db=c, tenant={"id": DEMO_TENANT, "name": "Demo"}),
        lambda c: create_project(db=c, project={
            "tenant_id": DEMO_TENANT, "id": DEMO_PROJECT, "name": "Payments",
            "default_env": "prod-k8s", "env_tags": ["k8s"]}),
    ]  # fmt: skip
    for s in sessions:
        lang = s.name.split("_", 1)[0]
        steps += [
            lambda c, u=s.user_id: create_user(db=c, user={"tenant_id": DEMO_TENANT, "id": u}),
            lambda c, u=s.user_id: grant_role(db=c, tenant_id=DEMO_TENANT, user_id=u,
                                              project_id=DEMO_PROJECT, role="developer",
                                              scope="read_only"),
            lambda c, u=s.user_id, lg=lang: set_profile(db=c, tenant_id=DEMO_TENANT, user_id=u,
                                                        update=_PROFILES.get(lg, {})),
        ]  # fmt: skip
    for step in steps:
        try:
            with res.engine.begin() as conn:
                step(conn)
        except InvalidInput:
            pass  # already there from an earlier run
    for s in sessions:  # the profile may have just been written: drop cached snapshots
        res.redis.delete(res.profile_cache.keys(DEMO_TENANT, s.user_id).snapshot)


def recall_report(res: Runtime, session: DemoSession) -> str:
    """Ask the session's follow-up questions through recall() and show the memory block."""
    from memstrata.core.recall.service import RecallRequest

    lang = session.name.split("_", 1)[0]
    task_id = next((t.get("task_id") for t in reversed(session.turns) if t.get("task_id")), None)
    res.warm_ltm()
    recaller = res.recaller()
    lines = ["", f"--- recall() for {session.name} ---"]
    try:
        for query in FOLLOW_UPS.get(lang, []):
            t0 = time.perf_counter()
            out = recaller.recall(RecallRequest(
                tenant_id=DEMO_TENANT, user_id=session.user_id, session_id=session.session_id,
                task_id=task_id, project_id=DEMO_PROJECT, query=query, explain=True,
            ))  # fmt: skip
            ms = (time.perf_counter() - t0) * 1000
            route = out.route
            layers = [n for n, on in (("PG", route.need_pg), ("Redis", route.need_redis),
                                      ("LTM", route.need_ltm)) if on]  # fmt: skip
            degraded = f"; degraded: {out.degraded}" if out.degraded else ""
            block = (out.text or "(nothing to inject)").splitlines()
            lines += ["", f"Q: {query}",
                      f"   route: {' + '.join(layers) or 'none'}; {ms:.1f} ms{degraded}",
                      *("   " + ln for ln in block)]  # fmt: skip
    finally:
        recaller.close()
    return "\n".join(lines)


def run_demo(
    res: Runtime,
    names: Sequence[str] | None,
    *,
    inline: bool,
    timeout_s: float,
    keep: bool = False,
    verbose: bool = False,
    alive: Callable[[], bool] | None = None,
) -> int:
    """Feed the bundled sessions, wait for the workers, print the report; 0 when complete.

    ``memstrata demo`` and ``memstrata up`` both run this; ``inline`` drains the queue in
    this process instead of waiting for the workers.
    """
    sessions = load_sessions(names)
    ensure_demo_authority(res, sessions)
    if not keep:
        for s in sessions:
            reset_user(res, s.user_id)
    if inline:
        client = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=lambda _s: None)
    else:
        from memstrata.tasks.app import app
        from memstrata.tasks.client import connect

        client = connect()
        with app.producer_or_acquire() as producer:  # connect now, not inside the first turn
            producer.connection.ensure_connection(max_retries=3)
    print(f"Feeding {len(sessions)} demo session(s) through record_turn() …", flush=True)
    fed = [feed(client, s) for s in sessions]
    shards = set().union(*(f.shards for f in fed))
    t0 = time.monotonic()
    if inline:
        drain_inline(res, shards)
        done = True
    else:
        done = wait_until_drained(res, shards, timeout_s=timeout_s, alive=alive)
    waited = time.monotonic() - t0
    where = "in this process" if inline else "by the workers"
    state = "processed" if done else "NOT fully processed"
    print(f"All turns {state} {where} after {waited * 1000:.0f} ms.", flush=True)
    for f in fed:
        print(session_report(res, f, verbose=verbose), flush=True)
        print(recall_report(res, f.session), flush=True)
    dead = dead_letters(res, {t for f in fed for t in f.turn_ids})
    if dead:
        print(f"\nDead-lettered turns ({len(dead)}):")
        for turn_id, reason in dead:
            print(f"  {turn_id}: {reason}")
    return 0 if done and not dead else 1
