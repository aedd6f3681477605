"""The receipt is a promise (docs/RELIABILITY.md): record_turn vs a Redis outage, the
session watermarks, and the reconciler that queues what reached L0 but not the stream.

Outages use a throwaway ``redis-server`` with AOF on a free port (the shared 6379 is never
touched): it is stopped and started again on the same folder, as a restart would.  In the
worker test only the data Redis goes down; the broker stays on the shared server (the
test namespace's queues), so the test is about the write path, not about kombu (D1).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis

from memstrata.core.api import MemoryClient, parse_messages
from memstrata.core.errors import StoreUnavailable
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.ingest.queue import shard_for
from memstrata.core.ingest.reconcile import ReconcileReport, reconcile
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.ops.bench.common.scratch_redis import RedisServer
from memstrata.tasks._options import DRAIN, RECONCILE
from tests.conftest import REDIS_URL, _purge
from tests.integration.conftest import CeleryProcess, wait_until

pytestmark = pytest.mark.integration

RETRIES = 5


# --------------------------------------------------------------------- a throwaway Redis
@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path / "redis")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def settings(server: RedisServer, namespace: str, tmp_path: Path) -> Settings:
    """Data on the throwaway server, the Celery broker on the shared one (its namespace)."""
    return load_settings(
        redis_url=server.url,
        broker_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        redis_socket_timeout_s=1.0,
        ltm=LtmSettings(history_enabled=False),
    )


@pytest.fixture(autouse=True)
def _broker_keys(namespace: str) -> Iterator[None]:
    yield
    shared = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    _purge(shared, namespace)
    shared.close()


@pytest.fixture
def restore(server: RedisServer) -> Iterator[Callable[[], None]]:
    """Start the server again if a test left it stopped (the fixtures purge through it)."""

    def up() -> None:
        if server.proc is None:
            server.start()

    yield up
    up()


# --------------------------------------------------------------------- helpers
def marker(tag: str) -> list[dict[str, Any]]:
    """One user message the rule extractor always turns into one conversation fact.

    Tags are letters: the fact's canonical key normalises digits away.
    """
    assert tag.isalpha(), tag
    return [{"role": "user", "content": f"My neighbour keeps a parrot named mk{tag} in the shed"}]


class Kicks(list[int]):
    def __call__(self, shard: int) -> None:
        self.append(shard)


def client(res: Runtime, kicks: Kicks | None = None) -> MemoryClient:
    return MemoryClient(transcript=res.transcript, queue=res.queue, kicker=kicks or Kicks())


def l0_turn_ids(res: Runtime, user: str, session: str) -> list[str]:
    return [r.turn_id for r in res.transcript.read_session(user_id=user, session_id=session)]


def stream_len(res: Runtime, user: str) -> int:
    shard = shard_for(user, res.settings.ingest_shards)
    return int(res.redis.xlen(res.queue.keys.ingest_stream(shard)))


def drain(res: Runtime, user: str) -> None:
    drain_shard(
        shard_for(user, res.settings.ingest_shards),
        queue=res.queue,
        transcript=res.transcript,
        pipeline=res.pipeline,
        consumer="test",
        batch=100,
        max_run_s=10,
    )


def markers_in_stm(res: Runtime, user: str, session: str) -> dict[str, int]:
    """mk-tag → mention count of the STM items that hold it (one item each, or a bug)."""
    out: dict[str, int] = {}
    for item in res.stm.by_session(user, session, limit=100):
        for word in item.summary.split():
            if word.startswith("mk"):
                assert word not in out, f"{word} is in two items"
                out[word] = item.mention_count
    return out


def decided_turns(res: Runtime, user: str, session: str) -> list[str]:
    return sorted(d.decision_id.split(":")[0] for d in read_decisions(res, user, session))


def run_reconcile(res: Runtime, kicks: Kicks | None = None, **kw: Any) -> ReconcileReport:
    options: dict[str, Any] = {"horizon_s": 3600.0, "max_turns": 100, **kw}
    return reconcile(transcript=res.transcript, queue=res.queue, kick=kicks or Kicks(), **options)


# --------------------------------------------------------------------- the outage
def test_turns_recorded_during_an_outage_are_processed_once_after_it(
    res: Runtime, server: RedisServer, restore: Callable[[], None]
) -> None:
    memory = client(res)
    # Given a session with one turn recorded while Redis was up
    memory.record_turn(user_id="u", session_id="s1", messages=marker("zero"), turn_id="s1-0")
    # When Redis goes down, the session goes on and a new one starts, each turn retried
    server.stop()
    for session, turn_id, tag in (("s1", "s1-1", "one"), ("s2", "s2-0", "two")):
        for _attempt in range(RETRIES):
            with pytest.raises(StoreUnavailable):
                memory.record_turn(
                    user_id="u", session_id=session, messages=marker(tag), turn_id=turn_id
                )
    # Then every failed call still left its turn in L0, once however often it was retried
    assert l0_turn_ids(res, "u", "s1") == ["s1-0", "s1-1"]
    assert l0_turn_ids(res, "u", "s2") == ["s2-0"]
    # When Redis is back and the reconciler runs
    restore()
    kicks = Kicks()
    report = run_reconcile(res, kicks)
    # Then it queued exactly the two turns that never reached the stream, and a drain is
    # due (s1-0's kick still holds the shard's flag, so this run had no need to kick)
    assert (report.files, report.behind, report.requeued, report.left) == (2, 2, 2, 0)
    assert report.lag_s > 0 and report.failed == 0
    shard = shard_for("u", res.settings.ingest_shards)
    assert kicks == [] and res.redis.exists(res.queue.keys.ingest_kick(shard))
    assert stream_len(res, "u") == 3  # s1-0 (never drained here) plus the two
    # ... and after a drain each marker is in STM once, mentioned once, decided once
    drain(res, "u")
    assert markers_in_stm(res, "u", "s1") == {"mkzero": 1, "mkone": 1}
    assert markers_in_stm(res, "u", "s2") == {"mktwo": 1}
    assert decided_turns(res, "u", "s1") == ["s1-0", "s1-1"]
    # When the reconciler and the agent's retries run again, Then nothing more is queued
    assert run_reconcile(res).requeued == 0
    for session, turn_id, tag in (("s1", "s1-1", "one"), ("s2", "s2-0", "two")):
        receipt = memory.record_turn(
            user_id="u", session_id=session, messages=marker(tag), turn_id=turn_id
        )
        assert receipt.already_recorded and not receipt.kicked
    assert stream_len(res, "u") == 0
    assert l0_turn_ids(res, "u", "s2") == ["s2-0"]
    assert markers_in_stm(res, "u", "s2") == {"mktwo": 1}


def test_a_retry_after_the_outage_queues_a_turn_that_never_was(
    res: Runtime, server: RedisServer, restore: Callable[[], None]
) -> None:
    memory = client(res)
    server.stop()
    with pytest.raises(StoreUnavailable):
        memory.record_turn(user_id="u", session_id="s1", messages=marker("late"), turn_id="t1")
    restore()
    # When the agent retries once Redis is back (before any reconciler run)
    receipt = memory.record_turn(
        user_id="u", session_id="s1", messages=marker("late"), turn_id="t1"
    )
    # Then the stored turn is queued, not appended again, and the reconciler has nothing to do
    assert receipt.already_recorded and receipt.kicked
    assert receipt.message_ids == ["t1.0"]
    assert l0_turn_ids(res, "u", "s1") == ["t1"]
    assert stream_len(res, "u") == 1
    assert run_reconcile(res).requeued == 0
    drain(res, "u")
    assert markers_in_stm(res, "u", "s1") == {"mklate": 1}


def test_the_beat_job_on_a_real_worker_queues_what_the_outage_left(
    res: Runtime,
    server: RedisServer,
    restore: Callable[[], None],
    celery_worker: CeleryProcess,
    start_beat: Callable[[Mapping[str, str]], CeleryProcess],
) -> None:
    memory = client(res)  # an agent without a broker: only Beat's drains process its turns
    server.stop()
    for tag in ("alpha", "beta"):
        for _attempt in range(RETRIES):
            with pytest.raises(StoreUnavailable):
                memory.record_turn(
                    user_id="u_beat", session_id="s1", messages=marker(tag), turn_id=f"t-{tag}"
                )
    restore()
    # When Beat runs the reconciler every second on a real worker
    beat = start_beat({"MEMSTRATA_INGEST_RECONCILE_INTERVAL_S": "1"})
    wait_until(
        lambda: markers_in_stm(res, "u_beat", "s1") == {"mkalpha": 1, "mkbeta": 1},
        "the reconciled turns to reach STM",
        timeout_s=60,
        worker=celery_worker,
    )
    # Then Beat sent the job, the worker ran it, reported its lag and kicked a drain
    assert f"Sending due task ingest-reconcile ({RECONCILE})" in beat.log()
    assert celery_worker.succeeded(RECONCILE) >= 1
    # the drain writes STM before the worker logs its success: wait for the line
    wait_until(
        lambda: celery_worker.succeeded(DRAIN) >= 1, "the drain's success line",
        timeout_s=30, worker=celery_worker,
    )  # fmt: skip
    log = celery_worker.log()
    requeued_both = "ingest reconcile {'files': 1, 'behind': 1, 'requeued': 2,"
    assert requeued_both in log
    assert "'lag_s': " in log
    # ... each turn is in L0 once, and processed once however many runs followed
    wait_until(lambda: celery_worker.succeeded(RECONCILE) >= 3, "two more runs", timeout_s=30)
    assert (
        celery_worker.log().count("ingest reconcile {'files': 1, 'behind': 1, 'requeued': 2") == 1
    )
    assert l0_turn_ids(res, "u_beat", "s1") == ["t-alpha", "t-beta"]
    assert markers_in_stm(res, "u_beat", "s1") == {"mkalpha": 1, "mkbeta": 1}
    assert decided_turns(res, "u_beat", "s1") == ["t-alpha", "t-beta"]


# --------------------------------------------------------------------- the watermark
@pytest.fixture
def shared_res(namespace: str, tmp_path: Path) -> Iterator[Runtime]:
    """A runtime on the shared Redis (these tests need no outage)."""
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL,
            key_namespace=f"{namespace}w",
            transcript_dir=tmp_path / "l0",
            ltm=LtmSettings(history_enabled=False),
        )
    )
    yield rt
    _purge(rt.redis, rt.settings.key_namespace)
    rt.close()


def append_only(res: Runtime, session: str, tag: str, **kw: Any) -> None:
    """A turn in L0 that never reached the stream (a crash between the two steps)."""
    res.transcript.append_turn(
        user_id="u", session_id=session, messages=parse_messages(marker(tag)), **kw
    )


def watermark(res: Runtime, session: str) -> int | None:
    gen = res.transcript.generation(user_id="u", session_id=session)
    key = res.queue.watermark_key(user_id="u", tenant_id=None, session_id=session, generation=gen)
    return res.queue.watermarks([key])[0]


def test_the_watermark_follows_the_turns_queued_in_file_order(shared_res: Runtime) -> None:
    res, memory = shared_res, client(shared_res)
    a = memory.record_turn(user_id="u", session_id="s", messages=marker("a"))
    size = res.transcript.path(user_id="u", session_id="s").stat().st_size
    assert watermark(res, "s") == size and a.kicked
    # a turn that reaches L0 but not the stream holds the watermark where it was ...
    append_only(res, "s", "b")
    memory.record_turn(user_id="u", session_id="s", messages=marker("c"))
    assert watermark(res, "s") == size
    # ... until the reconciler queues it (and, harmlessly, the turn after it again)
    report = run_reconcile(res)
    assert (report.behind, report.requeued) == (1, 2)
    end = res.transcript.path(user_id="u", session_id="s").stat().st_size
    assert watermark(res, "s") == end
    assert run_reconcile(res).behind == 0


def test_the_reconciler_does_a_bounded_amount_of_work_per_run(shared_res: Runtime) -> None:
    res = shared_res
    for n in range(5):
        append_only(res, "s", "n" + "abcde"[n])
    append_only(res, "t", "other")
    first = run_reconcile(res, max_turns=3)  # oldest file first: 3 of s, none of t
    assert (first.requeued, first.left) == (3, 2)
    second = run_reconcile(res, max_turns=3)
    assert (second.requeued, second.left) == (3, 0)
    assert run_reconcile(res, max_turns=3).requeued == 0
    assert stream_len(res, "u") == 6


def test_after_redis_lost_its_data_the_turns_of_the_horizon_are_queued_again(
    shared_res: Runtime,
) -> None:
    res, memory = shared_res, client(shared_res)
    real_clock = res.transcript.clock
    res.transcript.clock = lambda: real_clock() - 7200  # recorded two hours ago
    memory.record_turn(user_id="u", session_id="s", messages=marker("old"))
    res.transcript.clock = real_clock
    for tag in ("newone", "newtwo"):
        memory.record_turn(user_id="u", session_id="s", messages=marker(tag))
    # When Redis loses every key (stream and watermarks) and the reconciler runs
    _purge(res.redis, res.settings.key_namespace)  # (this process still thinks the
    # consumer group exists: the enqueue script recreates it with the stream)
    report = run_reconcile(res, horizon_s=3600.0)
    # Then the turns recorded within the horizon are queued again, the older one is settled
    assert (report.behind, report.requeued) == (1, 2)
    drain(res, "u")
    assert markers_in_stm(res, "u", "s") == {"mknewone": 1, "mknewtwo": 1}
    assert run_reconcile(res, horizon_s=3600.0).requeued == 0


def test_a_session_file_written_anew_is_never_taken_for_its_predecessor(
    shared_res: Runtime,
) -> None:
    # Given a session fully queued and processed, whose file is then deleted (a demo reset)
    res, memory = shared_res, client(shared_res)
    for n in range(3):
        memory.record_turn(
            user_id="u", session_id="s", messages=marker("a" + "xyz"[n]), turn_id=f"t{n}"
        )
    drain(res, "u")
    res.transcript.path(user_id="u", session_id="s").unlink()
    for key in res.redis.scan_iter(match=res.stm.keys("u").prefix + "*"):
        res.redis.delete(key)
    # When the same turn ids are recorded again into the new, shorter file
    receipt = memory.record_turn(
        user_id="u", session_id="s", messages=marker("fresh"), turn_id="t0"
    )
    # Then the old file's watermark does not swallow them: they are queued and processed
    assert not receipt.already_recorded
    assert stream_len(res, "u") == 1
    drain(res, "u")
    assert markers_in_stm(res, "u", "s") == {"mkfresh": 1}


# --------------------------------------------------------------------- the fsync
def test_record_turn_fsyncs_the_turns_session_file(
    shared_res: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    res, memory = shared_res, client(shared_res)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    receipt = memory.record_turn(user_id="u", session_id="s", messages=marker("sync"))
    assert synced == [str(res.transcript.path(user_id="u", session_id="s"))]
    assert receipt.kicked and stream_len(res, "u") == 1


def test_a_failed_fsync_fails_the_call_and_the_retry_syncs_and_queues_the_turn_once(
    shared_res: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    res, memory = shared_res, client(shared_res)
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    # Given a first attempt that never completed its fsync (here it raises; a writer
    # that died between write() and fsync is the case): the call raises, nothing queued
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        memory.record_turn(user_id="u", session_id="s", messages=marker("eio"), turn_id="t1")
    assert stream_len(res, "u") == 0
    # When the agent retries (no receipt, so it must), Then the turn found in the file is
    # fsync-ed before its receipt, not appended again, and queued and processed once
    synced: list[str] = []

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    receipt = memory.record_turn(user_id="u", session_id="s", messages=marker("eio"), turn_id="t1")
    assert receipt.already_recorded and receipt.kicked
    assert synced == [str(res.transcript.path(user_id="u", session_id="s"))]
    assert l0_turn_ids(res, "u", "s") == ["t1"]
    assert stream_len(res, "u") == 1
    drain(res, "u")
    assert markers_in_stm(res, "u", "s") == {"mkeio": 1}
