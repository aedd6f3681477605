"""Public agent sessions (five formats) replayed through ``record_turn()`` into STM.

The data is read in place from the shared bench folder; the test is skipped where that
folder is absent.  Two sessions per source go through the in-process drain (the same
``drain_shard`` the worker runs); one goes through a real worker and must give the
same result.  A human-readable report is written under pytest's tmp dir.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from memstrata.core.ingest.pipeline import read_decisions
from memstrata.core.models.candidate import Verdict
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings
from memstrata.ops import replay
from memstrata.ops.replay import Replayer, Session, SessionReport, load_source, render_markdown
from tests.conftest import REDIS_URL, _purge
from tests.integration.conftest import AppKicker, CeleryProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not replay.DEFAULT_ROOT.is_dir(), reason="agent-sessions not present"),
]

AT0 = 1_790_000_000.0
PER_SOURCE = 2
# sessions and messages per session (min, median, max) as counted in FORMAT.md
FORMAT_COUNTS = {
    "swe-agent": (14, (10, 26, 44)),
    "mini-swe-agent": (32, (63, 151, 353)),
    "openhands": (5, (8, 47, 101)),
    "tau-bench": (50, (12, 26, 62)),  # trial 0 only
    "opencode-zh": (7, (61, 189, 249)),
}


@pytest.fixture(scope="module")
def sessions() -> dict[str, list[Session]]:
    return {name: load_source(name) for name in replay.SOURCES}


@pytest.fixture
def second_res(settings: Settings, tmp_path: Path) -> Iterator[Runtime]:
    """A second, independent namespace in the same Redis (for side-by-side comparisons)."""
    other = settings.model_copy(
        update={"key_namespace": f"t{uuid.uuid4().hex[:10]}", "transcript_dir": tmp_path / "l0b"}
    )
    res = Runtime(other)
    yield res
    _purge(res.redis, other.key_namespace)
    res.close()


def test_loaders_follow_the_format_recipes(sessions: dict[str, list[Session]]) -> None:
    for name, (count, (lo, med, hi)) in FORMAT_COUNTS.items():
        sizes = [len(s.messages) for s in sessions[name]]
        assert len(sizes) == count, name
        assert (min(sizes), statistics.median(sizes), max(sizes)) == (lo, med, hi), name
        for s in sessions[name]:
            calls = [c["id"] for m in s.messages for c in m.get("tool_calls") or []]
            assert len(calls) == len(set(calls)), f"{s.session_id}: repeated call ids"
            answered = {m["tool_call_id"] for m in s.messages if m["role"] == "tool"}
            assert answered <= set(calls), s.session_id
            assert {m["role"] for m in s.messages} <= {"system", "user", "assistant", "tool"}


def _check_session(res: Runtime, session: Session, rep: SessionReport) -> None:
    """Everything the replay claims can be found in L0 and STM."""
    assert rep.errors == [], rep.errors
    # every non-system message reached L0, in order
    l0 = list(res.transcript.read_session(user_id=rep.user_id, session_id=rep.stm_session_id))
    replayed = [m for m in session.messages if m["role"] != "system"]
    assert [r.role.value for r in l0] == [m["role"] for m in replayed]
    assert len({r.turn_id for r in l0}) == rep.turns
    # every candidate got a recorded decision; every STM item came from a written one
    decisions = read_decisions(res, rep.user_id, rep.stm_session_id)
    assert len(decisions) == rep.decisions == rep.written + rep.refused
    written_ids = {d.memory_id for d in decisions if d.verdict is Verdict.WRITTEN}
    items = res.stm.by_session(rep.user_id, rep.stm_session_id, limit=1000)
    assert {i.id for i in items} <= written_ids
    assert 1 <= rep.stored_items == len(items) <= res.settings.stm_session_cap
    assert all(len(i.summary) <= res.settings.max_summary_chars for i in items)
    l0_ids = {r.message_id for r in l0}
    for i in items:  # sessions of one source share a user, so an item may merge several
        assert set(i.source.message_ids) & l0_ids, i.id


def test_sessions_of_every_source_replay_without_errors(
    res: Runtime, sessions: dict[str, list[Session]], tmp_path: Path
) -> None:
    # Given two sessions of each of the five sources
    picked = [s for name in replay.SOURCES for s in sessions[name][:PER_SOURCE]]
    replayer = Replayer(res)
    reports = []
    for session in picked:
        # When each is replayed turn by turn and drained
        rep = replayer.replay(session, at0=AT0)
        # Then every turn was accepted, and L0, decisions and STM agree with the report
        _check_session(res, session, rep)
        reports.append(rep)
    # ... raw tool output was refused somewhere, as the seed demands (四.5)
    reasons = {reason for rep in reports for reason in rep.refusal_reasons}
    assert any(r.startswith("raw unstructured text") for r in reasons)
    # ... and the reviewer's report names every session
    text = render_markdown(reports, command="pytest", cap=res.settings.stm_session_cap)
    out = tmp_path / "replay-report.md"
    out.write_text(text, encoding="utf-8")
    print(f"\nreplay report: {out}")
    for s in picked:
        assert f"## {s.session_id}\n" in text


def _comparable(rep: SessionReport) -> dict[str, Any]:
    keep = (
        "turns",
        "decisions",
        "written",
        "refused",
        "refusal_reasons",
        "written_rules",
        "stored_items",
        "stored_types",
        "samples",
        "errors",
    )
    return {k: v for k, v in asdict(rep).items() if k in keep}


def test_replay_through_a_worker_matches_the_inline_replay(
    res: Runtime,
    second_res: Runtime,
    producer: Celery,
    celery_worker: CeleryProcess,
    sessions: dict[str, list[Session]],
) -> None:
    # Given a multi-turn customer session and a real worker
    session = sessions["tau-bench"][0]
    # When it is replayed through the worker, and inline in another namespace
    via_worker = Replayer(res, kicker=AppKicker(producer), wait_s=30).replay(session, at0=AT0)
    inline = Replayer(second_res).replay(session, at0=AT0)
    # Then both paths stored and refused exactly the same things
    _check_session(res, session, via_worker)
    assert via_worker.turns > 1 and via_worker.decisions > 0
    assert _comparable(via_worker) == _comparable(inline)
    assert "memstrata.ingest.drain" in celery_worker.log()


def test_replay_command_writes_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # When a reviewer runs the command for one source
    monkeypatch.setenv("MEMSTRATA_REDIS_URL", REDIS_URL)
    out = tmp_path / "docs" / "replay-report.md"
    code = replay.main(["--source", "opencode-zh", "--limit", "1", "--report", str(out)])
    # Then it succeeds and the report holds the source's totals and the session
    assert code == 0
    text = out.read_text(encoding="utf-8")
    assert "| opencode-zh | 1 |" in text
    assert "## opencode-zh/session-ses_3f88.md" in text


def _m(role: str, content: str = "", call: str | None = None, answers: str | None = None) -> Any:
    calls = [{"id": call, "name": "bash", "arguments": "{}"}] if call else []
    return {"role": role, "content": content, "tool_call_id": answers, "tool_calls": calls}


def test_turns_start_at_user_messages_and_keep_calls_with_their_results() -> None:
    # Given a session that opens mid-task (assistant first) and has a long second turn
    session = [
        _m("system", "policy"),
        _m("assistant", "continuing"),
        _m("user", "fix the bug"),
        _m("assistant", "look", call="c1"),
        _m("tool", "out1", answers="c1"),
        _m("assistant", "edit", call="c2"),
        _m("tool", "out2", answers="c2"),
        _m("assistant", "done"),
        _m("user", "thanks"),
    ]
    # When it is grouped with at most four messages per turn
    turns = replay.group_turns(session, max_messages=4)
    # Then the system prompt is left out, a call never leaves its result, and the long
    # turn is continued before an assistant message
    assert [[m["content"] for m in t] for t in turns] == [
        ["continuing"],
        ["fix the bug", "look", "out1"],
        ["edit", "out2", "done"],
        ["thanks"],
    ]


def test_oversized_messages_are_cut_to_the_limit_and_reported() -> None:
    raw = _m("assistant", "x" * 70_000, call="c1")
    raw["tool_calls"][0]["arguments"] = "y" * 10_000
    msg, cut = replay.to_message(raw, 65_536)
    assert cut
    assert len(msg.content) + len(msg.tool_calls[0].arguments) <= 65_536
    assert msg.content.endswith("chars over the message limit]")
    assert msg.tool_calls[0].arguments == "y" * 10_000  # the call itself is kept whole
    same, cut = replay.to_message(_m("user", "short"), 65_536)
    assert not cut and same.content == "short"


def test_repeated_call_ids_are_renamed_and_results_rebound() -> None:
    session = [
        _m("assistant", call="call_1"),
        _m("tool", "a", answers="call_1"),
        _m("assistant", call="call_1"),
        _m("tool", "b", answers="call_1"),
    ]
    out = replay.unique_call_ids("s", session)
    assert [m["tool_calls"][0]["id"] for m in out[::2]] == ["call_1", "call_1#2"]
    assert [m["tool_call_id"] for m in out[1::2]] == ["call_1", "call_1#2"]
    with pytest.raises(ValueError, match="has no call"):
        replay.unique_call_ids("s", [_m("tool", "orphan", answers="nope")])
