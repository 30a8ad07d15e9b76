"""Time in a question: the spans of time the expressions recall understands name, relative to
the question's date."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory.when import asks_when, time_range

NOW = datetime(2023, 6, 15, 12, tzinfo=timezone.utc)  # a Thursday


@pytest.mark.parametrize(
    ("query", "first", "last"),
    [
        ("what happened on 2023-05-07?", "2023-05-07", "2023-05-07"),
        ("the party on 7 May 2023", "2023-05-07", "2023-05-07"),
        ("the party on the 7th of May, 2023", "2023-05-07", "2023-05-07"),
        ("on May 7, 2023 we met", "2023-05-07", "2023-05-07"),
        ("what did we do on May 7?", "2023-05-07", "2023-05-07"),
        ("on the 7th of May", "2023-05-07", "2023-05-07"),
        ("at 2023-05-07T10:00:00Z", "2023-05-07", "2023-05-07"),
        ("born on Feb 29", "2020-02-29", "2020-02-29"),  # the latest there was
        ("what did we do on December 24?", "2022-12-24", "2022-12-24"),  # the latest one
        ("where did I live in May 2022?", "2022-05-01", "2022-05-31"),
        ("trips in Feb. 2024", "2024-02-01", "2024-02-29"),
        ("on 31 June 2023", "2023-06-01", "2023-06-30"),  # no such day: its month
        ("what did I read in March?", "2023-03-01", "2023-03-31"),
        ("what did I read in September?", "2022-09-01", "2022-09-30"),  # not begun yet
        ("the concert in 2021", "2021-01-01", "2021-12-31"),
        ("during 2019", "2019-01-01", "2019-12-31"),
        ("what have I done since March?", "2023-03-01", "2023-06-15"),
        ("since 2020", "2020-01-01", "2023-06-15"),
        ("since May 2021", "2021-05-01", "2023-06-15"),
        ("the day before yesterday", "2023-06-13", "2023-06-13"),
        ("what did Caroline do yesterday?", "2023-06-14", "2023-06-14"),
        ("anything today?", "2023-06-15", "2023-06-15"),
        ("what did I do last week?", "2023-06-05", "2023-06-11"),
        ("plans this week", "2023-06-12", "2023-06-18"),
        ("the past month", "2023-05-01", "2023-05-31"),
        ("earlier this month", "2023-06-01", "2023-06-30"),
        ("last year's holiday", "2022-01-01", "2022-12-31"),
        ("what happened last weekend?", "2023-06-10", "2023-06-11"),
        ("three days ago", "2023-06-12", "2023-06-12"),
        ("a week ago", "2023-06-05", "2023-06-11"),
        ("2 months ago", "2023-04-01", "2023-04-30"),
        ("a couple of years ago", "2021-01-01", "2021-12-31"),
        ("TWO YEARS AGO", "2021-01-01", "2021-12-31"),
    ],
)
def test_each_expression_names_its_span(query: str, first: str, last: str) -> None:
    span = time_range(query, NOW)
    assert span is not None, query
    assert (span.start_date.isoformat(), span.end_date.isoformat()) == (first, last)


@pytest.mark.parametrize(
    "query",
    [
        "where do I live?",
        "I may go to Paris",  # "may", the verb
        "the marble statue of mars",  # words that begin with a month's abbreviation
        "this weekend",  # not begun by a Thursday
        "what is 12345?",
        "room 2001",  # a number alone is not a year
        "I paid $2024 for rent",
        "may 5 people come?",  # a day and a month need "on"
        "march 3 miles",
        "since when?",
        "since 2030",  # not begun
        "valid until 9999-12-31",  # past the last day there is
    ],
)
def test_a_query_without_a_time_names_none(query: str) -> None:
    assert time_range(query, NOW) is None


def test_the_most_specific_expression_wins() -> None:
    span = time_range("last year, on 2022-03-04, we moved", NOW)
    assert span is not None and span.phrase == "2022-03-04"


def test_days_are_counted_in_the_time_zone_given() -> None:
    late = datetime(2023, 6, 15, 23, 30, tzinfo=timezone.utc)
    tokyo = timezone(timedelta(hours=9))  # already the 16th there
    span = time_range("yesterday", late, tz=tokyo)
    assert span is not None and span.start_date == date(2023, 6, 15)
    assert datetime.fromtimestamp(span.start, tokyo).hour == 0


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        time_range("yesterday", datetime(2023, 6, 15))


def test_questions_that_ask_for_a_time() -> None:
    assert asks_when("When did Melanie paint a sunrise?")
    assert asks_when("what year did they marry")
    assert asks_when("How long ago was the trip?")
    assert not asks_when("Where did Melanie paint a sunrise?")


days = st.dates(min_value=date(1990, 1, 1), max_value=date(2090, 12, 31))


@given(today=days, n=st.integers(min_value=1, max_value=400))
def test_days_ago_is_that_one_day(today: date, n: int) -> None:
    now = datetime(today.year, today.month, today.day, 15, tzinfo=timezone.utc)
    span = time_range(f"{n} days ago", now)
    assert span is not None
    assert span.start_date == span.end_date == today - timedelta(days=n)
    assert span.end - span.start == 86400


@given(today=days, unit=st.sampled_from(["week", "month", "year"]))
def test_last_unit_ends_where_this_one_begins(today: date, unit: str) -> None:
    now = datetime(today.year, today.month, today.day, 9, tzinfo=timezone.utc)
    last, this = time_range(f"last {unit}", now), time_range(f"this {unit}", now)
    assert last is not None and this is not None
    assert last.end == this.start  # contiguous, no gap, no overlap
    assert now.timestamp() in this
    assert last.start < last.end
