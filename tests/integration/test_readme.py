"""Every ```python block of README.md runs exactly as printed, in order, in one process.

The blocks run in a subprocess whose ``MEMSTRATA_*`` environment points at the test's
Redis namespace, scratch PostgreSQL database and L0 folder, beside a real Celery worker;
between blocks the driver waits until the ingest streams are drained (what an agent's
next turn would find).  The record example's turn must then be in the recall example's
answer: the two snippets join up.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from tests.conftest import REDIS_URL
from tests.integration.conftest import REPO_ROOT, CeleryProcess, process_env
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

DRIVER = r"""
import json, sys, time
from memstrata.core.runtime import get_runtime

def drained():
    rt = get_runtime()
    for shard in range(rt.settings.ingest_shards):
        if rt.redis.exists(rt.queue.keys.ingest_kick(shard)) or rt.queue.backlog(shard) != (0, 0):
            return False
    return True

blocks = json.load(sys.stdin)
scope = {"__name__": "__readme__"}
for i, code in enumerate(blocks):
    exec(compile(code, f"README.md block {i + 1}", "exec"), scope)
    deadline = time.monotonic() + 30
    while not drained():
        if time.monotonic() > deadline:
            sys.exit(f"block {i + 1}: the turn was not drained within 30 s")
        time.sleep(0.05)
out = scope.get("out")
print(json.dumps({"text": getattr(out, "text", None), "names": sorted(scope)}))
"""


def readme_blocks() -> list[str]:
    return BLOCK.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8"))


@pytest.fixture
def settings(namespace: str, tmp_path: Path, lifecycle_pg: str) -> Settings:
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        postgres_url=lifecycle_pg,
        ltm=LtmSettings(enabled=False),
    )


def test_the_readme_has_the_record_and_the_recall_example() -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 2
    assert blocks[0].startswith("from memstrata import Memory\n")
    assert any("memory.recall(" in b for b in blocks)


def test_every_python_block_runs_as_printed_and_recall_finds_the_turn(
    settings: Settings, res: Runtime, celery_worker: CeleryProcess
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], input=json.dumps(readme_blocks()), cwd=REPO_ROOT,
        env=process_env(settings), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + celery_worker.log_tail()
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "The database is not the cause" in result["text"], result
    assert "Don't restart prod" in result["text"], result
