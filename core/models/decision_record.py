"""The compact stored form of a write decision (docs/KEYS.md, *Write decisions*).

A full :class:`WriteDecision` is ~1 KB of JSON, most of it the score breakdown, the
write_profile, the importance breakdown and the summary: all of them follow from the
candidate, which the deterministic extractor re-derives from the turn in L0, and from
two facts of the moment of the decision (``novelty`` and the mention count).  So the
hash value holds only what the moment decided, as one JSON array::

    [1, written, reason, score, threshold, memory_type, memory_id, message_ids, at,
     novelty, mentions, check, omitted?]

``written`` is 1 or 0; a message id ``<turn_id>.<n>`` is stored as ``n``; ``reason`` is
an index into :data:`REASONS` (≥ 0), a template (< 0, filled from the score, threshold or
memory id) or the text itself; ``check`` is the CRC-32 of the candidate's canonical key
and summary preview, so an expansion that re-derives another candidate says so instead
of showing it; ``omitted`` only on a budget summary.  The rule, the candidate's ordinal
and the turn are in the hash field (the decision id), the session in the key.  A value
that starts with ``{`` is a record of the format before this one (a full JSON
``WriteDecision``) and is read as it is.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field, replace

from memstrata.core.models.candidate import Verdict, WriteDecision
from memstrata.core.models.memory import MemoryType

FORMAT = 1
BUDGET_RULE = "extraction_budget"
# Append-only: a stored index keeps its meaning for as long as records live (7 days).
REASONS: tuple[str, ...] = (
    "raw unstructured text (seed 四.5: no raw logs or transcripts in STM)",
    "chit-chat carries no task state",
    "unverified guess (seed 四.5)",
    "duplicate of a fact already in STM",
    "transient, short-lived information",
    "changed fact: new version",
    "restated in the same message; already stored",
    "older than the stored version; kept as history",
)
_REASON_INDEX = {r: i for i, r in enumerate(REASONS)}
# one encoder: ``json.dumps`` with options builds a new one per call
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _templated(code: int, score: float, threshold: float, memory_id: str | None) -> str:
    if code == -1:
        return f"score {score:g} ≥ threshold {threshold:g}"
    if code == -2:
        return f"score {score:g} below threshold {threshold:g}"
    return f"restated fact merged into {memory_id if memory_id else '?'}"


def _reason_code(reason: str, score: float, threshold: float, memory_id: str | None) -> int | str:
    if (code := _REASON_INDEX.get(reason)) is not None:
        return code
    if reason.startswith(("score ", "restated fact merged into ")):
        for code in (-1, -2, -3):
            if _templated(code, score, threshold, memory_id) == reason:
                return code
    return reason


def _num(x: float) -> float | int:
    return int(x) if x.is_integer() else x


def _short_ids(message_ids: tuple[str, ...], turn_id: str) -> list[str | int]:
    """``<turn_id>.<n>`` (the ids L0 gives a turn's messages) as ``n``: the turn is in the
    field already."""
    head = turn_id + "."
    out: list[str | int] = []
    for m in message_ids:
        tail = m[len(head) :] if m.startswith(head) else ""
        out.append(int(tail) if tail.isdigit() and str(int(tail)) == tail else m)
    return out


def check_of(canonical_fact_key: str, summary_preview: str) -> int:
    """What ties a record to the candidate it was made for (re-derived on expansion)."""
    return zlib.crc32(f"{canonical_fact_key}\n{summary_preview}".encode())


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One stored decision: what was decided, without what L0 can tell again."""

    decision_id: str  # <turn_id>:<ordinal>:<rule>, or <turn_id>:~<message index>:budget
    verdict: Verdict
    reason: str
    score: float
    threshold: float
    memory_type: MemoryType
    memory_id: str | None
    message_ids: tuple[str, ...]
    session_id: str
    at: float
    novelty: float  # the write_profile's novelty at the time (1.0, 0.8 or 0.0)
    mentions: int  # the mention count importance was computed with
    check: int
    omitted: dict[str, int] = field(default_factory=dict)
    full: WriteDecision | None = None  # a record stored in the format before this one

    @property
    def turn_id(self) -> str:
        return self.decision_id.rsplit(":", 2)[0]

    @property
    def is_budget(self) -> bool:
        if self.full is not None:  # an old record: its own fields, not the id's layout
            return self.full.rule == BUDGET_RULE
        return self.decision_id.rsplit(":", 2)[1].startswith("~")

    @property
    def ordinal(self) -> int:
        """The candidate's index in the turn's extraction (a budget summary: its message's)."""
        return int(self.decision_id.rsplit(":", 2)[1].lstrip("~"))

    @property
    def rule(self) -> str:
        if self.full is not None:
            return self.full.rule
        return BUDGET_RULE if self.is_budget else self.decision_id.rsplit(":", 1)[1]

    @classmethod
    def of(cls, d: WriteDecision, *, mentions: int) -> DecisionRecord:
        return cls(
            decision_id=d.decision_id,
            verdict=d.verdict,
            reason=d.reason,
            score=d.score,
            threshold=d.threshold,
            memory_type=d.memory_type,
            memory_id=d.memory_id,
            message_ids=tuple(d.message_ids),
            session_id=d.session_id,
            at=d.at,
            novelty=d.profile.novelty,
            mentions=mentions,
            check=check_of(d.canonical_fact_key, d.summary),
            omitted=d.omitted,
        )

    def encode(self) -> str:
        """The hash value: one short JSON array (module docstring)."""
        row: list[object] = [
            FORMAT,
            1 if self.verdict is Verdict.WRITTEN else 0,
            _reason_code(self.reason, self.score, self.threshold, self.memory_id),
            _num(self.score),
            _num(self.threshold),
            self.memory_type.value,
            self.memory_id,
            _short_ids(self.message_ids, self.turn_id),
            self.at,
            _num(self.novelty),
            self.mentions,
            self.check,
        ]
        if self.omitted:
            row.append(self.omitted)
        return _JSON.encode(row)

    @classmethod
    def decode(cls, decision_id: str, raw: str, *, session_id: str) -> DecisionRecord:
        """A stored value, either format (a ``{`` is the full JSON of the old one)."""
        if raw.startswith("{"):
            full = WriteDecision.model_validate_json(raw)
            return replace(cls.of(full, mentions=1), full=full)
        row = json.loads(raw)
        if row[0] != FORMAT:
            raise ValueError(f"decision record format {row[0]!r} is not known")
        _, written, reason, score, threshold, mtype, memory_id, mids, at, nov, mentions, check = (
            row[:12]
        )
        score, threshold = float(score), float(threshold)
        if isinstance(reason, int):
            reason = (
                REASONS[reason] if reason >= 0 else _templated(reason, score, threshold, memory_id)
            )
        return cls(
            decision_id=decision_id,
            verdict=Verdict.WRITTEN if written else Verdict.REFUSED,
            reason=reason,
            score=score,
            threshold=threshold,
            memory_type=MemoryType(mtype),
            memory_id=memory_id,
            message_ids=tuple(
                f"{decision_id.rsplit(':', 2)[0]}.{m}" if isinstance(m, int) else m for m in mids
            ),
            session_id=session_id,
            at=float(at),
            novelty=float(nov),
            mentions=int(mentions),
            check=int(check),
            omitted=dict(row[12]) if len(row) > 12 else {},
        )
