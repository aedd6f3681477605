"""Compression of long scripted debugging sessions stored for real (L0 + Redis STM)."""

from __future__ import annotations

import hashlib

import pytest

from memstrata.core.compress.cache import SessionActivity, ViewCache, due_for_compression
from memstrata.core.compress.errors import BudgetTooSmall
from memstrata.core.compress.explain import explain
from memstrata.core.compress.model import DependencyClass, Level, Part
from memstrata.core.compress.service import compress_cached, compress_session, session_items
from memstrata.core.compress.tokens import default_counter
from memstrata.core.errors import NotFound
from memstrata.core.models.memory import MemoryItem, MemoryType
from memstrata.core.models.transcript import MessageIn, Role, TranscriptRecord
from memstrata.core.runtime import Runtime
from memstrata.ops.bench.compress import ingest, retained, scripted_session

pytestmark = pytest.mark.integration


def _l0_digest(res: Runtime, session_id: str) -> str:
    path = res.transcript.path(user_id="u1", session_id=session_id)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _must_keep(items: list[MemoryItem]) -> list[MemoryItem]:
    return [i for i in items if i.memory_type in (MemoryType.DECISION, MemoryType.CONSTRAINT)]


@pytest.mark.parametrize(
    ("lang", "title"), [("en", "Key decisions and constraints"), ("zh", "关键决定和约束")]
)
def test_long_debugging_session_compresses_15_to_1_keeping_every_decision_and_constraint(
    res: Runtime, lang: str, title: str
) -> None:
    # Given a 120-step debugging session with big log outputs, replayed through extraction
    ingest(res, "u1", "s1", scripted_session(lang, cycles=120))
    before = _l0_digest(res, "s1")
    items = session_items(res.stm, "u1", "s1")
    must = _must_keep(items)
    assert len(must) >= 4, "the script states constraints, decisions and a plan"
    # When its view is asked for at 1/15 of its raw size
    raw = compress_session(
        transcript=res.transcript, stm=res.stm, user_id="u1", session_id="s1", budget_tokens=None
    ).raw_tokens
    view = compress_session(
        transcript=res.transcript,
        stm=res.stm,
        user_id="u1",
        session_id="s1",
        budget_tokens=raw // 15,
    )
    # Then it is a formal view within budget, 15:1, with every constraint and decision
    assert view.level is Level.FORMAL
    assert view.view_tokens <= raw // 15 and view.ratio >= 15
    assert [i.id for i in must if not retained(i, view)] == []
    summary = view.messages[0].content
    assert f"## {title}" in summary
    assert {s.key for s in view.sections if s.lines} >= {"goal", "decisions", "state", "next"}
    # And L0 is byte-for-byte unchanged
    assert _l0_digest(res, "s1") == before


def test_class_decisions_follow_what_stm_holds_and_what_replies_quote(res: Runtime) -> None:
    ingest(res, "u1", "s1", scripted_session("en", cycles=30))
    view = compress_session(
        transcript=res.transcript, stm=res.stm, user_id="u1", session_id="s1", budget_tokens=6000
    )
    by_call = {t.tool_call_id: t for t in view.tool_results}
    # step 0's reply ("Confirmed: the root cause is …") is stored as a fact → digested
    assert by_call["call-0000"].dependency is DependencyClass.DIGESTED
    assert "conclusion" in by_call["call-0000"].reason
    # step 1's reply quotes its numbers and nothing in STM holds them → strong
    assert by_call["call-0001"].dependency is DependencyClass.STRONG
    # the last result: its reply moves on and STM holds its lines → digested, never verbatim
    last = by_call["call-0029"]
    assert last.dependency is DependencyClass.DIGESTED and "STM item" in last.reason
    assert last.action is not Part.VERBATIM
    # under light compression only digested results become stubs naming call and command
    light = compress_session(transcript=res.transcript, stm=res.stm, user_id="u1",
                             session_id="s1", budget_tokens=view.raw_tokens - 3000)  # fmt: skip
    assert light.level is Level.LIGHT
    stubs = [m for m in light.messages if m.part is Part.STUB]
    assert stubs
    for m in stubs:
        assert m.tool_call_id is not None
        assert by_call[m.tool_call_id].dependency is DependencyClass.DIGESTED
        assert m.tool_call_id in m.content and "kubectl logs deploy/" in m.content
    assert all(t.tool_call_id in explain(view) for t in view.tool_results)


def test_near_field_messages_are_verbatim(res: Runtime) -> None:
    records = ingest(res, "u1", "s1", scripted_session("zh", cycles=45))
    view = compress_session(
        transcript=res.transcript, stm=res.stm, user_id="u1", session_id="s1", budget_tokens=4000
    )
    users = [r for r in records if r.role is Role.USER]
    verbatim = {m.message_ids[0]: m.content for m in view.messages if m.part is Part.VERBATIM}
    assert verbatim[users[-1].message_id] == users[-1].content
    assert verbatim[users[-2].message_id] == users[-2].content


def test_unknown_session_is_a_clear_not_found(res: Runtime) -> None:
    with pytest.raises(NotFound, match="no transcript for session 'nope'"):
        compress_session(
            transcript=res.transcript,
            stm=res.stm,
            user_id="u1",
            session_id="nope",
            budget_tokens=1000,
        )


def test_budget_below_the_near_field_says_how_much_is_needed(res: Runtime) -> None:
    ingest(res, "u1", "s1", scripted_session("en", cycles=20))
    with pytest.raises(BudgetTooSmall, match="ask for at least") as err:
        compress_session(
            transcript=res.transcript, stm=res.stm, user_id="u1", session_id="s1", budget_tokens=50
        )
    assert err.value.near_field > 50


def test_same_transcript_gives_the_cached_view_and_a_new_turn_a_new_version(
    res: Runtime,
) -> None:
    ingest(res, "u1", "s1", scripted_session("en", cycles=20))
    cache = ViewCache(res.redis, namespace=res.settings.key_namespace)
    kw = dict(
        transcript=res.transcript,
        stm=res.stm,
        cache=cache,
        user_id="u1",
        session_id="s1",
        budget_tokens=5000,
    )
    first, cached1 = compress_cached(**kw)  # type: ignore[arg-type]
    second, cached2 = compress_cached(**kw)  # type: ignore[arg-type]
    assert (cached1, cached2) == (False, True) and first == second
    ingest(res, "u1", "s1", [[MessageIn(role=Role.USER, content="Any update?")]])
    third, cached3 = compress_cached(**kw)  # type: ignore[arg-type]
    assert not cached3 and third.last_message_id != first.last_message_id


def test_activity_tracks_context_size_and_finds_idle_sessions(res: Runtime) -> None:
    records = ingest(res, "u1", "s1", scripted_session("en", cycles=5))
    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)
    before_after = activity.note_turn(records, default_counter())
    assert before_after is not None and before_after[0] == 0 and before_after[1] > 1000
    # a redelivered turn is not counted twice
    assert activity.note_turn(records, default_counter()) == (before_after[1], before_after[1])
    assert sum(activity.token_counts("u1", "s1").values()) == before_after[1]
    # compression state lives beside STM, not under the user's STM prefix
    stm_prefix = res.stm.keys("u1").prefix
    assert not any(":ctx:" in k or ":ctok:" in k for k in res.redis.scan_iter(f"{stm_prefix}*"))
    idle = activity.idle(now=records[-1].at + 3600, idle_s=600, min_tokens=1000)
    assert [(c.user_id, c.session_id) for c in idle] == [("u1", "s1")]
    assert activity.idle(now=records[-1].at + 60, idle_s=600, min_tokens=1000) == []
    ViewCache(res.redis, namespace=res.settings.key_namespace).put(
        compress_session(
            transcript=res.transcript,
            stm=res.stm,
            user_id="u1",
            session_id="s1",
            budget_tokens=None,
        )
    )
    assert activity.idle(now=records[-1].at + 3600, idle_s=600, min_tokens=1000) == []


def test_a_session_is_due_for_compression_when_it_passes_the_threshold(res: Runtime) -> None:
    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)
    turns = scripted_session("en", cycles=12)
    records = ingest(res, "u1", "s1", turns)
    by_turn: dict[str, list[TranscriptRecord]] = {}
    for r in records:
        by_turn.setdefault(r.turn_id, []).append(r)
    due = [
        due_for_compression(activity, [recs], default_counter(), threshold=10_000, step=10_000)
        for recs in by_turn.values()
    ]
    fired = [k for k, d in enumerate(due) if d]
    total = activity.get("u1", "s1")
    assert total is not None and total.tokens > 20_000
    assert len(fired) == total.tokens // 10_000, "once at the threshold, then once per step"
    assert due[fired[0]][0].session_id == "s1"


def test_a_tenant_session_is_compressed_from_its_own_scope(res: Runtime) -> None:
    # Given the same user and session ids inside a tenant and outside it
    ingest(res, "u1", "s1", scripted_session("en", cycles=20), tenant_id="acme")
    ingest(res, "u1", "s1", scripted_session("zh", cycles=20))
    acme = compress_session(transcript=res.transcript, stm=res.stm, user_id="u1",
                            session_id="s1", budget_tokens=6000, tenant_id="acme")  # fmt: skip
    plain = compress_session(transcript=res.transcript, stm=res.stm, user_id="u1",
                             session_id="s1", budget_tokens=6000)  # fmt: skip
    # Then each view is built from its own transcript and STM items only
    assert acme.tenant_id == "acme" and acme.language == "en"
    assert plain.tenant_id == "default" and plain.language == "zh"  # no tenant = default
    assert "Do not restart payment-service" in acme.text()
    assert "不要在工作时间重启" not in acme.text()
    # and their cached views and counters do not collide
    cache = ViewCache(res.redis, namespace=res.settings.key_namespace)
    cache.put(acme)
    cache.put(plain)
    got = cache.get("u1", "s1", acme.last_message_id, 6000, tenant_id="acme")
    assert got == acme
    assert cache.get("u1", "s1", acme.last_message_id, 6000) is None


def test_a_drained_batch_is_counted_as_its_turns_one_by_one(res: Runtime) -> None:
    # Given two sessions' turns, a turn with no records, and a redelivery of the first
    # session's second turn after the other session's turns
    records = ingest(res, "u1", "s1", scripted_session("en", cycles=3))
    records += ingest(res, "u1", "s2", scripted_session("en", cycles=2))
    turns: list[list[TranscriptRecord]] = []
    for r in records:
        if not turns or turns[-1][0].turn_id != r.turn_id:
            turns.append([])
        turns[-1].append(r)
    batch = [turns[0], [], *turns[1:], turns[1]]
    other = res.settings.key_namespace + "x"  # the same turns counted one call at a time
    one_by_one = SessionActivity(res.redis, namespace=other)
    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)
    try:
        expected = [one_by_one.note_turn(t, default_counter()) for t in batch]

        # When the batch is counted in one call
        got = activity.note_turns(batch, default_counter())

        # Then every turn reads as if counted alone, in order: the redelivery adds nothing
        assert got == expected and got[1] is None
        assert got[-1] is not None and got[-1][0] == got[-1][1]
        for session in ("s1", "s2"):
            alone, batched = one_by_one.get("u1", session), activity.get("u1", session)
            assert batched is not None and alone is not None
            assert (batched.tokens, batched.last_message_id) == (
                alone.tokens, alone.last_message_id
            )
            # the active-sessions index holds each session's newest turn, as one ZADD a
            # turn left it
            assert activity.last_activity("u1", session) == max(
                r.at for r in records if r.session_id == session
            )
            assert one_by_one.last_activity("u1", session) == activity.last_activity("u1", session)
    finally:
        for key in res.redis.scan_iter(match=f"{other}:*", count=1000):
            res.redis.delete(key)
