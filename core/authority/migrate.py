"""Run the authority schema's Alembic migrations from code (no alembic.ini needed).

``upgrade(url)`` builds the schema from empty or brings it to ``head``; ``downgrade(url,
"base")`` removes it.  Both run in one transaction per migration (PostgreSQL has
transactional DDL), so a failed step leaves the previous revision intact.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from core.authority.errors import AuthorityUnavailable

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "authority_alembic_version"


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _run(url: str, step: str, revision: str) -> None:
    cfg = _config(url)
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            cfg.attributes["connection"] = conn
            if step == "upgrade":
                command.upgrade(cfg, revision)
            else:
                command.downgrade(cfg, revision)
            conn.commit()
    except OperationalError as exc:
        raise AuthorityUnavailable(f"cannot migrate the authority schema: {exc.orig}") from exc
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the authority schema at ``url`` up to ``revision`` (default: the newest)."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str) -> None:
    """Take the authority schema at ``url`` down to ``revision`` (``"base"`` drops it all)."""
    _run(url, "downgrade", revision)


def current(url: str) -> str | None:
    """The revision the database is at, or None for an empty (unmigrated) database."""
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    except OperationalError as exc:
        raise AuthorityUnavailable(f"cannot read the authority schema: {exc.orig}") from exc
    finally:
        engine.dispose()


def head() -> str:
    """The newest revision shipped with this package."""
    script = ScriptDirectory.from_config(_config("postgresql://"))
    rev = script.get_current_head()
    assert rev is not None
    return rev
