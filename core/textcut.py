"""Bounded text: fair shares of a size budget and head + tail cuts with an explicit marker.

Shared by L0 (a message longer than ``MEMSTRATA_MAX_MESSAGE_CHARS`` keeps its head and
tail, docs/WRITE_PATH.md §1) and extraction (a message is read in bounded windows,
``core.extract.windows``), so both cut the same way and extraction can tell a cut from
the message's own text.  Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CUT_MARKER = (
    "\n[… memstrata: {cut:,} of {total:,} characters cut from the middle of this text "
    "(limit {limit:,}) …]\n"
)
CUT_MARKER_RE = re.compile(
    r"\n\[… memstrata: [\d,]+ of [\d,]+ characters cut from the middle of this text "
    r"\(limit [\d,]+\) …\]\n"
)
MARKER_MAX_CHARS = 120  # the marker itself, with the largest numbers a setting allows


def fair_shares(sizes: Sequence[int], *, each: int, total: int) -> list[int]:
    """How much of each item to keep: at most ``each`` per item and ``total`` in all.

    Water-filling: an item smaller than an equal share of what is left keeps all of it,
    and what it leaves over goes to the larger ones, so short items are never cut to
    make room for a long one.  Deterministic; ``sum(result) <= total``.
    """
    want = [max(0, min(size, each)) for size in sizes]
    if sum(want) <= total:
        return want
    out = [0] * len(want)
    left, items = max(0, total), len(want)
    for i in sorted(range(len(want)), key=lambda k: (want[k], k)):
        out[i] = min(want[i], left // items)
        left -= out[i]
        items -= 1
    return out


def cut_middle(text: str, keep: int, *, limit: int | None = None) -> str:
    """``text`` when it has at most ``keep`` characters, else its first and last
    ``keep // 2`` characters around :data:`CUT_MARKER` (which names ``limit``, the
    setting that cut it; ``keep`` by default).  The marker adds at most
    :data:`MARKER_MAX_CHARS`."""
    if len(text) <= keep:
        return text
    head = keep - keep // 2
    tail = keep // 2
    marker = CUT_MARKER.format(cut=len(text) - head - tail, total=len(text), limit=limit or keep)
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def without_markers(text: str) -> str:
    """``text`` with every cut marker replaced by a line break (what extraction reads)."""
    if "memstrata:" not in text:
        return text
    return CUT_MARKER_RE.sub("\n", text)
