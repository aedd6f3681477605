"""Shared fixtures: real Redis on 127.0.0.1:6379, one fresh key namespace per test.

Every test gets its own namespace (and so its own STM keys, ingest streams and Celery
queues), and its keys are deleted afterwards, so tests can run beside the demo or a
second test run on the same Redis.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings

REDIS_URL = os.environ.get("MEMSTRATA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _purge(client: redis.Redis, namespace: str) -> None:
    for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        client.delete(key)


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(namespace: str, tmp_path: Path) -> Settings:
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        # no Milvus unless a test starts one: drains must not queue raw-history indexing
        ltm=LtmSettings(history_enabled=False),
    )


@pytest.fixture
def res(settings: Settings) -> Iterator[Runtime]:
    resources = Runtime(settings)
    try:
        resources.redis.ping()
    except redis.ConnectionError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"Redis not reachable at {REDIS_URL}: {exc}")
    yield resources
    _purge(resources.redis, settings.key_namespace)
    resources.close()


UNIT_TIMEOUT_S = 30  # the slowest unit test (an embedding model load) takes ~2 s


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit tests get a short timeout; integration tests keep the ini's (real services)."""
    unit = Path(__file__).parent / "unit"
    for item in items:
        if item.path.is_relative_to(unit) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))
