"""Run the LTM ledger's Alembic branch (``ltm``) through the authority's migration env.

The revisions live in ``core/ltm/migrations_versions`` and form their own branch, so
they run in the authority's environment (same database, same version table) next to its
revisions: ``upgrade heads`` brings both up.  Until the authority config lists this
folder in ``version_locations``, :func:`upgrade` adds it itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from core.authority.migrate import MIGRATIONS_DIR
from core.errors import StoreUnavailable

VERSIONS_DIR = Path(__file__).resolve().parent / "migrations_versions"
BRANCH = "ltm"


def config(url: str) -> Config:
    """An Alembic config: the authority's env and versions plus the LTM branch."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option(
        "version_locations", os.pathsep.join([str(MIGRATIONS_DIR / "versions"), str(VERSIONS_DIR)])
    )
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _run(url: str, step: str, revision: str) -> None:
    cfg = config(url)
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
        raise StoreUnavailable(f"cannot migrate the LTM ledger: {exc.orig}") from exc
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = f"{BRANCH}@head") -> None:
    """Create or update the LTM ledger tables at ``url``."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str = f"{BRANCH}@base") -> None:
    """Remove the LTM ledger tables (``ltm@base``) or step back to ``revision``."""
    _run(url, "downgrade", revision)
