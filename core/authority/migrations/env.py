"""Alembic environment of the authority schema, driven by :mod:`core.authority.migrate`.

No alembic.ini: the caller hands over an open connection (``config.attributes``) or a
URL (``sqlalchemy.url``).  The version table is ``authority_alembic_version`` so this
stream of migrations can share a database with other memstrata components.
"""

from __future__ import annotations

from core.authority.tables import authority_metadata
from core.migrations import run_env

VERSION_TABLE = "authority_alembic_version"

run_env(authority_metadata, VERSION_TABLE)
