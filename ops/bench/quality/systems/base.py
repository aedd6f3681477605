"""The one small interface every system under test implements."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

from ops.bench.quality.datasets import Question, Space

log = logging.getLogger(__name__)

MAX_ERRORS = 50  # error records kept per system (all are counted)


@dataclass(frozen=True)
class Hit:
    """One ranked memory: its text (what recall would inject) and its source turn ids."""

    text: str
    turns: tuple[str, ...]


@dataclass
class SystemStats:
    stored_items: int = 0
    ingested_turns: int = 0
    add_seconds: list[float] = field(default_factory=list)  # per ingested turn
    search_seconds: list[float] = field(default_factory=list)  # per query
    notes: list[str] = field(default_factory=list)
    degraded: Counter[str] = field(default_factory=Counter)  # answers a layer was missing from
    errors: list[dict[str, str]] = field(default_factory=list)  # the first MAX_ERRORS
    error_count: int = 0

    def error(self, stage: str, space: str, item: str, exc: BaseException) -> None:
        """Record a failure of one part of the run (the run goes on, and fails at the end)."""
        self.error_count += 1
        log.warning("%s failed on %s %s: %s: %s", stage, space, item, type(exc).__name__, exc)
        if len(self.errors) < MAX_ERRORS:
            self.errors.append({"stage": stage, "space": space, "item": item,
                                "error": f"{type(exc).__name__}: {exc}"[:500]})  # fmt: skip


class System(Protocol):
    name: str
    stats: SystemStats

    def ingest(self, space: Space) -> None:
        """Load one memory space (a user's whole history) in time order."""
        ...

    def search(self, space: Space, question: Question, depth: int) -> list[Hit]:
        """Ranked memories for the question, enough to fill ``depth`` unique turns."""
        ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------- shared text helpers
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


@cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN  # Lucene's English stop set (33 words)

    return frozenset(STOPWORDS_EN)


@cache
def _jieba() -> object:
    import jieba

    jieba.setLogLevel(60)
    jieba.initialize()
    return jieba


def _jieba_cut(run: str) -> list[str]:
    import jieba

    _jieba()
    return [w for w in jieba.lcut(run) if w.strip()]


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased latin words without Lucene's English stop words; jieba for Chinese."""
    stop = _stopwords()
    out: list[str] = []

    def latin(chunk: str) -> Iterator[str]:
        for w in _LATIN.findall(chunk.casefold()):
            if w not in stop:
                yield w

    pos = 0
    for m in _CJK_RUN.finditer(text):
        out.extend(latin(text[pos : m.start()]))
        out.extend(_jieba_cut(m.group()))
        pos = m.end()
    out.extend(latin(text[pos:]))
    return out
