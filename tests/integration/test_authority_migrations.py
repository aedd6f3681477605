"""The authority branch is built from empty by Alembic, matches the models, and goes away."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from memstrata.core import migrations
from memstrata.core.authority.tables import authority_metadata
from tests.integration.authority_db import scratch_database

pytestmark = pytest.mark.integration

TABLES = {
    "tenants",
    "users",
    "user_profiles",
    "user_preferences",
    "projects",
    "workspaces",
    "user_project_roles",
    "agent_settings",
    "stable_memory_facts",
}


def _tables(url: str) -> set[str]:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        eng.dispose()


def test_upgrade_from_empty_builds_every_table_and_downgrade_removes_them() -> None:
    with scratch_database() as url:
        # Given an empty database
        assert migrations.current(url).get("authority") is None
        # When it is upgraded to head
        migrations.upgrade(url)
        # Then every table exists and the version is head
        assert migrations.current(url)["authority"] == migrations.heads()["authority"]
        assert _tables(url) >= TABLES
        # When it is downgraded to base
        migrations.downgrade(url, "base")
        # Then only the (empty) version table is left, and no sequence
        assert migrations.current(url).get("authority") is None
        assert _tables(url) <= {migrations.VERSION_TABLE}
        eng = create_engine(url)
        with eng.connect() as conn:
            seqs = conn.execute(text("SELECT relname FROM pg_class WHERE relkind = 'S'")).all()
        eng.dispose()
        assert seqs == []
        # And upgrading again works (the downgrade left nothing behind)
        migrations.upgrade(url)
        assert _tables(url) >= TABLES


def test_migrated_schema_matches_the_models() -> None:
    with scratch_database() as url:
        migrations.upgrade(url)
        eng = create_engine(url)
        try:
            with eng.connect() as conn:
                ctx = MigrationContext.configure(
                    conn,
                    opts={
                        "compare_type": True,
                        # other branches (LTM ledger, lifecycle audit) share this database
                        "include_name": lambda name, kind, _p: (
                            kind != "table" or name in authority_metadata.tables
                        ),
                    },
                )
                diff = compare_metadata(ctx, authority_metadata)
        finally:
            eng.dispose()
        assert diff == []


def test_unreachable_database_is_a_transient_error() -> None:
    from memstrata.core.authority.errors import AuthorityUnavailable
    from memstrata.core.errors import TransientError

    with pytest.raises(AuthorityUnavailable) as info:
        migrations.current("postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=1")
    assert isinstance(info.value, TransientError)


def test_constraint_names_are_the_documented_ones() -> None:
    with scratch_database() as url:
        migrations.upgrade(url)
        eng = create_engine(url)
        try:
            with eng.connect() as conn:
                checks = set(
                    conn.execute(
                        text(
                            "SELECT conname FROM pg_constraint WHERE contype = 'c'"
                            " AND connamespace = 'public'::regnamespace"
                            " AND conname NOT LIKE 'ck_ltm_%'"
                        )
                    )
                    .scalars()
                    .all()
                )
        finally:
            eng.dispose()
    assert checks == {
        "ck_user_project_roles_scope",
        "ck_stable_memory_facts_domain",
        "ck_stable_memory_facts_origin",
        "ck_stable_memory_facts_interval",
        "ck_stable_memory_facts_key_in_domain",
    }
