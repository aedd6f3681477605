"""Rendering of the memory block in the seed's structure (十.4), Chinese or English.

    用户/环境画像：            (from PostgreSQL, only when routed there)
    当前任务短期记忆：         (Redis STM candidates that survived the pool)
    相关长期经验：             (LTM cards that survived the pool)
    相关原始对话：             (raw messages of L0: the fallback, each with its date)

The same content is returned as :class:`RenderedMemory` for agents that build their own
prompts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memstrata.core.authority.blocks import AuthorityBlocks
from memstrata.core.recall.pool import PoolCandidate, SourceType, trusted

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


def _dated(at: float | None) -> str:
    """``(2023-05-08) `` for a line with a time: when a statement was said is part of its
    meaning ("yesterday"), and what a question about "when" needs."""
    if at is None or at <= 0:
        return ""
    return time.strftime("(%Y-%m-%d) ", time.gmtime(at))


def _label(memory_type: str, lang: Lang) -> str:
    return _TYPE_LABEL.get(memory_type, {}).get(lang, memory_type)


def render(blocks: AuthorityBlocks | None, memory: RenderedMemory, lang: Lang) -> str:
    """The prompt text; sections without content are left out entirely."""
    sections: list[str] = []
    if blocks is not None:
        profile = blocks.render(lang)
        if profile:
            sections.append(profile)
    sep = "：" if lang == "zh" else ": "
    if memory.short_term:
        lines = [_TITLES["stm"][lang]]
        if memory.task_id:
            lines.append(f"- {_TITLES['task'][lang]}{sep}{memory.task_id}")
        lines += [f"- [{_label(m.memory_type, lang)}] {m.text}" for m in memory.short_term]
        sections.append("\n".join(lines))
    if memory.long_term:
        lines = [_TITLES["ltm"][lang]]
        lines += [f"- {_dated(m.at)}{m.text}" for m in memory.long_term]
        sections.append("\n".join(lines))
    if memory.history:
        lines = [_TITLES["history"][lang]]
        lines += [f"- {_dated(m.at)}{m.text}" for m in memory.history]
        sections.append("\n".join(lines))
    return "\n\n".join(sections)
