"""record_turn() → ingest queue → real Celery worker → Redis STM.

Every test runs a worker subprocess on its own key namespace (see ``conftest.py``) and
waits for the shard to drain, polling with a deadline, never sleeping a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from celery import Celery

from memstrata.core.api import MemoryClient, parse_messages
from memstrata.core.errors import InvalidId, InvalidInput, PayloadTooLarge
from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.ingest.queue import GROUP, IngestQueue, shard_for
from memstrata.core.models.transcript import TurnPointer, TurnReceipt
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings
from memstrata.core.transcript.store import TranscriptStore
from memstrata.tasks._options import DRAIN, RECLAIM
from tests.integration.conftest import (
    REPO_ROOT,
    CeleryProcess,
    process_env,
    shard_idle,
    user_state,
    wait_drained,
    wait_until,
)

pytestmark = pytest.mark.integration

AT = 1_790_000_000.0  # event time of the scripted turns (recent enough not to expire)
TOOL_RESULT = "db.cpu 12%\nslow queries: 0\ncreateOrder p99 latency 2300ms\nactive_threads 200/200"

EN_TURN: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": "createOrder on payment-service keeps timing out in prod-k8s. "
        "Please answer in Chinese, conclusion first. Don't restart the prod database.",
    },
    {
        "role": "assistant",
        "content": "Let me check the database metrics first.",
        "tool_calls": [{"id": "call_1", "name": "query_metrics", "arguments": "{}"}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
    {
        "role": "assistant",
        "content": "The database looks fine, so it is not the cause. "
        "Maybe the thread pool is saturated. Next, check the thread pool and downstream latency.",
    },
]
ZH_TURN: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": "支付服务的 createOrder 接口在生产环境一直超时。"
        "请用中文回答，先说结论。不要重启生产数据库。",
    },
    {
        "role": "assistant",
        "content": "先查一下数据库指标。",
        "tool_calls": [{"id": "call_1", "name": "query_metrics", "arguments": "{}"}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
    {
        "role": "assistant",
        "content": "数据库指标正常，已经排除数据库的问题。可能是线程池满了。"
        "下一步检查线程池和下游延迟。",
    },
]

# (verdict, rule, summary) of every recorded decision, in turn order
EN_DECISIONS = [
    ("written", "user_symptom", "createOrder on payment-service keeps timing out in prod-k8s"),
    ("written", "user_preference", "Please answer in Chinese, conclusion first"),
    ("written", "user_constraint", "Don't restart the prod database."),
    ("written", "tool_observation", "[query_metrics] createOrder p99 latency 2300ms"),
    ("written", "tool_observation", "[query_metrics] active_threads 200/200"),
    ("written", "excluded_cause", "The database looks fine, so it is not the cause"),
    ("refused", "hypothesis", "Maybe the thread pool is saturated"),
    ("written", "next_step", "Next, check the thread pool and downstream latency."),
]
ZH_DECISIONS = [
    ("written", "user_symptom", "支付服务的 createOrder 接口在生产环境一直超时。"),
    ("written", "user_preference", "请用中文回答"),
    ("written", "user_preference", "先说结论。"),
    ("written", "user_constraint", "不要重启生产数据库。"),
    ("written", "next_step", "先查一下数据库指标。"),
    ("written", "tool_observation", "[query_metrics] createOrder p99 latency 2300ms"),
    ("written", "tool_observation", "[query_metrics] active_threads 200/200"),
    ("written", "excluded_cause", "数据库指标正常"),
    ("written", "excluded_cause", "已经排除数据库的问题。"),
    ("refused", "hypothesis", "可能是线程池满了。"),
    ("written", "next_step", "下一步检查线程池和下游延迟。"),
]
# (memory_type, summary, version) of every item left in STM
EN_ITEMS = {
    ("fact", "createOrder on payment-service keeps timing out in prod-k8s", 1),
    ("preference", "Please answer in Chinese, conclusion first", 1),
    ("constraint", "Don't restart the prod database.", 1),
    ("observation", "[query_metrics] createOrder p99 latency 2300ms", 1),
    ("observation", "[query_metrics] active_threads 200/200", 1),
    ("fact", "The database looks fine, so it is not the cause", 1),
    ("decision", "Next, check the thread pool and downstream latency.", 1),
}
ZH_ITEMS = {
    ("fact", "支付服务的 createOrder 接口在生产环境一直超时。", 1),
    ("preference", "请用中文回答", 1),
    ("preference", "先说结论。", 1),
    ("constraint", "不要重启生产数据库。", 1),
    ("observation", "[query_metrics] createOrder p99 latency 2300ms", 1),
    ("observation", "[query_metrics] active_threads 200/200", 1),
    ("fact", "数据库指标正常", 1),  # the restatement in the same message changes nothing
    ("decision", "下一步检查线程池和下游延迟。", 2),  # the next step moved on within the turn
}
SCRIPTS = {
    "en": (EN_TURN, EN_DECISIONS, EN_ITEMS),
    "zh": (ZH_TURN, ZH_DECISIONS, ZH_ITEMS),
}


def decisions_of(res: Runtime, user_id: str, session_id: str) -> list[tuple[str, str, str]]:
    return [
        (d.verdict.value, d.rule, d.summary) for d in read_decisions(res, user_id, session_id)
    ]


def items_of(res: Runtime, user_id: str, session_id: str) -> set[tuple[str, str, int]]:
    return {
        (i.memory_type.value, i.summary, i.version)
        for i in res.stm.by_session(user_id, session_id, limit=100)
    }


def dead_letters(res: Runtime) -> list[dict[str, str]]:
    entries = res.redis.xrange(res.queue.keys.dead_letters)
    return [fields for _id, fields in cast(list[tuple[str, dict[str, str]]], entries)]


def append(
    res: Runtime, user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
) -> TurnPointer:
    """Write a turn to L0 without queueing it (the test decides how it is delivered)."""
    appended = res.transcript.append_turn(
        user_id=user_id,
        session_id=session_id,
        task_id="bug456",
        messages=parse_messages(messages),
        at=AT,
    )
    return appended.pointer


# --------------------------------------------------------------------- happy path
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_recorded_turn_is_extracted_into_stm_by_the_worker(
    lang: str, res: Runtime, memory: MemoryClient, celery_worker: CeleryProcess
) -> None:
    turn, expected_decisions, expected_items = SCRIPTS[lang]
    # Given a worker, When an agent records a debugging turn
    receipt = memory.record_turn(
        user_id=f"u_{lang}", session_id="s_1", task_id="bug456", messages=turn, at=AT
    )
    assert receipt.kicked and len(receipt.message_ids) == len(turn)
    # Then the worker drains the shard and STM holds exactly the expected facts
    wait_drained(res, receipt.shard, celery_worker)
    assert decisions_of(res, f"u_{lang}", "s_1") == expected_decisions
    assert items_of(res, f"u_{lang}", "s_1") == expected_items
    assert {i.task_id for i in res.stm.by_task(f"u_{lang}", "bug456", limit=100)} == {"bug456"}
    assert dead_letters(res) == []
    assert "memstrata.ingest.drain" in celery_worker.log()


# --------------------------------------------------------------------- agent process
AGENT = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING)
from memstrata.tasks.client import connect
receipt = connect().record_turn(user_id="u_agent", session_id="s_1", task_id="bug456",
                                messages=json.loads(sys.argv[1]), at=float(sys.argv[2]))
print(receipt.model_dump_json())
"""


def run_agent(settings: Settings, turn: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """An agent process using the documented producer API (``tasks.client.connect``)."""
    return subprocess.run(
        [sys.executable, "-c", AGENT, json.dumps(turn), str(AT)],
        cwd=REPO_ROOT,
        env=process_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_agent_process_hands_turns_to_the_worker_through_tasks_client(
    res: Runtime, celery_worker: CeleryProcess
) -> None:
    # When a separate agent process records a turn with tasks.client.connect()
    agent = run_agent(res.settings, EN_TURN)
    assert agent.returncode == 0, agent.stderr
    receipt = TurnReceipt.model_validate_json(agent.stdout.strip().splitlines()[-1])
    # Then its own Celery app kicked the worker of this namespace, which stored the facts
    assert receipt.kicked
    wait_drained(res, receipt.shard, celery_worker)
    assert items_of(res, "u_agent", "s_1") == EN_ITEMS


def test_agent_process_configures_celery_without_errors(res: Runtime) -> None:
    # When an agent process's first use of Celery is the kick of record_turn()
    agent = run_agent(res.settings, EN_TURN)
    # Then nothing is logged on its stderr
    assert agent.returncode == 0
    assert agent.stderr == ""


# --------------------------------------------------------------------- redelivery
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_redelivered_turn_leaves_stm_and_its_decisions_unchanged(
    lang: str, res: Runtime, producer: Celery, celery_worker: CeleryProcess
) -> None:
    # Given a turn already drained into STM
    pointer = append(res, "u_redeliver", "s_1", SCRIPTS[lang][0])
    shard, kicked = res.queue.enqueue(pointer)
    assert kicked
    producer.send_task(DRAIN, args=[shard])
    wait_drained(res, shard, celery_worker)
    before = user_state(res, "u_redeliver")
    assert len(res.stm.by_session("u_redeliver", "s_1", limit=100)) == len(SCRIPTS[lang][2])
    # When the same pointer is delivered again, twice in one batch, and a spare drain runs
    for _ in range(2):
        res.queue.enqueue(pointer)
    producer.send_task(DRAIN, args=[shard])
    wait_drained(res, shard, celery_worker)
    producer.send_task(DRAIN, args=[shard])
    wait_until(lambda: celery_worker.succeeded(DRAIN) == 3, "the spare drain")
    # Then every item, index, dedup map and recorded decision is byte-for-byte what it was
    assert user_state(res, "u_redeliver") == before
    assert items_of(res, "u_redeliver", "s_1") == SCRIPTS[lang][2]
    assert dead_letters(res) == []


# --------------------------------------------------------------------- crash recovery
CRASH_TURNS: list[list[dict[str, Any]]] = [
    [
        {
            "role": "user",
            "content": "Please answer in Chinese, conclusion first. "
            "Don't restart the prod database.",
        }
    ],
    [
        {
            "role": "assistant",
            "content": "Checking metrics.",
            "tool_calls": [{"id": "c1", "name": "query_metrics", "arguments": "{}"}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "createOrder p99 latency 2300ms"},
    ],
    [{"role": "assistant", "content": "The database looks fine, so it is not the cause."}],
]
CRASH_ITEMS = {
    ("preference", "Please answer in Chinese, conclusion first", 1),
    ("constraint", "Don't restart the prod database.", 1),
    ("observation", "[query_metrics] createOrder p99 latency 2300ms", 1),
    ("fact", "The database looks fine, so it is not the cause.", 1),
}


def _idle_past(res: Runtime, shard: int, idle_ms: int) -> bool:
    stream = res.queue.keys.ingest_stream(shard)
    pending = res.redis.xpending_range(stream, GROUP, min="-", max="+", count=100)
    return bool(pending) and all(int(p["time_since_delivered"]) >= idle_ms for p in pending)


@pytest.mark.parametrize("next_drain", ["beat_safety_net", "next_turn"])
def test_turns_read_by_a_crashed_drain_are_reclaimed(
    next_drain: str,
    res: Runtime,
    memory: MemoryClient,
    producer: Celery,
    celery_worker: CeleryProcess,
) -> None:
    # Given three turns read (not acknowledged) by a drain that then died with its flag
    crashed = IngestQueue(
        res.redis,
        namespace=res.settings.key_namespace,
        shards=res.settings.ingest_shards,
        kick_ttl_ms=1000,  # the crashed drain's flag lapses quickly
        claim_idle_ms=res.settings.ingest_claim_idle_ms,
    )
    pointers = [append(res, "u_crash", "s_1", turn) for turn in CRASH_TURNS]
    shard = shard_for("u_crash", res.settings.ingest_shards)
    for p in pointers:
        crashed.enqueue(p)
    taken = crashed.claim_or_release(shard, "crashed-host-4242", 100)
    assert [e.pointer for e in taken] == pointers
    assert res.queue.backlog(shard) == (3, 3)
    # ... and its kick flag expired and the entries idled past ingest_claim_idle_ms
    kick = res.queue.keys.ingest_kick(shard)
    wait_until(
        lambda: (
            not res.redis.exists(kick) and _idle_past(res, shard, res.settings.ingest_claim_idle_ms)
        ),
        "the crashed drain's flag and claim to lapse",
    )
    # When the next drain of the shard starts (Beat's safety net, or a new turn's kick)
    if next_drain == "beat_safety_net":
        producer.send_task(RECLAIM)
    else:
        receipt = memory.record_turn(
            user_id="u_crash",
            session_id="s_1",
            task_id="bug456",
            messages=[{"role": "user", "content": "谢谢"}],
            at=AT + 1,
        )
        assert receipt.kicked and receipt.shard == shard
    # Then it takes the entries over and nothing is lost
    wait_drained(res, shard, celery_worker)
    assert items_of(res, "u_crash", "s_1") == CRASH_ITEMS
    turns = {d.decision_id.split(":")[0] for d in read_decisions(res, "u_crash", "s_1")}
    assert {p.turn_id for p in pointers} <= turns
    assert dead_letters(res) == []


class TestWorkerKilledMidDrain:
    """SIGKILL of the pool process while a drain task is running: nothing may be lost.

    The kill lands between two batches or inside one; in the second case the dead
    process's unacknowledged entries wait for ``ingest_claim_idle_ms`` and a reclaim.
    """

    TURNS = 1500

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"ingest_batch": 20})  # many small batches

    @staticmethod
    def pool_child(worker: CeleryProcess) -> int:
        pid = worker.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def test_every_turn_is_processed_after_the_pool_process_dies(
        self, res: Runtime, producer: Celery, celery_worker: CeleryProcess
    ) -> None:
        # Given many queued turns of one user and a drain task working through them
        l0 = TranscriptStore(Path(res.settings.transcript_dir), fsync=False)
        for i in range(self.TURNS):
            turn = parse_messages([{"role": "user", "content": f"Don't restart service-{i}."}])
            appended = l0.append_turn(user_id="u_kill", session_id="s_1", messages=turn, at=AT + i)
            shard, _ = res.queue.enqueue(appended.pointer)
        stream = res.queue.keys.ingest_stream(shard)
        producer.send_task(DRAIN, args=[shard])
        wait_until(
            lambda: res.redis.xlen(stream) < self.TURNS,
            "the first acknowledged batch",
            interval_s=0.002,
            worker=celery_worker,
        )
        # When the pool process running it is killed mid-flight
        os.kill(self.pool_child(celery_worker), signal.SIGKILL)
        assert res.redis.xlen(stream) > 0, "the drain finished before the kill"
        wait_until(lambda: "WorkerLostError" in celery_worker.log(), "the worker to see the loss")
        # Then the redelivered task (acks_late + reject_on_worker_lost) drains the rest, and
        # Beat's safety net has a drain take over what the dead process had read
        kick = res.queue.keys.ingest_kick(shard)
        deadline = time.monotonic() + 60
        while not shard_idle(res, shard) and time.monotonic() < deadline:
            if not res.redis.exists(kick) and _idle_past(res, shard, 1000):
                producer.send_task(RECLAIM)
            time.sleep(0.2)
        wait_drained(res, shard, celery_worker)
        decisions = read_decisions(res, "u_kill", "s_1")
        assert len({d.decision_id.split(":")[0] for d in decisions}) == self.TURNS
        # ... and although the reclaimed turns were processed last, the newest fact is current
        newest = f"Don't restart service-{self.TURNS - 1}."
        assert newest in {i.summary for i in res.stm.by_session("u_kill", "s_1", limit=1000)}
        assert dead_letters(res) == []


# --------------------------------------------------------------------- dead letters
def test_turn_whose_transcript_is_gone_is_dead_lettered_and_the_batch_goes_on(
    res: Runtime, producer: Celery, celery_worker: CeleryProcess
) -> None:
    # Given one batch: a good turn, a pointer to a missing transcript, garbage, a good turn
    first = append(res, "u_dead", "s_1", CRASH_TURNS[0])
    ghost = first.model_copy(update={"session_id": "s_ghost", "turn_id": "tghost"})
    last = append(res, "u_dead", "s_1", CRASH_TURNS[2])
    shard, kicked = res.queue.enqueue(first)
    assert kicked
    res.queue.enqueue(ghost)
    res.redis.xadd(res.queue.keys.ingest_stream(shard), {"p": "{not a pointer"})
    res.queue.enqueue(last)
    # When the worker drains the shard
    producer.send_task(DRAIN, args=[shard])
    wait_drained(res, shard, celery_worker)
    # Then the two bad entries are dead-lettered with their reasons ...
    dead = dead_letters(res)
    assert [d["reason"] for d in dead] == [
        "NotFound: no transcript for session 's_ghost'",
        "unparseable turn pointer",
    ]
    assert TurnPointer.model_validate_json(dead[0]["p"]) == ghost
    assert dead[1]["p"] == "{not a pointer"
    # ... and both good turns are in STM
    assert items_of(res, "u_dead", "s_1") == {
        ("preference", "Please answer in Chinese, conclusion first", 1),
        ("constraint", "Don't restart the prod database.", 1),
        ("fact", "The database looks fine, so it is not the cause.", 1),
    }


# --------------------------------------------------------------------- bad input
GOOD = [{"role": "user", "content": "Don't restart the prod database."}]

BAD_INPUT: dict[str, tuple[dict[str, Any], type[InvalidInput], str]] = {
    "colon in user_id": ({"user_id": "u:42"}, InvalidId, "invalid user_id"),
    "glob in user_id": ({"user_id": "u*"}, InvalidId, "invalid user_id"),
    "space in session_id": ({"session_id": "s 1"}, InvalidId, "invalid session_id"),
    "fullwidth look-alike": ({"user_id": "ｕ42"}, InvalidId, "invalid user_id"),
    "zero-width space": ({"user_id": "u\u200b42"}, InvalidId, "invalid user_id"),
    "path traversal": ({"session_id": ".."}, InvalidId, "invalid session_id"),
    "slash in session_id": ({"session_id": "../etc"}, InvalidId, "invalid session_id"),
    "empty user_id": ({"user_id": ""}, InvalidId, "invalid user_id"),
    "long user_id": ({"user_id": "u" * 129}, InvalidId, "invalid user_id"),
    "colon in task_id": ({"task_id": "bug:1"}, InvalidId, "invalid task_id"),
    "space in tenant_id": ({"tenant_id": "acme corp"}, InvalidId, "invalid tenant_id"),
    "glob in turn_id": ({"turn_id": "t?"}, InvalidId, "invalid turn_id"),
    "too many messages": ({"messages": GOOD * 65}, PayloadTooLarge, "limit 64"),
    "no messages": ({"messages": []}, InvalidInput, "at least one message"),
    "unknown role": (
        {"messages": [{"role": "robot", "content": "hi"}]},
        InvalidInput,
        "message 0: role",
    ),
    "missing role": ({"messages": [{"content": "hi"}]}, InvalidInput, "message 0: role"),
    "unknown field": (
        {"messages": [*GOOD, {"role": "user", "content": "hi", "sudo": True}]},
        InvalidInput,
        "message 1: sudo",
    ),
    "content not a string": (
        {"messages": [{"role": "user", "content": 42}]},
        InvalidInput,
        "message 0: content",
    ),
    "message not a dict": ({"messages": ["hello"]}, InvalidInput, "message 0"),
    "tool result without call id": (
        {"messages": [{"role": "tool", "content": "ok"}]},
        InvalidInput,
        "needs its tool_call_id",
    ),
    "colon in message_id": (
        {"messages": [{"role": "user", "content": "hi", "message_id": "m:1"}]},
        InvalidId,
        "message 0: message_id",
    ),
    "duplicate message_id": (
        {
            "messages": [
                {"role": "user", "content": "a", "message_id": "m1"},
                {"role": "user", "content": "b", "message_id": "m1"},
            ]
        },
        InvalidInput,
        "duplicate message_id",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_invalid_turn_is_refused_with_a_typed_error_and_nothing_written(
    case: str, res: Runtime, memory: MemoryClient
) -> None:
    override, error, fragment = BAD_INPUT[case]
    kwargs: dict[str, Any] = {"user_id": "u_ok", "session_id": "s_ok", "messages": GOOD}
    kwargs.update(override)
    # When an agent hands over a bad turn, Then it gets a typed error naming the problem
    with pytest.raises(error) as info:
        memory.record_turn(**kwargs)
    assert type(info.value) is error
    assert fragment in str(info.value)
    # ... and nothing reached L0 or the ingest queue
    root = Path(res.settings.transcript_dir)
    assert not root.exists() or [p for p in root.rglob("*") if p.is_file()] == []
    for shard in range(res.settings.ingest_shards):
        assert res.redis.xlen(res.queue.keys.ingest_stream(shard)) == 0
        assert not res.redis.exists(res.queue.keys.ingest_kick(shard))


def test_drain_task_rejects_a_shard_outside_the_configured_range(
    res: Runtime, producer: Celery, celery_worker: CeleryProcess
) -> None:
    # When a drain is sent for a shard that does not exist
    producer.send_task(DRAIN, args=[res.settings.ingest_shards])
    # Then the worker fails it permanently (no retry loop) and nothing is touched
    wait_until(
        lambda: f"shard must be an int in [0, {res.settings.ingest_shards})" in celery_worker.log(),
        "the worker to reject the shard",
        worker=celery_worker,
    )
    assert "Retry in" not in celery_worker.log()
    assert all(shard_idle(res, s) for s in range(res.settings.ingest_shards))
