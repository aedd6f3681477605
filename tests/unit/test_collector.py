"""A worker's garbage-collector schedule (core/collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from memstrata.core.collector import tune_collector
from memstrata.core.settings import Settings


@pytest.fixture
def collector_state() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector_state")
def test_a_worker_collects_generation_0_less_often_and_freezes_what_it_built() -> None:
    gc.unfreeze()
    built_at_start = [{"kept": i} for i in range(100)]  # tracked containers alive now
    tune_collector(50_000)
    assert gc.get_threshold()[0] == 50_000
    assert gc.get_freeze_count() >= len(built_at_start)


@pytest.mark.usefixtures("collector_state")
def test_threshold_0_leaves_the_schedule_as_it_is() -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    tune_collector(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_default_and_its_bounds() -> None:
    assert Settings().gc_threshold == 50_000
    with pytest.raises(ValueError, match="gc_threshold"):
        Settings(gc_threshold=-1)


@pytest.mark.usefixtures("collector_state")
def test_only_memstratas_own_worker_changes_the_collector() -> None:
    """Celery's signals are process-wide: a user's worker importing the tasks module keeps
    its collector as it is; memstrata's freezes its start-up heap before forking."""
    from types import SimpleNamespace

    from memstrata.tasks import app as tasks_app

    gc.unfreeze()
    try:
        tasks_app._worker_started(sender=SimpleNamespace(app=object()))
        assert tasks_app._ours is False
        assert gc.get_freeze_count() == 0
        tasks_app._worker_started(sender=SimpleNamespace(app=tasks_app.app))
        assert tasks_app._ours is True
        assert gc.get_freeze_count() > 0
    finally:
        tasks_app._ours = False
