"""Append-only JSONL transcript, one file per session.

A turn (user input, assistant output, tool results, system events) is validated whole,
then written with a single ``write()`` on an ``O_APPEND`` descriptor under an exclusive
``flock`` and ``fsync``-ed before :meth:`TranscriptStore.append_turn` returns: once the
agent gets its receipt the turn survives a crash.  The byte offset and length of the
turn are returned so the ingest queue carries a pointer, not the text.

**Size.**  A message (its content plus its tool-call arguments) is kept whole up to
``max_message_chars`` and a turn up to ``max_turn_chars``; beyond either, the longest
texts keep their head and tail around an explicit marker (:func:`core.textcut.cut_middle`)
and the turn is accepted all the same: no turn is refused for its size.

**A turn id is recorded once per session.**  When the caller names the turn
(``turn_id=``), the append first looks for that id in the last ``dedup_window_bytes`` of
the session file, under the same lock; a retry of a turn already there appends nothing
and returns the stored turn (``existing``), and a retry whose messages differ raises
:class:`Conflict`.  A torn last line (a writer that crashed mid-``write()``, never
acknowledged) is cut off before the next append, so it cannot glue onto the next record.
The reconciler (:mod:`core.ingest.reconcile`) reads turns back by span:
:meth:`TranscriptStore.turns_after` and :meth:`TranscriptStore.recent_turns`, under a
shared lock so it never sees half a turn.  See docs/RELIABILITY.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from memstrata.core.errors import Conflict, CorruptRecord, InvalidInput, NotFound, PayloadTooLarge
from memstrata.core.ids import is_valid_id, owner_tenant, validate_id
from memstrata.core.models.inputs import validate_event_time
from memstrata.core.models.transcript import MessageIn, TranscriptRecord, TurnPointer
from memstrata.core.models.trusted import trusted
from memstrata.core.textcut import cut_middle, fair_shares

DEDUP_WINDOW_BYTES = 256 * 1024
"""How far back from the end of a session file a caller-named turn id is looked for."""

_CHUNK = 64 * 1024
# pydantic writes the fields in declaration order: message_id first, turn_id second; a
# quote inside a string value is always escaped, so these only match the keys themselves
_TURN_ID = re.compile(rb',"turn_id":"([A-Za-z0-9_.\-]{1,128})"')
_MESSAGE_ID = re.compile(rb'^\{"message_id":"([A-Za-z0-9_.\-]{1,128})"')
# what a retry must repeat exactly; the times are the first attempt's
_SAME_TURN_FIELDS = {"message_id", "turn_id", "task_id", "role", "content", "tool_call_id",
                     "tool_calls", "name"}  # fmt: skip

log = logging.getLogger(__name__)


def new_turn_id(now: float | None = None) -> str:
    """Time-ordered, collision-resistant turn id (``t`` + ns timestamp hex + random)."""
    ns = int((now if now is not None else time.time()) * 1e9)
    return f"t{ns:016x}{secrets.token_hex(3)}"


@dataclass(frozen=True)
class AppendedTurn:
    records: tuple[TranscriptRecord, ...]
    pointer: TurnPointer
    generation: str  # of the session file (:meth:`TranscriptStore.generation`)
    existing: bool = False  # the turn id was already recorded: nothing was appended


@dataclass(frozen=True)
class TurnSpan:
    """Where one turn sits in its session file, with its first record (ids and times)."""

    offset: int
    length: int
    first: TranscriptRecord

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def pointer(self) -> TurnPointer:
        r = self.first
        return TurnPointer(
            user_id=r.user_id,
            tenant_id=owner_tenant(r.tenant_id),
            session_id=r.session_id,
            task_id=r.task_id,
            turn_id=r.turn_id,
            at=r.at,
            offset=self.offset,
            length=self.length,
        )


@dataclass(frozen=True)
class SessionFile:
    """One session's L0 file as the reconciler sees it."""

    tenant_id: str
    user_id: str
    session_id: str
    size: int
    mtime: float


class TranscriptStore:
    """L0 on a local (or shared) folder: ``<root>/t/<tenant>/u/<user>/<session>.jsonl``.

    The tenant is always there: no tenant is :data:`core.ids.DEFAULT_TENANT`, the same
    owner as in every other layer.
    """

    def __init__(
        self,
        root: Path,
        *,
        fsync: bool = True,
        max_message_chars: int = 1024 * 1024,
        max_turn_messages: int = 64,
        max_turn_chars: int = 4 * 1024 * 1024,
        dedup_window_bytes: int = DEDUP_WINDOW_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self.max_message_chars = max_message_chars
        self.max_turn_messages = max_turn_messages
        self.max_turn_chars = max_turn_chars
        self.dedup_window_bytes = dedup_window_bytes
        self.clock = clock
        self._folder = lru_cache(maxsize=4096)(self._folder_of)

    def path(self, *, user_id: str, session_id: str, tenant_id: str | None = None) -> Path:
        validate_id(user_id, kind="user_id")
        validate_id(session_id, kind="session_id")
        return self._folder(owner_tenant(tenant_id), user_id) / f"{session_id}.jsonl"

    def _folder_of(self, tenant_id: str, user_id: str) -> Path:
        """An owner's folder (ids validated by the caller), built once per owner: the
        path's joins and a ``mkdir`` on every turn were ~8 % of a ``record_turn`` profile
        (docs/PERFORMANCE.md)."""
        return self.root / "t" / tenant_id / "u" / user_id

    def _validate(self, messages: Sequence[MessageIn]) -> None:
        if not messages:
            raise InvalidInput("a turn needs at least one message")
        if len(messages) > self.max_turn_messages:
            raise PayloadTooLarge(
                f"turn has {len(messages)} messages, limit {self.max_turn_messages}"
            )
        for i, m in enumerate(messages):
            if m.role.value == "tool" and not m.tool_call_id:
                raise InvalidInput(f"message {i}: a tool result needs its tool_call_id")

    def _fit(self, messages: Sequence[MessageIn]) -> list[MessageIn]:
        """The messages, with the longest texts cut to their head and tail when a message
        is over ``max_message_chars`` or the turn over ``max_turn_chars``."""
        sizes = [len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in messages]
        if max(sizes) <= self.max_message_chars and sum(sizes) <= self.max_turn_chars:
            return list(messages)
        shares = fair_shares(sizes, each=self.max_message_chars, total=self.max_turn_chars)
        out = []
        for i, (m, size, share) in enumerate(zip(messages, sizes, shares, strict=True)):
            if size <= share:
                out.append(m)
                continue
            log.warning(
                "message %d (%s) has %d chars: kept its head and tail, %d chars "
                "(MEMSTRATA_MAX_MESSAGE_CHARS %d, MEMSTRATA_MAX_TURN_CHARS %d)",
                i, m.role.value, size, share, self.max_message_chars, self.max_turn_chars,
            )  # fmt: skip
            texts = [m.content, *(c.arguments for c in m.tool_calls)]
            keep = fair_shares([len(t) for t in texts], each=share, total=share)
            calls = [
                c.model_copy(update={"arguments": cut_middle(c.arguments, k, limit=share)})
                for c, k in zip(m.tool_calls, keep[1:], strict=True)
            ]
            content = cut_middle(m.content, keep[0], limit=share)
            out.append(m.model_copy(update={"content": content, "tool_calls": calls}))
        return out

    def append_turn(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Sequence[MessageIn],
        tenant_id: str | None = None,
        task_id: str | None = None,
        turn_id: str | None = None,
        at: float | None = None,
    ) -> AppendedTurn:
        """Validate and durably append one turn; nothing is written if any part is invalid.

        With a caller-named ``turn_id`` already among the session's last
        ``dedup_window_bytes``, nothing is appended: the stored turn is returned with
        ``existing=True`` (its messages must be the same, else :class:`Conflict`).
        Over-long texts are kept as head and tail (:meth:`_fit`), never refused.
        """
        self._validate(messages)
        messages = self._fit(messages)
        tenant_id = owner_tenant(tenant_id)
        path = self.path(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        if task_id is not None:
            validate_id(task_id, kind="task_id")
        if turn_id is not None:
            validate_id(turn_id, kind="turn_id")
        now = self.clock()
        when = now if at is None else validate_event_time(at, kind="at", now=now)
        tid = turn_id if turn_id is not None else new_turn_id(when)
        records = []
        seen: set[str] = set()
        for i, m in enumerate(messages):
            if m.message_id:
                mid = validate_id(m.message_id, kind="message_id")
            else:
                mid = f"{tid}.{i}"  # a safe id's characters: safe when it fits 128
                if len(mid) > 128:
                    raise InvalidInput(
                        f"turn_id: at most {128 - len(str(i)) - 1} characters for a turn whose "
                        "messages take their ids from it (message ids are '<turn_id>.<n>')"
                    )
            if mid in seen:
                raise InvalidInput(f"duplicate message_id {mid!r} in one turn")
            seen.add(mid)
            # every part is checked above or was by MessageIn: no second validation (its
            # six id checks per record; docs/PERFORMANCE.md, 2026-12-07 third sitting)
            records.append(
                trusted(
                    TranscriptRecord,
                    {
                        "message_id": mid,
                        "turn_id": tid,
                        "recorded_at": now,
                        "user_id": user_id,
                        "tenant_id": tenant_id,
                        "session_id": session_id,
                        "task_id": task_id,
                        "role": m.role,
                        "content": m.content,
                        "tool_call_id": m.tool_call_id,
                        "tool_calls": list(m.tool_calls),
                        "name": m.name,
                        "at": when,
                    },
                )
            )
        blob = "".join(r.model_dump_json(exclude_none=True) + "\n" for r in records).encode()
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        try:
            fd = os.open(path, flags, 0o640)
        except FileNotFoundError:  # the owner's first turn, or its folder erased since
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            offset = _cut_torn_tail(fd, os.fstat(fd).st_size, path)
            if turn_id is not None and offset:
                found = _find_turn(fd, offset, turn_id, self.dedup_window_bytes, path)
                if found is not None:
                    existing = _existing(found, records, path, _generation(fd))
                    # synced again: its writer may have died between its write() and its
                    # fsync (no receipt was given then; docs/RELIABILITY.md R3)
                    if self.fsync:
                        os.fsync(fd)
                    return existing
            _write_all(fd, blob, offset)
            if self.fsync:
                os.fsync(fd)
            generation = _generation_of(blob) if offset == 0 else _generation(fd)
        finally:
            os.close(fd)
        pointer = trusted(
            TurnPointer,
            {
                "user_id": user_id,
                "tenant_id": tenant_id,
                "session_id": session_id,
                "task_id": task_id,
                "turn_id": tid,
                "at": when,
                "offset": offset,
                "length": len(blob),
            },
        )
        return AppendedTurn(tuple(records), pointer, generation)

    def read_turn(self, pointer: TurnPointer) -> list[TranscriptRecord]:
        """Read back exactly the records of one appended turn."""
        path = self.path(
            user_id=pointer.user_id, session_id=pointer.session_id, tenant_id=pointer.tenant_id
        )
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise NotFound(f"no transcript for session {pointer.session_id!r}") from exc
        try:
            data = os.pread(fd, pointer.length, pointer.offset)
        finally:
            os.close(fd)
        if len(data) != pointer.length:
            raise CorruptRecord(f"turn {pointer.turn_id} truncated in {path.name}")
        out = [_parse(line, path, n) for n, line in enumerate(data.splitlines())]
        if any(r.turn_id != pointer.turn_id for r in out):
            raise CorruptRecord(f"pointer for turn {pointer.turn_id} does not match {path.name}")
        return out

    def read_session(
        self, *, user_id: str, session_id: str, tenant_id: str | None = None
    ) -> Iterator[TranscriptRecord]:
        """Every record of a session in append order (replay, audit, re-extraction).

        A torn last line (a crash in the middle of a write that never returned) is
        skipped with a warning; damage anywhere else raises :class:`CorruptRecord`.
        """
        path = self.path(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        if not path.exists():
            raise NotFound(f"no transcript for session {session_id!r}")
        with path.open("rb") as fh:
            lines = fh.read().split(b"\n")
        tail = lines.pop() if lines else b""
        if tail.strip():
            log.warning("skipping torn last line of %s (%d bytes)", path, len(tail))
        for n, line in enumerate(lines):
            if line.strip():
                yield _parse(line, path, n)

    def sessions(self, *, user_id: str, tenant_id: str | None = None) -> list[str]:
        """Session ids that have a transcript, oldest file first."""
        folder = self.path(user_id=user_id, session_id="x", tenant_id=tenant_id).parent
        if not folder.exists():
            return []
        files = sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        return [p.stem for p in files]

    def owners(self) -> Iterator[tuple[str, str]]:
        """``(tenant_id, user_id)`` of every owner with a transcript (folders of valid ids)."""
        base = self.root / "t"
        if not base.is_dir():
            return
        for tenant in sorted(base.iterdir()):
            users = tenant / "u"
            if not (is_valid_id(tenant.name) and users.is_dir()):
                continue
            for user in sorted(users.iterdir()):
                if user.is_dir() and is_valid_id(user.name):
                    yield tenant.name, user.name

    def session_files(self, *, modified_since: float) -> Iterator[SessionFile]:
        """Every session file written at or after ``modified_since`` (one ``stat`` per file)."""
        for tenant_id, user_id in self.owners():
            folder = self.root / "t" / tenant_id / "u" / user_id
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    if not name.endswith(".jsonl") or not is_valid_id(name[:-6]):
                        continue
                    try:
                        st = entry.stat()
                    except FileNotFoundError:  # removed meanwhile
                        continue
                    if st.st_mtime >= modified_since:
                        yield SessionFile(tenant_id, user_id, name[:-6], st.st_size, st.st_mtime)

    def turns_after(
        self,
        *,
        user_id: str,
        session_id: str,
        tenant_id: str | None = None,
        offset: int,
        limit: int,
    ) -> list[TurnSpan]:
        """Up to ``limit`` whole turns from byte ``offset`` (a turn boundary) on, in order."""
        path = self.path(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        out: list[TurnSpan] = []
        with _shared(path) as fd:
            size = _complete_size(fd, os.fstat(fd).st_size)
            if offset < size:
                for span in _turns_forward(fd, offset, size, path):
                    out.append(span)
                    if len(out) >= limit:
                        break
        return out

    def recent_turns(
        self,
        *,
        user_id: str,
        session_id: str,
        tenant_id: str | None = None,
        since: float,
    ) -> tuple[list[TurnSpan], int]:
        """The session's last turns recorded at or after ``since`` (wall clock), in order,
        and the end of the file's last whole turn.

        Read backwards from the end, stopping at the first older turn (or one recorded
        before ``recorded_at`` existed), so the cost is the size of those turns.
        """
        path = self.path(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        out: list[TurnSpan] = []
        with _shared(path) as fd:
            size = _complete_size(fd, os.fstat(fd).st_size)
            for span in _turns_backward(fd, size, path):
                recorded = span.first.recorded_at
                if recorded is None or recorded < since:
                    break
                out.append(span)
        out.reverse()
        return out, size

    def generation(self, *, user_id: str, session_id: str, tenant_id: str | None = None) -> str:
        """What tells this session file from an earlier one of the same name.

        A hash of its first line (up to 1 KiB), which holds the first turn's ids and its
        ``recorded_at``: a session file deleted and written anew (a demo reset) gets a new
        generation, and so new watermarks, never the old file's offsets.
        """
        path = self.path(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        with _shared(path) as fd:
            return _generation(fd)

    def iter_all(self) -> Iterator[TranscriptRecord]:
        """Every record of every owner and session (rebuilding a projection of L0)."""
        for tenant_id, user_id in self.owners():
            for session_id in self.sessions(user_id=user_id, tenant_id=tenant_id):
                yield from self.read_session(
                    user_id=user_id, session_id=session_id, tenant_id=tenant_id
                )


def _parse(line: bytes, path: Path, n: int) -> TranscriptRecord:
    try:
        return TranscriptRecord.model_validate_json(line)
    except ValueError as exc:
        raise CorruptRecord(f"{path.name} line {n + 1}: {exc}") from exc


# ------------------------------------------------------------------ file helpers


class _shared:
    """An ``O_RDONLY`` descriptor under a shared ``flock``: writers finish whole turns first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> int:
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise NotFound(f"no transcript at {self.path.name}") from exc
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


GENERATION_BYTES = 1024


def _generation_of(head: bytes) -> str:
    """A file's generation from its first bytes: its first line, up to 1 KiB."""
    first = head[:GENERATION_BYTES].split(b"\n", 1)[0]
    return hashlib.sha1(first).hexdigest()[:12]


def _generation(fd: int) -> str:
    return _generation_of(os.pread(fd, GENERATION_BYTES, 0))


def _write_all(fd: int, blob: bytes, offset: int) -> None:
    """Write ``blob`` at the end; on failure cut the file back to ``offset`` (no torn turn)."""
    view = memoryview(blob)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except BaseException:
        os.ftruncate(fd, offset)
        raise


def _complete_size(fd: int, size: int) -> int:
    """The file size without a torn last line (bytes after the last newline)."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    pos = size
    while pos > 0:
        start = max(0, pos - _CHUNK)
        chunk = os.pread(fd, pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0


def _cut_torn_tail(fd: int, size: int, path: Path) -> int:
    """Drop a torn last line (its writer never returned); the new end of the file."""
    complete = _complete_size(fd, size)
    if complete != size:
        torn = size - complete
        log.warning("cutting a torn last line of %s (%d bytes) before appending", path, torn)
        os.ftruncate(fd, complete)
    return complete


def _lines_forward(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of each complete line in ``[start, end)``, first to last."""
    pos, buf = start, b""
    while pos < end:
        chunk = os.pread(fd, min(_CHUNK, end - pos), pos)
        if not chunk:
            break
        buf_at = pos - len(buf)
        buf += chunk
        pos += len(chunk)
        cut = 0
        while True:
            nl = buf.find(b"\n", cut)
            if nl < 0:
                break
            yield buf_at + cut, buf[cut:nl]
            cut = nl + 1
        buf = buf[cut:]


def _lines_backward(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of each line before ``end`` (just past a newline), last first."""
    pos, buf = end, b""  # buf holds [pos, pos + len(buf)), ending with a newline
    while pos > 0 or buf:
        nl = buf.rfind(b"\n", 0, len(buf) - 1) if buf else -1
        if nl >= 0:
            yield pos + nl + 1, buf[nl + 1 : -1]
            buf = buf[: nl + 1]
            continue
        if pos == 0:
            yield 0, buf[:-1]
            return
        start = max(0, pos - _CHUNK)
        buf = os.pread(fd, pos - start, start) + buf
        pos = start


def _ids(line: bytes) -> tuple[bytes, bytes] | None:
    """``(turn_id, message_id)`` of a record line, without parsing the JSON."""
    mid, tid = _MESSAGE_ID.match(line), _TURN_ID.search(line, 0, 400)
    if mid is None or tid is None:
        return None
    return tid.group(1), mid.group(1)


class _Group:
    """Adjacent lines of one turn, collected in either direction.

    One turn's lines share a turn id and never repeat a message id; a repeated message
    id marks a second copy of the turn (files written before turn ids were deduplicated),
    and a line whose ids cannot be read is a turn of its own (parsing it will say why).
    """

    def __init__(self) -> None:
        self.lines: list[tuple[int, bytes]] = []
        self.turn_id: bytes | None = None
        self.message_ids: set[bytes] = set()

    def takes(self, line: bytes) -> bool:
        """Add ``line`` if it continues this turn (always, when the group is empty)."""
        ids = _ids(line)
        if self.lines and (ids is None or ids[0] != self.turn_id or ids[1] in self.message_ids):
            return False  # (an unreadable first line has turn_id None: it stands alone)
        if ids is not None:
            self.turn_id = ids[0]
            self.message_ids.add(ids[1])
        return True

    def add(self, line_at: int, line: bytes) -> None:
        self.lines.append((line_at, line))

    def span(self, path: Path) -> TurnSpan:
        lines = sorted(self.lines)
        first_at, first_line = lines[0]
        last_at, last_line = lines[-1]
        length = last_at + len(last_line) + 1 - first_at
        return TurnSpan(first_at, length, _parse(first_line, path, 0))


def _turns_forward(fd: int, start: int, end: int, path: Path) -> Iterator[TurnSpan]:
    group = _Group()
    for line_at, line in _lines_forward(fd, start, end):
        if not group.takes(line):
            yield group.span(path)
            group = _Group()
            group.takes(line)
        group.add(line_at, line)
    if group.lines:
        yield group.span(path)


def _turns_backward(fd: int, end: int, path: Path) -> Iterator[TurnSpan]:
    group = _Group()
    for line_at, line in _lines_backward(fd, end):
        if not line.strip():
            continue
        if not group.takes(line):
            yield group.span(path)
            group = _Group()
            group.takes(line)
        group.add(line_at, line)
    if group.lines:
        yield group.span(path)


def _find_turn(
    fd: int, size: int, turn_id: str, window: int, path: Path
) -> tuple[TurnSpan, list[TranscriptRecord]] | None:
    """The last copy of ``turn_id`` whose records reach into the file's last ``window`` bytes."""
    start = max(0, size - window)
    needle = b',"turn_id":"' + turn_id.encode() + b'"'
    if needle not in os.pread(fd, size - start, start):
        return None
    for span in _turns_backward(fd, size, path):
        if span.first.turn_id == turn_id:
            data = os.pread(fd, span.length, span.offset)
            return span, [_parse(line, path, n) for n, line in enumerate(data.splitlines())]
        if span.end <= start:
            return None
    return None


def _existing(
    found: tuple[TurnSpan, list[TranscriptRecord]],
    records: list[TranscriptRecord],
    path: Path,
    generation: str,
) -> AppendedTurn:
    """The stored turn a retry names, if the retry repeats it exactly."""
    span, stored = found
    if len(stored) != len(records) or any(
        old.model_dump(include=_SAME_TURN_FIELDS) != new.model_dump(include=_SAME_TURN_FIELDS)
        for old, new in zip(stored, records, strict=True)
    ):
        raise Conflict(
            f"turn_id {span.first.turn_id!r} is already recorded in {path.name} "
            "with other messages: a retry must repeat the turn exactly"
        )
    return AppendedTurn(tuple(stored), span.pointer, generation, existing=True)
