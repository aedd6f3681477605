"""Loaders for the four benchmark formats, into one shape: memory spaces of turns + questions.

A :class:`Space` is what one user's memory holds (a LoCoMo conversation, a MemDaily
trajectory with its distractors, a MADial user's archive, a BEAM chat); its questions may
only be answered from it.  Files are read in place; nothing is copied.
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

from memstrata.ops.bench.common.madial import read_madial

Format = Literal["locomo", "memdaily", "madial", "beam"]
FORMATS: tuple[Format, ...] = ("locomo", "memdaily", "madial", "beam")


@dataclass(frozen=True)
class Turn:
    id: str  # the dataset's id, normalised (LoCoMo "D1:3", MemDaily "01_simple_events:4:2")
    speaker: str
    text: str  # what every system indexes: "<speaker>: <text>" for dialogue turns
    at: float  # event time, seconds since the epoch (the simulated clock)
    session: str  # session key within the space ("1", "2", ...)
    role: str = "user"  # the chat role it is recorded with (BEAM: "user" or "assistant")


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: tuple[str, ...]
    category: str
    answer: str = ""
    # the strings answer containment looks for in the injected text (none: not scored)
    answers: tuple[str, ...] = ()


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


def _answers(value: object) -> tuple[str, ...]:
    """The answer containment looks for: the answer field, if there is one."""
    if value is None or str(value).strip() == "":
        return ()
    return (str(value),)


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
            # category 5's adversarial answer is the bait, not something to find
            answers = _answers(qa.get("answer"))
            qid = f"{sample['sample_id']}:q{qi}"
            questions.append(Question(qid, qa["question"], tuple(gold), cat, str(answer), answers))
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
                    _answers(q.get("answer")),
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


# ---------------------------------------------------------------------- BEAM
BEAM_HEADLINE = frozenset({
    "information_extraction", "multi_session_reasoning", "knowledge_update",
    "temporal_reasoning", "contradiction_resolution",
})  # fmt: skip
# the generator's " ->-> <batch>,<index>" tag at a message's end (seen as "2,N/A", " 3,8",
# "5,14)" too; a few assistant messages of chat 5 carry it as well)
_BEAM_ARTEFACT = re.compile(r"\s*->->[^\n]{0,24}\Z")
# the key facts a grader checks: "LLM response should state: March 29"
_BEAM_KEY_FACT = re.compile(r"^LLM response should (?:state|mention):\s*(.+?)\s*$", re.DOTALL)


def parse_beam_time(text: str) -> float:
    """``March-15-2024`` → epoch seconds (UTC, midnight)."""
    return datetime.strptime(text.strip(), "%B-%d-%Y").replace(tzinfo=UTC).timestamp()


def strip_beam_artefact(text: str) -> str:
    return _BEAM_ARTEFACT.sub("", text)


def flatten_ids(value: object) -> list[str]:
    """``source_chat_ids`` → message ids in order, de-duplicated: a list, nested lists, or
    a dict whose values hold them (knowledge_update: old and new information both)."""
    out: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit()):
            tid = str(int(v))
            if tid not in out:
                out.append(tid)

    walk(value)
    return out


def beam_answers(q: dict[str, Any]) -> tuple[str, ...]:
    """The strings answer containment looks for: the rubric's key facts ("should state:" /
    "should mention:"), else the answer field.  BEAM's ``answer`` is a sentence that
    restates the question ("My first sprint ends on March 29."); the rubric holds the
    fact itself ("March 29")."""
    facts = []
    for item in q.get("rubric") or []:
        m = _BEAM_KEY_FACT.match(str(item))
        if m and m.group(1):
            facts.append(m.group(1))
    if facts:
        return tuple(facts)
    return _answers(q.get("answer", q.get("ideal_answer")))


def _beam_chats(path: Path) -> list[Path]:
    if (path / "chat.json").exists():
        return [path]
    chats = [p.parent for p in path.glob("*/chat.json")]
    return sorted(chats, key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit()
                                        else 0, p.name))  # fmt: skip


def _beam_turns(chat: list[dict[str, Any]], limit_batches: int | None) -> list[Turn]:
    turns: list[Turn] = []
    last = float("-inf")
    batches = sorted(chat, key=lambda b: int(b.get("batch_number", 0)))[:limit_batches]
    for batch in batches:
        messages = [m for group in batch.get("turns", []) for m in group]
        anchor = batch.get("time_anchor") or next(
            (m["time_anchor"] for m in messages if m.get("time_anchor")), None
        )
        if anchor is None:
            raise ValueError(f"BEAM batch {batch.get('batch_number')} has no time_anchor")
        # one session per batch, dated by its anchor; messages one second apart
        start = max(parse_beam_time(str(anchor)), last + 1)
        for i, m in enumerate(messages):
            role = str(m["role"])
            content = strip_beam_artefact(str(m.get("content", "")))
            at = start + i
            turns.append(Turn(str(int(m["id"])), role, f"{role}: {content}", at,
                              str(batch.get("batch_number")), role))  # fmt: skip
            last = at
    return turns


def load_beam(
    path: Path, *, limit_chats: int | None = None, limit_batches: int | None = None
) -> Dataset:
    """One space per chat (``<n>/chat.json`` + ``probing_questions.json``; ``path`` is the
    folder of chats or one chat).  ``limit_batches`` keeps the first n batches and only the
    questions whose gold lies in them."""
    spaces: list[Space] = []
    dropped = 0
    for folder in _beam_chats(path)[:limit_chats]:
        chat = json.loads((folder / "chat.json").read_text("utf-8"))
        turns = _beam_turns(chat, limit_batches)
        known = {t.id for t in turns}
        probing = json.loads((folder / "probing_questions.json").read_text("utf-8"))
        questions = []
        for category, items in probing.items():
            for i, q in enumerate(items):
                cited = flatten_ids(q.get("source_chat_ids"))
                gold = [t for t in cited if t in known]
                if limit_batches is not None and (not gold or len(gold) < len(cited)):
                    continue  # the slice holds only questions answerable from its batches
                dropped += len(cited) - len(gold)
                answer = q.get("answer", q.get("ideal_answer", ""))
                questions.append(Question(f"beam-{folder.name}:{category}:{i}",
                                          str(q["question"]), tuple(gold), str(category),
                                          str(answer or ""), beam_answers(q)))  # fmt: skip
        spaces.append(Space(f"beam-{folder.name}", turns, questions))
    return Dataset(
        name=f"beam-{path.name}",
        fmt="beam",
        spaces=spaces,
        headline=BEAM_HEADLINE,
        dropped_ids=dropped,
        notes=[
            "headline = information_extraction, multi_session_reasoning, knowledge_update, "
            "temporal_reasoning, contradiction_resolution; the other categories reported "
            "apart; abstention has no gold",
            "answer containment looks for the rubric's key facts (should state / mention)",
        ],
    )


# ---------------------------------------------------------------------- entry
def detect_format(path: Path) -> Format:
    if path.is_dir():
        if (path / "chat.json").exists() or any(path.glob("*/chat.json")):
            return "beam"
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
    if fmt == "beam":
        return load_beam(path, **kw)
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
