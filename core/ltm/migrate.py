"""The LTM ledger's Alembic branch (``ltm``), run through the authority's migration env.

The revisions live in ``core/ltm/migrations_versions`` as their own branch, listed in the
authority config's ``version_locations`` (same database, same version table), so
``memstrata migrate`` (``upgrade heads``) brings both up.  These helpers move only the
LTM branch, for tests and for deployments that run LTM alone.
"""

from __future__ import annotations

from pathlib import Path

from core.authority import migrate as _migrate

VERSIONS_DIR = Path(__file__).resolve().parent / "migrations_versions"
BRANCH = "ltm"


def upgrade(url: str, revision: str = f"{BRANCH}@head") -> None:
    """Create or update the LTM ledger tables at ``url``."""
    _migrate.upgrade(url, revision)


def downgrade(url: str, revision: str = f"{BRANCH}@base") -> None:
    """Remove the LTM ledger tables (``ltm@base``) or step back to ``revision``."""
    _migrate.downgrade(url, revision)
