"""The one Alembic environment of memstrata, run by :mod:`core.migrations` (no alembic.ini).

The caller hands over an open connection (``config.attributes["connection"]``); without
one (a revision generated from code, say) a connection is made from ``sqlalchemy.url``.
Every branch (authority, ltm, lifecycle) shares this env and the one version table
``memstrata_alembic_version``; the target metadata is every table the code declares.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from memstrata.core.migrations import VERSION_TABLE, declared_metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=declared_metadata(),
        version_table=VERSION_TABLE,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    config = context.config
    if context.is_offline_mode():
        context.configure(
            url=config.get_main_option("sqlalchemy.url"),
            target_metadata=declared_metadata(),
            version_table=VERSION_TABLE,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(str(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


main()
