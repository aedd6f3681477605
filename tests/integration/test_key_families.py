"""Every key the write paths leave in Redis belongs to a family ``core.keys`` declares.

One namespace, real Redis and PostgreSQL: turns recorded through the ingest queue and
drained through the pipeline (with the compression trigger counting them), a turn whose
transcript is gone (dead-lettered), a turn that failed alone (its attempt count), direct
STM writes, a recall without LTM, a cached compression, a promotion scan that stops
half-way, a session finalised, recall hits synced into the ledger, the sweep, and a turn
left queued; then, holding a job lock, a SCAN of the namespace.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from memstrata.core.api import MemoryClient, parse_messages
from memstrata.core.compress.cache import SessionActivity, ViewCache, due_for_compression
from memstrata.core.compress.service import compress_cached
from memstrata.core.compress.tokens import default_counter
from memstrata.core.extract.rules import Extraction, ExtractionContext
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.keys import FAMILIES, families_of
from memstrata.core.lifecycle import scan as scan_module
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.lifecycle.maintenance import sync_access
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.scan import scan
from memstrata.core.ltm.card import CardDraft
from memstrata.core.maintenance import record_run, run_locked
from memstrata.core.models.transcript import TranscriptRecord, TurnPointer
from memstrata.core.policy.write import WritePolicy
from memstrata.core.recall.service import RecallRequest
from memstrata.core.runtime import Runtime
from tests.integration.test_lifecycle_env import (
    NOW,
    Tenant,
    item,
    kicks,
    lc,
    lc_engine,
    lifecycle_pg,
    settings,
    tenant,
)

pytestmark = pytest.mark.integration
__all__ = ["kicks", "lc", "lc_engine", "lifecycle_pg", "settings", "tenant"]  # fixtures

PREF = "I prefer the conclusion first, then the details."
DEBUG = "createOrder times out on prod-k8s. Do not restart the production database."
POOL = "Timeouts of this kind are usually caused by the thread pool."
# no path here writes Celery's broker keys (no worker runs in this test)
NOT_WRITTEN_HERE = {"<ns>:celery:*"}


def _write_everything(res: Runtime, lc: Lifecycle, tenant: Tenant, mp: pytest.MonkeyPatch) -> None:
    ns = res.settings.key_namespace
    u, t = tenant.user, tenant.id
    activity = SessionActivity(res.redis, namespace=ns)
    counter = default_counter()
    kicked: list[int] = []

    def kick(shard: int) -> None:  # stands in for the Celery drain task
        kicked.append(shard)

    client = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=kick)

    # ingest: the preference in two sessions (promoted to PG later), a debugging turn
    for n, (session, text) in enumerate([("d1", PREF), ("d1", DEBUG), ("d2", PREF)]):
        client.record_turn(
            user_id=u,
            tenant_id=t,
            session_id=session,
            task_id="bug456",
            messages=[{"role": "user", "content": text}],
            at=NOW + n * 60,
        )
    # ... and a pointer whose transcript does not exist: dead-lettered by the drain
    res.queue.enqueue(
        TurnPointer(
            user_id="ghost", session_id="nowhere", turn_id="t_1", at=NOW, offset=0, length=1
        )
    )

    def on_batch(turns: list[tuple[TurnPointer, list[TranscriptRecord]]]) -> None:
        due_for_compression(
            activity, [recs for _p, recs in turns], counter, threshold=10**9, step=10**9
        )

    dead = 0
    for shard in range(res.queue.shards):
        report = drain_shard(
            shard,
            queue=res.queue,
            transcript=res.transcript,
            pipeline=res.pipeline,
            consumer="key-families",
            batch=50,
            max_run_s=30,
            on_batch=on_batch,
        )
        dead += report.dead
    assert kicked and dead == 1

    # STM written directly: an entity-indexed conclusion (the batch queue's kind), and
    # another tenant's user with a long-lived and a short-lived item
    res.stm.upsert(
        item(
            u,
            t,
            "d2",
            POOL,
            "d2:conclusion:thread_pool",
            subtype="conclusion",
            importance=0.45,
            entities=("thread_pool",),
        )
    )
    res.stm.upsert(item("bob", "zz_keys", "b1", "The log output from just now.", "b1:obs:log"))
    res.stm.upsert(item("bob", "zz_keys", "b1", "Build 17 failed.", "b1:obs:build", ttl_s=60))

    # recall without LTM: profile cache filled, access counts and the flag written
    recaller = res.recaller(ltm=False)
    try:
        recaller.recall(
            RecallRequest(
                tenant_id=t,
                user_id=u,
                session_id="d2",
                task_id="bug456",
                query="What did we find on the createOrder timeout?",
                now=NOW + 600,
            )
        )
    finally:
        recaller.close()

    # compression: a cached view of d1, from the token counts taken at ingest
    compress_cached(
        transcript=res.transcript,
        stm=res.stm,
        cache=ViewCache(res.redis, namespace=ns),
        user_id=u,
        tenant_id=t,
        session_id="d1",
        budget_tokens=2000,
        activity=activity,
        now=NOW + 600,
    )

    # lifecycle: one user per round and an item budget of 1, so the scan applies alice's
    # decisions and stops before bob, leaving its cursor (as a big deployment's does)
    mp.setattr(scan_module, "USERS_PER_ROUND", 1)
    report_ = scan(lc, now=NOW + 700, max_items=1, max_s=30)
    assert not report_.complete and report_.applied.get("path_a") == 1
    assert report_.applied.get("queued") == 1
    finalise(lc, user_id=u, tenant_id=t, session_id="d1", now=NOW + 800)
    # recall returned a card (recall's access ZSET): its count reaches the ledger
    card = lc.ledger.write(
        CardDraft(
            tenant_id=t,
            user_id=u,
            canonical_key="k1",
            memory_type="experience",
            title="pool",
            summary=POOL,
            tags=["topic:thread_pool"],
        ),
        now=NOW,
    )
    res.redis.zincrby(lc.keys.access(u, t), 1, f"ltm:{card.memory_id}")
    assert sync_access(lc, now=NOW + 900, max_users=1) == 1

    # the sweep removes bob's short-lived item
    assert res.stm.sweep(now=NOW + 120, max_items=100).removed == 1

    # a turn whose drain failed on it alone stays pending with its attempt count and error
    _fail_alone(res)
    # a Beat job's run is recorded (tasks/observe.py does this after each scheduled task)
    record_run(res.redis, ns, "sweep-expired-stm", started=NOW, finished=NOW + 1, outcome="ok")

    # a last turn stays queued: its shard's stream entry and kick flag are live
    assert client.record_turn(
        user_id=u,
        tenant_id=t,
        session_id="d3",
        messages=[{"role": "user", "content": DEBUG}],
        at=NOW + 1000,
    ).kicked


class _Boom:
    def extract_turn(self, turn: Sequence[TranscriptRecord], ctx: ExtractionContext) -> Extraction:
        raise RuntimeError("boom")


def _fail_alone(res: Runtime) -> None:
    appended = res.transcript.append_turn(
        user_id="carol",
        session_id="c1",
        messages=parse_messages([{"role": "user", "content": PREF}]),
    )
    shard, _ = res.queue.enqueue(appended.pointer)
    assert res.queue.claim_or_release(shard, "key-families-2", 10)  # read, then its drain failed
    boom = IngestPipeline(store=res.stm, extractor=_Boom(), policy=WritePolicy())
    report = drain_shard(
        shard, queue=res.queue, transcript=res.transcript, pipeline=boom,
        consumer="key-families-2", batch=10, max_run_s=30, attempts=res.attempts,
    )  # fmt: skip
    assert report.alone == 1 and report.dead == 0


def test_every_key_the_write_paths_leave_belongs_to_one_declared_family(
    res: Runtime, lc: Lifecycle, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = res.settings.key_namespace
    _write_everything(res, lc, tenant, monkeypatch)

    def survey() -> dict[str, str]:
        return {
            str(k): str(res.redis.type(k)) for k in res.redis.scan_iter(match=f"{ns}:*", count=1000)
        }

    # the survey runs under a job lock, so the lock key is in it too
    keys = run_locked(res.redis, ns, "key-survey", ttl_s=60, work=survey)
    assert keys is not None
    # Then every key belongs to exactly one declared family ...
    assert {k for k in keys if len(families_of(k, ns)) != 1} == set()
    family = {k: families_of(k, ns)[0] for k in keys}
    # ... holds the Redis type the family declares ...
    assert {
        k: typ
        for k, typ in keys.items()
        if family[k].type != "various" and family[k].type.lower() != typ
    } == {}
    # ... and every family these paths write was seen
    seen = {f.shape for f in family.values()}
    assert {f.shape for f in FAMILIES} - NOT_WRITTEN_HERE - seen == set()
