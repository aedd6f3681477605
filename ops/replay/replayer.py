"""Replaying sessions through ``record_turn()`` and collecting what STM kept."""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field

from memstrata.core.api import Kicker, MemoryClient
from memstrata.core.errors import MemstrataError
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.ingest.pipeline import read_decision_records
from memstrata.core.models.candidate import Verdict
from memstrata.core.runtime import Runtime
from memstrata.ops.replay.formats import Session
from memstrata.ops.replay.turns import group_turns, to_message

log = logging.getLogger(__name__)


def safe_id(text: str) -> str:
    """A key-safe id for a free-form name; long names keep a hash suffix."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "x"
    if len(cleaned) <= 100:
        return cleaned
    return f"{cleaned[:80]}_{hashlib.sha1(text.encode()).hexdigest()[:12]}"


@dataclass
class SessionReport:
    """What one replayed session produced, for the markdown report and for tests."""

    source: str
    session_id: str
    user_id: str
    stm_session_id: str
    messages: int = 0
    system_skipped: int = 0
    turns: int = 0
    continuations: int = 0
    cut_messages: int = 0
    errors: list[str] = field(default_factory=list)
    decisions: int = 0
    written: int = 0
    refused: int = 0
    refusal_reasons: Counter[str] = field(default_factory=Counter)
    written_rules: Counter[str] = field(default_factory=Counter)
    stored_items: int = 0
    stored_types: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[str, str, str]] = field(default_factory=list)  # type, subtype, summary
    seconds: float = 0.0


class InlineKicker:
    """Remembers kicked shards so the replay drains them in this process (no worker)."""

    def __init__(self) -> None:
        self.shards: set[int] = set()

    def __call__(self, shard: int) -> None:
        self.shards.add(shard)


def _reason_bucket(reason: str) -> str:
    return re.sub(r"score -?[\d.]+ below", "score below", reason)


class Replayer:
    """Replays sessions into one namespace, inline or through a Celery kicker.

    With ``kicker=None`` the shards are drained in-process after each session (the same
    ``drain_shard`` the worker runs); with a Celery kicker the replay waits, polling with
    ``wait_s`` as the deadline, until the workers have drained them.
    """

    def __init__(
        self,
        res: Runtime,
        *,
        kicker: Kicker | None = None,
        wait_s: float = 120.0,
        samples: int = 5,
    ) -> None:
        self.res = res
        inline = InlineKicker()
        self.inline = inline if kicker is None else None
        self.client = MemoryClient(
            transcript=res.transcript,
            queue=res.queue,
            kicker=kicker if kicker is not None else inline,
        )
        self.wait_s = wait_s
        self.samples = samples

    def replay(self, session: Session, *, at0: float | None = None) -> SessionReport:
        started = time.monotonic()
        settings = self.res.settings
        sid = safe_id(session.session_id)
        rep = SessionReport(
            session.source, session.session_id, safe_id(f"replay-{session.source}"), sid
        )
        rep.messages = len(session.messages)
        rep.system_skipped = sum(1 for m in session.messages if m["role"] == "system")
        turns = group_turns(session.messages, max_messages=settings.max_turn_messages)
        rep.turns = len(turns)
        rep.continuations = sum(1 for t in turns if t[0]["role"] != "user")
        clock = time.time() if at0 is None else at0
        digest = hashlib.sha1(session.session_id.encode()).hexdigest()[:10]
        shards: set[int] = set()
        for k, turn in enumerate(turns):
            built = [to_message(m, settings.max_message_chars) for m in turn]
            rep.cut_messages += sum(1 for _m, cut in built if cut)
            try:
                receipt = self.client.record_turn(
                    user_id=rep.user_id,
                    session_id=sid,
                    task_id=sid,
                    turn_id=f"r{digest}-{k:05d}",
                    messages=[m for m, _cut in built],
                    at=clock + k,  # one second per turn keeps the turns in order
                )
                shards.add(receipt.shard)
            except MemstrataError as exc:
                rep.errors.append(f"turn {k}: {type(exc).__name__}: {exc}")
        self._drain(shards)
        self._collect(rep)
        rep.seconds = time.monotonic() - started
        log.info(
            "replayed %s: %s turns, %s written, %s refused",
            session.session_id,
            rep.turns,
            rep.written,
            rep.refused,
        )
        return rep

    def _drain(self, shards: set[int]) -> None:
        res = self.res
        if self.inline is not None:
            for shard in sorted(shards | self.inline.shards):
                while drain_shard(
                    shard,
                    queue=res.queue,
                    transcript=res.transcript,
                    pipeline=res.pipeline,
                    consumer="replay",
                    batch=res.settings.ingest_batch,
                    max_run_s=res.settings.ingest_max_run_s,
                ).continued:
                    pass
            self.inline.shards.clear()
            return
        deadline = time.monotonic() + self.wait_s
        for shard in sorted(shards):
            while res.redis.exists(res.queue.keys.ingest_kick(shard)) or any(
                res.queue.backlog(shard)
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"shard {shard} not drained after {self.wait_s}s")
                time.sleep(0.05)

    def _collect(self, rep: SessionReport) -> None:
        for d in read_decision_records(self.res.stm, rep.user_id, rep.stm_session_id):
            rep.decisions += 1
            if d.verdict is Verdict.WRITTEN:
                rep.written += 1
                rep.written_rules[d.rule] += 1
            else:
                rep.refused += 1
                rep.refusal_reasons[_reason_bucket(d.reason)] += 1
        items = self.res.stm.by_session(rep.user_id, rep.stm_session_id, limit=1000)
        rep.stored_items = len(items)
        rep.stored_types = Counter(i.memory_type.value for i in items)
        top = sorted(items, key=lambda i: (-i.importance, i.summary))[: self.samples]
        rep.samples = [(i.memory_type.value, i.subtype, i.summary) for i in top]
