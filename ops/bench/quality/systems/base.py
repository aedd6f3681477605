"""The one small interface every system under test implements."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Protocol

from memstrata.ops.bench.quality.datasets import Question, Space

if TYPE_CHECKING:
    from memstrata.core.compress.tokens import Cl100kCounter

log = logging.getLogger(__name__)

MAX_ERRORS = 50  # error records kept per system (all are counted)
RAW_HISTORY = "raw_history"  # a layer that keeps raw turns: reported, never counted as curated
INDEX_CONTEXT = "l0 context (indexed)"  # L0 text indexed with cards, never stored on them
UNCURATED = frozenset({RAW_HISTORY, INDEX_CONTEXT})  # reported apart from stored_tokens


@dataclass(frozen=True)
class Hit:
    """One ranked memory: its text (what recall would inject) and its source turn ids."""

    text: str
    turns: tuple[str, ...]


@dataclass(frozen=True)
class Injection:
    """What a system would put into the prompt within a token budget."""

    text: str
    turns: tuple[str, ...]  # source turns of the injected memories


@dataclass
class SystemStats:
    stored_items: int = 0
    ingested_turns: int = 0
    add_seconds: list[float] = field(default_factory=list)  # per ingested turn
    search_seconds: list[float] = field(default_factory=list)  # per query
    notes: list[str] = field(default_factory=list)
    degraded: Counter[str] = field(default_factory=Counter)  # answers a layer was missing from
    # cl100k tokens of the memories held at query time, per layer; curated layers count
    # towards ``stored_tokens``; L0 text an index holds (the raw-history index, the
    # episodes' neighbours added at index time) is reported apart (``UNCURATED``)
    stored_layers: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, str]] = field(default_factory=list)  # the first MAX_ERRORS
    error_count: int = 0

    @property
    def stored_tokens(self) -> int:
        return sum(n for layer, n in self.stored_layers.items() if layer not in UNCURATED)

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

    def inject(self, space: Space, question: Question, budget: int) -> Injection:
        """The text the system would inject for the question within ``budget`` cl100k
        tokens (not timed: the latencies are ``search``'s)."""
        ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------- token budgets
@cache
def cl100k() -> Cl100kCounter:
    """The project's offline cl100k counter (core.compress.tokens), one per process."""
    from memstrata.core.compress.tokens import Cl100kCounter

    return Cl100kCounter()


def count_tokens(texts: Iterable[str]) -> int:
    return sum(cl100k().count_many(list(texts)))


def pack(hits: Iterable[Hit], budget: int) -> Injection:
    """The top memories concatenated (one per line) until the next one would overflow
    ``budget`` cl100k tokens: always a prefix of the ranking, so a larger budget injects
    a superset; a memory is never cut.  Each line break is charged one token, so the
    text never exceeds the budget."""
    counter = cl100k()
    texts: list[str] = []
    turns: list[str] = []
    used = 0
    for h in hits:
        need = counter.count(h.text) + (1 if texts else 0)
        if used + need > budget:
            break
        used += need
        texts.append(h.text)
        for t in h.turns:
            if t not in turns:
                turns.append(t)
    return Injection("\n".join(texts), tuple(turns))


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
