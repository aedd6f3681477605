"""L0 records a named turn once: retries, conflicts, torn tails, spans for the reconciler."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memstrata.core.errors import Conflict, InvalidId, InvalidInput
from memstrata.core.models.transcript import MessageIn, Role, ToolCall
from memstrata.core.transcript.store import TranscriptStore

AT = 1_700_000_000.0
IDS = {"user_id": "u_1", "session_id": "s_1"}


class Clock:
    def __init__(self, t: float = 1_790_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> TranscriptStore:
    return TranscriptStore(tmp_path / "l0", fsync=False, dedup_window_bytes=4096, clock=clock)


def turn(text: str = "Don't restart the prod database.") -> list[MessageIn]:
    return [
        MessageIn(role=Role.USER, content=text),
        MessageIn(
            role=Role.ASSISTANT,
            content="checking",
            tool_calls=[ToolCall(id="c1", name="query", arguments="{}")],
        ),
        MessageIn(role=Role.TOOL, tool_call_id="c1", content="cpu 12%"),
    ]


def raw(store: TranscriptStore) -> bytes:
    return store.path(**IDS).read_bytes()


def test_a_retried_turn_id_appends_nothing_and_returns_the_stored_turn(
    store: TranscriptStore, clock: Clock
) -> None:
    # Given a named turn in L0
    first = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    before = raw(store)
    # When the same turn is appended again, later and without its event time
    clock.t += 30
    again = store.append_turn(user_id="u_1", session_id="s_1", messages=turn(), turn_id="t1")
    # Then the file is unchanged and the stored turn comes back, first attempt's times
    assert raw(store) == before
    assert again.existing and not first.existing
    assert again.pointer == first.pointer
    assert again.records == first.records
    assert again.generation == first.generation
    assert [r.recorded_at for r in again.records] == [clock.t - 30] * 3


def test_a_retry_is_found_behind_other_turns_within_the_window(store: TranscriptStore) -> None:
    first = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    for n in range(3):  # another writer of the session appended meanwhile
        store.append_turn(**IDS, messages=turn(f"other {n}"), at=AT)
    before = raw(store)
    again = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    assert again.existing and again.pointer == first.pointer
    assert raw(store) == before


def test_the_window_bounds_how_far_back_a_turn_id_is_looked_for(store: TranscriptStore) -> None:
    # Given a named turn followed by more than dedup_window_bytes (4 KiB) of other turns
    store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    while len(raw(store)) < 3 * 4096:
        store.append_turn(**IDS, messages=turn("x" * 200), at=AT)
    # When it is retried, Then it is not found and is appended again (the documented bound)
    again = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    assert not again.existing


def test_a_retry_with_other_messages_is_a_conflict_and_writes_nothing(
    store: TranscriptStore,
) -> None:
    store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    before = raw(store)
    for other in (turn("something else"), turn()[:2], [*turn(), *turn("more")[:1]]):
        with pytest.raises(Conflict, match="already recorded"):
            store.append_turn(**IDS, messages=other, turn_id="t1", at=AT)
    with pytest.raises(Conflict):
        store.append_turn(**IDS, messages=turn(), turn_id="t1", task_id="bug9", at=AT)
    assert raw(store) == before


def test_unnamed_turns_are_never_deduplicated(store: TranscriptStore) -> None:
    a = store.append_turn(**IDS, messages=turn(), at=AT)
    b = store.append_turn(**IDS, messages=turn(), at=AT)
    assert a.pointer.turn_id != b.pointer.turn_id and not b.existing
    assert len(list(store.read_session(**IDS))) == 6


def test_an_empty_turn_id_is_refused_not_replaced(store: TranscriptStore) -> None:
    with pytest.raises(InvalidId, match="turn_id"):
        store.append_turn(**IDS, messages=turn(), turn_id="", at=AT)
    assert not store.path(**IDS).exists()


@pytest.mark.parametrize(
    "at", [float("nan"), float("inf"), -float("inf"), 1e300, -1.0, True, "1700000000", 10**400]
)
def test_a_bad_event_time_is_refused_before_anything_is_written(
    store: TranscriptStore, at: object
) -> None:
    with pytest.raises(InvalidInput, match=r"^at: "):
        store.append_turn(**IDS, messages=turn(), at=at)  # type: ignore[arg-type]
    assert not store.path(**IDS).exists()


def test_a_torn_last_line_is_cut_before_the_next_append(
    store: TranscriptStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a file whose last write was torn by a crash (never acknowledged)
    first = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    with store.path(**IDS).open("ab") as fh:
        fh.write(b'{"message_id":"t2.0","turn_id":"t2","rec')
    # When the next turn is appended
    second = store.append_turn(**IDS, messages=turn("next"), turn_id="t3", at=AT)
    # Then it starts where the last whole turn ended, and the session reads back clean
    assert second.pointer.offset == first.pointer.length
    assert [r.turn_id for r in store.read_session(**IDS)] == ["t1"] * 3 + ["t3"] * 3
    assert "torn last line" in caplog.text


def test_a_failed_write_leaves_no_half_turn(
    store: TranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    before = raw(store)
    real_write = os.write
    calls = {"n": 0}

    def short_then_fail(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_fail)
    with pytest.raises(OSError, match="No space"):
        store.append_turn(**IDS, messages=turn("big"), turn_id="t2", at=AT)
    monkeypatch.undo()
    assert raw(store) == before


def test_copies_written_before_dedup_are_told_apart(store: TranscriptStore) -> None:
    # Given an old file holding the same turn three times in a row (the D3 duplicates)
    one = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    block = raw(store)
    store.path(**IDS).write_bytes(block * 3)
    # Then the span readers see three turns, and a retry matches the last copy
    spans = store.turns_after(**IDS, offset=0, limit=10)
    assert [(s.offset, s.length) for s in spans] == [(i * len(block), len(block)) for i in range(3)]
    again = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    assert again.existing and again.pointer.offset == 2 * len(block)
    assert again.pointer.length == one.pointer.length


def test_turns_after_reads_whole_turns_from_an_offset(store: TranscriptStore) -> None:
    pointers = [
        store.append_turn(**IDS, messages=turn(f"n{n}")[: 1 + n % 3], at=AT + n).pointer
        for n in range(5)
    ]
    spans = store.turns_after(**IDS, offset=pointers[1].offset, limit=3)
    assert [s.pointer for s in spans] == pointers[1:4]
    assert store.turns_after(**IDS, offset=pointers[-1].offset + pointers[-1].length, limit=3) == []


def test_recent_turns_stop_at_the_first_turn_recorded_before_since(
    store: TranscriptStore, clock: Clock
) -> None:
    old = [store.append_turn(**IDS, messages=turn(f"old {n}"), at=AT).pointer for n in range(2)]
    clock.t += 3600
    new = [store.append_turn(**IDS, messages=turn(f"new {n}"), at=AT).pointer for n in range(2)]
    spans, end = store.recent_turns(**IDS, since=clock.t - 60)
    assert [s.pointer for s in spans] == new
    assert end == new[-1].offset + new[-1].length
    spans, _end = store.recent_turns(**IDS, since=0)
    assert [s.pointer for s in spans] == old + new


def test_a_session_file_written_anew_has_a_new_generation(
    store: TranscriptStore, clock: Clock
) -> None:
    first = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    later = store.append_turn(**IDS, messages=turn("more"), at=AT)
    assert later.generation == first.generation == store.generation(**IDS)
    # When the file is deleted (a demo reset) and the same turn is written again
    store.path(**IDS).unlink()
    clock.t += 1
    again = store.append_turn(**IDS, messages=turn(), turn_id="t1", at=AT)
    assert not again.existing
    assert again.generation != first.generation


def test_session_files_lists_files_written_since(store: TranscriptStore, clock: Clock) -> None:
    store.append_turn(**IDS, messages=turn(), at=AT)
    store.append_turn(user_id="u_2", session_id="s_9", tenant_id="acme", messages=turn(), at=AT)
    files = sorted(store.session_files(modified_since=0), key=lambda f: f.user_id)
    assert [(f.tenant_id, f.user_id, f.session_id) for f in files] == [
        ("default", "u_1", "s_1"),
        ("acme", "u_2", "s_9"),
    ]
    assert files[0].size == len(raw(store))
    assert list(store.session_files(modified_since=files[0].mtime + 3600)) == []
