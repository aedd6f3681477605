"""Beat's promotion scan through a real PostgreSQL outage: retried, then resumed.

A real worker and Beat (scan every second) run against a throwaway PostgreSQL cluster
that the test stops and starts again (the shared 5432 is never touched).  While it is
down the scan's path-A promotion raises a transient ``StoreUnavailable``, which the
worker retries with backoff (the task options' retry set is ``TransientError``); once it
is back, the preference said in two sessions reaches PostgreSQL without anyone resending
anything.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memstrata.core.authority.admin import create_tenant, create_user
from memstrata.core.authority.db import make_engine
from memstrata.core.authority.facts import fact_history
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.tasks._options import LIFECYCLE_SCAN
from tests.conftest import REDIS_URL
from tests.integration.conftest import CeleryProcess, wait_until
from tests.integration.pg_cluster import PgCluster, migrated_cluster
from tests.integration.test_lifecycle_env import say

pytestmark = pytest.mark.integration

PREF = "我喜欢先说结论再讲细节。"
SCAN_EVERY_S = {"MEMSTRATA_LIFECYCLE__SCAN_INTERVAL_S": "1"}


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    with migrated_cluster() as c:
        yield c


@pytest.fixture
def settings(namespace: str, tmp_path: Path, cluster: PgCluster) -> Settings:
    """The conftest settings, on the throwaway cluster (short connect timeout)."""
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        postgres_url=cluster.url("memstrata"),
        postgres_timeout_s=1.0,
        ltm=LtmSettings(history_enabled=False),
    )


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    eng = make_engine(settings.postgres_url, connect_timeout_s=1.0)
    yield eng
    eng.dispose()


def scan_lines(worker: CeleryProcess, outcome: str) -> list[str]:
    pattern = rf"Task {re.escape(LIFECYCLE_SCAN)}\[[^\]]+\] {outcome}.*"
    return re.findall(pattern, worker.log())


def test_the_promotion_scan_retries_a_postgres_outage_and_promotes_once_it_is_back(
    res: Runtime, engine: Engine, cluster: PgCluster, celery_worker: CeleryProcess,
    start_beat: Callable[[Mapping[str, str]], CeleryProcess],
) -> None:  # fmt: skip
    # Given a preference said in two sessions (ingest needs no PostgreSQL)
    tenant, user = f"t{uuid.uuid4().hex[:10]}", "alice"
    with engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": tenant, "name": "Acme"})
        create_user(db=conn, user={"tenant_id": tenant, "id": user})
    now = time.time()
    for n, session in enumerate(("s1", "s2")):
        say(res, user, tenant, session, PREF, at=now + n)
    # When PostgreSQL goes down and Beat runs the scan
    cluster.stop()
    start_beat(SCAN_EVERY_S)
    wait_until(lambda: bool(scan_lines(celery_worker, "retry: Retry in")),
               "the scan to be retried", timeout_s=60, worker=celery_worker)  # fmt: skip
    # Then the scan fails with a transient, typed error that the worker retries
    retry = scan_lines(celery_worker, "retry: Retry in")[0]
    assert "StoreUnavailable('promote fact: PostgreSQL unavailable" in retry, retry

    # When PostgreSQL is back
    cluster.start()

    def promoted() -> bool:
        with engine.connect() as conn:
            facts = fact_history(db=conn, tenant_id=tenant, user_id=user,
                                 canonical_fact_key="profile.answer_style")  # fmt: skip
        return bool(facts)

    # Then a retry (or the next Beat run) resumes the scan and the preference is promoted
    wait_until(promoted, "the preference to reach PostgreSQL", timeout_s=60, interval_s=0.5,
               worker=celery_worker)  # fmt: skip
    wait_until(lambda: bool(scan_lines(celery_worker, "succeeded")), "a scan to succeed",
               worker=celery_worker)  # fmt: skip
