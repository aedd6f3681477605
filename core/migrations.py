"""Running Alembic from code, shared by every component that owns tables (no alembic.ini).

Each component (authority + LTM branch, lifecycle audit) keeps its own script directory
and version table; this module holds the one runner and the one env body they share.
"""

from __future__ import annotations

from alembic import command, context
from alembic.config import Config
from sqlalchemy import Connection, MetaData, create_engine

from core.adapters.pg import PgErrorMap
from core.errors import StoreUnavailable


def run_alembic(
    cfg: Config, url: str, step: str, revision: str, *, unavailable: type[StoreUnavailable]
) -> None:
    """``upgrade`` or ``downgrade`` to ``revision`` on one connection, committed at the end.

    Database errors go through the one PostgreSQL map (:mod:`core.adapters.pg`): a server
    that does not answer raises ``unavailable`` (a transient error).
    """
    translated = PgErrorMap(unavailable=unavailable)
    what = f"cannot migrate ({cfg.get_main_option('script_location')})"
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with translated(what), engine.connect() as conn:
            cfg.attributes["connection"] = conn
            if step == "upgrade":
                command.upgrade(cfg, revision)
            else:
                command.downgrade(cfg, revision)
            conn.commit()
    finally:
        engine.dispose()


def run_env(metadata: MetaData, version_table: str) -> None:
    """The body of an ``env.py``: the caller's connection, else one from ``sqlalchemy.url``."""
    config = context.config

    def configure(connection: Connection) -> None:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            version_table=version_table,
            compare_type=True,
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()

    if context.is_offline_mode():
        context.configure(
            url=config.get_main_option("sqlalchemy.url"),
            target_metadata=metadata,
            version_table=version_table,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        configure(connection)
        return
    engine = create_engine(str(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.connect() as conn:
            configure(conn)
            conn.commit()
    finally:
        engine.dispose()
