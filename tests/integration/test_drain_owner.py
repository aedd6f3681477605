"""A failing drain says whom it hit: the drain a turn kicks carries that turn's owner
(ids only) as its kwargs, so Flower's task page (built from the worker's task events)
and the task's log line name the tenant and user, not just a shard number."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from memstrata.core.api import MemoryClient
from memstrata.core.ids import user_key
from memstrata.core.models.transcript import MessageIn
from memstrata.core.runtime import Runtime
from memstrata.tasks._options import DRAIN
from tests.integration.conftest import AppKicker, start_celery, wait_until

pytestmark = pytest.mark.integration


def test_a_failing_drain_names_the_owner_in_its_task_args_and_log(
    res: Runtime, producer: Celery, tmp_path: Path
) -> None:
    # Given a worker configured with fewer shards than the producer (a real misconfiguration:
    # its drains of the other shards fail), and a receiver of its task events (Flower's)
    assert res.settings.ingest_shards > 1
    events: dict[str, list[dict[str, Any]]] = {"task-received": [], "task-failed": []}
    stop = threading.Event()

    ready = threading.Event()

    def capture() -> None:
        with producer.connection_for_read() as conn:
            recv = producer.events.Receiver(conn, handlers={
                name: (lambda e, n=name: events[n].append(e)) for name in events})  # fmt: skip
            ready.set()  # the worker takes seconds to boot: the queue is bound by then
            for _ in recv.consume(limit=None, timeout=None, wakeup=True):
                if stop.is_set():  # (a daemon thread: it ends with the next event or pytest)
                    return

    listener = threading.Thread(target=capture, daemon=True)
    listener.start()
    assert ready.wait(30)
    worker = start_celery(
        "worker",
        ["-Q", "ingest", "-P", "solo", "-n", f"w-{res.settings.key_namespace}@%h",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        settings=res.settings, log_path=tmp_path / "worker.log",
        env={"MEMSTRATA_INGEST_SHARDS": "1"},
    )  # fmt: skip
    try:
        worker.wait_for_log(" ready.")
        memory = MemoryClient(transcript=res.transcript, queue=res.queue,
                              kicker=AppKicker(producer))  # fmt: skip
        # When turns of several users are recorded (some land on shards the worker refuses)
        hit = {}
        for n in range(12):  # safe ids and mapped ones (an e-mail address becomes ~base32)
            user = f"u_{n}" if n % 2 else user_key(f"u{n}@example.com")
            receipt = memory.record_turn(
                tenant_id="acme", user_id=user, session_id="s1",
                messages=[MessageIn(role="user", content=f"my locker code is {n}")],
            )  # fmt: skip
            if receipt.shard > 0 and receipt.kicked:
                hit[user] = receipt.shard
        assert hit, "no turn landed on a refused shard"
        wait_until(lambda: len(events["task-failed"]) >= len(hit), "the drains to fail",
                   worker=worker)  # fmt: skip
    finally:
        stop.set()
        worker.stop()
        listener.join(1)
    # Then every failed drain's task-received event (what Flower shows as args/kwargs)
    # names the tenant and user whose turn kicked it, and no content
    failed = {e["uuid"] for e in events["task-failed"]}
    received = [e for e in events["task-received"] if e["uuid"] in failed]
    assert {e["name"] for e in received} == {DRAIN}
    shown = {}
    for e in received:
        kwargs = ast.literal_eval(e["kwargs"])
        shown[kwargs["user_id"]] = (kwargs["tenant_id"], ast.literal_eval(e["args"])[0])
        assert "locker" not in e["kwargs"] + e["args"]
    assert shown == {user: ("acme", shard) for user, shard in hit.items()}
    assert all("InvalidInput" in e["exception"] for e in events["task-failed"])
    # And the worker's one line per outcome names them too
    log = worker.log()
    for user in hit:
        assert f"tenant_id=acme user_id={user}" in log, log[-3000:]
