"""Run the authority schema's Alembic migrations from code (no alembic.ini needed).

``upgrade(url)`` builds the schema from empty or brings it to ``head``; ``downgrade(url,
"base")`` removes it.  Both run in one transaction per migration (PostgreSQL has
transactional DDL), so a failed step leaves the previous revision intact.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from core.authority.errors import AuthorityUnavailable
from core.migrations import run_alembic

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# other components' Alembic branches that share this env and version table
BRANCH_VERSION_DIRS = (Path(__file__).resolve().parents[1] / "ltm" / "migrations_versions",)
VERSION_TABLE = "authority_alembic_version"
AUTHORITY_BRANCH_BASE = "0001_authority"


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    locations = [MIGRATIONS_DIR / "versions", *BRANCH_VERSION_DIRS]
    cfg.set_main_option("version_locations", os.pathsep.join(str(p) for p in locations))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _run(url: str, step: str, revision: str) -> None:
    run_alembic(_config(url), url, step, revision, unavailable=AuthorityUnavailable)


def upgrade(url: str, revision: str = "heads") -> None:
    """Bring the schema at ``url`` up to ``revision`` (default: every branch's newest)."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str) -> None:
    """Take the authority schema at ``url`` down to ``revision`` (``"base"`` drops it all)."""
    _run(url, "downgrade", revision)


def _authority_only(revisions: tuple[str, ...]) -> str | None:
    script = ScriptDirectory.from_config(_config("postgresql://"))
    own = [
        r
        for r in revisions
        if AUTHORITY_BRANCH_BASE in {x.revision for x in script.iterate_revisions(r, "base")}
    ]
    return own[0] if own else None


def current(url: str) -> str | None:
    """The authority branch's revision, or None for an empty (unmigrated) database."""
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return _authority_only(tuple(ctx.get_current_heads()))
    except OperationalError as exc:
        raise AuthorityUnavailable(f"cannot read the authority schema: {exc.orig}") from exc
    finally:
        engine.dispose()


def head() -> str:
    """The newest authority revision shipped with this package."""
    script = ScriptDirectory.from_config(_config("postgresql://"))
    rev = _authority_only(tuple(script.get_heads()))
    assert rev is not None
    return rev
