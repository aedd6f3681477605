"""The calendar window a question names (core.recall.when): pure, English and Chinese."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstrata.core.recall.when import SLACK_S, date_window, said_within

NOW = datetime(2024, 1, 20, 12, tzinfo=UTC).timestamp()


def days(window: tuple[float, float] | None) -> tuple[str, str] | None:
    """The window without its slack, as the first day in it and the first day after it."""
    if window is None:
        return None

    def day(t: float) -> str:
        return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d")

    return day(window[0] + SLACK_S), day(window[1] - SLACK_S)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What did Tim say about his injury on 16 November, 2023?", ("2023-11-16", "2023-11-17")),
        ("What book did Tim finish on 8th December, 2023?", ("2023-12-08", "2023-12-09")),
        ("Where was the picture shared on December 1,2023 taken?", ("2023-12-01", "2023-12-02")),
        ("Which team did John sign with on May 21, 2023?", ("2023-05-21", "2023-05-22")),
        ("What did Nate share in November 2022?", ("2022-11-01", "2022-12-01")),
        ("Where was John between August 11 and August 15 2023?", ("2023-08-11", "2023-08-16")),
        ("Where was Tim in the week before 16 November 2023?", ("2023-11-09", "2023-11-16")),
        ("What did we plan the week after 3 March 2023?", ("2023-03-04", "2023-03-11")),
        # no year: the latest such day not after now (2024-01-20)
        ("What kind of deal did John get in December?", ("2023-12-01", "2024-01-01")),
        ("What happened on Jan 5?", ("2024-01-05", "2024-01-06")),
        ("我2023年5月做了什么？", ("2023-05-01", "2023-06-01")),
        ("我5月7日去了哪里？", ("2023-05-07", "2023-05-08")),
        ("2023年12月31日的会议讲了什么？", ("2023-12-31", "2024-01-01")),
        ("What did we deploy on 2023-05-07?", ("2023-05-07", "2023-05-08")),
        ("Which incidents were logged in 2023-11?", ("2023-11-01", "2023-12-01")),
        ("Tell me what went out on 2023-05-07.", ("2023-05-07", "2023-05-08")),
    ],
)
def test_a_question_that_spells_out_its_dates_names_their_window(
    question: str, expected: tuple[str, str]
) -> None:
    assert days(date_window(question, NOW)) == expected


LATER = datetime(2025, 3, 1, 12, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # the year one date states is the other's ("August 11" is not 2024's)
        ("Where was John between August 11 and August 15 2023?", ("2023-08-11", "2023-08-16")),
        # a span's end before its start is in the next year
        ("What happened between December 28 and January 3?", ("2024-12-28", "2025-01-04")),
        ("What happened between December 28 and January 3, 2024?", ("2023-12-28", "2024-01-04")),
        # no 29 February in 2025: the latest leap year's
        ("What did I say on Feb 29?", ("2024-02-29", "2024-03-01")),
        # "from" starts no span when only one date is named
        ("What did I get from Tim the week after 3 March 2023?", ("2023-03-04", "2023-03-11")),
    ],
)
def test_a_date_without_its_year_takes_the_questions_or_the_latest(
    question: str, expected: tuple[str, str]
) -> None:
    assert days(date_window(question, LATER)) == expected


@pytest.mark.parametrize(
    "question",
    [
        "May I ask what you did last week?",  # a verb, not the month
        "We march on, whatever happens.",
        "Did August Wilson write Fences?",  # a name
        "When did John get an ankle injury in 2023?",  # a year alone: the whole history
        "What did I say yesterday?",  # relative: the question carries no date
        "the meeting is at 10:30",
        "build 2023-05-07-rc1 and version 1.2023-05 are names, not dates",
        "Do you think these 3 may help with the timeout?",  # words, in lower case
        "option 2 may fail",
        "we ran march 3 miles",
        "Upgrade to 1.10 dec",
        "2023年13月的账单",  # no 13th month, and not the 3rd
        "What happened on February 30, 2023?",  # no such day
        "",
    ],
)
def test_a_question_without_a_spelled_out_date_names_no_window(question: str) -> None:
    assert date_window(question, NOW) is None


def test_a_line_is_within_the_window_with_a_day_of_slack_and_an_undated_one_never() -> None:
    window = date_window("What did Tim say on 16 November, 2023?", NOW)
    day = datetime(2023, 11, 16, tzinfo=UTC).timestamp()
    assert said_within(day + 3600, window)
    assert said_within(day - 3600, window)  # a time zone west of UTC
    assert not said_within(day - 2 * 86400, window)
    assert not said_within(None, window)
    assert not said_within(day, None)


@given(st.text(max_size=200))
def test_a_spelled_out_day_is_inside_the_window_whatever_else_the_question_says(
    text: str,
) -> None:
    window = date_window(f"{text} on 16 November, 2023?", NOW)
    noon = datetime(2023, 11, 16, 12, tzinfo=UTC).timestamp()
    assert window is not None
    assert said_within(noon, window) or "week" in text.casefold() or len(text) > 1900
