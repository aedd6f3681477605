"""How tasks fail, on a real Celery worker: bad input and bugs once, outages with retries.

The retry set of every task is ``core.errors.TransientError`` (``tasks/_options.py``):
* bad input is refused with a typed ``InvalidInput`` before any store is touched, and
  is not retried (never an ``{"error": ...}`` result, never a bare ``ValueError``);
* a PostgreSQL programming error (here: a database without the schema) is a permanent
  ``StoreRejected`` and is not retried (the old ledger map retried it as "unavailable");
* an unreachable PostgreSQL is a transient ``StoreUnavailable`` and is retried.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.settings import Settings, load_settings
from memstrata.tasks._options import (
    COMPRESS,
    DRAIN,
    LIFECYCLE_FINALISE,
    LIFECYCLE_RETRACT,
    LTM_INDEX,
    LTM_RECONCILE,
    SWEEP,
)
from tests.conftest import REDIS_URL
from tests.integration.authority_db import PG_USER, scratch_database
from tests.integration.conftest import CeleryProcess, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """The shared settings, with PostgreSQL either an empty database or a closed port."""
    with contextlib.ExitStack() as stack:
        if getattr(request, "param", "closed") == "empty":
            url = stack.enter_context(scratch_database("memstrata_tasks_"))
        else:
            url = f"postgresql+psycopg://{PG_USER}@127.0.0.1:{free_port()}/nowhere"
        ltm = {}
        if getattr(request, "param", "closed") == "ltm_off":  # and no Milvus anywhere
            ltm = {"ltm": LtmSettings(enabled=False, milvus_uri=f"http://127.0.0.1:{free_port()}")}
        yield load_settings(
            **ltm,
            redis_url=REDIS_URL,
            key_namespace=namespace,
            transcript_dir=tmp_path / "transcripts",
            postgres_url=url,
            postgres_timeout_s=1.0,
        )


def outcome(worker: CeleryProcess, name: str, task_id: str) -> str | None:
    """The worker's log line that ended (or retried) one task, if it has been written."""
    pattern = rf"Task {re.escape(name)}\[{task_id}\] ((?:raised|retry|succeeded).*)"
    found = re.search(pattern, worker.log())
    return found.group(1) if found else None


BAD_INPUT: dict[str, tuple[str, list[Any], dict[str, Any], str, str]] = {
    # case: (task, args, kwargs, error type, what the message says)
    "fact retraction without its owner": (
        LIFECYCLE_RETRACT, [], {"kind": "fact", "target": "profile.language"}, "InvalidInput",
        "RetractInput: payload: Value error, kind must be 'card', or 'fact' with tenant_id and "
        "user_id",
    ),
    "unknown retraction kind": (
        LIFECYCLE_RETRACT, [], {"kind": "nope", "target": "x"}, "InvalidInput",
        "RetractInput: kind: Input should be 'card' or 'fact'",
    ),
    "unsafe user id": (
        COMPRESS, ["bad id!", "s1"], {}, "InvalidId", "CompressRequest.user_id: invalid id",
    ),
    "path in a session id": (
        LIFECYCLE_FINALISE, ["u1", ".."], {}, "InvalidId", "SessionInput.session_id: invalid id",
    ),
    "limit that is not a number": (
        SWEEP, [], {"max_items": "many"}, "InvalidInput",
        "BatchLimit: limit: Input should be a valid integer",
    ),
    "no card ids": (
        LTM_INDEX, [[]], {}, "InvalidInput", "CardIds: memory_ids: List should have at least 1",
    ),
    "shard as a string": (
        DRAIN, ["0"], {}, "InvalidInput", "DrainInput: shard: Value error, shard must be an int",
    ),
}  # fmt: skip


def test_bad_input_fails_once_with_a_typed_error_and_is_not_retried(
    producer: Celery, celery_worker: CeleryProcess
) -> None:
    # When each task gets a payload it cannot accept
    sent = {
        case: (name, producer.send_task(name, args=args, kwargs=kwargs).id, error, message)
        for case, (name, args, kwargs, error, message) in BAD_INPUT.items()
    }
    wait_until(
        lambda: all(outcome(celery_worker, n, tid) for n, tid, _e, _m in sent.values()),
        "every task to finish",
        worker=celery_worker,
    )
    # Then each one failed with the typed error naming the field, and none was retried
    for case, (name, task_id, error, message) in sent.items():
        line = outcome(celery_worker, name, task_id)
        assert line is not None and line.startswith(f"raised unexpected: {error}("), (case, line)
        assert message in line, (case, line)
        assert celery_worker.succeeded(name) == 0, case
    assert "Retry in" not in celery_worker.log()


@pytest.mark.parametrize("settings", ["empty"], indirect=True)
def test_a_postgres_programming_error_fails_once_and_is_not_retried(
    producer: Celery, celery_worker: CeleryProcess
) -> None:
    # Given a database without the lifecycle schema (no ``ltm_cards``, no ``lifecycle_audit``)
    # When a retraction has to read the card (whose owner's lock to take) and its audit
    task_id = producer.send_task(LIFECYCLE_RETRACT, kwargs={"kind": "card", "target": "c1"}).id
    wait_until(
        lambda: outcome(celery_worker, LIFECYCLE_RETRACT, task_id) is not None,
        "the retraction to finish",
        worker=celery_worker,
    )
    # Then it fails permanently, naming the SQL error, and is not retried
    line = outcome(celery_worker, LIFECYCLE_RETRACT, task_id)
    assert line is not None and line.startswith("raised unexpected: StoreRejected("), line
    assert 'relation "ltm_cards" does not exist' in line
    assert "Retry in" not in celery_worker.log()


def test_an_unreachable_postgres_is_retried(producer: Celery, celery_worker: CeleryProcess) -> None:
    # Given PostgreSQL on a closed port, When the same retraction runs
    task_id = producer.send_task(LIFECYCLE_RETRACT, kwargs={"kind": "card", "target": "c1"}).id
    wait_until(
        lambda: outcome(celery_worker, LIFECYCLE_RETRACT, task_id) is not None,
        "the retraction to be retried",
        worker=celery_worker,
    )
    # Then the worker retries it with backoff (a transient StoreUnavailable)
    line = outcome(celery_worker, LIFECYCLE_RETRACT, task_id)
    assert line is not None and line.startswith("retry: Retry in "), line
    assert "StoreUnavailable(" in line


@pytest.mark.parametrize("settings", ["ltm_off"], indirect=True)
def test_the_ltm_reconciler_does_nothing_when_ltm_is_off(
    producer: Celery, celery_worker: CeleryProcess
) -> None:
    # Given long-term memory switched off (and no Milvus listening)
    # When Beat's reconciler runs
    task_id = producer.send_task(LTM_RECONCILE).id
    wait_until(
        lambda: outcome(celery_worker, LTM_RECONCILE, task_id) is not None,
        "the reconciler to finish",
        worker=celery_worker,
    )
    # Then it succeeds at once without reaching for Milvus (it used to retry for 5 s a try)
    line = outcome(celery_worker, LTM_RECONCILE, task_id)
    assert line is not None and line.startswith("succeeded"), line
    assert "'disabled': 1" in line
    assert "Retry in" not in celery_worker.log()
