"""Fixtures of the lifecycle tests (no tests here): a migrated PostgreSQL database with the
authority schema, the LTM ledger and the lifecycle audit; a tenant with a user and a
project; a :class:`Lifecycle` on the test's Redis namespace; item and turn builders.

Test modules bind the fixtures by import (``from ...test_lifecycle_env import *``-free:
each name is imported explicitly).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from memstrata.core import migrations
from memstrata.core.authority.admin import create_project, create_tenant, create_user
from memstrata.core.authority.db import make_engine
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.ledger import Ledger
from memstrata.core.ltm.tables import cards
from memstrata.core.models.memory import MemoryItem, MemorySource, MemoryType
from memstrata.core.models.transcript import MessageIn
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from tests.conftest import REDIS_URL
from tests.integration.authority_db import scratch_database

NOW = 1_900_000_000.0
# three statements about one topic: the smallest cluster consolidation merges (seed 2: >= 3)
BEAGLE = [
    "I adopted a beagle puppy named Max from the shelter",
    "Max the beagle puppy chewed my running shoes",
    "Took Max the beagle puppy to the vet for shots",
]


@pytest.fixture(scope="session")
def lifecycle_pg() -> Iterator[str]:
    """One scratch database for the session: authority schema, LTM ledger, lifecycle audit."""
    with scratch_database("memstrata_lc_") as url:
        migrations.upgrade(url)
        yield url


@pytest.fixture(scope="session")
def lc_engine(lifecycle_pg: str) -> Iterator[Engine]:
    eng = make_engine(lifecycle_pg)
    yield eng
    eng.dispose()


@pytest.fixture
def settings(namespace: str, tmp_path: Path, lifecycle_pg: str) -> Settings:
    """The conftest settings, pointed at the lifecycle database."""
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        postgres_url=lifecycle_pg,
    )


@dataclass(frozen=True)
class Tenant:
    id: str
    user: str = "alice"
    project: str = "shop"


@pytest.fixture
def tenant(lc_engine: Engine) -> Tenant:
    t = Tenant(f"t{uuid.uuid4().hex[:10]}")
    with lc_engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": t.id, "name": "Acme"})
        create_user(db=conn, user={"tenant_id": t.id, "id": t.user})
        create_project(db=conn, project={"tenant_id": t.id, "id": t.project, "name": "Shop"})
    return t


@dataclass
class Kicks:
    """Stands in for the Celery hand-over to the LTM indexer: records the card ids."""

    ids: list[str] = field(default_factory=list)

    def __call__(self, ids: Any) -> None:
        self.ids.extend(ids)


@pytest.fixture
def kicks() -> Kicks:
    return Kicks()


@pytest.fixture
def lc(res: Runtime, kicks: Kicks) -> Lifecycle:
    return res.lifecycle(on_cards=kicks)


def item(
    user: str, tenant: str | None, session: str, summary: str, key: str, *,
    mtype: MemoryType = MemoryType.FACT, subtype: str = "general", importance: float = 0.5,
    at: float = NOW, ttl_s: float = 7 * 86400, entities: tuple[str, ...] = (),
    detail: dict[str, Any] | None = None,
) -> MemoryItem:  # fmt: skip
    """An STM item as the ingest pipeline writes it (for facts its extractor has no rule for)."""
    digest = hashlib.sha1(f"{tenant}|{user}|{key}".encode()).hexdigest()
    return MemoryItem(
        id="m_" + digest[:20], user_id=user, tenant_id=tenant, session_id=session,
        memory_type=mtype, subtype=subtype, summary=summary, detail=detail or {},
        entities=list(entities),
        source=MemorySource(message_ids=[f"msg_{digest[:8]}_{session}"]),
        confidence=0.9, importance=importance, created_at=at, updated_at=at, last_access_at=at,
        expires_at=at + ttl_s,
        fingerprint=hashlib.sha1(f"{key}|{summary}".encode()).hexdigest()[:16],
        canonical_fact_key=key, seen_sessions=[session],
    )  # fmt: skip


def say(res: Runtime, user: str, tenant: str | None, session: str, text: str,
        at: float) -> list[str]:  # fmt: skip
    """Record one user turn in L0 and run it through the real ingest pipeline."""
    t = res.transcript.append_turn(
        user_id=user, tenant_id=tenant, session_id=session,
        messages=[MessageIn(role="user", content=text)], at=at,
    )  # fmt: skip
    out = res.pipeline.process([(t.pointer, list(t.records))])
    return [d.memory_id or "" for o in out for d in o.written]


def user_cards(engine: Engine, tenant: str, user: str) -> list[LtmCard]:
    with engine.connect() as conn:
        ids = conn.execute(
            select(cards.c.memory_id).where(cards.c.tenant_id == tenant, cards.c.user_id == user)
        ).scalars()
        return sorted(
            Ledger(engine).cards(list(ids), conn=conn).values(), key=lambda c: c.created_at
        )
