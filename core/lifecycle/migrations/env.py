"""Alembic environment of the lifecycle audit, driven by :mod:`core.lifecycle.migrate`.

Its own version table (``lifecycle_alembic_version``), so this stream shares the
database with the authority schema and the LTM ledger without sharing their history:
each component migrates, and downgrades, on its own.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from core.lifecycle.audit import lifecycle_metadata

VERSION_TABLE = "lifecycle_alembic_version"


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=lifecycle_metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    engine = create_engine(str(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.connect() as conn:
            _configure(conn)
            conn.commit()
    finally:
        engine.dispose()


_run()
