"""Is a memory general experience or task-local state?  (seed 1 十四, zh + en)

Seed 1 promotes "通用经验，不只是当前任务临时状态" and names what must never be
promoted: "当前 bug456 下一步先看线程池", "刚才那次日志输出", a session's temporary
debugging path.  Two small marker lists decide it; a marker of the moment ("just now",
"next", "当前", a ticket id) wins over a marker of generality ("usually", "常见"),
because a wrong promotion costs more than a missed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GENERAL = (
    "usually", "typically", "generally", "in general", "often", "commonly", "common cause",
    "of this kind", "this kind of", "this type of", "whenever", "always", "as a rule",
    "通常", "一般", "常见", "往往", "经常", "总是", "这类", "某类", "此类", "这种", "规律",
)  # fmt: skip
_LOCAL = (
    "just now", "right now", "a moment ago", "this time", "next,", "next step", "next look",
    "for now", "currently", "at the moment", "today", "from just now",
    "刚才", "刚刚", "这次", "本次", "当前", "目前", "下一步", "接下来", "先看", "现在", "今天",
)  # fmt: skip
_TICKET = r"\b(?:bug|issue|ticket|jira|inc|pr)[-_#]?\d+\b|#\d+\b|(?:bug|issue|工单|事故)[-_#]?\d+"
# one pass of the C regex engine per text instead of one substring test per marker
_GENERAL_RE = re.compile("|".join(re.escape(m) for m in _GENERAL))
_LOCAL_RE = re.compile("|".join([*(re.escape(m) for m in _LOCAL), _TICKET]))


@dataclass(frozen=True)
class Generality:
    general_markers: tuple[str, ...]
    local_markers: tuple[str, ...]

    @property
    def is_local(self) -> bool:
        return bool(self.local_markers)

    @property
    def is_general(self) -> bool:
        return bool(self.general_markers) and not self.local_markers


def assess(text: str) -> Generality:
    """Markers of generality and of the moment found in ``text`` (case-insensitive)."""
    low = text.casefold()
    general = tuple(dict.fromkeys(_GENERAL_RE.findall(low)))
    return Generality(general, tuple(dict.fromkeys(_LOCAL_RE.findall(low))))
