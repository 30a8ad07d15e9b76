"""Filters, query terms, BM25 weights and rank fusion: the store's search logic, no I/O.

Filter semantics, the same on every backend: ``{"a.b": 3}`` or ``{"a.b": {"$gt": 2}}`` look
up nested keys; ``$eq $ne $gt $gte $lt $lte $in $nin``; numbers compare as numbers and strings
as strings (a string never equals or orders against a number); an item that lacks the key
never matches. SQL backends narrow rows with a pre-filter and this module decides exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.text import tokens

OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"})
MISSING = object()


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
            return MISSING
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
    if actual is MISSING:
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


def terms(text: str) -> list[str]:
    """A query's distinct terms, at most 32, in order."""
    seen: dict[str, None] = {}
    for term in tokens(text):
        seen.setdefault(term, None)
    return list(seen)[:32]


#: BM25's parameters: term-frequency saturation and document-length normalization. Memory
#: items are short and a longer one (a turn that says something, a fact with its details)
#: is rarely longer for being verbose, so length is normalized gently: ``B`` 0.3 rather than
#: the textbook 0.75 (LoCoMo turns, lexical hit@5: 0.622 at 0.75, 0.646 at 0.3; facts and
#: episodes unchanged; ``benchmarks``).
K1, B = 1.2, 0.3


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


@dataclass(frozen=True)
class Ranking:
    """How hybrid search fuses its lexical and vector rankings (see :func:`fuse`)."""

    lexical_weight: float
    vector_weight: float
    #: The fusion constant: larger values flatten the difference between ranks.
    rrf_k: int
    #: How many lexical and vector candidates each query considers, at least.
    candidates: int


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
