"""The Beat schedule as data, and the expire sweep it drives, run by a real worker and Beat."""

from __future__ import annotations

import fnmatch
import time
from datetime import timedelta
from typing import Any, cast

import pytest
from celery import Celery

from memstrata.core.api import MemoryClient
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.tasks._options import SWEEP
from memstrata.tasks.app import QUEUES, app, celery_config
from tests.integration.conftest import CeleryProcess, user_state, wait_drained, wait_until
from tests.integration.test_celery_ingest import EN_ITEMS, EN_TURN, ZH_ITEMS, ZH_TURN

pytestmark = pytest.mark.integration

DAY = 24 * 3600.0


def _seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    return float(value.run_every.total_seconds())  # a celery.schedules.schedule


@pytest.mark.parametrize("sweep_interval_s", [1.0, 60.0, 3600.0])
def test_every_beat_entry_names_a_registered_task_on_a_valid_queue(
    sweep_interval_s: float,
) -> None:
    # Given the app with its task modules loaded, and the schedule for these settings
    app.loader.import_default_modules()
    config = celery_config(load_settings(sweep_interval_s=sweep_interval_s))
    schedule = config["beat_schedule"]
    routes = config["task_routes"]
    assert schedule, "the schedule is empty"
    for name, entry in schedule.items():
        # Then each entry names a registered task ...
        assert entry["task"] in app.tasks, f"{name}: {entry['task']} is not registered"
        # ... goes to a queue the workers consume, the one its routes also pick ...
        queue = entry["options"]["queue"]
        assert queue in QUEUES, f"{name}: unknown queue {queue!r}"
        routed = [r["queue"] for pat, r in routes.items() if fnmatch.fnmatch(entry["task"], pat)]
        assert routed == [queue], f"{name}: routed to {routed}, scheduled on {queue}"
        # ... and expires before its next run, so a backlog never runs a stale copy
        interval = _seconds(entry["schedule"])
        expires = float(entry["options"]["expires"])
        assert 0 < expires < interval, f"{name}: expires {expires}s, interval {interval}s"
    sweep = next(e for e in schedule.values() if e["task"] == SWEEP)
    assert _seconds(sweep["schedule"]) == sweep_interval_s


def _record(memory: MemoryClient, user_id: str, turn: list[dict[str, Any]], at: float) -> int:
    receipt = memory.record_turn(
        user_id=user_id, session_id="s_1", task_id="bug456", messages=turn, at=at
    )
    return receipt.shard


def _summaries(res: Runtime, user_id: str) -> set[tuple[str, str, int]]:
    items = res.stm.by_session(user_id, "s_1", limit=100)
    return {(i.memory_type.value, i.summary, i.version) for i in items}


def _given_an_expired_and_a_fresh_user(
    res: Runtime, memory: MemoryClient, worker: CeleryProcess
) -> dict[str, Any]:
    """u_old's turn happened 40 days ago (past every TTL), u_new's just now."""
    now = time.time()
    for shard in {
        _record(memory, "u_old", EN_TURN, now - 40 * DAY),
        _record(memory, "u_new", ZH_TURN, now),
    }:
        wait_drained(res, shard, worker)
    assert _summaries(res, "u_old") == EN_ITEMS  # written, already past their expiry
    assert res.stm.by_session("u_old", "s_1", now=now) == []
    assert _summaries(res, "u_new") == ZH_ITEMS
    return user_state(res, "u_new")


def _then_only_the_expired_user_is_gone(res: Runtime, fresh_before: dict[str, Any]) -> None:
    # every item, index entry and dedup map entry of u_old is gone ...
    assert user_state(res, "u_old", decisions=False) == {}
    # ... while the "why (not) stored" record keeps its own TTL for explanations
    assert res.redis.exists(res.stm.keys("u_old").decisions("s_1"))
    # ... u_new is untouched, and the sweep hint only holds u_new, due at its next expiry
    assert user_state(res, "u_new") == fresh_before
    hinted = res.redis.zrange(res.stm.gkeys.sweep_users, 0, -1, withscores=True)
    hint = dict(cast(list[tuple[str, float]], hinted))
    # (hint members are owner scopes: no tenant is the default tenant)
    assert list(hint) == ["default/u_new"] and hint["default/u_new"] > time.time()


def test_sweep_task_removes_expired_items_from_every_index(
    res: Runtime, memory: MemoryClient, producer: Celery, celery_worker: CeleryProcess
) -> None:
    fresh_before = _given_an_expired_and_a_fresh_user(res, memory, celery_worker)
    # When the maintenance task runs once
    producer.send_task(SWEEP)
    expected = f"sweep {{'removed': {len(EN_ITEMS)}, 'users': 1}}"
    wait_until(
        lambda: expected in celery_worker.log(),
        f"the sweep to report {len(EN_ITEMS)} removals",
        worker=celery_worker,
    )
    _then_only_the_expired_user_is_gone(res, fresh_before)


def test_beat_drives_the_sweep_on_its_interval(
    res: Runtime, memory: MemoryClient, celery_worker: CeleryProcess, start_beat: Any
) -> None:
    fresh_before = _given_an_expired_and_a_fresh_user(res, memory, celery_worker)
    # When Beat runs with a one-second sweep interval
    beat = start_beat({"MEMSTRATA_SWEEP_INTERVAL_S": "1"})
    # Then a sweep is sent, a worker runs it, and the expired user is gone from STM
    wait_until(
        lambda: user_state(res, "u_old", decisions=False) == {},
        "Beat's sweep to remove the expired items",
        worker=celery_worker,
    )
    assert "Sending due task sweep-expired-stm (memstrata.maintenance.sweep_expired)" in beat.log()
    _then_only_the_expired_user_is_gone(res, fresh_before)
