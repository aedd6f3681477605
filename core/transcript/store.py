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
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import CorruptRecord, InvalidInput, NotFound, PayloadTooLarge
from core.ids import is_valid_id, owner_tenant, validate_id
from core.models.transcript import MessageIn, TranscriptRecord, TurnPointer
from core.textcut import cut_middle, fair_shares

log = logging.getLogger(__name__)


def new_turn_id(now: float | None = None) -> str:
    """Time-ordered, collision-resistant turn id (``t`` + ns timestamp hex + random)."""
    ns = int((now if now is not None else time.time()) * 1e9)
    return f"t{ns:016x}{secrets.token_hex(3)}"


@dataclass(frozen=True)
class AppendedTurn:
    records: tuple[TranscriptRecord, ...]
    pointer: TurnPointer


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
    ) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self.max_message_chars = max_message_chars
        self.max_turn_messages = max_turn_messages
        self.max_turn_chars = max_turn_chars

    def path(self, *, user_id: str, session_id: str, tenant_id: str | None = None) -> Path:
        validate_id(user_id, kind="user_id")
        validate_id(session_id, kind="session_id")
        return self.root / "t" / owner_tenant(tenant_id) / "u" / user_id / f"{session_id}.jsonl"

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

        Over-long texts are kept as head and tail (:meth:`_fit`), never refused."""
        self._validate(messages)
        messages = self._fit(messages)
        tenant_id = owner_tenant(tenant_id)
        path = self.path(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        if task_id is not None:
            validate_id(task_id, kind="task_id")
        when = at if at is not None else time.time()
        tid = validate_id(turn_id, kind="turn_id") if turn_id else new_turn_id(when)
        records = []
        seen: set[str] = set()
        for i, m in enumerate(messages):
            mid = m.message_id or f"{tid}.{i}"
            if mid in seen:
                raise InvalidInput(f"duplicate message_id {mid!r} in one turn")
            seen.add(mid)
            records.append(
                TranscriptRecord(
                    message_id=mid,
                    turn_id=tid,
                    user_id=user_id,
                    tenant_id=tenant_id,
                    session_id=session_id,
                    task_id=task_id,
                    role=m.role,
                    content=m.content,
                    tool_call_id=m.tool_call_id,
                    tool_calls=list(m.tool_calls),
                    name=m.name,
                    at=when,
                )
            )
        blob = "".join(r.model_dump_json(exclude_none=True) + "\n" for r in records).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            offset = os.lseek(fd, 0, os.SEEK_END)
            view = memoryview(blob)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        pointer = TurnPointer(
            user_id=user_id,
            tenant_id=tenant_id,
            session_id=session_id,
            task_id=task_id,
            turn_id=tid,
            at=when,
            offset=offset,
            length=len(blob),
        )
        return AppendedTurn(tuple(records), pointer)

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
