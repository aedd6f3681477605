"""One Alembic env, one version table, one branch per component, on real PostgreSQL.

`memstrata migrate` on an empty database builds every table the code declares (and only
those), `downgrade` to base leaves none, a database of the earlier layout (two version
tables) is adopted, and a run that applies nothing raises instead of reporting success.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, text

from memstrata.core import migrations
from memstrata.core.migrations import MigrationError
from memstrata.ops.cli import main
from tests.integration.authority_db import scratch_database

pytestmark = pytest.mark.integration

OLD_AUTHORITY_TABLE, OLD_LIFECYCLE_TABLE = migrations.LEGACY_VERSION_TABLES


@pytest.fixture
def url() -> Iterator[str]:
    with scratch_database("memstrata_mig_") as u:
        yield u


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    eng = create_engine(url)
    yield eng
    eng.dispose()


def declared_columns() -> dict[str, dict[str, bool]]:
    """Every table the code's metadata declares: column name -> nullable."""
    return {
        name: {c.name: bool(c.nullable) for c in table.columns}
        for md in migrations.declared_metadata()
        for name, table in md.tables.items()
    }


def migrated_columns(engine: Engine) -> dict[str, dict[str, bool]]:
    insp = inspect(engine)
    return {
        t: {c["name"]: bool(c["nullable"]) for c in insp.get_columns(t)}
        for t in insp.get_table_names()
        if t != migrations.VERSION_TABLE
    }


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def versions(engine: Engine, table: str = migrations.VERSION_TABLE) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text(f"SELECT version_num FROM {table}")).scalars())


def to_old_layout(engine: Engine) -> None:
    """Rewrite the version record the way the earlier layout kept it.

    Authority and LTM heads in ``authority_alembic_version``, the lifecycle head (when
    migrated) in ``lifecycle_alembic_version``, each table as Alembic creates it; no
    ``memstrata_alembic_version``.  The ``store`` branch came after that layout: its
    table and revision are removed.
    """
    with engine.begin() as conn:
        all_revs = conn.execute(text(f"SELECT version_num FROM {migrations.VERSION_TABLE}"))
        revs = [(str(r),) for (r,) in all_revs if not str(r).startswith("store_")]
        conn.execute(text("DROP TABLE IF EXISTS agent_store_items"))
        conn.execute(text(f"DROP TABLE {migrations.VERSION_TABLE}"))
        for table, keep in (
            (OLD_AUTHORITY_TABLE, lambda r: not r.startswith("lifecycle_")),
            (OLD_LIFECYCLE_TABLE, lambda r: r.startswith("lifecycle_")),
        ):
            mine = [r for (r,) in revs if keep(r)]
            if not mine:
                continue
            conn.execute(text(
                f"CREATE TABLE {table} (version_num VARCHAR(32) NOT NULL,"
                f" CONSTRAINT {table}_pkc PRIMARY KEY (version_num))"))  # fmt: skip
            for r in mine:
                conn.execute(text(f"INSERT INTO {table} VALUES (:r)"), {"r": r})


# ------------------------------------------------------------------ from empty, to empty
def test_migrate_builds_exactly_the_tables_and_columns_the_code_declares(
    url: str, engine: Engine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an empty database, when `memstrata migrate` runs
    monkeypatch.setenv("MEMSTRATA_POSTGRES_URL", url)
    assert main(["migrate"]) == 0
    # Then it reports every branch from empty to its head
    heads = migrations.heads()
    assert set(heads) == {"authority", "ltm", "lifecycle", "store"}
    assert capsys.readouterr().out.splitlines() == [
        f"{b}: empty → {heads[b]}" for b in migrations.BRANCHES
    ]
    # And the tables and columns are exactly those of the code's metadata, in one table
    # of versions that records each branch's head
    assert migrated_columns(engine) == declared_columns()
    assert tables(engine) - set(declared_columns()) == {migrations.VERSION_TABLE}
    assert versions(engine) == set(heads.values())
    assert migrations.current(url) == heads
    # And types, indexes, keys and constraints match each metadata (on its own tables) too
    with engine.connect() as conn:
        for md in migrations.declared_metadata():
            ctx = MigrationContext.configure(conn, opts={
                "compare_type": True,
                "include_name": lambda name, kind, _p, md=md: kind != "table" or name in md.tables,
            })  # fmt: skip
            assert (sorted(md.tables), compare_metadata(ctx, md)) == (sorted(md.tables), [])
    # When it runs again, nothing changes and it says so
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{b}: {heads[b]} → {heads[b]}" for b in migrations.BRANCHES
    ]


def test_downgrade_to_base_leaves_no_table_and_no_recorded_version(
    url: str, engine: Engine
) -> None:
    migrations.upgrade(url)
    migrations.downgrade(url)
    assert tables(engine) <= {migrations.VERSION_TABLE}
    assert versions(engine) == set()
    assert migrations.current(url) == {}
    with engine.connect() as conn:
        seqs = conn.execute(text("SELECT relname FROM pg_class WHERE relkind = 'S'")).all()
    assert seqs == []
    # and the database can be built again from there
    migrations.upgrade(url)
    assert migrated_columns(engine) == declared_columns()


def test_each_branch_migrates_and_downgrades_on_its_own(url: str, engine: Engine) -> None:
    heads = migrations.heads()
    migrations.upgrade(url, "lifecycle@head")
    assert tables(engine) == {"lifecycle_audit", "owner_erasures", migrations.VERSION_TABLE}
    migrations.upgrade(url)
    migrations.downgrade(url, "lifecycle@base")
    assert not {"lifecycle_audit", "owner_erasures"} & tables(engine)
    assert {"tenants", "ltm_cards"} <= tables(engine)
    assert migrations.current(url) == {b: r for b, r in heads.items() if b != "lifecycle"}
    migrations.downgrade(url, "ltm_0001")
    assert migrations.current(url)["ltm"] == "ltm_0001"
    assert "source_message_ids" not in migrated_columns(engine)["ltm_cards"]


def test_an_engine_is_accepted_and_left_open(engine: Engine) -> None:
    migrations.upgrade(engine)
    assert migrations.current(engine) == migrations.heads()
    with engine.connect() as conn:  # still usable: the runner did not dispose of it
        assert conn.execute(text("SELECT count(*) FROM tenants")).scalar_one() == 0


# ------------------------------------------------------------------ the earlier layout
def test_a_database_of_the_old_layout_moves_into_the_one_version_table(
    url: str, engine: Engine
) -> None:
    # Given a fully migrated database whose versions sit in the two old tables
    migrations.upgrade(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (id, name) VALUES ('t1', 'kept')"))
    to_old_layout(engine)
    heads = migrations.heads()
    assert versions(engine, OLD_AUTHORITY_TABLE) == {heads["authority"], heads["ltm"]}
    assert versions(engine, OLD_LIFECYCLE_TABLE) == {heads["lifecycle"]}
    # Then reading the version already sees every branch it had, and changes nothing
    assert migrations.current(url) == {b: r for b, r in heads.items() if b != "store"}
    assert {OLD_AUTHORITY_TABLE, OLD_LIFECYCLE_TABLE} <= tables(engine)
    # When it is upgraded
    migrations.upgrade(url)
    # Then the old version tables are gone, their revisions in the one table, data kept
    assert not {OLD_AUTHORITY_TABLE, OLD_LIFECYCLE_TABLE} & tables(engine)
    assert versions(engine) == set(migrations.heads().values())
    assert migrated_columns(engine) == declared_columns()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM tenants")).scalar_one() == "kept"


def test_an_old_quickstart_database_without_the_audit_table_gains_it(
    url: str, engine: Engine
) -> None:
    # Given the old quickstart's database: authority + an older LTM ledger, no audit table
    migrations.upgrade(url, "0001_authority")
    migrations.upgrade(url, "ltm_0001")
    to_old_layout(engine)
    assert OLD_LIFECYCLE_TABLE not in tables(engine)
    assert "lifecycle_audit" not in tables(engine)
    # When `migrate` runs
    migrations.upgrade(url)
    # Then the audit table exists, the ledger is at its head, and one version table is left
    assert migrated_columns(engine) == declared_columns()
    assert versions(engine) == set(migrations.heads().values())
    assert OLD_AUTHORITY_TABLE not in tables(engine)


def test_two_revisions_of_one_branch_are_refused_and_nothing_moves(
    url: str, engine: Engine
) -> None:
    # Given an old version table that disagrees with the one table about the LTM branch
    migrations.upgrade(url)
    with engine.begin() as conn:
        conn.execute(text(
            f"CREATE TABLE {OLD_AUTHORITY_TABLE} (version_num VARCHAR(32) NOT NULL,"
            f" CONSTRAINT {OLD_AUTHORITY_TABLE}_pkc PRIMARY KEY (version_num))"))  # fmt: skip
        conn.execute(text(f"INSERT INTO {OLD_AUTHORITY_TABLE} VALUES ('ltm_0001')"))
    # Then the upgrade refuses, naming both, and leaves both tables as they were
    with pytest.raises(MigrationError, match=r"two revisions of branch 'ltm'.*ltm_0001"):
        migrations.upgrade(url)
    assert versions(engine, OLD_AUTHORITY_TABLE) == {"ltm_0001"}
    assert versions(engine) == set(migrations.heads().values())


# ------------------------------------------------------------------ failing loudly
def _script_copy(tmp_path: Path, *, revisions: bool, env: str | None = None) -> Path:
    """A copy of the script directory, without its revisions or with another env.py."""
    src = migrations.SCRIPT_LOCATION
    dst = tmp_path / "migrations"
    (dst / "versions").mkdir(parents=True)
    shutil.copy(src / "script.py.mako", dst)
    if env is None:
        shutil.copy(src / "env.py", dst)
    else:
        (dst / "env.py").write_text(env)
    if revisions:
        for f in (src / "versions").glob("*_0*.py"):
            shutil.copy(f, dst / "versions")
    return dst


def test_migrate_with_no_revisions_found_fails_loudly_and_creates_nothing(
    url: str,
    engine: Engine,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a script directory in which Alembic finds no revision (what alembic < 1.16 saw
    # when version_locations was joined with path_separator)
    monkeypatch.setattr(migrations, "SCRIPT_LOCATION", _script_copy(tmp_path, revisions=False))
    monkeypatch.setenv("MEMSTRATA_POSTGRES_URL", url)
    # When `memstrata migrate` runs, then it exits non-zero and says why
    assert main(["migrate"]) == 1
    err = capsys.readouterr().err
    assert "memstrata migrate: no revisions of branch 'authority' found" in err
    # And nothing was created
    assert tables(engine) == set()


def test_an_upgrade_that_applied_nothing_raises(
    url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an env that runs no migration (the revisions are found, nothing is applied)
    idle_env = "from alembic import context  # runs nothing\n"
    monkeypatch.setattr(
        migrations, "SCRIPT_LOCATION", _script_copy(tmp_path, revisions=True, env=idle_env)
    )
    # Then the upgrade raises, naming what is missing, instead of reporting success
    missing = r"upgrade to 'heads' did not apply .*0002_authority_api_keys"
    with pytest.raises(MigrationError, match=missing):
        migrations.upgrade(url)
    assert tables(engine) == set()
