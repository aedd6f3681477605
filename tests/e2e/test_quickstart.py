"""The quickstart flow (DESIGN §7), bounded: ``memstrata migrate``, then the bundled demo.

``bash ops/quickstart.sh`` sets the machine up and runs ``memstrata up``, which migrates
PostgreSQL and feeds the two demo sessions through the workers.  This test types the same
commands a user would on a machine that is set up, through the ``memstrata`` console
script, but self-contained and bounded: its own key namespace and L0 folder, a scratch
PostgreSQL database, its own milvus-lite server, and ``demo --inline`` (the queue drained
in the command's own process, no worker).  It checks what the README promises the user
sees: what ended up in short-term memory, what was refused and why, and the memory block
``recall()`` builds for each follow-up question.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import inspect, select

from memstrata.core import migrations
from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.lifecycle.audit import audit_table
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.models.candidate import Verdict
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings
from memstrata.ops.demo_run import DEMO_TENANT, FOLLOW_UPS, DemoSession, load_sessions
from tests.conftest import _purge
from tests.integration.authority_db import scratch_database
from tests.integration.conftest import REPO_ROOT, process_env

pytestmark = pytest.mark.integration

MEMSTRATA = Path(sys.executable).with_name("memstrata")  # what `pip install -e .` puts there
COMMAND_TIMEOUT_S = 60.0
# what the demo sessions are written to show being refused (ops/demo/README.md)
REFUSALS = (
    "raw unstructured text",
    "unverified guess",
    "chit-chat carries no task state",
    "duplicate of a fact already in STM",
)


@pytest.fixture
def quickstart(settings: Settings, tmp_path: Path) -> Iterator[Runtime]:
    """The test's settings on a scratch database and a milvus-lite server of its own, and a
    runtime on them to look at the stores the commands wrote."""
    server = MilvusServer(tmp_path / "milvus" / "ltm.db", f"127.0.0.1:{free_port()}")
    server.start()
    try:
        with scratch_database("memstrata_e2e_") as pg_url:
            ltm = settings.ltm.model_copy(
                update={"milvus_uri": server.uri, "collection_prefix": settings.key_namespace}
            )
            res = Runtime(settings.model_copy(update={"postgres_url": pg_url, "ltm": ltm}))
            try:
                yield res
            finally:
                res.close()
    finally:
        server.stop()
        client = redis.Redis.from_url(str(settings.redis_url), decode_responses=True)
        _purge(client, settings.key_namespace)
        client.close()


def memstrata(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    assert MEMSTRATA.is_file(), f"no console script at {MEMSTRATA}: pip install -e ."
    proc = subprocess.run(
        [str(MEMSTRATA), *args], cwd=REPO_ROOT, env=process_env(settings), capture_output=True,
        text=True, timeout=COMMAND_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_migrate_then_the_demo_shows_what_was_stored_refused_and_recalled(
    quickstart: Runtime,
) -> None:
    res, settings = quickstart, quickstart.settings
    card = f"ltm_{uuid.uuid4().hex[:12]}"
    # Given an empty database, a retraction cannot even read its tables (the control)
    before = memstrata(settings, "retract", "card", card)
    assert before.returncode == 1
    assert "no LTM card" not in before.stderr

    # When the user migrates
    migrate = memstrata(settings, "migrate")
    # Then every branch goes from empty to its head, and every declared table exists
    assert migrate.returncode == 0, migrate.stderr
    heads = migrations.current(settings.postgres_url)
    assert migrate.stdout.splitlines() == [
        f"{branch}: empty → {heads[branch]}" for branch in migrations.BRANCHES
    ]
    tables = set(inspect(res.engine).get_table_names())
    assert {t for md in migrations.declared_metadata() for t in md.tables} <= tables

    # And a retraction of what does not exist is a clean, typed error, no SQL in it
    missing_card = memstrata(settings, "retract", "card", card)
    assert (missing_card.returncode, missing_card.stdout) == (1, "")
    assert missing_card.stderr == f"memstrata retract: no LTM card {card}\n"
    missing_tenant = memstrata(
        settings, "retract", "fact", "profile.answer_style", "--tenant", "nope", "--user", "nobody"
    )
    assert (missing_tenant.returncode, missing_tenant.stdout) == (1, "")
    assert missing_tenant.stderr == "memstrata retract: no tenant 'nope'\n"

    # When the user runs the bundled demo
    demo = memstrata(settings, "demo", "--inline")
    # Then every turn is processed and nothing was dead-lettered
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    sessions = load_sessions()
    lines = demo.stdout.splitlines()
    assert lines[0] == f"Feeding {len(sessions)} demo session(s) through record_turn() …"
    assert re.fullmatch(r"All turns processed in this process after \d+ ms\.", lines[1])
    assert "Dead-lettered" not in demo.stdout
    sections = demo.stdout.split("\n=== ")[1:]
    assert len(sections) == len(sessions)
    for session, section in zip(sessions, sections, strict=True):
        stored, recalled = section.split(f"\n--- recall() for {session.name} ---\n")
        _check_session_report(res, session, stored)
        _check_recall_report(res, session, recalled)

    # And the demo users now exist, so a retraction goes through and is audited
    fact = ["retract", "fact", "profile.answer_style", "--tenant", DEMO_TENANT, "--user", "demo-en"]
    first, again = memstrata(settings, *fact), memstrata(settings, *fact)
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    assert first.stdout.startswith("fact profile.answer_style: retracted;")
    assert again.stdout.startswith("fact profile.answer_style: already not current;")
    with res.engine.connect() as conn:
        rows = conn.execute(
            select(audit_table.c.action, audit_table.c.reason).where(
                audit_table.c.tenant_id == DEMO_TENANT,
                audit_table.c.target == "profile.answer_style",
            )
        ).all()
    assert [tuple(r) for r in rows] == [("retract", "retracted from the CLI")] * 2


def _check_session_report(res: Runtime, session: DemoSession, text: str) -> None:
    """The session's counts are what STM and the decision log hold; refusals give a why."""
    user, sid = session.user_id, session.session_id
    assert text.startswith(f"{session.name}: user {user}, session {sid} ===\n")
    assert f"\n{len(session.turns)} turns recorded; " in text
    decisions = read_decisions(res, user, sid, tenant_id=DEMO_TENANT)
    refused = [d for d in decisions if d.verdict is Verdict.REFUSED]
    items = res.stm.by_session(user, sid, limit=res.settings.stm_session_cap, tenant_id=DEMO_TENANT)
    assert refused and items
    judged = f"{len(decisions)} candidates judged: {len(decisions) - len(refused)} written, "
    assert f"\n{judged}{len(refused)} refused\n" in text
    assert f"\nIn short-term memory ({len(items)} items, newest first):\n" in text
    for item in items:
        assert _one_line(item.summary)[:100] in text, item.summary
    refusals = text.split(f"\nRefused ({len(refused)}), with the reason:\n")[1]
    assert refusals.count("\n      why: ") == len(refused)
    for reason in REFUSALS:
        assert f"why: {reason}" in refusals, reason


def _check_recall_report(res: Runtime, session: DemoSession, text: str) -> None:
    """Each follow-up question gets a memory block: the profile from PostgreSQL, and for
    the debugging question the session's own STM items, the excluded cause among them."""
    lang = session.name.split("_", 1)[0]
    asked = text.split("\nQ: ")[1:]
    assert [a.split("\n", 1)[0] for a in asked] == FOLLOW_UPS[lang]
    debugging = asked[0]
    for answer in asked:
        route = answer.split("\n")[1]
        assert re.fullmatch(r"   route: [A-Za-z +]+; [\d.]+ ms", route), route
        assert "prod-k8s" in answer  # the demo project's default environment, from PG
        assert "(nothing to inject)" not in answer
    items = res.stm.by_session(
        session.user_id, session.session_id, limit=res.settings.stm_session_cap,
        tenant_id=DEMO_TENANT,
    )  # fmt: skip
    excluded = [_one_line(i.summary)[:60] for i in items if i.subtype == "excluded_cause"]
    assert excluded and all(summary in debugging for summary in excluded), excluded
    assert "Redis" in debugging.split("\n")[1]  # the question about the task reads STM


def _one_line(text: str) -> str:
    return " ".join(text.split())
