"""Scoped erase (issue #14 item 7): one owner leaves every layer, its neighbours stay whole.

Five owners write through the real paths: authority facts (with history), preferences and
a project role in PostgreSQL; turns through ``record_turn`` → L0 → the ingest queue → the
drain (STM, decisions, compression counters, the raw-history index), one recall (profile
cache, recall bookkeeping), a compressed view, the session's finalise (promotion, cards
in the ledger projected into a real milvus-lite server, lifecycle records, audit rows),
then one more turn left queued and a dead-lettered one.  The victim ``alice`` of tenant
A is erased by ``memstrata erase`` (after a ``--dry-run`` that changes nothing); then every
store is scanned: every Redis key of the namespace with its content, every row of every
PostgreSQL table, every record of the four Milvus collections, every L0 file.  Nothing of
the victim is left but one audit record without content and the erase marker, and the
neighbours (the same user id in tenant B and in the default tenant, another user of
tenant A) read exactly as before.  A second owner's erase is interrupted by a real Milvus
stop after the first steps and completes when run again.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memstrata.core.agent_store import AgentStore
from memstrata.core.api import MemoryClient
from memstrata.core.apikeys import ApiKeys
from memstrata.core.authority.admin import create_project, create_tenant, create_user
from memstrata.core.authority.facts import grant_role, upsert_fact
from memstrata.core.compress.cache import SessionActivity, ViewCache
from memstrata.core.compress.service import compress_cached
from memstrata.core.compress.tokens import EstimateCounter
from memstrata.core.erase import STEPS, erase_owner, erase_state
from memstrata.core.errors import InvalidInput, StoreUnavailable
from memstrata.core.ids import owner_tenant
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.queue import Entry
from memstrata.core.keys import user_scope
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.milvus_server import MilvusServer, free_port
from memstrata.core.models.transcript import MessageIn, TranscriptRecord, TurnPointer
from memstrata.core.recall.service import RecallRequest
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from tests.conftest import REDIS_URL, _purge
from tests.integration import ltm_env
from tests.integration.conftest import REPO_ROOT, process_env
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

embedder = ltm_env.embedder

NOW = 1_900_000_000.0
RUN = uuid.uuid4().hex[:6]
TA, TB = f"ta{RUN}", f"tb{RUN}"


@dataclass(frozen=True)
class Who:
    tenant: str | None
    user: str
    secret: str

    @property
    def owner(self) -> tuple[str, str]:
        return owner_tenant(self.tenant), self.user

    @property
    def scope(self) -> str:
        return user_scope(self.user, self.tenant)


VICTIM = Who(TA, f"alice{RUN}", f"zqvictim{RUN}x")
NEIGHBOURS = (
    Who(TB, f"alice{RUN}", f"zqsameid{RUN}x"),  # the same user id in another tenant
    Who(None, f"alice{RUN}", f"zqdefault{RUN}x"),  # ... and in the default tenant
    Who(TA, f"bob{RUN}", f"zqbob{RUN}x"),  # another user of the victim's tenant
)
CAROL = Who(TA, f"carol{RUN}", f"zqcarol{RUN}x")  # erased with an interruption
DAVE = Who(TA, f"dave{RUN}", f"zqdave{RUN}x")  # erased by a process SIGKILLed midway
EVERYONE = (VICTIM, *NEIGHBOURS, CAROL, DAVE)


def turns(who: Who) -> list[str]:
    return [
        f"I keep my spare locker key code {who.secret} taped inside the garden shed.",
        f"My neighbour keeps a parrot named {who.secret} in the blue mailbox.",
        f"Don't restart the prod database of project {who.secret}. Please answer in Chinese.",
    ]


@dataclass
class World:
    rt: Runtime
    server: MilvusServer


@pytest.fixture(scope="module")
def milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    server = MilvusServer(tmp_path_factory.mktemp("erase_milvus") / "ltm.db",
                          f"127.0.0.1:{free_port()}")  # fmt: skip
    server.start()
    yield server
    server.stop()


def _write_authority(rt: Runtime, who: Who) -> None:
    tenant, user = who.owner
    # the tenant ("default" may exist from another test) and its project may exist already
    with contextlib.suppress(InvalidInput), rt.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": tenant, "name": tenant})
    with contextlib.suppress(InvalidInput), rt.engine.begin() as conn:
        create_project(db=conn, project={"tenant_id": tenant, "id": "p1", "name": "p1"})
    with rt.engine.begin() as conn:
        create_user(db=conn, user={"tenant_id": tenant, "id": user})
    for value in ("concise", "detailed"):  # a fact with history
        with rt.engine.begin() as conn:
            upsert_fact(db=conn, tenant_id=tenant, user_id=user, domain="profile",
                        canonical_fact_key="profile.answer_style", value=value)  # fmt: skip
    with rt.engine.begin() as conn:
        upsert_fact(db=conn, tenant_id=tenant, user_id=user, domain="preference",
                    canonical_fact_key="preference.locker", value=who.secret)  # fmt: skip
        grant_role(db=conn, tenant_id=tenant, user_id=user, project_id="p1", role="dev",
                   scope="read_write")  # fmt: skip
    # an agent-store document (LangGraph BaseStore) in the user's namespace
    AgentStore(rt.engine, tenant_id=who.tenant).put((user, "notes"), "locker",
                                                    {"text": who.secret})  # fmt: skip


def _drain(rt: Runtime) -> None:
    activity = SessionActivity(rt.redis, namespace=rt.settings.key_namespace)
    history = rt.ltm.history
    assert history is not None

    def after_batch(batch: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]]) -> None:
        for _pointer, records in batch:  # what the ingest task does after a batch
            activity.note_turn(records, EstimateCounter())
            history.project(records)

    for shard in range(rt.settings.ingest_shards):
        drain_shard(shard, queue=rt.queue, transcript=rt.transcript, pipeline=rt.pipeline,
                    consumer="c1", batch=200, max_run_s=60, on_batch=after_batch)  # fmt: skip


@pytest.fixture(scope="module")
def world(
    lifecycle_pg: str,
    milvus: MilvusServer,
    embedder: CachedEmbedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    settings = load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path_factory.mktemp("erase") / "transcripts",
        postgres_url=lifecycle_pg,
        ltm=LtmSettings(milvus_uri=milvus.uri, collection_prefix=namespace, milvus_timeout_s=3),
    )
    rt = Runtime(settings, embedder=embedder)
    ltm = rt.ltm
    client = MemoryClient(transcript=rt.transcript, queue=rt.queue, kicker=lambda shard: None)
    def project(ids: Sequence[str]) -> None:  # what the memstrata.ltm.index task does
        ltm.projector.project(list(ids))

    lc = rt.lifecycle(on_cards=project)
    recaller = rt.recaller()
    try:
        for who in EVERYONE:
            _write_authority(rt, who)
        ApiKeys(rt.engine).create(TA, name=f"agents of {TA}", scopes=["read"])  # the tenant's
        for who in EVERYONE:
            for n, content in enumerate(turns(who)):
                client.record_turn(user_id=who.user, tenant_id=who.tenant, session_id="s1",
                                   messages=[MessageIn(role="user", content=content)],
                                   at=NOW + n)  # fmt: skip
        _drain(rt)
        for who in EVERYONE:
            recaller.recall(RecallRequest(tenant_id=who.tenant, user_id=who.user,
                                          session_id="s1", query=f"locker code {who.secret}",
                                          now=NOW + 60))  # fmt: skip
            compress_cached(transcript=rt.transcript, stm=rt.stm, user_id=who.user,
                            cache=ViewCache(rt.redis, namespace=namespace), session_id="s1",
                            budget_tokens=2000, tenant_id=who.tenant, now=NOW + 60)  # fmt: skip
            finalise(lc, user_id=who.user, tenant_id=who.tenant, session_id="s1",
                     now=NOW + 7200)  # fmt: skip
            # a second session still in STM, a turn still queued, one dead-lettered
            client.record_turn(user_id=who.user, tenant_id=who.tenant, session_id="s2",
                               messages=[MessageIn(role="user", content=turns(who)[1])],
                               at=NOW + 7300)  # fmt: skip
        _drain(rt)
        for who in EVERYONE:
            receipt = client.record_turn(user_id=who.user, tenant_id=who.tenant, session_id="s3",
                                         messages=[MessageIn(role="user", content=turns(who)[0])],
                                         at=NOW + 7400)  # fmt: skip
            pointer = TurnPointer(user_id=who.user, tenant_id=owner_tenant(who.tenant),
                                  session_id="s3", turn_id=receipt.turn_id, at=NOW + 7400,
                                  offset=0, length=1)  # fmt: skip
            rt.queue.dead_letter(Entry("0-1", pointer, pointer.model_dump_json()), "test")
        ltm.lexical.refresh()
        yield World(rt, milvus)
    finally:
        recaller.close()
        with contextlib.suppress(Exception):
            ltm.lexical.drop()
            ltm.vector.drop()
            if ltm.history is not None:
                ltm.history.drop()
        _purge(rt.redis, namespace)
        rt.close()


# ---------------------------------------------------------------- scanning every store

Dump = tuple[dict[str, list[str]], dict[str, list[dict[str, Any]]],
             dict[str, list[dict[str, Any]]], dict[str, str]]  # fmt: skip


def _j(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str,
                      sort_keys=True)  # fmt: skip


def redis_dump(rt: Runtime) -> dict[str, list[str]]:
    """Every key of the namespace with each of its elements (field, member, entry)."""
    r: Any = rt.redis  # decoded replies: str everywhere
    out = {}
    for key in sorted(r.scan_iter(match=f"{rt.settings.key_namespace}:*", count=1000)):
        kind = r.type(key)
        if kind == "hash":
            elems = [_j([f, v]) for f, v in sorted(r.hgetall(key).items())]
        elif kind == "zset":
            elems = [_j([m, sc]) for m, sc in r.zrange(key, 0, -1, withscores=True)]
        elif kind == "string":
            elems = [str(r.get(key))]
        elif kind == "stream":  # turn pointers parsed, so their ids can be matched
            elems = [_j([eid, {k: json.loads(v) if k == "p" else v for k, v in f.items()}])
                     for eid, f in r.xrange(key)]  # fmt: skip
        else:
            elems = [str(kind)]
        out[str(key)] = elems
    return out


def pg_dump(rt: Runtime) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of the database."""
    with rt.engine.connect() as conn:
        tables = [t for (t,) in conn.execute(text(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ))]  # fmt: skip
        return {t: [dict(row._mapping) for row in conn.execute(text(f'SELECT * FROM "{t}"'))]
                for t in tables}  # fmt: skip


def milvus_dump(rt: Runtime) -> dict[str, list[dict[str, Any]]]:
    """Every record of the four collections (scalar and text fields)."""
    ltm = rt.ltm
    assert ltm.history is not None
    out = {}
    indexes: list[Any] = [ltm.lexical, ltm.vector, ltm.history.lexical, ltm.history.vector]
    for routed in indexes:
        index = getattr(routed, "serving", routed)  # card indexes: the serving generation
        fields = ["id", "tenant_id", "user_id", "status"]
        if index.name == "lexical":
            fields += ["title", "summary", "content", "bm25_text"]
        out[index.collection] = list(index.conn.client.query(
            index.collection, filter='id != ""', output_fields=fields, limit=16_384,
            consistency_level="Strong"))  # fmt: skip
    return out


def l0_dump(rt: Runtime) -> dict[str, str]:
    root = rt.transcript.root
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def dump(rt: Runtime) -> Dump:
    return redis_dump(rt), pg_dump(rt), milvus_dump(rt), l0_dump(rt)


def names(who: Who, blob: str) -> bool:
    """Whether one stored element names the owner (scope, id pair) or holds its secret."""
    tenant, user = who.owner
    pair = f'"user_id":"{user}"' in blob and f'"tenant_id":"{tenant}"' in blob
    return who.secret in blob or who.scope in blob or pair


def of_owner(who: Who, row: dict[str, Any]) -> bool:
    tenant, user = who.owner
    user_col = row.get("user_id", row.get("id") if "authority_version" in row else None)
    return (row.get("tenant_id") == tenant and user_col == user) or names(who, _j(row))


def owner_view(who: Who, d: Dump) -> dict[str, Any]:
    """Everything of one owner in every store, to compare before and after."""
    redis_d, pg_d, milvus_d, l0_d = d
    tenant, user = who.owner
    counts_key = f":tenant:{{{tenant}}}:users"
    redis_v = {}
    for key, elems in redis_d.items():
        if f"{{{who.scope}}}" in key:
            mine = elems
        elif key.endswith(counts_key):
            mine = [e for e in elems if json.loads(e)[0] == user]
        else:
            mine = [e for e in elems if names(who, e)]
        if mine:
            redis_v[key] = mine
    return {
        "redis": redis_v,
        "pg": {t: sorted(_j(r) for r in rows if of_owner(who, r)) for t, rows in pg_d.items()},
        "milvus": {c: sorted(r["id"] for r in rows
                             if (r["tenant_id"], r["user_id"]) == (tenant, user))
                   for c, rows in milvus_d.items()},
        "l0": {p: v for p, v in l0_d.items() if p.startswith(f"t/{tenant}/u/{user}/")},
    }


def test_erase_removes_the_owner_from_every_store_and_leaves_its_neighbours_whole(
    world: World,
) -> None:
    rt = world.rt
    before = dump(rt)
    # Given the victim and each neighbour hold data in every store
    for who in (VICTIM, *NEIGHBOURS):
        view = owner_view(who, before)
        assert view["l0"] and view["redis"], who
        assert all(view["milvus"].values()), (who, {c: len(v) for c, v in view["milvus"].items()})
        for table in ("users", "user_profiles", "user_preferences", "user_project_roles",
                      "stable_memory_facts", "ltm_cards", "lifecycle_audit",
                      "agent_store_items"):  # fmt: skip
            assert view["pg"][table], (who, table)
    victim = owner_view(VICTIM, before)["redis"]
    assert any(f"{{{VICTIM.scope}}}" not in k for k in victim)  # global structures too
    env = process_env(rt.settings)
    base = [sys.executable, "-m", "memstrata.ops.cli", "erase", "--tenant", TA,
            "--user", VICTIM.user,
            "--json", "--yes"]  # fmt: skip

    # When a dry run is asked for
    dry = subprocess.run([*base, "--dry-run"], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert dry.returncode == 0, dry.stderr[-3000:]
    plan = json.loads(dry.stdout)
    # Then it names what is there in every layer and changes nothing
    assert plan["dry_run"] and not plan["removed"]
    for key in ("l0.files", "redis.keys", "redis.members", "redis.queued_turns",
                "redis.dead_letters", "pg.users", "pg.user_profiles", "pg.user_preferences",
                "pg.user_project_roles", "pg.stable_memory_facts", "pg.ltm_cards",
                "pg.ltm_projections", "pg.lifecycle_audit", "pg.agent_store_items",
                "ltm.lexical", "ltm.vectors",
                "ltm.raw_lexical", "ltm.raw_vectors"):  # fmt: skip
        assert plan["found"][key] > 0, (key, plan["found"])
    assert dump(rt) == before
    assert erase_state(rt, user_id=VICTIM.user, tenant_id=TA) is None

    # When the owner is erased
    done = subprocess.run(base, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["finished"] and not report["resumed"]
    assert report["removed"] == plan["found"]
    after = dump(rt)

    # Then no Redis key of the namespace, nor any element of one, names the victim
    gone = owner_view(VICTIM, after)
    assert gone["redis"] == {}
    assert [k for k, elems in after[0].items() for e in elems if VICTIM.secret in k + e] == []
    # And no PostgreSQL row is left but the erase marker and one audit record without content
    assert {t: len(rows) for t, rows in gone["pg"].items() if rows} == {
        "lifecycle_audit": 1, "owner_erasures": 1}  # fmt: skip
    audit = next(r for r in after[1]["lifecycle_audit"] if of_owner(VICTIM, r))
    assert (audit["action"], audit["memory_ids"], audit["breakdown"]) == ("erase", [], {})
    assert VICTIM.secret not in _j(audit)
    marker = next(r for r in after[1]["owner_erasures"] if of_owner(VICTIM, r))
    assert marker["finished_at"] is not None and marker["steps"] == [*STEPS, "done"]
    # And no record in any of the four Milvus collections, no L0 file
    assert gone["milvus"] == {c: [] for c in after[2]} and gone["l0"] == {}
    assert [r for rows in after[2].values() for r in rows if names(VICTIM, _j(r))] == []
    assert [p for p, v in after[3].items() if VICTIM.secret in v] == []
    # And the tenant's own rows stay: its API keys are the tenant's, not the user's
    tenant_keys = [r for r in before[1]["api_keys"] if r["tenant_id"] == TA]
    assert tenant_keys and [r for r in after[1]["api_keys"] if r["tenant_id"] == TA] == tenant_keys
    # And every neighbour reads exactly as before, in every store
    for who in NEIGHBOURS:
        assert owner_view(who, after) == owner_view(who, before), who

    # When it is run again, then there is nothing left to do and no second audit record
    again = erase_owner(rt, user_id=VICTIM.user, tenant_id=TA)
    assert again.finished and sum(again.removed.values()) == 0
    assert len([r for r in pg_dump(rt)["lifecycle_audit"] if of_owner(VICTIM, r)]) == 1


def test_an_erase_interrupted_after_some_steps_completes_when_run_again(world: World) -> None:
    rt = world.rt
    tenant, user = CAROL.owner
    first_steps = ["queued_turns", "l0", "redis", "postgres"]
    assert owner_view(CAROL, dump(rt))["l0"]
    # Given Milvus goes down, so an erase fails at its LTM step
    world.server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            erase_owner(rt, user_id=user, tenant_id=tenant)
        # Then the marker says the erase is in progress, with the steps it finished
        state = erase_state(rt, user_id=user, tenant_id=tenant)
        assert state is not None and state["finished_at"] is None
        assert state["steps"] == first_steps
        # And those layers are clean already: L0, Redis, PostgreSQL (but the marker)
        partial = owner_view(CAROL, (redis_dump(rt), pg_dump(rt), {}, l0_dump(rt)))
        assert partial["redis"] == {} and partial["l0"] == {}
        assert {t: len(r) for t, r in partial["pg"].items() if r} == {"owner_erasures": 1}
    finally:
        world.server.start()
    # And its LTM records are still there, until the erase runs again
    assert any(owner_view(CAROL, dump(rt))["milvus"].values())
    # When it runs again
    report = erase_owner(rt, user_id=user, tenant_id=tenant)
    # Then it knows it resumes an interrupted erase, and finishes it
    assert report.resumed and report.steps_before == first_steps
    assert report.finished and report.removed["ltm.lexical"] > 0
    view = owner_view(CAROL, dump(rt))
    assert view["redis"] == {} and view["l0"] == {} and not any(view["milvus"].values())
    assert {t: len(r) for t, r in view["pg"].items() if r} == {
        "lifecycle_audit": 1, "owner_erasures": 1}  # fmt: skip
    state = erase_state(rt, user_id=user, tenant_id=tenant)
    assert state is not None and state["finished_at"] is not None and state["runs"] == 2


def test_an_erase_process_killed_midway_is_finished_by_the_next_run(world: World) -> None:
    rt = world.rt
    tenant, user = DAVE.owner
    assert owner_view(DAVE, dump(rt))["l0"]
    first_steps = ["queued_turns", "l0", "redis", "postgres"]
    # Given Milvus is down, so `memstrata erase` hangs in its LTM step (the RPC timeout)
    world.server.stop()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memstrata.ops.cli", "erase", "--tenant", tenant, "--user",
             user, "--yes"], cwd=REPO_ROOT, env=process_env(rt.settings),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while (erase_state(rt, user_id=user, tenant_id=tenant) or {}).get("steps") != (
                first_steps
            ):
                assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
                time.sleep(0.02)
            # When the process is SIGKILLed in the middle of that step
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
    finally:
        world.server.start()
    # Then the marker still says in progress
    state = erase_state(rt, user_id=user, tenant_id=tenant)
    assert state is not None and state["finished_at"] is None and state["steps"] == first_steps
    # When erase runs again, then it resumes and finishes: nothing of the owner is left
    report = erase_owner(rt, user_id=user, tenant_id=tenant)
    assert report.resumed and report.steps_before == first_steps and report.finished
    view = owner_view(DAVE, dump(rt))
    assert view["redis"] == {} and view["l0"] == {} and not any(view["milvus"].values())
    assert {t: len(r) for t, r in view["pg"].items() if r} == {
        "lifecycle_audit": 1, "owner_erasures": 1}  # fmt: skip


def test_erase_refuses_a_bad_id_before_touching_anything(world: World, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        erase_owner(world.rt, user_id="../etc", tenant_id=TA)
    env = process_env(world.rt.settings)
    proc = subprocess.run(
        # the CLI takes external user ids ("a b" is one); a tenant id must be safe
        [sys.executable, "-m", "memstrata.ops.cli", "erase", "--tenant", "a b", "--user", "u",
         "--dry-run"],
        cwd=REPO_ROOT,
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.startswith("memstrata erase: invalid tenant_id")
    assert "Traceback" not in proc.stderr
