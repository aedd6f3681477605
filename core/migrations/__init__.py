"""The one Alembic environment of every table memstrata keeps in PostgreSQL (no alembic.ini).

    core/migrations/
        __init__.py     this runner: upgrade, downgrade, current, heads, config
        env.py          the environment Alembic runs: the caller's connection, one version table
        script.py.mako  the template of a new revision
        versions/       every revision, named ``<branch>_<nnnn>_<what>.py``, one branch each:
                          authority   tenants, users, profiles, ... stable_memory_facts
                          ltm         ltm_cards, ltm_projections (the card ledger)
                          lifecycle   lifecycle_audit
                          store       agent_store_items (framework stores' documents)

One version table, ``memstrata_alembic_version``, records the head of each branch.  The
branches are independent roots (``down_revision = None``, no ``depends_on``), so
``upgrade(url)`` (target ``heads``) brings all of them up, ``upgrade(url, "ltm@head")``
only one, and ``downgrade(url, "lifecycle@base")`` removes one component's tables alone.
Every migration runs in its own transaction (PostgreSQL has transactional DDL): a failed
step leaves the previous revision in place.

Every caller uses these functions: ``memstrata migrate``, the demo (and so ``memstrata
up``), the benchmarks' scratch databases and the test fixtures.  After a run the runner
checks that the database records what was asked for, and raises :class:`MigrationError`
otherwise, so a script directory Alembic cannot read fails loudly instead of migrating
nothing.

A database migrated by the earlier layout (``authority_alembic_version`` holding the
authority and LTM heads, ``lifecycle_alembic_version`` the lifecycle head) is adopted by
the next ``upgrade`` or ``downgrade``: in one transaction its rows move into the one
version table and the old tables are dropped.

Adding a table: write a revision on its component's branch, e.g.
``command.revision(config(url), "why", head="ltm@head", autogenerate=True)``, and give
every constraint and index an explicit final name (``op.f(...)``): the env combines three
metadata objects, so no naming convention applies to the DDL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from alembic import __version__ as alembic_version
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    insert,
    inspect,
    select,
)

from memstrata.core.adapters.pg import PgErrorMap
from memstrata.core.authority.errors import AuthorityUnavailable
from memstrata.core.errors import PermanentError

log = logging.getLogger(__name__)
_MIGRATION_ERRORS = PgErrorMap(unavailable=AuthorityUnavailable)

SCRIPT_LOCATION = Path(__file__).resolve().parent
VERSION_TABLE = "memstrata_alembic_version"
BRANCHES = ("authority", "ltm", "lifecycle", "store")
LEGACY_VERSION_TABLES = ("authority_alembic_version", "lifecycle_alembic_version")
"""Version tables of the earlier layout, adopted into :data:`VERSION_TABLE` on first use."""

Db = str | Engine
"""A SQLAlchemy URL (an engine is made and disposed of) or the caller's engine (kept)."""


class MigrationError(PermanentError):
    """The shipped revisions, or what the database records, are not what the code expects."""


def declared_metadata() -> list[MetaData]:
    """Every metadata object whose tables the code queries: what the revisions must build."""
    from memstrata.core import apikeys  # noqa: F401  (declares api_keys on the authority metadata)
    from memstrata.core.agent_store import store_metadata
    from memstrata.core.authority.tables import authority_metadata
    from memstrata.core.lifecycle.audit import lifecycle_metadata
    from memstrata.core.ltm.tables import ltm_metadata

    return [authority_metadata, ltm_metadata, lifecycle_metadata, store_metadata]


def config(url: str = "postgresql://") -> Config:
    """The Alembic config of the one environment (the URL is used only without a connection)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@dataclass(frozen=True)
class _Scripts:
    directory: ScriptDirectory
    heads: dict[str, str]  # branch -> newest revision
    branch_of: dict[str, str]  # revision -> branch

    def branch(self, revision: str) -> str:
        try:
            return self.branch_of[revision]
        except KeyError:
            raise MigrationError(
                f"the database records revision {revision!r}, which this code does not ship "
                f"(migrated by another version of memstrata?)"
            ) from None

    def ancestry(self, revisions: list[str]) -> set[str]:
        """The revisions and everything below them: what a database at these heads holds."""
        return {s.revision for s in self.directory.iterate_revisions(tuple(revisions), "base")}


def _scripts() -> _Scripts:
    """The shipped revisions, checked: each branch found, with one head, and nothing else."""
    directory = ScriptDirectory.from_config(config())
    heads: dict[str, str] = {}
    branch_of: dict[str, str] = {}
    for branch in BRANCHES:
        try:
            chain = list(directory.iterate_revisions(f"{branch}@head", "base"))
        except (CommandError, RevisionError):
            chain = []
        if not chain:
            raise MigrationError(
                f"no revisions of branch {branch!r} found in {directory.versions} "
                f"(alembic {alembic_version})"
            )
        heads[branch] = chain[0].revision
        branch_of.update((s.revision, branch) for s in chain)
    stray = set(directory.get_heads()) - set(heads.values())
    if stray:
        raise MigrationError(f"revisions outside the branches {BRANCHES}: {sorted(stray)}")
    return _Scripts(directory, heads, branch_of)


def heads() -> dict[str, str]:
    """The newest revision of each branch shipped with this code."""
    return dict(_scripts().heads)


def _version_table(name: str) -> Table:
    """An Alembic version table as Alembic itself defines it."""
    return Table(
        name,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{name}_pkc"),
    )


def _recorded(conn: Connection) -> list[str]:
    """The revisions the database records, in the one version table and any legacy one."""
    present = set(inspect(conn).get_table_names())
    found: list[str] = []
    for name in (VERSION_TABLE, *LEGACY_VERSION_TABLES):
        if name in present:
            table = _version_table(name)
            found += conn.execute(select(table.c.version_num)).scalars().all()
    return found


def _by_branch(scripts: _Scripts, revisions: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rev in revisions:
        branch = scripts.branch(rev)
        if out.get(branch, rev) != rev:
            raise MigrationError(
                f"the database records two revisions of branch {branch!r}: "
                f"{out[branch]!r} and {rev!r}"
            )
        out[branch] = rev
    return out


@contextmanager
def _connect(db: Db) -> Iterator[Connection]:
    """One connection; database errors go through the one PostgreSQL map
    (:mod:`core.adapters.pg`): a server that does not answer is :class:`AuthorityUnavailable`."""
    engine = create_engine(db, pool_size=1, max_overflow=0) if isinstance(db, str) else db
    try:
        with _MIGRATION_ERRORS("cannot migrate PostgreSQL"), engine.connect() as conn:
            yield conn
    finally:
        if isinstance(db, str):
            engine.dispose()


def current(db: Db) -> dict[str, str]:
    """The revision each migrated branch is at (``{}`` for an empty database). Read-only."""
    scripts = _scripts()
    with _connect(db) as conn:
        return _by_branch(scripts, _recorded(conn))


def _adopt_legacy(conn: Connection, scripts: _Scripts) -> None:
    """Move the rows of the earlier layout's version tables into the one table, drop them."""
    with conn.begin():
        present = set(inspect(conn).get_table_names())
        legacy = [name for name in LEGACY_VERSION_TABLES if name in present]
        if not legacy:
            return
        one = _version_table(VERSION_TABLE)
        one.create(conn, checkfirst=True)
        _by_branch(scripts, _recorded(conn))  # refuses two revisions of one branch
        kept = set(conn.execute(select(one.c.version_num)).scalars())
        for name in legacy:
            old = _version_table(name)
            revisions = list(conn.execute(select(old.c.version_num)).scalars())
            for rev in revisions:
                if rev not in kept:
                    conn.execute(insert(one).values(version_num=rev))
                    kept.add(rev)
            old.drop(conn)
            log.info("adopted the version table %s (%s) into %s", name, revisions, VERSION_TABLE)


def _wanted(scripts: _Scripts, target: str) -> set[str]:
    """The revisions ``target`` names; none for a relative one (``+1``, ``ltm@-1``) or base."""
    try:
        return {s.revision for s in scripts.directory.get_revisions(target)}
    except (CommandError, RevisionError):
        return set()


def _verify(
    scripts: _Scripts, step: Literal["upgrade", "downgrade"], target: str, at: dict[str, str]
) -> None:
    """Refuse to report success when the database does not record what was asked for."""
    wanted = _wanted(scripts, target)
    recorded = f"the database records {at or 'no revision'}"
    if step == "upgrade":
        missing = sorted(wanted - scripts.ancestry(list(at.values())))
        if missing:
            raise MigrationError(f"upgrade to {target!r} did not apply {missing}; {recorded}")
        return
    if target == "base":
        left = at
    elif target.endswith("@base"):
        left = {b: r for b, r in at.items() if b == target.removesuffix("@base")}
    else:
        branches = {scripts.branch(w) for w in wanted}
        left = {b: r for b, r in at.items() if b in branches and r not in wanted}
    if left:
        raise MigrationError(f"downgrade to {target!r} left {left}; {recorded}")


def _run(step: Literal["upgrade", "downgrade"], db: Db, target: str) -> None:
    scripts = _scripts()
    with _connect(db) as conn:
        _adopt_legacy(conn, scripts)
        cfg = config(conn.engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        if step == "upgrade":
            command.upgrade(cfg, target)
        else:
            command.downgrade(cfg, target)
        conn.commit()
        at = _by_branch(scripts, _recorded(conn))
    _verify(scripts, step, target, at)


def upgrade(db: Db, target: str = "heads") -> None:
    """Bring the database up to ``target``: by default every branch's newest revision."""
    _run("upgrade", db, target)


def downgrade(db: Db, target: str = "base") -> None:
    """Take the database down to ``target``: by default remove every table (``base``)."""
    _run("downgrade", db, target)
