"""When a question asks about: the calendar window its dates name (pure, English + Chinese).

"What did Tim say on 16 November, 2023?", "Where was John between August 11 and August 15
2023?", "我2023年5月做了什么？", "what broke on 2023-05-07?": a line said inside the window
the question names is more likely what it asks about than an equally similar line said
months away.  Only dates the
question spells out count (a day, a month, a span of them); relative ones ("last week")
need the date they were said on, which the question does not carry.  A date without its
year is the latest one not after ``now``.  Times are UTC (an agent's history records no
time zone), so the window is widened by :data:`SLACK_S` on each side.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

SLACK_S = 24 * 3600.0
"""How far outside the named days a line still counts: a day, for the time zone the
question was asked in."""

_MONTH_NAMES = (
    "january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul",
    "august aug", "september sep sept", "october oct", "november nov", "december dec",
)  # fmt: skip
_MONTHS = {name: n for n, names in enumerate(_MONTH_NAMES, start=1) for name in names.split()}
_MONTH = r"(?P<{g}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{g}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{g}>(?:19|20)\d\d)"
# "16 November, 2023", "8th December 2023", "November 16, 2023", "December 1,2023",
# "May 7", "November 2022", "December"
_EN_DATE = (
    rf"(?:{_DAY.format(g='d1')}\s+(?:of\s+)?{_MONTH.format(g='m1')}(?:,?\s*{_YEAR.format(g='y1')})?"
    rf"|{_MONTH.format(g='m2')}\s+{_DAY.format(g='d2')}(?!\d)(?:\s*,\s*|\s+){_YEAR.format(g='y2')}"
    rf"|{_MONTH.format(g='m3')}\s+{_DAY.format(g='d3')}(?![\d:])"
    rf"|{_MONTH.format(g='m4')}(?:,?\s+(?:of\s+)?{_YEAR.format(g='y4')})?)"
)
_EN = re.compile(rf"(?<![\w.-]){_EN_DATE}(?![\w-])", re.IGNORECASE)
_ZH = re.compile(
    r"(?:(?P<y>(?:19|20)\d\d)\s*年\s*)?(?<!\d)(?P<m>1[0-2]|0?[1-9])\s*月"
    r"(?:\s*(?P<d>[0-3]?\d)\s*[日号])?"
)
# ISO 8601 as agents and logs write it: "2023-05-07", "2023-05"
_ISO = re.compile(
    r"(?<![\w-])(?<!\w\.)(?P<y>(?:19|20)\d\d)-(?P<m>1[0-2]|0[1-9])(?:-(?P<d>[0-3]\d))?"
    r"(?![\w-]|\.\w)"
)
_WEEK_BEFORE = re.compile(r"\bweek before\b", re.IGNORECASE)
_WEEK_AFTER = re.compile(r"\bweek after\b", re.IGNORECASE)
# a month alone names one after a preposition ("in May", "of November"); otherwise it
# may be a verb or a name ("May I ask", "we march on", "August Wilson")
_BARE_MONTH_AFTER = frozenset(
    ("in", "of", "since", "until", "till", "during", "early", "late", "by")
)
# these are also words ("these 3 may help", "we ran march 3 miles", "jan", "dec"): in
# lower case they name a month only with a year beside them
_ALSO_WORDS = frozenset(("may", "march", "mar", "jan", "dec", "sept"))
_WORD_BEFORE = re.compile(r"(\w+)\W*$")

Window = tuple[float, float]
# a date the question spells out: (year or None when it says none, month, day or None)
_Date = tuple[int | None, int, int | None]


def _day(y: int, m: int, d: int) -> Window | None:
    try:
        start = datetime(y, m, d, tzinfo=UTC)
    except ValueError:
        return None
    return start.timestamp(), (start + timedelta(days=1)).timestamp()


def _month(y: int, m: int) -> Window:
    start = datetime(y, m, 1, tzinfo=UTC)
    days = calendar.monthrange(y, m)[1]
    return start.timestamp(), (start + timedelta(days=days)).timestamp()


def _window(y: int, m: int, d: int | None) -> Window | None:
    return _day(y, m, d) if d else _month(y, m)


def _latest(m: int, d: int | None, now: float) -> Window | None:
    """The window of the latest ``m``/``d`` not after ``now`` (a 29 February: the
    latest leap year's)."""
    today = datetime.fromtimestamp(now, tz=UTC)
    year = today.year - 1 if (m, d or 1) > (today.month, today.day) else today.year
    for y in range(year, year - 8, -1):
        if (w := _window(y, m, d)) is not None:
            return w
    return None


def _dates(query: str) -> list[_Date]:
    """Every date ``query`` spells out, in the order it says them."""
    found: list[tuple[int, _Date]] = []
    for hit in _EN.finditer(query):
        g = hit.groupdict()
        mname = next(g[k] for k in ("m1", "m2", "m3", "m4") if g[k])
        day = next((g[k] for k in ("d1", "d2", "d3") if g[k]), None)
        year = next((g[k] for k in ("y1", "y2", "y4") if g[k]), None)
        folded = mname.casefold().rstrip(".")
        if year is None and folded in _ALSO_WORDS and mname[0].islower():
            continue
        if day is None and year is None:
            before = _WORD_BEFORE.search(query, max(0, hit.start() - 24), hit.start())
            if before is None or before.group(1).casefold() not in _BARE_MONTH_AFTER:
                continue
        found.append((hit.start(), (int(year) if year else None, _MONTHS[folded],
                                    int(day) if day else None)))  # fmt: skip
    for hit in (*_ZH.finditer(query), *_ISO.finditer(query)):
        y, d = hit["y"], hit["d"]
        found.append((hit.start(), (int(y) if y else None, int(hit["m"]), int(d) if d else None)))
    return [date for _, date in sorted(found)]


def _windows(query: str, now: float) -> list[Window]:
    """The windows of the dates ``query`` spells out.  A date without its year takes the
    year another date of the question states ("between August 11 and August 15 2023"),
    else the latest one not after ``now``; a span whose end would fall before its start
    crosses a new year ("between December 28 and January 3", "… January 3, 2024")."""
    dates = _dates(query)
    stated = next((y for y, _, _ in dates if y is not None), None)
    out: list[tuple[Window, _Date]] = []
    for y, m, d in dates:
        year = y if y is not None else stated
        w = _window(year, m, d) if year is not None else _latest(m, d, now)
        if w is None:
            continue
        if out and w[1] <= out[-1][0][0]:  # a span's end before its start
            (prev, (py, pm, pd)) = out[-1]
            if y is None:  # "December 28 and January 3": the next January
                w = _window(datetime.fromtimestamp(w[0], tz=UTC).year + 1, m, d) or w
            elif py is None:  # "December 28 and January 3, 2024": the December before
                year_before = datetime.fromtimestamp(prev[0], tz=UTC).year - 1
                out[-1] = (_window(year_before, pm, pd) or prev, (py, pm, pd))
        out.append((w, (y, m, d)))
    return [w for w, _ in out]


def date_window(query: str, now: float) -> Window | None:
    """The UTC window ``[start, end)`` of the dates ``query`` names, or None.

    Several dates span from the earliest to the latest ("between August 11 and August
    15"); "the week before X" is the seven days up to X, "the week after X" the seven
    after.  The window is widened by :data:`SLACK_S` on each side."""
    if len(query) > 2000:  # a question, not a document: nothing to gain from a scan
        return None
    found = _windows(query, now)
    if not found:
        return None
    start, end = min(w[0] for w in found), max(w[1] for w in found)
    if len(found) == 1:
        week = 7 * 24 * 3600.0
        if _WEEK_BEFORE.search(query):
            start, end = start - week, start
        elif _WEEK_AFTER.search(query):
            start, end = end, end + week
    return start - SLACK_S, end + SLACK_S


def said_within(said_at: float | None, window: Window | None) -> bool:
    """Whether a line said at ``said_at`` falls in ``window`` (an undated line does not)."""
    return window is not None and said_at is not None and window[0] <= said_at < window[1]
