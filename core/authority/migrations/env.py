"""Alembic environment of the authority schema, driven by :mod:`core.authority.migrate`.

No alembic.ini: the caller hands over an open connection (``config.attributes``) or a
URL (``sqlalchemy.url``).  The version table is ``authority_alembic_version`` so this
stream of migrations can share a database with other memstrata components.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from core.authority.tables import authority_metadata

VERSION_TABLE = "authority_alembic_version"


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=authority_metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    config = context.config
    if context.is_offline_mode():
        context.configure(
            url=config.get_main_option("sqlalchemy.url"),
            target_metadata=authority_metadata,
            version_table=VERSION_TABLE,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
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
