"""Filters, text analysis, BM25 weights and rank fusion: the store's search logic, no I/O.

Filter semantics, the same on every backend: ``{"a.b": 3}`` or ``{"a.b": {"$gt": 2}}`` look
up nested keys; ``$eq $ne $gt $gte $lt $lte $in $nin``; numbers compare as numbers and strings
as strings (a string never equals or orders against a number); an item that lacks the key
never matches. SQL backends narrow rows with a pre-filter and this module decides exactly.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import snowballstemmer

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"})
_MISSING = object()
_TERM = re.compile(r"[^\W_]+", re.UNICODE)


def conditions(filter: Mapping[str, Any] | None) -> list[tuple[list[str], str, Any]]:
    """``(path, operator, value)`` triples of a filter, validated."""
    out: list[tuple[list[str], str, Any]] = []
    for key, spec in (filter or {}).items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"filter keys must be non-empty strings, got {key!r}")
        path = key.split(".")
        if isinstance(spec, Mapping) and spec and all(str(k).startswith("$") for k in spec):
            for op, value in spec.items():
                if op not in OPERATORS:
                    raise ConfigurationError(
                        f"unknown filter operator {op!r} for {key!r}; "
                        f"use one of {', '.join(sorted(OPERATORS))}"
                    )
                if op in ("$in", "$nin") and not isinstance(value, (list, tuple, set)):
                    raise ConfigurationError(f"{op} for {key!r} needs a list, got {value!r}")
                out.append((path, op, value))
        else:
            out.append((path, "$eq", spec))
    return out


def lookup(value: Any, path: Sequence[str]) -> Any:
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def _equal(actual: Any, expected: Any) -> bool:
    kinds = _kind(actual), _kind(expected)
    if kinds[0] != kinds[1]:
        return False
    return bool(actual == expected)


def compare(actual: Any, op: str, expected: Any) -> bool:
    if actual is _MISSING:
        return False
    if op == "$eq":
        return _equal(actual, expected)
    if op == "$ne":
        return not _equal(actual, expected)
    if op == "$in":
        return any(_equal(actual, e) for e in expected)
    if op == "$nin":
        return not any(_equal(actual, e) for e in expected)
    kind = _kind(actual)
    if kind not in ("number", "string") or kind != _kind(expected):
        return False
    if op == "$gt":
        return bool(actual > expected)
    if op == "$gte":
        return bool(actual >= expected)
    if op == "$lt":
        return bool(actual < expected)
    return bool(actual <= expected)


def matches(value: Any, conds: Iterable[tuple[list[str], str, Any]]) -> bool:
    return all(compare(lookup(value, path), op, expected) for path, op, expected in conds)


#: Words too common to tell items apart. Dropping them from documents and queries keeps a
#: query's postings to the words that rank (BM25 gives them almost no weight anyway).
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


def _new_stemmer() -> Any:
    return snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = _new_stemmer()
    return stemmer.stemWord(word)[:MAX_TERM]


def tokens(text: str) -> list[str]:
    """The indexed terms of a text, in order: lower-cased words without stopwords, stemmed
    (English Snowball), so "moved" finds "moving". The same analysis for documents and
    queries on every backend, so an item ranks the same everywhere."""
    return [_stem(w) for w in _TERM.findall(text.lower()) if w not in STOPWORDS]


def postings(doc: str) -> tuple[Counter[str], int]:
    """``({term: frequency}, length)`` of a document, as the lexical index stores it."""
    found = tokens(doc)
    return Counter(found), len(found)


def index_rows(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lexical index rows of store item rows (each with ``prefix``, ``key``, ``doc``);
    sets each item's ``doc_len``."""
    out: list[dict[str, Any]] = []
    for item in items:
        doc = item.get("doc")
        if doc is None:
            item["doc_len"] = None
            continue
        counts, length = postings(doc)
        item["doc_len"] = length
        prefix, key = item["prefix"], item["key"]
        out += [
            {"term": t, "prefix": prefix, "key": key, "tf": n, "dl": length}
            for t, n in counts.items()
        ]
    return out


def terms(text: str) -> list[str]:
    """A query's distinct terms, at most 32, in order."""
    seen: dict[str, None] = {}
    for term in tokens(text):
        seen.setdefault(term, None)
    return list(seen)[:32]


#: BM25's parameters: term-frequency saturation and document-length normalization.
K1, B = 1.2, 0.75


def idf(docs: int, df: int) -> float:
    """BM25's inverse document frequency, never negative (``docs`` may lag ``df``)."""
    docs = max(docs, df)
    return math.log(1 + (docs - df + 0.5) / (df + 0.5))


def text_leaves(value: Any) -> list[str]:
    """Every string (and number) in a JSON value: what lexical search indexes by default."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            out.append(str(item))
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(list(item)))
    return out


def fuse(
    rankings: Sequence[Sequence[Any]],
    weights: Sequence[float],
    *,
    k: int = 60,
) -> list[tuple[Any, float]]:
    """Reciprocal rank fusion: each list adds ``weight / (k + rank)`` to its items."""
    scores: dict[Any, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
