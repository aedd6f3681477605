"""No poison turn: the review's D2 turn, long messages, bounded decisions, dead letters.

Real Redis and a real Celery worker (``conftest.py``).  The slow turns are made slow by
raising the extraction budget in the test's settings, and the attempts and time limits
are made small, so each test stays bounded; no assertion is about time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from celery import Celery

from memstrata.core.api import MemoryClient
from memstrata.core.ingest.pipeline import DECISION_MAX_BYTES, read_decisions
from memstrata.core.ingest.queue import GROUP, shard_for
from memstrata.core.models.candidate import Verdict
from memstrata.core.models.decision_record import BUDGET_RULE
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings
from memstrata.core.textcut import CUT_MARKER_RE
from memstrata.tasks._options import RECLAIM
from tests.integration.conftest import (
    REPO_ROOT,
    CeleryProcess,
    process_env,
    shard_idle,
    wait_until,
)

pytestmark = pytest.mark.integration

CJK = "我们决定回滚支付服务，不要重启生产环境。"
REVIEW_MESSAGE = (CJK * 3300)[:65_536]  # the reliability review's D2 message
# one short sentence after another, each classified (a "，" no longer ends a clause, so a
# comma-joined message is one sentence and cheap: ~11 ms, which let the soft limit land
# in the post-batch hook instead): ~170 ms a message on an idle machine, pure CPU
NEUTRAL = "今天天气很好。"
SLOW_MESSAGE = (NEUTRAL * 10_000)[:65_536]
RAISED_BUDGET = {  # read everything: a 64-message turn of SLOW_MESSAGE costs ~11 s idle
    "extract_max_message_chars": 16 * 1024 * 1024,
    "extract_max_turn_chars": 64 * 1024 * 1024,
    "extract_max_message_candidates": 100_000,
    "extract_max_turn_candidates": 1_000_000,
}
MARKERS = 40


def tag(i: int) -> str:
    """Letters only: digits are masked in fingerprints, so "mk1" and "mk2" would merge."""
    return "".join(chr(ord("a") + int(d)) for d in f"{i:03d}")


def marker(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"My neighbour keeps a parrot named mk{tag(i)} in the shed"}


def record_markers(memory: MemoryClient, user_id: str, now: float) -> None:
    for i in range(MARKERS):
        memory.record_turn(user_id=user_id, session_id="s_markers", messages=[marker(i)], at=now)


def markers_in_stm(res: Runtime, user_id: str) -> set[str]:
    items = res.stm.by_session(user_id, "s_markers", limit=1000)
    return {w for i in items for w in i.summary.split() if w.startswith("mk")}


def dead_letters(res: Runtime) -> list[dict[str, str]]:
    entries = res.redis.xrange(res.queue.keys.dead_letters)
    return [fields for _id, fields in cast(list[tuple[str, dict[str, str]]], entries)]


def all_idle(res: Runtime) -> bool:
    return all(shard_idle(res, s) for s in range(res.settings.ingest_shards))


def decision_bytes(res: Runtime, user_id: str, session_id: str) -> tuple[int, int]:
    """(bytes of the session's decision records, the largest record)."""
    raw = cast(dict[str, str], res.redis.hgetall(res.stm.keys(user_id).decisions(session_id)))
    sizes = [len(k.encode()) + len(v.encode()) for k, v in raw.items()]
    return sum(sizes), max(sizes, default=0)


def saw_losses(worker: CeleryProcess, n: int) -> bool:
    return worker.log().count("WorkerLostError") >= n


def pool_child(worker: CeleryProcess) -> int | None:
    pid = worker.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else None


# --------------------------------------------------------------------- D2, within budget
def test_the_review_turn_is_processed_and_its_shard_goes_on(
    res: Runtime, memory: MemoryClient, celery_worker: CeleryProcess
) -> None:
    now = time.time()
    # Given the review's turn: 64 messages x 65,536 CJK characters (4.2 M characters)
    poison = [{"role": "user", "content": REVIEW_MESSAGE, "message_id": f"m{k}"} for k in range(64)]
    receipt = memory.record_turn(user_id="u_p", session_id="s_poison", messages=poison, at=now)
    # ... and 40 marker turns behind it on its shard, 40 on other users' shards
    record_markers(memory, "u_p", now)
    others = [f"u_o{k}" for k in range(8)]
    for user in others:
        record_markers(memory, user, now)
    assert {shard_for(u, res.settings.ingest_shards) for u in others} - {receipt.shard}
    # When the worker drains
    wait_until(lambda: all_idle(res), "every shard to drain", timeout_s=120, worker=celery_worker)
    # Then the big turn was processed, nothing was dead-lettered and every marker is in STM
    assert dead_letters(res) == []
    for user in ["u_p", *others]:
        assert markers_in_stm(res, user) == {f"mk{tag(i)}" for i in range(MARKERS)}
    decisions = read_decisions(res, "u_p", "s_poison")
    summaries = [d for d in decisions if d.rule == BUDGET_RULE]
    assert len(summaries) == 64  # every message was cut by the turn budget, and says so
    assert all(d.omitted["chars_not_read"] > 0 for d in summaries)
    # ... and its decision records are bounded (the review measured 64 x 7.2 MB)
    total, largest = decision_bytes(res, "u_p", "s_poison")
    assert largest <= DECISION_MAX_BYTES
    assert total <= (256 + 64) * DECISION_MAX_BYTES


# --------------------------------------------------------------------- long messages
def test_a_turn_with_a_400k_character_message_is_accepted_and_its_other_facts_stored(
    res: Runtime, memory: MemoryClient, celery_worker: CeleryProcess
) -> None:
    now = time.time()
    long_reply = "The build log follows, line by line, unchanged. " * 8_400  # 403,200 chars
    receipt = memory.record_turn(
        user_id="u_long",
        session_id="s_1",
        messages=[
            {"role": "user", "content": "Please answer in Chinese, conclusion first."},
            {"role": "assistant", "content": long_reply},
            {"role": "user", "content": "Don't restart the prod database."},
            marker(7),
        ],
        at=now,
    )
    # Then L0 keeps the long message whole (under MEMSTRATA_MAX_MESSAGE_CHARS) ...
    records = list(res.transcript.read_session(user_id="u_long", session_id="s_1"))
    assert records[1].content == long_reply
    wait_until(lambda: all_idle(res), "the shard to drain", timeout_s=60, worker=celery_worker)
    # ... and the other messages' facts are in STM, read as if the long one were not there
    summaries = {i.summary for i in res.stm.by_session("u_long", "s_1", limit=100)}
    assert {
        "Please answer in Chinese, conclusion first.",
        "Don't restart the prod database.",
        f"My neighbour keeps a parrot named mk{tag(7)} in the shed",
    } <= summaries
    budget = [d for d in read_decisions(res, "u_long", "s_1") if d.rule == BUDGET_RULE]
    assert [d.message_ids for d in budget] == [[receipt.message_ids[1]]]
    assert dead_letters(res) == []


def test_a_message_over_the_l0_cap_keeps_head_and_tail_and_the_turn_is_accepted(
    res: Runtime, memory: MemoryClient
) -> None:
    cap = res.settings.max_message_chars
    huge = "A" * cap + "B" * cap  # twice the cap
    memory.record_turn(
        user_id="u_huge", session_id="s_1", messages=[{"role": "user", "content": huge}]
    )
    (record,) = res.transcript.read_session(user_id="u_huge", session_id="s_1")
    assert record.content.startswith("A" * (cap // 2)) and record.content.endswith("B" * (cap // 2))
    assert len(CUT_MARKER_RE.sub("", record.content)) == cap


# --------------------------------------------------------------------- bounded decisions
def test_decisions_of_one_65536_character_message_stay_under_a_byte_bound(res: Runtime) -> None:
    # Given the review's single message (6,554 decision records, 7.2 MB, before)
    appended = res.transcript.append_turn(
        user_id="u_dec",
        session_id="s_1",
        task_id="INC-1",  # a debugging task: every rule may claim a clause
        messages=[_msg(REVIEW_MESSAGE)],
    )
    # When it is processed
    (outcome,) = res.pipeline.process([(appended.pointer, list(appended.records))])
    # Then at most 64 candidates were judged and one summary counts the rest
    assert len(outcome.decisions) <= 64
    (summary,) = outcome.summaries
    # (3,277 sentences of two "，" segments each; the 64 judged ones took the first ~32)
    assert summary.omitted["clauses_not_classified"] > 3200
    total, largest = decision_bytes(res, "u_dec", "s_1")
    assert largest <= DECISION_MAX_BYTES
    assert total <= 65 * DECISION_MAX_BYTES  # 130 KiB, was 7.2 MB


def test_refusals_beyond_the_cap_are_counted_not_recorded(res: Runtime) -> None:
    guesses = " ".join(f"Maybe service-{tag(i)} is slow." for i in range(40))
    appended = res.transcript.append_turn(
        user_id="u_ref", session_id="s_1", task_id="INC-1", messages=[_msg(guesses)]
    )  # guesses are task state: only a task has them
    (outcome,) = res.pipeline.process([(appended.pointer, list(appended.records))])
    assert len(outcome.refused) == 40
    recorded = read_decisions(res, "u_ref", "s_1")
    refused = [d for d in recorded if d.verdict is Verdict.REFUSED and d.rule != BUDGET_RULE]
    assert len(refused) == res.settings.decision_max_refusals_per_message == 16
    (summary,) = [d for d in recorded if d.rule == BUDGET_RULE]
    assert summary.omitted == {"refused:hypothesis": 24}


def _msg(content: str) -> Any:
    from memstrata.core.api import parse_messages

    return parse_messages([{"role": "user", "content": content}])[0]


# --------------------------------------------------------------------- dead letters
class TestTurnThatKillsItsWorker:
    """A turn whose processing kills the worker (as the hard time limit's SIGKILL does)."""

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"ingest_max_attempts": 2, **RAISED_BUDGET})

    def test_it_is_dead_lettered_after_its_attempts_and_the_shard_goes_on(
        self, res: Runtime, memory: MemoryClient, producer: Celery, celery_worker: CeleryProcess
    ) -> None:
        now = time.time()
        slow = [{"role": "user", "content": SLOW_MESSAGE, "message_id": f"m{k}"} for k in range(64)]
        receipt = memory.record_turn(user_id="u_k", session_id="s_poison", messages=slow, at=now)
        shard = receipt.shard
        stream = res.queue.keys.ingest_stream(shard)
        attempts = res.queue.keys.ingest_attempts(shard)
        poison_id = cast(list[tuple[str, Any]], res.redis.xrange(stream, count=1))[0][0]
        record_markers(memory, "u_k", now)
        # When every drain that takes the turn up is killed while it processes it
        killed: list[int] = []
        deadline = time.monotonic() + 150
        while not (dead_letters(res) and all_idle(res)):
            assert time.monotonic() < deadline, celery_worker.log_tail()
            pending = res.redis.xpending_range(stream, GROUP, min=poison_id, max=poison_id, count=1)
            tried = int(res.redis.hget(attempts, poison_id) or 0)
            child = pool_child(celery_worker)
            if pending and tried not in killed and child is not None:
                time.sleep(0.2)  # inside the turn's extraction (it would take ~11 s)
                os.kill(child, signal.SIGKILL)
                killed.append(tried)
                wait_until(
                    partial(saw_losses, celery_worker, len(killed)), "the worker to see the loss"
                )
            elif not res.redis.exists(res.queue.keys.ingest_kick(shard)) and res.redis.xlen(stream):
                producer.send_task(RECLAIM)  # Beat's safety net, without waiting for Beat
            time.sleep(0.2)
        # Then: killed in its batch and in each of its 2 attempts alone, then dead-lettered
        assert killed == [0, 1, 2]
        (dead,) = dead_letters(res)
        assert json.loads(dead["p"])["turn_id"] == receipt.turn_id
        assert dead["reason"].startswith("gave up after 2 attempts alone; last: no error recorded")
        # ... and every turn behind it on its shard was processed, its counter is gone
        assert markers_in_stm(res, "u_k") == {f"mk{tag(i)}" for i in range(MARKERS)}
        assert not res.redis.exists(attempts)


class TestTurnOverTheSoftTimeLimit:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(
            update={
                "ingest_max_attempts": 2,
                "task_soft_time_limit_s": 1,
                "task_time_limit_s": 5,
                **RAISED_BUDGET,
            }
        )

    def test_it_is_dead_lettered_with_its_reason_and_the_shard_goes_on(
        self, res: Runtime, memory: MemoryClient, celery_worker: CeleryProcess
    ) -> None:
        now = time.time()
        slow = [{"role": "user", "content": SLOW_MESSAGE, "message_id": f"m{k}"} for k in range(64)]
        receipt = memory.record_turn(user_id="u_s", session_id="s_poison", messages=slow, at=now)
        record_markers(memory, "u_s", now)
        wait_until(
            lambda: bool(dead_letters(res)) and all_idle(res),
            "the turn to be dead-lettered and the shard drained",
            timeout_s=90,
            worker=celery_worker,
        )
        (dead,) = dead_letters(res)
        assert json.loads(dead["p"])["turn_id"] == receipt.turn_id
        assert dead["reason"] == (
            "gave up after 2 attempts alone; last: SoftTimeLimitExceeded: "
            "the drain's time ran out processing this turn"
        )
        assert markers_in_stm(res, "u_s") == {f"mk{tag(i)}" for i in range(MARKERS)}
        assert "Hard time limit" not in celery_worker.log()  # never SIGKILLed


# --------------------------------------------------------------------- the CLI
def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstrata.ops.cli", "dead-letters", *args],
        cwd=REPO_ROOT,
        env=process_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_dead_letters_cli_lists_retries_and_drops(
    res: Runtime, memory: MemoryClient, celery_worker: CeleryProcess
) -> None:
    # Given two turns in L0 whose pointers were dead-lettered (as a drain that gave up does)
    for n, user in enumerate(["u_cli", "u_drop"]):
        appended = res.transcript.append_turn(
            user_id=user, session_id="s_1", messages=[_msg(marker(n)["content"])]
        )
        res.redis.xadd(
            res.queue.keys.dead_letters,
            {"p": appended.pointer.model_dump_json(exclude_none=True), "reason": f"boom {n}"},
        )
    # When an operator lists them
    listed = cli(res.settings, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    letters = json.loads(listed.stdout)
    assert [(d["pointer"]["user_id"], d["reason"]) for d in letters] == [
        ("u_cli", "boom 0"),
        ("u_drop", "boom 1"),
    ]
    text = cli(res.settings, "list")
    assert text.stdout.startswith("2 dead letter(s)") and "u_cli  session s_1" in text.stdout
    # ... retries the first: its pointer is queued again and the worker stores its fact
    retried = cli(res.settings, "retry", letters[0]["id"])
    assert retried.returncode == 0, retried.stderr
    assert "1 dead letter(s) re-queued" in retried.stdout
    wait_until(
        lambda: bool(res.stm.by_session("u_cli", "s_1", limit=10)) and all_idle(res),
        "the retried turn to be processed",
        worker=celery_worker,
    )
    # ... and drops the second
    dropped = cli(res.settings, "drop", letters[1]["id"])
    assert dropped.returncode == 0 and "1 dead letter(s) dropped" in dropped.stdout
    # Then none is left, and unknown ids are refused with one line
    assert dead_letters(res) == []
    missing = cli(res.settings, "drop", letters[1]["id"])
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"memstrata dead-letters: no dead letter {letters[1]['id']}"
