"""memstrata.ops.procs.Supervisor: what ``memstrata up`` does when a worker, Beat or Flower dies."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from memstrata.ops.procs import Child, Supervisor
from tests.unit.test_compose import APP, FILES, ROOT


def _wait_exit(child: Child) -> None:
    for _ in range(200):  # bounded: at most 10 s
        if child.exit_code() is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"{child.name} did not exit")


def test_dead_child_is_restarted_with_backoff_then_given_up(tmp_path: Path) -> None:
    child = Child("worker", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], {},
                  tmp_path / "worker.log")  # fmt: skip
    sup = Supervisor([child], max_restarts=2, window_s=100.0, backoff_s=1.0)
    child.start()
    _wait_exit(child)
    first = child.pid
    assert sup.poll(0.0) is None and sup.due == {"worker": 1.0}  # restart 1 due in 1 s
    assert sup.poll(0.5) is None and child.pid == first  # backoff not over yet
    assert sup.poll(1.0) is None and child.pid != first  # restarted
    _wait_exit(child)
    assert sup.poll(2.0) is None and sup.due == {"worker": 4.0}  # backoff doubled
    assert sup.poll(4.0) is None
    _wait_exit(child)
    assert sup.poll(5.0) is child  # two restarts used up in the window: give up
    assert child.log_path.read_text().count("boom") == 3
    child.stop()


def test_live_child_is_left_alone(tmp_path: Path) -> None:
    child = Child("beat", [sys.executable, "-c", "import time; time.sleep(30)"], {},
                  tmp_path / "beat.log")  # fmt: skip
    child.start()
    try:
        sup = Supervisor([child])
        assert sup.poll(0.0) is None and sup.due == {} and child.exit_code() is None
    finally:
        child.stop(timeout_s=5)


@pytest.mark.parametrize("name", sorted(FILES))
def test_compose_restarts_every_long_running_role(name: str) -> None:
    """The compose equivalent of the Supervisor (D1): a dead worker, Beat or Flower comes back.

    Read from the YAML itself (merge keys resolved), so no compose tool is needed."""
    services = yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))["services"]
    for role in APP - {"migrate"}:  # migrate is one-shot (restart: "no", checked there)
        assert services[role].get("restart") in {"unless-stopped", "always"}, (name, role)
