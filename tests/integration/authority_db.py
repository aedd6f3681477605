"""Fixtures of the authority tests: a real PostgreSQL database per test session.

The database ``memstrata_test_<random>`` is created through the maintenance database
(``test``, else ``postgres``) on 127.0.0.1:5432, migrated to every branch's head with
:func:`core.migrations.upgrade`, and dropped at the end (``WITH (FORCE)``, so a
leaked connection cannot keep it alive).  Each test gets its own tenant (a random id),
which is the isolation unit the layer itself enforces.  Test modules bind the fixtures
by assignment (``pg_url = authority_db.pg_url``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text

from memstrata.core import migrations
from memstrata.core.authority.admin import (
    create_project,
    create_tenant,
    create_user,
    create_workspace,
)
from memstrata.core.authority.cache import ProfileCache
from memstrata.core.authority.db import make_engine
from memstrata.core.authority.facts import grant_role, set_profile
from memstrata.core.runtime import Runtime

PG_HOST = os.environ.get("MEMSTRATA_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("MEMSTRATA_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("MEMSTRATA_TEST_PG_USER", "postgres")


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    last: Exception | None = None
    for dbname in ("test", "postgres"):
        try:
            return psycopg.connect(
                host=PG_HOST,
                port=PG_PORT,
                user=PG_USER,
                dbname=dbname,
                autocommit=True,
                connect_timeout=5,
            )
        except psycopg.OperationalError as exc:
            last = exc
    pytest.fail(f"PostgreSQL not reachable at {PG_HOST}:{PG_PORT}: {last}")


@contextmanager
def scratch_database(prefix: str = "memstrata_test_") -> Iterator[str]:
    """Create an empty database, yield its SQLAlchemy URL, drop it afterwards."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A migrated database shared by the session's authority tests."""
    with scratch_database() as url:
        migrations.upgrade(url)
        yield url


@pytest.fixture(scope="session")
def engine(pg_url: str) -> Iterator[Engine]:
    eng = make_engine(pg_url)
    yield eng
    eng.dispose()


@dataclass(frozen=True)
class World:
    """One tenant with two users, two projects and a workspace; alice is read-only on shop."""

    tenant_id: str
    alice: str = "alice"
    bob: str = "bob"
    shop: str = "shop"
    blog: str = "blog"
    workspace: str = "ws-shop"


def seed_world(engine: Engine, tenant_id: str | None = None) -> World:
    w = World(tenant_id or f"t{uuid.uuid4().hex[:10]}")
    with engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": w.tenant_id, "name": "Acme"})
        for user in (w.alice, w.bob):
            create_user(db=conn, user={"tenant_id": w.tenant_id, "id": user})
        create_project(
            db=conn,
            project={
                "tenant_id": w.tenant_id,
                "id": w.shop,
                "name": "Shop",
                "default_env": "prod-cn",
                "env_tags": ["k8s", "cn"],
                "attributes": {"owner_team": "payments"},
            },
        )
        create_project(db=conn, project={"tenant_id": w.tenant_id, "id": w.blog, "name": "Blog"})
        create_workspace(
            db=conn,
            workspace={
                "tenant_id": w.tenant_id,
                "id": w.workspace,
                "project_id": w.shop,
                "name": "Shop ops",
                "env_tags": ["oncall"],
            },
        )
        grant_role(
            db=conn,
            tenant_id=w.tenant_id,
            user_id=w.alice,
            project_id=w.shop,
            role="developer",
            scope="read_only",
        )
        grant_role(
            db=conn,
            tenant_id=w.tenant_id,
            user_id=w.bob,
            project_id=w.blog,
            role="owner",
            scope="admin",
        )
        set_profile(
            db=conn,
            tenant_id=w.tenant_id,
            user_id=w.alice,
            update={"language": "zh-CN", "answer_style": "brief_first"},
        )
    return w


@pytest.fixture
def world(engine: Engine) -> World:
    return seed_world(engine)


@pytest.fixture
def cache(res: Runtime) -> ProfileCache:
    """A profile cache in the test's own Redis namespace (purged by the ``res`` fixture)."""
    return ProfileCache(res.redis, namespace=res.settings.key_namespace, entry_ttl_s=60)


def race_in_process(
    url: str, tenant_id: str, user_id: str, key: str, values: list[str], barrier: Any, out: Any
) -> None:
    """Entry point of a spawned writer process: results go back through the ``out`` queue."""
    try:
        out.put(race_upserts(url, tenant_id, user_id, key, values, barrier))
    except Exception as exc:
        out.put(repr(exc))
        raise


def race_upserts(
    url: str, tenant_id: str, user_id: str, key: str, values: list[str], barrier: Any
) -> list[bool]:
    """Body of a racing writer process: own engine, wait for the others, then upsert.

    Returns, per value, whether this writer changed the fact (False = it was already current).
    """
    from memstrata.core.authority.facts import upsert_fact

    eng = make_engine(url, pool_size=1)
    out: list[bool] = []
    try:
        with eng.connect() as conn:
            conn.execute(text("SELECT 1"))  # connect before the start line
            conn.rollback()
            barrier.wait(timeout=30)
            for value in values:
                result = upsert_fact(
                    db=conn,
                    tenant_id=tenant_id,
                    user_id=user_id,
                    canonical_fact_key=key,
                    domain=key.split(".")[0],
                    value=value,
                )
                conn.commit()
                out.append(result.changed)
    finally:
        eng.dispose()
    return out
