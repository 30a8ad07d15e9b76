"""Time in a question: the span of time a query names, read relative to the question's date.

A question that names a time ("what did I do last week?", "in May 2023", "two years ago")
also says *when* the answer happened: :func:`time_range` finds that span without a language
model, relative to ``now`` (the caller's ``as_of``, or the clock), so recall can favour what
is dated inside it. What is understood (dates, months, years, ``since ...``, ``last week``,
``N days ago``, ...) is listed in the user guide's "Questions about time" and in
:data:`_READERS`, most specific first. Weeks begin on Monday; every span is in UTC unless
``tz`` says otherwise. A question that asks for a time names none (:func:`asks_when`).

Example:
    >>> from datetime import datetime, timezone
    >>> now = datetime(2023, 6, 15, 12, tzinfo=timezone.utc)
    >>> span = time_range("What did Caroline do last week?", now)
    >>> span.start_date.isoformat(), span.end_date.isoformat(), span.phrase
    ('2023-06-05', '2023-06-11', 'last week')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo

__all__ = ["TimeRange", "asks_when", "time_range"]

_MONTH_WORDS = (
    "january february march april may june july august september october november december"
)
MONTHS = {
    name: number
    for number, month in enumerate(_MONTH_WORDS.split(), start=1)
    for name in (month, month[:3])
} | {"sept": 9}
_NUMBER_WORDS = "one two three four five six seven eight nine ten eleven twelve"
NUMBERS = {"a": 1, "an": 1, "a couple of": 2, "a few": 3} | {
    word: number for number, word in enumerate(_NUMBER_WORDS.split(), start=1)
}

_MONTH = rf"(?P<month>{'|'.join(sorted(MONTHS, key=len, reverse=True))})\b\.?"
_COUNT = r"(?P<count>\d{1,3}|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + ")"
_YEAR = r"(?P<year>(?:19|20)\d\d|2100)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"

_ASKS_WHEN = re.compile(
    r"\b(when\s+(?:did|was|were|is|will|do|does|has|have|had)|what\s+(?:date|day|year|month|"
    r"time)|how\s+long\s+ago|since\s+when)\b"
)


@dataclass(frozen=True)
class TimeRange:
    """A span of time a question names: ``[start, end)`` in seconds since the epoch, the
    ``phrase`` that named it (lower-cased), and the ``tz`` its days are counted in."""

    start: float
    end: float
    phrase: str
    tz: tzinfo = timezone.utc

    @property
    def start_date(self) -> date:
        """Its first day."""
        return datetime.fromtimestamp(self.start, self.tz).date()

    @property
    def end_date(self) -> date:
        """Its last day."""
        return datetime.fromtimestamp(self.end, self.tz).date() - timedelta(days=1)

    def __contains__(self, moment: float) -> bool:
        return self.start <= moment < self.end


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time ("when did ...", "what year ...", "how long ago").

    Example:
        >>> asks_when("When did Melanie paint a sunrise?"), asks_when("Where does she live?")
        (True, False)
    """
    return _ASKS_WHEN.search(query.lower()) is not None


def time_range(query: str, now: float | datetime, tz: tzinfo = timezone.utc) -> TimeRange | None:
    """The span of time ``query`` names, relative to ``now``; ``None`` when it names none.

    Args:
        query: The question.
        now: The question's moment: seconds since the epoch or a timezone-aware
            ``datetime`` (``as_of``, or the clock).
        tz: The time zone days, weeks, months and years are counted in.

    Example:
        >>> from datetime import datetime, timezone
        >>> now = datetime(2023, 6, 15, tzinfo=timezone.utc)
        >>> time_range("where did I live in May 2022?", now).start_date.isoformat()
        '2022-05-01'
        >>> time_range("two years ago", now).end_date.isoformat()
        '2021-12-31'
        >>> time_range("where do I live?", now) is None
        True
    """
    moment = now if isinstance(now, datetime) else datetime.fromtimestamp(now, tz)
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware (or seconds since the epoch)")
    today = moment.astimezone(tz).date()
    text = query.lower()
    for pattern, read in _READERS:
        for found in pattern.finditer(text):
            try:
                if (days := read(found, today)) is not None:
                    end = _at(days[1] + timedelta(days=1), tz)
                    return TimeRange(_at(days[0], tz), end, found[0], tz)
            except (OverflowError, ValueError):  # not a date, or past year 9999: no span
                continue
    return None


def _at(day: date, tz: tzinfo) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()


def _month_span(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)


Days = tuple[date, date] | None


def _full_date(found: re.Match[str], today: date) -> Days:
    month = found["month"]  # a name, or digits (ISO); not a date: ValueError, no span
    day = date(int(found["year"]), MONTHS.get(month) or int(month), int(found["day"]))
    return day, day


def _day_in_year(found: re.Match[str], today: date) -> Days:
    month, number = MONTHS[found["month"]], int(found["day"])
    for year in range(today.year, today.year - 8, -1):  # the latest one by today (Feb 29)
        try:
            day = date(year, month, number)
        except ValueError:  # not a date that year (or any: the 31st of June)
            continue
        if day <= today:
            return day, day
    return None


def _month_of_year(found: re.Match[str], today: date) -> Days:
    return _month_span(int(found["year"]), MONTHS[found["month"]])


def _month(found: re.Match[str], today: date) -> tuple[date, date]:
    month = MONTHS[found["month"]]
    year = today.year if month <= today.month else today.year - 1
    return _month_span(year, month)


def _year(found: re.Match[str], today: date) -> Days:
    year = int(found["year"])
    return date(year, 1, 1), date(year, 12, 31)


def _ago(found: re.Match[str], today: date) -> Days:
    count = found["count"]
    return _units_back(today, found["unit"], int(count) if count.isdigit() else NUMBERS[count])


def _last(found: re.Match[str], today: date) -> Days:
    back = 0 if found["which"] == "this" else 1
    if found["unit"] == "weekend":
        saturday = today - timedelta(days=today.weekday() + 2 + 7 * (back - 1))
        return None if saturday > today else (saturday, saturday + timedelta(days=1))
    return _units_back(today, found["unit"], back)


def _units_back(today: date, unit: str, n: int) -> tuple[date, date]:
    """The whole day, week (from Monday), month or year ``n`` of them before ``today``'s."""
    if unit == "day":
        day = today - timedelta(days=n)
        return day, day
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * n)
        return monday, monday + timedelta(days=6)
    if unit == "month":
        index = today.year * 12 + today.month - 1 - n
        return _month_span(index // 12, index % 12 + 1)
    return date(today.year - n, 1, 1), date(today.year - n, 12, 31)


def _dayword(found: re.Match[str], today: date) -> Days:
    back = {"today": 0, "yesterday": 1}.get(found["word"], 2)  # the day before yesterday
    return _units_back(today, "day", back)


def _since(found: re.Match[str], today: date) -> Days:
    if found["year"] is None and found["month"] is None:
        return None  # "since when", "since then"
    if found["year"] is None:
        start = _month(found, today)[0]
    else:
        start = date(int(found["year"]), MONTHS.get(found["month"] or "", 1), 1)
    return None if start > today else (start, today)


#: The patterns, most specific first, each with what reads its span of days.
_READERS = tuple(
    (re.compile(pattern), read)
    for pattern, read in (
        (rf"\b{_YEAR}-(?P<month>\d\d)-(?P<day>\d\d)(?!\d)", _full_date),
        (rf"\bsince\s+(?:{_MONTH}\s*,?\s*)?{_YEAR}?\b", _since),
        (rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\s*,?\s+{_YEAR}\b", _full_date),
        (rf"\b{_MONTH}\s+{_DAY}\s*,?\s+{_YEAR}\b", _full_date),
        (rf"\b{_MONTH}\s*,?\s+(?:of\s+)?{_YEAR}\b", _month_of_year),
        (rf"\bon\s+{_MONTH}\s+{_DAY}\b(?!\s*,?\s*\d)", _day_in_year),
        (rf"\bon\s+(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?!\s*,?\s*\d)", _day_in_year),
        (r"\b(?P<word>the\s+day\s+before\s+yesterday|today|yesterday)\b", _dayword),
        (rf"\b{_COUNT}\s+(?P<unit>day|week|month|year)s?\s+ago\b", _ago),
        (r"\b(?P<which>last|past|previous|this)\s+(?P<unit>weekend|week|month|year)\b", _last),
        (rf"\b(?:in|during|of)\s+{_MONTH}(?!\s*,?\s*(?:\d|of\b))", _month),
        (rf"\b(?:in|during|of|from|for)\s+(?:the\s+year\s+)?{_YEAR}(?![\d/-])", _year),
    )
)
