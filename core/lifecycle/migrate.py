"""Run the lifecycle audit's Alembic migrations from code (no alembic.ini needed).

Own script directory and version table (``lifecycle_alembic_version``): the audit table
migrates independently of the authority schema and the LTM ledger in the same database.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

from core.errors import StoreUnavailable
from core.migrations import run_alembic

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _run(url: str, step: str, revision: str) -> None:
    run_alembic(config(url), url, step, revision, unavailable=StoreUnavailable)


def upgrade(url: str, revision: str = "head") -> None:
    """Create or update the audit table at ``url``."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Remove the audit table (``base``) or step back to ``revision``."""
    _run(url, "downgrade", revision)
