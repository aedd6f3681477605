"""What extraction reads of a message: clause-safe windows within a character budget.

A message that fits its budget is read whole, in windows of at most ``window`` characters
cut at clause ends (``。！？；!?;，``, a line break, ". "; else a space; else hard).
A longer message is read as its head and one window at its end (``ceil(limit / window)``
windows in all, or one more when clause ends cut the head short), so a statement that
opens a long message and a conclusion that closes it are both seen; the middle is
skipped and counted.  The work is O(window) per window and the number of windows is
bounded, so the cost of a message is bounded whatever its
length (docs/WRITE_PATH.md §3, measured by ``memstrata bench extract``).
"""

from __future__ import annotations

from dataclasses import dataclass

from memstrata.core.textcut import without_markers

_ENDS = ("。", "！", "？", "；", "!", "?", ";", "，", "\n")


@dataclass(frozen=True)
class Reading:
    """The windows read of one text and how much of it they cover."""

    windows: tuple[str, ...]
    total: int  # characters of the text (cut markers of L0 removed)

    @property
    def read(self) -> int:
        return sum(len(w) for w in self.windows)

    @property
    def skipped(self) -> int:
        return self.total - self.read

    @property
    def text(self) -> str:
        """The windows joined by line breaks (a clause never spans two windows)."""
        return "\n".join(self.windows)


def _cut_before(text: str, start: int, end: int) -> int:
    """Where a window from ``start`` may end at the latest ``end``: after the last clause
    end in its second half, else after the last space there, else at ``end``."""
    if end >= len(text):
        return len(text)
    lo = start + (end - start) // 2
    best = max(text.rfind(ch, lo, end) for ch in _ENDS)
    dot = text.rfind(". ", lo, end)
    if dot >= 0 and dot + 1 > best:
        best = dot + 1
    if best < 0:
        best = text.rfind(" ", lo, end)
    return best + 1 if best >= 0 else end


def _start_after(text: str, start: int, end: int) -> int:
    """Where a window ending the text may begin at the earliest ``start``: after the
    first clause end in its first half, else after the first space there, else at it."""
    hi = start + (end - start) // 2
    hits = [k for k in (text.find(ch, start, hi) for ch in _ENDS) if k >= 0]
    dot = text.find(". ", start, hi)
    if dot >= 0:
        hits.append(dot + 1)
    if not hits:
        space = text.find(" ", start, hi)
        hits = [space] if space >= 0 else []
    return min(hits) + 1 if hits else start


def read_windows(text: str, *, limit: int, window: int) -> Reading:
    """Clause-safe windows of at most ``window`` characters covering at most ``limit``
    characters of ``text``: all of it when it fits, else its head, in at most
    ``ceil((limit - tail) / window)`` windows, and its last window (``tail`` characters,
    at most ``min(window, limit // 2)``)."""
    text = without_markers(text)
    window = max(1, window)
    limit = max(0, limit)
    if len(text) <= limit:
        head_end, tail, most = len(text), None, len(text)
    else:
        tail_size = min(window, limit // 2)
        head_end = limit - tail_size
        tail = _start_after(text, len(text) - tail_size, len(text)) if tail_size else None
        most = -(-head_end // window)  # head windows
    windows: list[str] = []
    pos = 0
    while pos < head_end and len(windows) < most:
        end = min(pos + window, head_end)
        cut = _cut_before(text, pos, end)
        windows.append(text[pos:cut])
        pos = cut
        if end == head_end:  # the head's budget is spent: no sliver windows after a cut
            break
    if tail is not None and tail < len(text):
        windows.append(text[max(tail, pos) :])
    return Reading(tuple(w for w in windows if w), len(text))
