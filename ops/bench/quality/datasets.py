"""Loaders for the three benchmark formats, into one shape: memory spaces of turns + questions.

A :class:`Space` is what one user's memory holds (a LoCoMo conversation, a MemDaily
trajectory with its distractors, a MADial user's archive); its questions may only be
answered from it.  Files are read in place; nothing is copied.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ops.bench.common.madial import read_madial

Format = Literal["locomo", "memdaily", "madial"]
FORMATS: tuple[Format, ...] = ("locomo", "memdaily", "madial")


@dataclass(frozen=True)
class Turn:
    id: str  # the dataset's id, normalised (LoCoMo "D1:3", MemDaily "01_simple_events:4:2")
    speaker: str
    text: str  # what every system indexes: "<speaker>: <text>" for dialogue turns
    at: float  # event time, seconds since the epoch (the simulated clock)
    session: str  # session key within the space ("1", "2", ...)


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: tuple[str, ...]
    category: str
    answer: str = ""


@dataclass
class Space:
    id: str
    turns: list[Turn]
    questions: list[Question]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Dataset:
    name: str
    fmt: Format
    spaces: list[Space]
    headline: frozenset[str]  # categories of the headline average
    notes: list[str] = field(default_factory=list)
    dropped_ids: int = 0  # gold ids that did not resolve to a turn

    @property
    def n_questions(self) -> int:
        return sum(len(s.questions) for s in self.spaces)


# ---------------------------------------------------------------------- LoCoMo
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")
_LOCOMO_CATEGORIES = {
    "1": "1 multi-hop",
    "2": "2 temporal",
    "3": "3 open-domain",
    "4": "4 single-hop",
    "5": "5 adversarial",
}


def normalise_evidence(evidence: Iterable[str], known: set[str] | None = None) -> list[str]:
    """LoCoMo evidence ids → canonical ``D<session>:<turn>``; unknown ids are dropped.

    Splits on ``[;,\\s]+`` (some entries hold several ids), repairs ``D:11:26`` and
    ``D30:05``, de-duplicates in order, and keeps only ids present in ``known`` when given.
    """
    out: list[str] = []
    for entry in evidence:
        for token in _EVIDENCE_SPLIT.split(str(entry)):
            m = _EVIDENCE_ID.match(token)
            if not m:
                continue
            tid = f"D{int(m.group(1))}:{int(m.group(2))}"
            if (known is None or tid in known) and tid not in out:
                out.append(tid)
    return out


def parse_locomo_time(text: str) -> float:
    """``1:56 pm on 8 May, 2023`` → epoch seconds (UTC)."""
    dt = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return dt.timestamp()


def locomo_turn_text(raw: dict[str, Any]) -> str:
    text = str(raw.get("text", ""))
    caption = raw.get("blip_caption")
    if caption:
        text += f" [shares {caption}]"
    return f"{raw['speaker']}: {text}"


def _locomo_sessions(conv: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]], float]]:
    out = []
    for key, value in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(value, list):
            n = int(m.group(1))
            out.append((n, value, parse_locomo_time(conv[f"session_{n}_date_time"])))
    out.sort(key=lambda x: x[0])
    return out


def _beyond(evidence: Iterable[str], sessions: int) -> bool:
    return any(int(i[1:].split(":")[0]) > sessions for i in normalise_evidence(evidence))


def load_locomo(
    path: Path, *, limit_spaces: int | None = None, limit_sessions: int | None = None
) -> Dataset:
    """One space per conversation.  ``limit_sessions`` keeps the first n sessions and only
    the questions whose gold turns all lie in them (a quick slice)."""
    data = json.loads(path.read_text("utf-8"))
    spaces: list[Space] = []
    dropped = 0
    for sample in data[:limit_spaces]:
        turns: list[Turn] = []
        for n, raw_turns, start in _locomo_sessions(sample["conversation"])[:limit_sessions]:
            for i, raw in enumerate(raw_turns):
                # turns of a session share its date: keep their order with one second each
                tid = normalise_evidence([raw["dia_id"]])[0]
                turns.append(Turn(tid, raw["speaker"], locomo_turn_text(raw), start + i, str(n)))
        known = {t.id for t in turns}
        questions = []
        for qi, qa in enumerate(sample["qa"]):
            evidence = qa.get("evidence", [])
            gold = normalise_evidence(evidence, known)
            if limit_sessions is not None and (not gold or _beyond(evidence, limit_sessions)):
                continue  # the slice holds only questions answerable from its sessions
            dropped += len(normalise_evidence(evidence)) - len(gold)
            cat = _LOCOMO_CATEGORIES.get(str(qa["category"]), str(qa["category"]))
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            qid = f"{sample['sample_id']}:q{qi}"
            questions.append(Question(qid, qa["question"], tuple(gold), cat, str(answer)))
        spaces.append(Space(str(sample["sample_id"]), turns, questions))
    return Dataset(
        name=path.name,
        fmt="locomo",
        spaces=spaces,
        headline=frozenset(v for k, v in _LOCOMO_CATEGORIES.items() if k != "5"),
        dropped_ids=dropped,
        notes=["headline = categories 1-4 with non-empty gold; category 5 reported apart"],
    )


# ---------------------------------------------------------------------- MemDaily
_MEMDAILY_TIME = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日\D*?(\d{1,2}):(\d{2})")


def parse_memdaily_time(text: str) -> float:
    """``2024年04月01日 周一 08:30`` → epoch seconds (UTC)."""
    m = _MEMDAILY_TIME.search(text)
    if not m:
        raise ValueError(f"unparseable MemDaily time {text!r}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()


def _memdaily_type(stem: str) -> str:
    """``05_post_processing_events`` → ``05 post_processing`` (the question type)."""
    prefix, _, rest = stem.partition("_")
    return f"{prefix} {rest.rsplit('_', 1)[0] if '_' in rest else rest}"


def _memdaily_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.json")) if path.is_dir() else [path]


def load_memdaily(
    path: Path,
    *,
    distractors: int = 50,
    seed: int = 0,
    per_file: int | None = None,
) -> Dataset:
    """One space per trajectory: its messages plus ``distractors`` messages drawn (fixed
    seed) from trajectories of other files, interleaved by time."""
    files = _memdaily_files(path)
    by_file: dict[str, list[dict[str, Any]]] = {
        f.stem: json.loads(f.read_text("utf-8")) for f in files
    }
    pool: list[tuple[str, Turn]] = []  # (file, turn) for drawing distractors
    for stem, trajs in by_file.items():
        for traj in trajs:
            for msg in traj["message_list"]:
                tid = f"{stem}:{traj['tid']}:{msg['mid']}"
                t = Turn(tid, "user", str(msg["message"]), parse_memdaily_time(msg["time"]), "1")
                pool.append((stem, t))
    rng = random.Random(seed)
    spaces: list[Space] = []
    for stem, trajs in by_file.items():
        others = [t for s, t in pool if s != stem]
        if not others and distractors:
            others = [t for s, t in pool if not t.id.startswith(f"{stem}:")]
        for traj in trajs[:per_file]:
            own = [
                Turn(f"{stem}:{traj['tid']}:{m['mid']}", "user", str(m["message"]),
                     parse_memdaily_time(m["time"]), "1")
                for m in traj["message_list"]
            ]  # fmt: skip
            extra = rng.sample(others, min(distractors, len(others))) if distractors else []
            turns = sorted(own + extra, key=lambda t: (t.at, t.id))
            qs = [
                Question(
                    f"{stem}:{traj['tid']}:q{q['qid']}",
                    str(q["question"]),
                    tuple(f"{stem}:{traj['tid']}:{g}" for g in q.get("target_step_id", [])),
                    _memdaily_type(stem),
                    str(q.get("answer", "")),
                )
                for q in traj["question_list"]
            ]
            spaces.append(Space(f"{stem}-{traj['tid']}", turns, qs, {"distractors": distractors}))
    cats = frozenset(q.category for s in spaces for q in s.questions)
    return Dataset(
        name=path.name,
        fmt="memdaily",
        spaces=spaces,
        headline=cats,
        notes=[f"{distractors} distractor messages per trajectory, seed {seed}"],
    )


# ---------------------------------------------------------------------- MADial-Bench
_SPEAKER_LINE = re.compile(r"^<([^>]+)>:\s*(.*)$", re.DOTALL)


def madial_query(dialogue: Sequence[str], test_turns: Sequence[int]) -> str:
    """The dialogue text before the first test turn (``<BOD>``/``<EOD>`` dropped)."""
    first = min(test_turns) if test_turns else len(dialogue)
    lines = []
    for line in dialogue[:first]:
        line = line.strip()
        if not line or line in ("<BOD>", "<EOD>"):
            continue
        m = _SPEAKER_LINE.match(line)
        speaker, text = (m.group(1), m.group(2)) if m else ("", line)
        text = text.strip().strip('"“”')
        lines.append(f"{speaker}: {text}" if speaker else text)
    return "\n".join(lines)


def load_madial(path: Path, *, dialogue_file: str | None = None) -> Dataset:
    """``path`` is a language folder (``en`` / ``zh``) holding ``*-memory.json`` and
    ``*-dialogue.json``.  Memories without a ``user-id`` take it from the sibling
    language's archive (same ids); if none is known they are candidates for every user."""
    folder = read_madial(path, dialogue_file=dialogue_file)
    dlg_file = folder.dialogue_file
    users = sorted({d.user for d in folder.dialogues})
    spaces: list[Space] = []
    for uid in users:
        turns = []
        for entry in folder.archive:
            if entry.owner not in ("", uid):
                continue
            when = datetime.strptime(entry.time, "%Y-%m-%d").replace(tzinfo=UTC)
            turns.append(Turn(entry.key, "archive", entry.event, when.timestamp(), "1"))
        turns.sort(key=lambda t: (t.at, t.id))
        known = {t.id for t in turns}
        qs = []
        for n, d in enumerate(folder.dialogues):
            if d.user != uid:
                continue
            gold = tuple(g for g in d.relevant if g in known)
            query = madial_query(d.lines, d.test_turns)
            qs.append(Question(f"{dlg_file.stem}:{n}", query, gold, f"user {uid}"))
        spaces.append(Space(f"madial-{path.name}-u{uid}", turns, qs))
    return Dataset(
        name=f"{path.name}/{dlg_file.name}",
        fmt="madial",
        spaces=spaces,
        headline=frozenset(q.category for s in spaces for q in s.questions),
        notes=["candidates = that user's archive entries; query = dialogue before the test turn"],
    )


# ---------------------------------------------------------------------- entry
def detect_format(path: Path) -> Format:
    if path.is_dir():
        if any(path.glob("*memory.json")):
            return "madial"
        return "memdaily"
    head = path.read_text("utf-8")[:4000]
    if '"sample_id"' in head or '"conversation"' in head or '"qa"' in head:
        return "locomo"
    if '"message_list"' in head:
        return "memdaily"
    raise ValueError(f"cannot tell the format of {path}; pass --format")


def load(path: Path, fmt: Format | None = None, **kw: Any) -> Dataset:
    fmt = fmt or detect_format(path)
    if fmt == "locomo":
        return load_locomo(path, **kw)
    if fmt == "memdaily":
        return load_memdaily(path, **kw)
    if fmt == "madial":
        return load_madial(path, **kw)
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
