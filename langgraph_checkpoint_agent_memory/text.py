"""Text analysis, the same for documents (indexed by ``db``) and queries on every backend."""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Protocol

_TERM = re.compile(r"[^\W_]+", re.UNICODE)

#: Words too common to tell items apart (BM25 gives them almost no weight anyway).
STOPWORDS = frozenset(
    str.split(
        """
        a about above after again against all am an and any are as at be because been before
        being below between both but by can could did do does doing down during each few for
        from further had has have having he her here hers herself him himself his how i if in
        into is it its itself just me more most my myself no nor not now of off on once only or
        other our ours ourselves out over own same she should so some such than that the their
        theirs them themselves then there these they this those through to too under until up
        very was we were what when where which while who whom why will with would you your yours
        yourself yourselves s t d ll m re ve
        """
    )
)
#: Longest term indexed, in characters (longer words are cut: they are ids, not language).
MAX_TERM = 64
#: A stemmer holds state while it works, so each thread gets its own (graph nodes and
#: LangGraph's executor threads index and search at once).
_STEMMERS = threading.local()


class _Stemmer(Protocol):
    """What this module uses of a ``snowballstemmer`` stemmer (the package has no types)."""

    def stemWord(self, word: str) -> str: ...


def _new_stemmer() -> _Stemmer:
    # loaded on the first stem: a process that never indexes a document does not pay for it
    import snowballstemmer

    stemmer: _Stemmer = snowballstemmer.stemmer("english")
    return stemmer


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A word's term, ``""`` for a stopword."""
    if word in STOPWORDS:
        return ""
    stemmer: _Stemmer | None = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = _new_stemmer()
    return stemmer.stemWord(word)[:MAX_TERM]


def tokens(text: str) -> list[str]:
    """The indexed terms of a text: lower-cased words but stopwords, stemmed (Snowball)."""
    return list(filter(None, map(_stem, _TERM.findall(text.lower()))))


def postings(doc: str) -> tuple[Counter[str], int]:
    found = tokens(doc)
    return Counter(found), len(found)


def fact_text(attribute: str, value: str, statement: str = "") -> str:
    """What search indexes for a fact: its attribute as words (``home_city``: "home city"),
    its value and its statement, unless that only repeats the value or the head as search
    sees words ("Berlin." for "Berlin"): it would double every term's frequency."""
    head = f"{attribute.replace('_', ' ')}: {value}"
    said = tokens(statement)
    return head if not said or said in (tokens(head), tokens(value)) else f"{head}\n{statement}"


def episode_text(summary: str | None, messages: Iterable[Mapping[str, Any]]) -> str:
    """What search indexes for an episode: its summary once there is one, and the words said,
    a line ``role: content`` per message."""
    said = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)
    return "\n".join(p for p in (summary or "", said) if p)


_MONTHS = [
    *("January", "February", "March", "April", "May", "June"),
    *("July", "August", "September", "October", "November", "December"),
]


def date_words(when: float | None) -> str:
    """The day ``when`` (seconds since the epoch) falls on, in UTC, as the words a question
    names it by ("May 2023", "May 7th", "in 2023", "2023-05-07"); empty for no date.

    Example:
        >>> date_words(1683460800.0)  # 2023-05-07 12:00 UTC
        'May 7 7th 2023-05-07'
        >>> tokens(date_words(1683460800.0))
        ['may', '7', '7th', '2023', '05', '07']
        >>> date_words(0.0)
        ''
    """
    if not when or not math.isfinite(when):
        return ""
    try:
        day = datetime.fromtimestamp(when, tz=timezone.utc).date()
    except (OverflowError, OSError, ValueError):
        return ""
    n = day.day
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{_MONTHS[day.month - 1]} {n} {n}{suffix} {day.isoformat()}"


def dated_text(text: str, when: float | None) -> str:
    """``text`` and, on a line of its own, :func:`date_words` of ``when``: what the lexical
    index keeps for a dated memory.

    Example:
        >>> dated_text("city: Berlin", 1683460800.0)
        'city: Berlin\\nMay 7 7th 2023-05-07'
        >>> dated_text("city: Berlin", None)
        'city: Berlin'
    """
    words = date_words(when)
    return f"{text}\n{words}" if words and text else text or words


def storable(text: str) -> str:
    """``text`` with NUL characters and lone surrogates replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        text = _SURROGATE.sub("\ufffd", text)
    return text


def unstorable(text: str) -> str | None:
    """Why no database can store ``text`` as it is, or ``None`` when every one can: a NUL
    character (PostgreSQL's ``text`` and ``jsonb`` refuse it) or a lone surrogate (not
    Unicode, so no driver can encode it). The reason reads after the value's name.

    Example:
        >>> unstorable("ok"), unstorable("a\\x00b"), unstorable("a\\ud800")
        (None, 'contains a NUL character', 'is not valid Unicode (a lone surrogate)')
    """
    if "\x00" in text:
        return "contains a NUL character"
    if not text.isascii() and _SURROGATE.search(text):
        return "is not valid Unicode (a lone surrogate)"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")
