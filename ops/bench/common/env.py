"""Where one benchmark run happens: its Redis and key namespace, its environment
variables and its scratch folder, all removed or restored afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[3]


def redis_url() -> str:
    return os.environ.get("MEMSTRATA_REDIS_URL", "redis://127.0.0.1:6379/0")


def new_namespace(prefix: str = "bench") -> str:
    """A key namespace no other run (tests, demo, other benches) uses."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def purge(client: redis.Redis, namespace: str) -> int:
    """Delete every key of a namespace (STM, ingest streams, Celery queues)."""
    n = 0
    batch: list[str] = []
    for key in client.scan_iter(match=f"{namespace}:*", count=2000):
        batch.append(key)
        if len(batch) >= 1000:
            n += int(client.unlink(*batch))
            batch = []
    if batch:
        n += int(client.unlink(*batch))
    return n


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder under the system temp dir, removed afterwards."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def patched_env(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a run (children inherit them)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
