"""The raw-history floor: what no curated layer kept still comes back, once, with its date."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from memstrata.core.authority.admin import create_tenant, create_user
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.history import HistoryIndex, history_id, project_transcripts
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.ltm.vector import MilvusVectorIndex
from memstrata.core.models.transcript import MessageIn
from memstrata.core.recall.pool import SourceType, Verdict
from memstrata.core.recall.result import RecallResult
from memstrata.core.recall.service import RecallRequest
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from tests.conftest import REDIS_URL, _purge
from tests.integration import ltm_env
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]

milvus_server = ltm_env.milvus_server
embedder = ltm_env.embedder

AT = 1_683_500_000.0  # 2023-05-07


@pytest.fixture
def runtime(
    lifecycle_pg: str, milvus_server: MilvusServer, embedder: CachedEmbedder, tmp_path: Path
) -> Iterator[Runtime]:
    ns = f"t{uuid.uuid4().hex[:10]}"
    rt = Runtime(
        load_settings(
            redis_url=REDIS_URL, key_namespace=ns, transcript_dir=tmp_path / "l0",
            postgres_url=lifecycle_pg,
            ltm=LtmSettings(milvus_uri=milvus_server.uri, collection_prefix=ns),
        ),
        embedder=embedder,
    )  # fmt: skip
    with rt.engine.begin() as conn:
        create_tenant(db=conn, tenant={"id": ns, "name": ns})
        create_user(db=conn, user={"tenant_id": ns, "id": "u1"})
    yield rt
    ltm = rt.ltm
    assert ltm.history is not None
    ltm.history.drop()
    ltm.lexical.drop()
    ltm.vector.drop()
    _purge(rt.redis, ns)
    rt.close()


def say(rt: Runtime, turn: list[tuple[str, str]], at: float) -> list[str]:
    """A turn through L0, the ingest pipeline and the raw-history projection."""
    t = rt.transcript.append_turn(
        user_id="u1", tenant_id=rt.settings.key_namespace, session_id="s1", at=at,
        messages=[MessageIn(role=role, content=text) for role, text in turn],
    )  # fmt: skip
    rt.pipeline.process([(t.pointer, list(t.records))])
    history = rt.ltm.history
    assert history is not None
    history.project(t.records)
    return [r.message_id for r in t.records]


def ask(runtime: Runtime, query: str) -> RecallResult:
    """The user's question a day after :data:`AT`, explained, in a session of its own."""
    recaller = runtime.recaller()
    try:
        return recaller.recall(RecallRequest(
            tenant_id=runtime.settings.key_namespace, user_id="u1", session_id="s2",
            query=query, now=AT + 86400, explain=True,
        ))  # fmt: skip
    finally:
        recaller.close()


def test_what_no_curated_layer_kept_comes_back_from_raw_history(runtime: Runtime) -> None:
    # Given an assistant answer the extractor keeps nothing of, said on 2023-05-07
    ids = say(runtime, [("user", "hi"), ("assistant",
              "The ferry to Vashon leaves from Fauntleroy every 40 minutes.")], AT)  # fmt: skip
    # When the user later asks about it
    out = ask(runtime, "how often does the Vashon ferry leave?")
    # Then the raw message is injected under its own heading, dated, with its message id
    assert out.degraded == {}
    assert out.memory.history and out.memory.history[0].message_ids == (ids[1],)
    assert "From earlier conversations:\n2023-05-07:\n- The ferry to Vashon" in out.text
    assert out.explain is not None
    raw = [s for s in out.explain.candidates if s.candidate.source_type is SourceType.RAW_HISTORY]
    assert raw[0].candidate.memory_id == history_id(runtime.settings.key_namespace, "u1", ids[1])
    # and it is marked as no curated card's: the card layer's silence is not held against it
    assert [s.candidate.uncurated for s in raw if s.candidate.message_ids == (ids[1],)] == [True]


def test_a_raw_message_that_says_nothing_of_its_own_gets_no_stand_in_vote(
    runtime: Runtime,
) -> None:
    # Given a user message the write path judged empty (a reaction and a question about
    # the listener) and an assistant answer it keeps nothing of: no card holds either
    ids = say(runtime, [("user", "Wow, great ferry pic! Where did you take it?"),
                        ("assistant", "That ferry photo is from the Fauntleroy dock in May.")],
              AT)  # fmt: skip
    out = ask(runtime, "where was the ferry photo taken?")
    assert out.explain is not None and out.degraded == {}
    raw = {s.candidate.message_ids[0]: s.candidate for s in out.explain.candidates
           if s.candidate.source_type is SourceType.RAW_HISTORY}  # fmt: skip
    # Then the answer stands in for the card layer that cannot see it, the reaction not
    assert set(raw) == set(ids)
    assert raw[ids[1]].uncurated and not raw[ids[0]].uncurated


def test_a_question_naming_a_day_gets_what_was_said_that_day_first(runtime: Runtime) -> None:
    # Given two raw answers a month apart that the extractor keeps nothing of
    month = 30 * 86400
    older = say(runtime, [("user", "hi"), ("assistant",
                "The Vashon ferry leaves Fauntleroy every 40 minutes.")], AT - month)  # fmt: skip
    newer = say(runtime, [("user", "hi again"), ("assistant",
                "The Vashon ferry leaves Fauntleroy every 30 minutes.")], AT)  # fmt: skip
    # When the user asks what was said on the older one's day (2023-04-07)
    out = ask(runtime, "How often did the Vashon ferry leave, as you said on 7 April 2023?")
    assert out.explain is not None and out.degraded == {}
    raw = [s for s in out.explain.candidates if s.candidate.source_type is SourceType.RAW_HISTORY]
    # Then that day's answer comes first, for having been said that day
    assert raw[0].candidate.message_ids == (older[1],)
    assert raw[0].parts["named_date"] > 0
    assert [s.parts["named_date"] for s in raw if s.candidate.message_ids == (newer[1],)] == [0.0]
    # and without a date the newer answer does
    plain = ask(runtime, "How often does the Vashon ferry leave?")
    assert plain.memory.history and plain.memory.history[0].message_ids == (newer[1],)


def test_a_raw_message_a_curated_memory_already_holds_is_not_injected_twice(
    runtime: Runtime,
) -> None:
    # Given a user statement the write path kept, made an episode card when its session
    # ended (and the raw index holds it too)
    ids = say(runtime, [("user", "I moved to Lisbon last spring with my two cats.")], AT)
    ltm = runtime.ltm

    def project(card_ids: Sequence[str]) -> None:
        ltm.projector.project(list(card_ids))

    lc = runtime.lifecycle(on_cards=project)
    finalise(lc, user_id="u1", tenant_id=runtime.settings.key_namespace, session_id="s1",
             now=AT + 7200)  # fmt: skip
    out = ask(runtime, "where did I move last spring?")
    assert out.explain is not None
    # Then the curated memory is kept and the raw copy of its message is a duplicate
    kept = [s for s in out.explain.candidates if s.verdict is Verdict.KEPT]
    assert {s.candidate.source_type for s in kept if ids[0] in s.candidate.message_ids} == {
        SourceType.LTM
    }  # the episode card (and the session summary), never the raw copy
    raw = [s for s in out.explain.candidates if s.candidate.source_type is SourceType.RAW_HISTORY]
    assert raw and all(
        s.verdict is Verdict.DUPLICATE for s in raw if ids[0] in s.candidate.message_ids
    )
    assert out.text.count("Lisbon") == 1
    # and the raw copy of the carded message is known to be curated
    assert [s.candidate.uncurated for s in raw if ids[0] in s.candidate.message_ids] == [False]


def test_the_index_is_rebuilt_from_l0_alone(runtime: Runtime) -> None:
    # Given two turns in L0 and an emptied raw-history index
    say(runtime, [("user", "my locker code is 4417")], AT)
    say(runtime, [("assistant", "noted: locker 4417")], AT + 5)
    history = runtime.ltm.history
    assert history is not None
    history.drop()
    history.ensure_schema()
    # When it is rebuilt from the transcript files
    assert project_transcripts(history, runtime.transcript) == 2
    # Then the owner's messages are found again, and only the owner's
    hits = history.search("locker 4417", tenant_id=runtime.settings.key_namespace,
                          user_id="u1", k=5, now=AT + 10)  # fmt: skip
    assert len(hits) == 2
    assert history.search("locker 4417", tenant_id="other", user_id="u1", k=5, now=AT) == []


def test_a_message_found_by_its_vector_alone_comes_back_with_its_text(runtime: Runtime) -> None:
    # Given a message in the vector collection whose lexical record is gone (so the
    # lexical list cannot bring its text)
    ids = say(runtime, [("user", "my locker code is 4417")], AT)
    history = runtime.ltm.history
    assert history is not None
    record = history_id(runtime.settings.key_namespace, "u1", ids[0])
    history.lexical.delete([record])
    # When it is found by meaning
    hits = history.search("which locker is mine?", tenant_id=runtime.settings.key_namespace,
                          user_id="u1", k=5, now=AT + 10)  # fmt: skip
    # Then the vector collection returned its text with the hit
    assert [(h.record_id, h.message_id, h.text) for h in hits] == [
        (record, ids[0], "my locker code is 4417")
    ]


def test_a_raw_vector_collection_made_without_text_still_answers(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a raw-history vector collection made by an earlier version (no text fields)
    history = runtime.ltm.history
    assert history is not None
    old = history.vector
    assert isinstance(old, MilvusVectorIndex)
    old.drop()
    MilvusVectorIndex(old.conn, collection=old.collection, dim=old.dim).ensure_schema()
    # When this version opens it
    vector = MilvusVectorIndex(old.conn, collection=old.collection, dim=old.dim, with_text=True)
    with caplog.at_level(logging.WARNING, logger="memstrata.core.ltm.vector"):
        vector.ensure_schema()
    # Then it says so and writes and searches without the text fields
    assert not vector.stores_text
    assert "reindex-history --drop" in caplog.text
    index = HistoryIndex(lexical=history.lexical, vector=vector, embedder=history.embedder)
    try:
        t = runtime.transcript.append_turn(
            user_id="u1", tenant_id=runtime.settings.key_namespace, session_id="s1", at=AT,
            messages=[MessageIn(role="user", content="my locker code is 4417")],
        )  # fmt: skip
        assert index.project(t.records) == 1
        hits = index.search("which locker is mine?", tenant_id=runtime.settings.key_namespace,
                            user_id="u1", k=5, now=AT + 10)  # fmt: skip
    finally:
        index.close()
    # and a hit's text is read from the lexical collection, as before
    assert [h.text for h in hits] == ["my locker code is 4417"]
