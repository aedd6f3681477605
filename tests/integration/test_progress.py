"""Long operator commands draw a progress bar (count, rate, ETA) on a terminal only:
``erase`` on a pseudo-terminal shows one, the same command piped or with ``--json``
prints nothing but its output.  (``ltm reindex``: tests/integration/test_long_jobs.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.core import migrations
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.settings import load_settings
from tests.conftest import REDIS_URL
from tests.integration.authority_db import scratch_database
from tests.integration.conftest import REPO_ROOT, process_env
from tests.integration.terminal import run_on_pty

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def migrated_pg() -> Iterator[str]:
    with scratch_database("memstrata_progress_") as url:
        migrations.upgrade(url)
        yield url


def test_erase_shows_progress_on_a_terminal_and_is_quiet_otherwise(
    migrated_pg: str, tmp_path: Path
) -> None:
    settings = load_settings(redis_url=REDIS_URL, key_namespace=f"t{uuid.uuid4().hex[:10]}",
                             transcript_dir=tmp_path / "l0", postgres_url=migrated_pg,
                             ltm=LtmSettings(enabled=False))  # fmt: skip
    env = process_env(settings)
    argv = [sys.executable, "-m", "memstrata.ops.cli", "erase", "--tenant", "acme",
            "--user", "nobody", "--yes"]  # fmt: skip
    code, out, drawn = run_on_pty(argv, env)
    assert code == 0, drawn
    # a tqdm bar: description, done/total of the erase's six steps, the unit and a rate
    assert "erase" in drawn and "6/6" in drawn and "step/s" in drawn, drawn
    assert "finished" in out
    # piped stderr (no terminal): the plan --yes confirms, but no bar
    piped = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=180, stdin=subprocess.DEVNULL)  # fmt: skip
    assert piped.returncode == 0 and "finished" in piped.stdout
    assert "6/6" not in piped.stderr and "\r" not in piped.stderr, piped.stderr
    # --json on a terminal: nothing drawn beyond the plan, one JSON object out
    code, out, drawn = run_on_pty([*argv, "--json"], env)
    assert code == 0 and json.loads(out)["finished"] is True
    assert "6/6" not in drawn and "step/s" not in drawn, drawn
