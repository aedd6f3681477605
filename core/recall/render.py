"""Rendering of the memory block in the seed's structure (十.4), Chinese or English.

    用户/环境画像：            (from PostgreSQL, only when routed there)
    当前任务短期记忆：         (Redis STM candidates that survived the pool)
    相关长期经验：             (LTM cards that survived the pool)
    相关原始对话：             (raw messages of L0: the fallback, each with its date)

Long-term and raw lines are printed under the day they were said (``2023-05-08:``), each
day once per section, in the order of its best-ranked line; undated lines come first,
above every day, so that none reads as said on the day above it.  A date inline on every
line cost 8 cl100k tokens a line, a sixth of a 512-token block on LoCoMo.

The same content is returned as :class:`RenderedMemory` for agents that build their own
prompts (each line with its own time, ``at``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memstrata.core.compress.tokens import TokenCounter
from memstrata.core.recall.pool import PoolCandidate, SourceType, day_of, said_day, trusted

Lang = Literal["zh", "en"]

_TITLES: dict[str, dict[Lang, str]] = {
    "stm": {"zh": "当前任务短期记忆：", "en": "Current task short-term memory:"},
    "ltm": {"zh": "相关长期经验：", "en": "Related long-term experience:"},
    "history": {"zh": "相关原始对话：", "en": "From earlier conversations:"},
    "task": {"zh": "当前任务", "en": "Current task"},
}
_TYPE_LABEL: dict[str, dict[Lang, str]] = {
    "constraint": {"zh": "约束", "en": "constraint"},
    "decision": {"zh": "决策", "en": "decision"},
    "fact": {"zh": "事实", "en": "fact"},
    "observation": {"zh": "观测", "en": "observation"},
    "preference": {"zh": "偏好", "en": "preference"},
    "hypothesis": {"zh": "假设", "en": "hypothesis"},
}


class MemoryLine(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory_id: str
    memory_type: str
    text: str
    source_type: SourceType
    message_ids: tuple[str, ...] = ()
    at: float | None = None  # when it was said: raw messages and dated cards show it


class RenderedMemory(BaseModel):
    """The typed form of the injected memory, in rank order within each section."""

    model_config = ConfigDict(frozen=True)

    task_id: str | None = None
    short_term: tuple[MemoryLine, ...] = ()
    long_term: tuple[MemoryLine, ...] = ()
    history: tuple[MemoryLine, ...] = ()  # raw messages: the fallback below the curated layers

    @classmethod
    def from_candidates(
        cls, kept: Sequence[PoolCandidate], *, task_id: str | None
    ) -> RenderedMemory:
        # the candidates' fields are typed already: no re-validation (issue 17)
        def line(c: PoolCandidate) -> MemoryLine:
            return trusted(MemoryLine, {
                "memory_id": c.memory_id, "memory_type": c.memory_type, "text": c.summary,
                "source_type": c.source_type, "message_ids": c.message_ids,
                "at": c.said_at,
            })  # fmt: skip

        def of(source: SourceType) -> tuple[MemoryLine, ...]:
            return tuple(line(c) for c in kept if c.source_type is source)

        return trusted(cls, {
            "task_id": task_id,
            "short_term": of(SourceType.REDIS_STM),
            "long_term": of(SourceType.LTM),
            "history": of(SourceType.RAW_HISTORY),
        })  # fmt: skip


def language_for(profile_language: str | None, query: str) -> Lang:
    """The user's language from the profile; else guessed from the query's script."""
    if profile_language:
        return "zh" if profile_language.casefold().startswith("zh") else "en"
    cjk = sum(1 for ch in query if "\u4e00" <= ch <= "\u9fff")
    return "zh" if cjk * 3 >= len(query.strip()) / 2 and cjk > 0 else "en"


def day_heading(day: int) -> str:
    """The heading of the lines said on ``day`` (UTC days since the epoch): when a
    statement was said is part of its meaning ("yesterday"), and what a question about
    "when" needs."""
    return time.strftime("%Y-%m-%d:", time.gmtime(day * 86_400))


def _label(memory_type: str, lang: Lang) -> str:
    return _TYPE_LABEL.get(memory_type, {}).get(lang, memory_type)


def line_text(source: SourceType, memory_type: str, text: str, lang: Lang) -> str:
    """One memory as its section prints it: STM lines carry their type; long-term and
    raw-history lines stand under their day's heading (:func:`day_heading`)."""
    if source is SourceType.REDIS_STM:
        return f"- [{_label(memory_type, lang)}] {text}"
    return f"- {text}"


def _by_day(lines: Sequence[MemoryLine], lang: Lang) -> Iterator[str]:
    """A section's body: undated lines first, then each day's heading and its lines, the
    days in the order of their best-ranked line (lines keep their rank order within)."""
    days: dict[int | None, list[MemoryLine]] = {None: []}
    for m in lines:
        days.setdefault(day_of(m.source_type, m.at), []).append(m)
    for day, group in days.items():
        if day is not None:
            yield day_heading(day)
        for m in group:
            yield line_text(m.source_type, m.memory_type, m.text, lang)


def section_header(source: SourceType, lang: Lang, task_id: str | None) -> str:
    """A section's title (and, for STM, the task it is the state of)."""
    if source is SourceType.REDIS_STM:
        title = _TITLES["stm"][lang]
        if task_id:
            sep = "：" if lang == "zh" else ": "
            return f"{title}\n- {_TITLES['task'][lang]}{sep}{task_id}"
        return title
    return _TITLES["ltm" if source is SourceType.LTM else "history"][lang]


_SECTIONS = (SourceType.REDIS_STM, SourceType.LTM, SourceType.RAW_HISTORY)


def render(profile: str, memory: RenderedMemory, lang: Lang) -> str:
    """The prompt text: ``profile`` (PostgreSQL's blocks as
    :meth:`~memstrata.core.authority.blocks.AuthorityBlocks.render` prints them, or "")
    then the memory sections; sections without content are left out entirely."""
    sections = [profile] if profile else []
    by_source = {
        SourceType.REDIS_STM: memory.short_term,
        SourceType.LTM: memory.long_term,
        SourceType.RAW_HISTORY: memory.history,
    }
    for source in _SECTIONS:
        lines = by_source[source]
        if lines:
            head = section_header(source, lang, memory.task_id)
            sections.append("\n".join((head, *_by_day(lines, lang))))
    return "\n\n".join(sections)


class RenderCost:
    """The pool's :class:`~memstrata.core.recall.pool.LineCost` for one recall: what each
    line adds to :func:`render`'s text in ``counter``'s tokens (cl100k), so the kept lines
    fit the request's budget as printed, not as estimated (the estimate let Chinese
    injections overflow a 512-token budget by a quarter, docs/QUALITY.md).

    A line is charged its printed text plus its line break; a section's first line also
    pays the title and the blank line before it, and a day's first line in its section
    the day's heading and its break.  cl100k's pre-tokenizer never joins a line start
    (``- ``, or a heading's digits) to the line before, but it does fold a line break into
    the piece before it; the sum bounds the text's count as long as that piece plus its
    break costs at most one token more: true for every punctuation and space code point
    at a line's end (an exhaustive check by script, 2026-12-04), and what
    ``test_the_printed_block_never_exceeds_the_token_budget`` keeps checking."""

    def __init__(self, counter: TokenCounter, lang: Lang, task_id: str | None) -> None:
        self._count = counter.count
        self._lang = lang
        self._titles = {s: counter.count(section_header(s, lang, task_id)) + 2 for s in _SECTIONS}
        self._heading = lru_cache(maxsize=1024)(lambda day: counter.count(day_heading(day)) + 1)

    def __call__(self, c: PoolCandidate, opens_section: bool, opens_day: bool = False) -> int:
        text = line_text(c.source_type, c.memory_type, c.summary, self._lang)
        n = self._count(text) + 1
        if opens_day and (day := said_day(c)) is not None:
            n += self._heading(day)
        return n + self._titles[c.source_type] if opens_section else n

    def profile(self, text: str) -> int:
        """What the profile block costs ahead of the memory sections (0 when empty)."""
        return self._count(text) + 2 if text else 0
