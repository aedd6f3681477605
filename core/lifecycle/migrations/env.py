"""Alembic environment of the lifecycle audit, driven by :mod:`core.lifecycle.migrate`.

Its own version table (``lifecycle_alembic_version``), so this stream shares the
database with the authority schema and the LTM ledger without sharing their history:
each component migrates, and downgrades, on its own.
"""

from __future__ import annotations

from core.lifecycle.audit import lifecycle_metadata
from core.migrations import run_env

VERSION_TABLE = "lifecycle_alembic_version"

run_env(lifecycle_metadata, VERSION_TABLE)
