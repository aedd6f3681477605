"""A scratch PostgreSQL database on the configured server."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator


@contextlib.contextmanager
def scratch_postgres(prefix: str = "memstrata_bench_") -> Iterator[str]:
    """A fresh database on the configured PostgreSQL server, dropped (FORCE) afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo
    from sqlalchemy.engine import make_url

    from memstrata.core.settings import load_settings

    base = make_url(os.environ.get("MEMSTRATA_POSTGRES_URL") or load_settings().postgres_url)
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = make_conninfo(
        host=base.host or "127.0.0.1",
        port=base.port or 5432,
        user=base.username or "postgres",
        password=base.password,
        dbname="postgres",
        connect_timeout=5,
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
