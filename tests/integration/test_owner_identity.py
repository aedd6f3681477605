"""One owner identity: ``(tenant, user)`` in every layer, no tenant = the default tenant.

Every combination of {no tenant, tenant ``default``, tenant A, tenant B} × {alice, bob}
writes a distinct secret through the real write path (L0 → ingest pipeline → STM, and the
raw-history index), the
session is finalised (promotion, episode and summary cards in the ledger, projected into
a real milvus-lite server), and every identity then reads through every read path.  A
reader must find exactly the secrets of its own owner: no tenant and tenant ``default``
are one owner, every other pair is two.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.core.authority.admin import create_tenant, create_user
from memstrata.core.compress.service import compress_session
from memstrata.core.errors import InvalidInput
from memstrata.core.ids import owner_tenant
from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.lifecycle.preload import preload
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.models.transcript import MessageIn
from memstrata.core.recall.service import Recaller, RecallRequest
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from tests.conftest import REDIS_URL, _purge
from tests.integration import ltm_env
from tests.integration.conftest import REPO_ROOT, process_env
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

milvus_server = ltm_env.milvus_server
embedder = ltm_env.embedder

NOW = 1_900_000_000.0
SESSION = "s1"
RUN = uuid.uuid4().hex[:6]
TENANTS: tuple[str | None, ...] = (None, "default", f"ta{RUN}", f"tb{RUN}")
USERS = (f"alice{RUN}", f"bob{RUN}")


@dataclass(frozen=True)
class Who:
    tenant: str | None
    user: str
    secret: str  # a token no other identity writes
    place: str  # and its own words: two owners' statements are never one fact

    @property
    def owner(self) -> tuple[str, str]:
        return owner_tenant(self.tenant), self.user

    def statement(self) -> str:
        return f"I keep my spare locker key code {self.secret} taped inside the {self.place}."


PLACES = ("garden shed", "blue mailbox", "red toolbox", "car glovebox", "attic trunk",
          "kitchen drawer", "old piano bench", "bicycle basket")  # fmt: skip
IDENTITIES = tuple(
    Who(t, u, f"zq{n}{RUN}x", PLACES[n])
    for n, (t, u) in enumerate((t, u) for t in TENANTS for u in USERS)
)


def found(text: str) -> set[str]:
    """The secrets that appear in ``text``."""
    return {w.secret for w in IDENTITIES if w.secret in text}


def own(reader: Who) -> set[str]:
    return {w.secret for w in IDENTITIES if w.owner == reader.owner}


@dataclass
class World:
    runtime: Runtime
    lc: Lifecycle
    recaller: Recaller


@pytest.fixture(scope="module")
def world(
    lifecycle_pg: str,
    milvus_server: MilvusServer,
    embedder: CachedEmbedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    app = load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path_factory.mktemp("owners") / "transcripts",
        postgres_url=lifecycle_pg,
        ltm=LtmSettings(milvus_uri=milvus_server.uri, collection_prefix=namespace),
    )
    runtime = Runtime(app, embedder=embedder)
    with runtime.engine.begin() as conn:
        for tenant in {owner_tenant(t) for t in TENANTS}:
            # "default" may exist from another test of this database
            with contextlib.suppress(InvalidInput):
                create_tenant(db=conn, tenant={"id": tenant, "name": tenant})
            for user in USERS:
                create_user(db=conn, user={"tenant_id": tenant, "id": user})
    ltm = runtime.ltm

    def project(ids: Sequence[str]) -> None:  # what the memstrata.ltm.index task does
        ltm.projector.project(list(ids))

    lc = runtime.lifecycle(on_cards=project)
    # Given every identity's secret written through L0 and the ingest pipeline
    for n, who in enumerate(IDENTITIES):
        turn = runtime.transcript.append_turn(
            user_id=who.user, tenant_id=who.tenant, session_id=SESSION,
            messages=[MessageIn(role="user", content=who.statement())], at=NOW + n,
        )  # fmt: skip
        runtime.pipeline.process([(turn.pointer, list(turn.records))])
        assert ltm.history is not None  # and the raw-history fallback, as the ltm task does
        ltm.history.project(turn.records)
    recaller = runtime.recaller()
    try:
        yield World(runtime, lc, recaller)
    finally:
        recaller.close()
        ltm.lexical.drop()
        ltm.vector.drop()
        if ltm.history is not None:
            ltm.history.drop()
        _purge(runtime.redis, namespace)
        runtime.close()


@pytest.fixture(scope="module")
def finalised(world: World) -> World:
    """The same world after every identity's session ended: its memories are LTM cards."""
    for who in IDENTITIES:
        finalise(world.lc, user_id=who.user, tenant_id=who.tenant, session_id=SESSION,
                 now=NOW + 7200)  # fmt: skip
    world.runtime.ltm.lexical.refresh()
    return world


def recall_text(w: World, reader: Who, query: str) -> str:
    out = w.recaller.recall(
        RecallRequest(
            tenant_id=reader.tenant, user_id=reader.user, session_id=SESSION, query=query,
            now=NOW + 7300, top_k=20, token_budget=4000, explain=True,
        )
    )  # fmt: skip
    assert out.explain is not None
    return out.text + json.dumps([s.candidate.summary for s in out.explain.candidates])


def stm_texts(w: World, reader: Who) -> str:
    rt = w.runtime
    items = rt.stm.by_session(reader.user, SESSION, tenant_id=reader.tenant, now=NOW + 60)
    items += rt.stm.recent(reader.user, tenant_id=reader.tenant, now=NOW + 60)
    decisions = read_decisions(rt, reader.user, SESSION, tenant_id=reader.tenant)
    view = compress_session(
        transcript=rt.transcript, stm=rt.stm, user_id=reader.user, session_id=SESSION,
        budget_tokens=4000, tenant_id=reader.tenant, now=NOW + 60,
    )  # fmt: skip
    l0 = rt.transcript.read_session(user_id=reader.user, session_id=SESSION,
                                    tenant_id=reader.tenant)  # fmt: skip
    return json.dumps(
        [
            [i.summary for i in items],
            [d.model_dump(mode="json") for d in decisions],
            view.model_dump(mode="json"),
            [r.content for r in l0],
        ],
        ensure_ascii=False,
    )


def ltm_texts(w: World, reader: Who, query: str) -> str:
    ltm = w.runtime.ltm
    tenant, user = reader.owner
    ranked = ltm.search.search(query, CardFilter(tenant_id=tenant, user_id=user), now=NOW)
    cards = ltm.ledger.cards([r.memory_id for r in ranked])
    loaded = preload(w.lc, user_id=reader.user, tenant_id=reader.tenant, session_id="s2",
                     query=query, now=NOW + 7400)  # fmt: skip
    preloaded = w.runtime.stm.get_many(reader.user, loaded, tenant_id=reader.tenant)
    return json.dumps(
        [[c.summary + c.content for c in cards.values()], [i.summary for i in preloaded]],
        ensure_ascii=False,
    )


readers = st.sampled_from(IDENTITIES)
slow = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_no_tenant_and_the_default_tenant_are_one_owner_in_every_layer(world: World) -> None:
    # Then the no-tenant identity and the default-tenant identity share STM keys and L0
    rt = world.runtime
    assert rt.stm.keys("alice", None).prefix == rt.stm.keys("alice", "default").prefix
    assert rt.transcript.path(user_id="alice", session_id=SESSION) == rt.transcript.path(
        user_id="alice", session_id=SESSION, tenant_id="default"
    )
    # and each reader's STM holds exactly its owner's secrets: its own and its twin's
    for reader in IDENTITIES:
        assert found(stm_texts(world, reader)) == own(reader), reader


@slow
@given(reader=readers, asked=readers)
def test_stm_and_recall_show_an_owner_only_its_own_secrets(
    world: World, reader: Who, asked: Who
) -> None:
    # When a reader asks about any identity's secret through recall and the STM views
    query = f"what is the locker key code {asked.secret}?"
    seen = found(recall_text(world, reader, query)) | found(stm_texts(world, reader))
    # Then it sees nothing that is not its owner's
    assert seen <= own(reader)
    if asked.owner == reader.owner:
        assert asked.secret in seen  # positive control: its own secret is found


@slow
@given(reader=readers, asked=readers)
def test_ltm_search_preload_and_recall_after_finalise_stay_within_the_owner(
    finalised: World, reader: Who, asked: Who
) -> None:
    # When the memories are long-term cards and a reader searches for any secret
    query = f"spare locker key code {asked.secret} {asked.place}"
    seen = found(ltm_texts(finalised, reader, query)) | found(recall_text(finalised, reader, query))
    # Then only its owner's cards come back, and its own secret does
    assert seen <= own(reader)
    if asked.owner == reader.owner:
        assert asked.secret in seen


@pytest.mark.parametrize("tenant", [None, "default", TENANTS[2]])
def test_the_cli_recall_stays_within_the_owner(finalised: World, tenant: str | None) -> None:
    reader = next(w for w in IDENTITIES if w.tenant == tenant and w.user == USERS[0])
    args = ["recall", f"locker key code {reader.secret}", "--user", reader.user,
            "--session", SESSION, "--json", "--top-k", "20"]  # fmt: skip
    if tenant is not None:
        args += ["--tenant", tenant]
    env = process_env(finalised.runtime.settings)
    proc = subprocess.run(
        [sys.executable, "-m", "memstrata.ops.cli", *args], cwd=REPO_ROOT, env=env,
        capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = found(proc.stdout)
    assert seen <= own(reader)
    assert reader.secret in seen


def test_the_fixture_identities_cover_every_combination() -> None:
    assert {(w.tenant, w.user) for w in IDENTITIES} == {(t, u) for t in TENANTS for u in USERS}
    assert len({w.owner for w in IDENTITIES}) == 6  # 8 identities, 6 owners
