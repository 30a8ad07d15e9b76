"""Searches that know when: with the store's ``time_field`` set, a query that names a span of
time ("last week", "in May 2023", "two years ago": see :mod:`..when`) puts the items dated
inside it first.

An item's date is its ``created_at`` or ``updated_at``, or a field of its value holding
seconds since the epoch (as agent memory's episodes hold ``occurred_at``). For a value field,
the batch also runs the same search restricted to the span (the store's filter, in the
database), so an item dated then is found even when its words rank it below the first
candidates; for ``created_at`` and ``updated_at``, the first candidates are ordered, those
inside the span first. The span is read relative to the store's clock.

How a batch's searches are widened for this and for a reranker (see :mod:`.reranked`) is
decided here, once: :func:`stage` says what runs, :meth:`Staged.candidates` what each search
ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langgraph.store.base import Op, Result, SearchItem, SearchOp

from langgraph_checkpoint_agent_memory.rerank import Reranking
from langgraph_checkpoint_agent_memory.when import TimeRange, time_range

#: The item columns a ``time_field`` may name; any other name is a field of the value.
COLUMNS = ("created_at", "updated_at")
#: How many candidates a search that names a time considers, at least.
TIME_CANDIDATES = 50


@dataclass
class Staged:
    """What a batch runs for its searches with a query, and how each is answered.

    Attributes:
        ops: The batch's operations (each such search widened to its candidates, from the
            first), then the dated searches added for them.
        asked: How many operations the batch itself has (the first of ``ops``).
        searches: Each such search, by its position in the batch.
        spans: The span of time a search names, by its position (when it names one).
        dated: The positions in ``ops`` of the dated searches added for a search: with its
            query, then without (the newest in the span, whatever their words).
    """

    ops: list[Op]
    asked: int = 0
    searches: dict[int, SearchOp] = field(default_factory=dict)
    spans: dict[int, TimeRange] = field(default_factory=dict)
    dated: dict[int, tuple[int, int]] = field(default_factory=dict)

    def candidates(self, i: int, results: Sequence[Result], time_field: str) -> list[SearchItem]:
        """The candidates of search ``i``, best first: those inside the span it names
        first, each group in the fused order."""
        found: list[SearchItem] = list(results[i])  # type: ignore[arg-type]
        span = self.spans.get(i)
        if span is None:
            return found
        if i in self.dated:
            scored = {(tuple(item.namespace), item.key): item for item in found}
            inside = []
            seen: set[tuple[tuple[str, ...], str]] = set()
            for j in self.dated[i]:  # those its words match, then the newest
                for item in cast(list[SearchItem], results[j]):
                    k = (tuple(item.namespace), item.key)
                    if k not in seen:
                        seen.add(k)
                        inside.append(scored.get(k, item))  # with its fused score, if any
        else:
            inside = [item for item in found if _moment(item, time_field) in span]
        first = {(tuple(item.namespace), item.key) for item in inside}
        return inside + [item for item in found if (tuple(item.namespace), item.key) not in first]


def stage(
    ops: list[Op], reranking: Reranking | None, time_field: str | None, now: float
) -> Staged | None:
    """How ``ops`` run when their searches are reranked (``reranking``) or dated
    (``time_field``); ``None`` when no search of ``ops`` is either.

    Example:
        >>> op = SearchOp(("users",), None, 10, 0, "what did I buy last week?")
        >>> staged = stage([op], None, "bought_at", 1_700_000_000.0)
        >>> [(o.query, o.filter) for o in staged.ops][1:]  # the search, then two dated
        ... # doctest: +NORMALIZE_WHITESPACE
        [('what did I buy last week?', {'bought_at': {'$gte': 1699228800.0, '$lt': 1699833600.0}}),
         (None, {'bought_at': {'$gte': 1699228800.0, '$lt': 1699833600.0}})]
    """
    staged = Staged(list(ops), len(ops))
    extra: list[Op] = []
    for i, op in enumerate(ops):
        if not isinstance(op, SearchOp) or not op.query:
            continue
        span = _span(op, time_field, now)
        if reranking is None and span is None:
            continue
        want = max(op.offset + op.limit, reranking.top_n if reranking else 0)
        if span is not None:
            want = max(want, TIME_CANDIDATES)
            staged.spans[i] = span
        staged.searches[i] = op
        # candidates are read without refreshing their TTL: the page returned is refreshed
        staged.ops[i] = SearchOp(op.namespace_prefix, op.filter, want, 0, op.query, False)
        if span is not None and time_field is not None and _filterable(time_field, op):
            staged.dated[i] = (len(ops) + len(extra), len(ops) + len(extra) + 1)
            within = {**(op.filter or {}), time_field: {"$gte": span.start, "$lt": span.end}}
            for query in (op.query, None):
                extra.append(SearchOp(op.namespace_prefix, within, want, 0, query, False))
    if not staged.searches:
        return None
    staged.ops += extra
    return staged


def _filterable(time_field: str, op: SearchOp) -> bool:
    """Whether the span is found through the store's filter: a field of the value the
    search does not filter on itself."""
    return time_field not in COLUMNS and time_field not in (op.filter or {})


def _span(op: SearchOp, time_field: str | None, now: float) -> TimeRange | None:
    """The span of time ``op``'s query names, when the store dates its items and the span
    has begun."""
    if time_field is None or not op.query:
        return None
    span = time_range(op.query, now)
    return span if span is not None and span.start <= now else None


def _moment(item: SearchItem, time_field: str) -> float:
    """An item's moment by ``time_field``: a column, or a number in its value (NaN for
    none, which no span holds)."""
    if time_field in COLUMNS:
        when: Any = item.created_at if time_field == "created_at" else item.updated_at
        return float(when.timestamp()) if when is not None else float("nan")
    value = item.value.get(time_field)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return float("nan")
