"""L0 transcript: durable, append-only JSONL; whole turns or nothing; pointers read back."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memstrata.core.errors import CorruptRecord, InvalidId, InvalidInput, NotFound, PayloadTooLarge
from memstrata.core.models.transcript import MessageIn, Role, ToolCall, TranscriptRecord
from memstrata.core.textcut import CUT_MARKER_RE, MARKER_MAX_CHARS
from memstrata.core.transcript.store import AppendedTurn, TranscriptStore, new_turn_id

AT = 1_700_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> TranscriptStore:
    return TranscriptStore(tmp_path / "l0", fsync=True, max_message_chars=256, max_turn_messages=4)


def user(content: str, **kw: object) -> MessageIn:
    return MessageIn(role=Role.USER, content=content, **kw)


def debugging_turn() -> list[MessageIn]:
    return [
        user("createOrder times out in prod-k8s"),
        MessageIn(
            role=Role.ASSISTANT,
            content="checking metrics",
            tool_calls=[ToolCall(id="call_1", name="query_metrics", arguments='{"svc":"pay"}')],
        ),
        MessageIn(role=Role.TOOL, tool_call_id="call_1", content="p99 latency 2300ms"),
        MessageIn(role=Role.ASSISTANT, content="The database looks fine."),
    ]


def file_bytes(store: TranscriptStore, **ids: str) -> bytes:
    return store.path(**ids).read_bytes()


# ---------------------------------------------------------------- append and read


def test_messages_get_stable_ids_from_turn_id_and_position(store: TranscriptStore) -> None:
    # Given a four-message turn with a caller-chosen turn id
    # When it is appended
    turn = store.append_turn(
        user_id="u_1", session_id="s_1", messages=debugging_turn(), turn_id="t001", at=AT
    )
    # Then each message is named <turn>.<position>
    assert [r.message_id for r in turn.records] == ["t001.0", "t001.1", "t001.2", "t001.3"]
    assert {r.turn_id for r in turn.records} == {"t001"}
    assert turn.pointer.turn_id == "t001"


def test_caller_given_message_ids_are_kept(store: TranscriptStore) -> None:
    turn = store.append_turn(
        user_id="u_1",
        session_id="s_1",
        messages=[user("hi", message_id="msg_91"), user("there")],
        turn_id="t001",
        at=AT,
    )
    assert [r.message_id for r in turn.records] == ["msg_91", "t001.1"]


def test_generated_turn_ids_are_safe_time_ordered_and_unique() -> None:
    ids = [new_turn_id(AT + i) for i in range(3)] + [new_turn_id(AT + 2)]
    assert ids[:3] == sorted(ids[:3])
    assert len(set(ids)) == 4
    assert all(i.startswith("t") and i.isalnum() for i in ids)


def test_session_is_read_back_in_append_order_with_every_field(store: TranscriptStore) -> None:
    # Given two turns appended one after the other
    first = store.append_turn(
        user_id="u_1",
        session_id="s_1",
        task_id="bug456",
        messages=debugging_turn(),
        turn_id="t001",
        at=AT,
    )
    second = store.append_turn(
        user_id="u_1", session_id="s_1", messages=[user("thanks")], turn_id="t002", at=AT + 5
    )
    # When the session is read
    records = list(store.read_session(user_id="u_1", session_id="s_1"))
    # Then it is exactly both turns' records, in order, with all context preserved
    assert records == [*first.records, *second.records]
    call = records[1]
    assert call.role is Role.ASSISTANT
    assert call.tool_calls == [
        ToolCall(id="call_1", name="query_metrics", arguments='{"svc":"pay"}')
    ]
    assert records[2].tool_call_id == "call_1"
    assert records[0].task_id == "bug456"
    assert records[0].at == AT
    assert records[4].at == AT + 5


def test_file_holds_one_json_line_per_message_at_the_pointer(store: TranscriptStore) -> None:
    # Given two appended turns
    a = store.append_turn(user_id="u_1", session_id="s_1", messages=debugging_turn(), at=AT)
    b = store.append_turn(user_id="u_1", session_id="s_1", messages=[user("ok then")], at=AT + 1)
    raw = file_bytes(store, user_id="u_1", session_id="s_1")
    # Then the file is newline-terminated JSON, and each pointer frames its own turn's bytes
    assert raw.endswith(b"\n")
    assert a.pointer.offset == 0
    assert b.pointer.offset == a.pointer.length
    assert len(raw) == a.pointer.length + b.pointer.length
    lines = raw[b.pointer.offset : b.pointer.offset + b.pointer.length].splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["ok then"]
    first_line = json.loads(raw.splitlines()[0])
    assert first_line["message_id"] == a.records[0].message_id
    assert first_line["user_id"] == "u_1"
    assert first_line["tenant_id"] == "default"  # no tenant is the default tenant


def test_read_turn_returns_exactly_the_records_of_one_pointer(store: TranscriptStore) -> None:
    store.append_turn(user_id="u_1", session_id="s_1", messages=[user("first")], at=AT)
    middle = store.append_turn(user_id="u_1", session_id="s_1", messages=debugging_turn(), at=AT)
    store.append_turn(user_id="u_1", session_id="s_1", messages=[user("last")], at=AT)
    assert store.read_turn(middle.pointer) == list(middle.records)


def test_read_turn_rejects_a_pointer_into_another_turn(store: TranscriptStore) -> None:
    first = store.append_turn(user_id="u_1", session_id="s_1", messages=[user("first")], at=AT)
    second = store.append_turn(user_id="u_1", session_id="s_1", messages=[user("two")], at=AT)
    wrong = second.pointer.model_copy(update={"offset": 0, "length": first.pointer.length})
    with pytest.raises(CorruptRecord, match="does not match"):
        store.read_turn(wrong)


def test_read_turn_past_the_end_of_file_is_corrupt(store: TranscriptStore) -> None:
    turn = store.append_turn(user_id="u_1", session_id="s_1", messages=[user("first")], at=AT)
    beyond = turn.pointer.model_copy(update={"length": turn.pointer.length + 10})
    with pytest.raises(CorruptRecord, match="truncated"):
        store.read_turn(beyond)


def test_reading_a_missing_session_raises_not_found(store: TranscriptStore) -> None:
    turn = store.append_turn(user_id="u_1", session_id="s_1", messages=[user("first")], at=AT)
    with pytest.raises(NotFound):
        list(store.read_session(user_id="u_1", session_id="s_other"))
    with pytest.raises(NotFound):
        store.read_turn(turn.pointer.model_copy(update={"session_id": "s_other"}))


def test_sessions_lists_every_session_file_of_a_user(store: TranscriptStore) -> None:
    assert store.sessions(user_id="u_1") == []
    for sid in ("s_a", "s_b"):
        store.append_turn(user_id="u_1", session_id=sid, messages=[user("hi")], at=AT)
    store.append_turn(user_id="u_2", session_id="s_c", messages=[user("hi")], at=AT)
    assert sorted(store.sessions(user_id="u_1")) == ["s_a", "s_b"]
    assert store.sessions(user_id="u_2") == ["s_c"]


def test_concurrent_appends_never_interleave_turns(store: TranscriptStore) -> None:
    # Given eight writers appending ten two-message turns each to one session
    def writer(w: int) -> list[str]:
        return [
            store.append_turn(
                user_id="u_1",
                session_id="s_1",
                messages=[user(f"w{w} n{n} a " + "x" * 200), user(f"w{w} n{n} b")],
                turn_id=f"w{w}n{n}",
                at=AT,
            ).pointer.turn_id
            for n in range(10)
        ]

    with ThreadPoolExecutor(max_workers=8) as pool:
        turn_ids = [t for ids in pool.map(writer, range(8)) for t in ids]
    # Then every turn's records are contiguous and complete, in each writer's order
    records = list(store.read_session(user_id="u_1", session_id="s_1"))
    assert len(records) == 160
    pairs = [records[i : i + 2] for i in range(0, 160, 2)]
    assert all(a.turn_id == b.turn_id for a, b in pairs)
    assert sorted(a.turn_id for a, _b in pairs) == sorted(turn_ids)
    for w in range(8):
        mine = [a.turn_id for a, _b in pairs if a.turn_id.startswith(f"w{w}n")]
        assert mine == [f"w{w}n{n}" for n in range(10)]


# ---------------------------------------------------------------- nothing written on bad input


def test_oversized_message_keeps_its_head_and_tail_and_the_turn_is_accepted(
    store: TranscriptStore,
) -> None:
    # Given a turn whose second message is far over the 256-char limit
    long = "H" * 500 + "M" * 1000 + "T" * 500
    turn = store.append_turn(
        user_id="u_1", session_id="s_1", messages=[user("fine"), user(long)], at=AT
    )
    # Then the turn is accepted: the first message whole, the second as head + marker + tail
    records = list(store.read_session(user_id="u_1", session_id="s_1"))
    assert records == list(turn.records)
    assert records[0].content == "fine"
    cut = records[1].content
    assert cut.startswith("H" * 128) and cut.endswith("T" * 128)
    assert "M" not in cut
    assert "1,744 of 2,000 characters cut from the middle" in cut
    assert len(cut) <= 256 + MARKER_MAX_CHARS
    assert CUT_MARKER_RE.search(cut)


def test_oversized_tool_call_arguments_share_the_message_limit(store: TranscriptStore) -> None:
    # Given content and tool-call arguments that together are one over the limit
    big_call = MessageIn(
        role=Role.ASSISTANT,
        content="x" * 200,
        tool_calls=[ToolCall(id="c1", name="run", arguments="y" * 57)],
    )
    turn = store.append_turn(user_id="u_1", session_id="s_1", messages=[big_call], at=AT)
    # Then the shorter text stays whole and the longer one gives up the difference
    (record,) = turn.records
    assert record.tool_calls[0].arguments == "y" * 57
    assert record.content.startswith("x" * 100) and record.content.endswith("x" * 99)
    assert "1 of 200 characters cut" in record.content


def test_turn_over_its_limit_is_shared_fairly_short_messages_stay_whole(tmp_path: Path) -> None:
    l0 = TranscriptStore(tmp_path / "l0", fsync=False, max_message_chars=1000, max_turn_chars=1000)
    messages = [user("short one"), user("1" * 900), user("2" * 900)]
    turn = store_turn(l0, messages)
    short, first, second = (r.content for r in turn.records)
    assert short == "short one"
    assert CUT_MARKER_RE.sub("", first) == "1" * 495
    assert CUT_MARKER_RE.sub("", second) == "2" * 496
    assert sum(len(CUT_MARKER_RE.sub("", c)) for c in (short, first, second)) <= 1000


def store_turn(l0: TranscriptStore, messages: list[MessageIn]) -> AppendedTurn:
    return l0.append_turn(user_id="u_1", session_id="s_1", messages=messages, at=AT)


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ([user("a")] * 5, PayloadTooLarge, "5 messages"),
        ([], InvalidInput, "at least one"),
        ([MessageIn(role=Role.TOOL, content="p99 2300ms")], InvalidInput, "tool_call_id"),
        ([user("a", message_id="m1"), user("b", message_id="m1")], InvalidInput, "duplicate"),
        ([user("a"), user("b", message_id="t9.0")], InvalidInput, "duplicate"),
        # a message built without validation: its id is still checked before it is written
        (
            [MessageIn.model_construct(role=Role.USER, content="a", message_id="../x")],
            InvalidId,
            "message_id",
        ),
    ],
    ids=[
        "too-many",
        "empty",
        "tool-without-call-id",
        "dup-ids",
        "dup-generated",
        "unchecked-message-id",
    ],
)
def test_invalid_turn_leaves_an_existing_file_byte_for_byte_unchanged(
    store: TranscriptStore, messages: list[MessageIn], error: type[Exception], match: str
) -> None:
    # Given a session that already has one turn
    store.append_turn(user_id="u_1", session_id="s_1", messages=debugging_turn(), at=AT)
    before = file_bytes(store, user_id="u_1", session_id="s_1")
    # When an invalid turn is appended
    with pytest.raises(error, match=match):
        store.append_turn(
            user_id="u_1", session_id="s_1", messages=messages, turn_id="t9", at=AT + 1
        )
    # Then the file is exactly as before
    assert file_bytes(store, user_id="u_1", session_id="s_1") == before


def test_limit_is_inclusive(store: TranscriptStore) -> None:
    turn = store.append_turn(user_id="u_1", session_id="s_1", messages=[user("x" * 256)] * 4, at=AT)
    assert len(turn.records) == 4


# ---------------------------------------------------------------- damaged files


def test_torn_last_line_is_skipped_with_a_warning(
    store: TranscriptStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a crash in the middle of a write: a partial record without its newline
    good = store.append_turn(user_id="u_1", session_id="s_1", messages=debugging_turn(), at=AT)
    path = store.path(user_id="u_1", session_id="s_1")
    with path.open("ab") as fh:
        fh.write(b'{"message_id":"t2.0","turn_id":"t2","user_id":"u_1","ro')
    # When the session is read
    with caplog.at_level(logging.WARNING, logger="memstrata.core.transcript.store"):
        records = list(store.read_session(user_id="u_1", session_id="s_1"))
    # Then every complete record is returned and the torn tail is reported, not raised
    assert records == list(good.records)
    assert "torn last line" in caplog.text


def test_corrupt_middle_line_raises_corrupt_record(store: TranscriptStore) -> None:
    store.append_turn(user_id="u_1", session_id="s_1", messages=[user("first")], at=AT)
    path = store.path(user_id="u_1", session_id="s_1")
    with path.open("ab") as fh:
        fh.write(b"{this is not json}\n")
    store.append_turn(user_id="u_1", session_id="s_1", messages=[user("third")], at=AT)
    with pytest.raises(CorruptRecord, match="line 2"):
        list(store.read_session(user_id="u_1", session_id="s_1"))


def test_valid_json_with_a_bad_record_shape_is_corrupt(store: TranscriptStore) -> None:
    path = store.path(user_id="u_1", session_id="s_1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"message_id":"a:b"}\n')
    with pytest.raises(CorruptRecord, match="line 1"):
        list(store.read_session(user_id="u_1", session_id="s_1"))


# ---------------------------------------------------------------- paths and ids


def test_tenants_get_separate_files_for_the_same_user_and_session(store: TranscriptStore) -> None:
    # Given the same user and session id under two tenants and under no tenant
    for tenant, text in ((None, "plain"), ("acme", "for acme"), ("globex", "for globex")):
        store.append_turn(
            user_id="u_1", session_id="s_1", tenant_id=tenant, messages=[user(text)], at=AT
        )
    # Then each has its own file and reads only its own records
    paths = {store.path(user_id="u_1", session_id="s_1", tenant_id=t) for t in (None, "acme")}
    assert len(paths) == 2
    acme = list(store.read_session(user_id="u_1", session_id="s_1", tenant_id="acme"))
    assert [(r.content, r.tenant_id) for r in acme] == [("for acme", "acme")]
    plain = list(store.read_session(user_id="u_1", session_id="s_1"))
    assert [(r.content, r.tenant_id) for r in plain] == [("plain", "default")]
    # and no tenant is the default tenant: one owner, one file
    assert store.path(user_id="u_1", session_id="s_1") == store.path(
        user_id="u_1", session_id="s_1", tenant_id="default"
    )


def test_path_layout_nests_tenant_user_and_session(store: TranscriptStore) -> None:
    root = store.root
    assert store.path(user_id="u_1", session_id="s_1") == (
        root / "t" / "default" / "u" / "u_1" / "s_1.jsonl"
    )
    assert (
        store.path(user_id="u_1", session_id="s_1", tenant_id="acme")
        == root / "t" / "acme" / "u" / "u_1" / "s_1.jsonl"
    )


def test_an_owner_folder_removed_between_turns_is_made_again(store: TranscriptStore) -> None:
    """The append opens the file first and makes the folder only when it is missing (an
    owner's first turn, or an erase since): the next turn is kept, in a new file."""
    store.append_turn(user_id="u_1", session_id="s_1", messages=[user("first")])
    folder = store.path(user_id="u_1", session_id="s_1").parent
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    store.append_turn(user_id="u_1", session_id="s_1", messages=[user("second")])
    assert [r.content for r in store.read_session(user_id="u_1", session_id="s_1")] == [
        "second"
    ]


@pytest.mark.parametrize(
    "ids",
    [
        {"user_id": "..", "session_id": "s_1"},
        {"user_id": "../../etc", "session_id": "s_1"},
        {"user_id": "u_1", "session_id": "../s_2"},
        {"user_id": "u_1", "session_id": "s_1", "tenant_id": ".."},
        {"user_id": "u_1", "session_id": "s/1"},
    ],
)
def test_path_traversal_ids_are_rejected_by_path(
    store: TranscriptStore, ids: dict[str, str]
) -> None:
    with pytest.raises(InvalidId):
        store.path(**ids)


@pytest.mark.parametrize(
    "ids",
    [
        {"user_id": "..", "session_id": "s_1"},
        {"user_id": "u_1", "session_id": "../s_2"},
        {"user_id": "u_1", "session_id": "s_1", "tenant_id": ".."},
        {"user_id": "u_1", "session_id": "s_1", "task_id": "bug:456"},
        {"user_id": "u_1", "session_id": "s_1", "turn_id": "t 1"},
    ],
)
def test_append_with_unsafe_ids_raises_invalid_id_and_writes_nothing(
    store: TranscriptStore, ids: dict[str, str], tmp_path: Path
) -> None:
    # When a turn is appended under an unsafe id
    with pytest.raises(InvalidId):
        store.append_turn(messages=[user("hi")], at=AT, **ids)
    # Then nothing at all was created, inside or outside the root
    assert not store.root.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_records_round_trip_as_models(store: TranscriptStore) -> None:
    turn = store.append_turn(user_id="u_1", session_id="s_1", messages=debugging_turn(), at=AT)
    raw = file_bytes(store, user_id="u_1", session_id="s_1").splitlines()
    assert [TranscriptRecord.model_validate_json(line) for line in raw] == list(turn.records)
