"""MADial-Bench read in place: one language folder's memory archive and its dialogues.

The LTM benchmark (``ops.bench.ltm_data``: cards and queries) and the quality benchmark
(``ops.bench.quality.datasets``: memory spaces and questions) frame the same files their
own way; this module is the one reader of those files.

An archive entry without a ``user-id`` (the English archive has none) takes it from the
sibling language's archive, which holds the same ids; its owner is ``""`` when no
archive names one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ArchiveEntry:
    key: str
    owner: str  # the user id, "" when no archive names it
    event: str
    scene: str
    time: str  # "YYYY-MM-DD"


@dataclass(frozen=True)
class Dialogue:
    user: str
    lines: tuple[str, ...]  # as in the file: "<BOD>", "<Name>: text", ..., "<EOD>"
    test_turns: tuple[int, ...]  # as in the file (not sorted)
    relevant: tuple[str, ...]  # gold archive keys


@dataclass(frozen=True)
class MadialFolder:
    memory_file: Path
    dialogue_file: Path
    archive: tuple[ArchiveEntry, ...]  # file order, one entry per key
    dialogues: tuple[Dialogue, ...]


def jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object per line (a JSON array is accepted too)."""
    text = path.read_text("utf-8").strip()
    if text.startswith("["):
        data: list[dict[str, Any]] = json.loads(text)
        return data
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _archive(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for row in jsonl(path):
        for key, value in row.items():
            out[str(key)] = value
    return out


def read_madial(folder: Path, *, dialogue_file: str | None = None) -> MadialFolder:
    """``folder`` is a language folder (``en`` / ``zh``) holding ``*memory.json`` and
    ``*dialogue*.json``; ``dialogue_file`` picks one of several dialogue files (default
    the shortest name, the plain setting)."""
    mem_file = next(iter(sorted(folder.glob("*memory.json"))))
    dlg_file = (
        folder / dialogue_file
        if dialogue_file
        else min(folder.glob("*dialogue*.json"), key=lambda p: len(p.name))
    )
    archive = _archive(mem_file)
    sibling: dict[str, dict[str, Any]] = {}
    for other in folder.parent.glob("*/*memory.json"):
        if other != mem_file:
            sibling.update(_archive(other))
    entries = []
    for key, value in archive.items():
        uid = value.get("user-id", sibling.get(key, {}).get("user-id"))
        entries.append(
            ArchiveEntry(
                key=key,
                owner="" if uid is None else str(uid),
                event=str(value["event"]),
                scene=str(value.get("scene", "")),
                time=str(value.get("time", "")),
            )
        )
    dialogues = [
        Dialogue(
            user=str(d.get("user-id", "")),
            lines=tuple(str(line) for line in d["dialogue"]),
            test_turns=tuple(int(t) for t in d.get("test-turn", [])),
            relevant=tuple(str(g) for g in d.get("relevant-id", [])),
        )
        for d in jsonl(dlg_file)
    ]
    return MadialFolder(mem_file, dlg_file, tuple(entries), tuple(dialogues))
