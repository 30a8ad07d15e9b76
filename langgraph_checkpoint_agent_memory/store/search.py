"""The store's search: filters, query terms, BM25 weights and rank fusion (no I/O), and the
search plans: candidates ranked (see :mod:`.ranking`) or newest first, read back in pages and
decided exactly against the filter (after the database's pre-filter; with encryption on, on
decrypted values). The user guide states the filter semantics, the same on every backend.

After the database's ranking, a search with a query may be staged (:func:`stage`):

* Dated: with a ``time_field``, a query that names a span of time ("last week", see
  :mod:`..when`) puts the items dated inside it first; for a value field, the batch also runs
  the search restricted to the span, so an item dated then is found whatever its rank.
* Reranked: with a reranker, the first ``top_n`` candidates are ordered again outside the
  database transaction, and every page of the query comes from that order.

Only the items returned have their TTL refreshed, not every candidate read.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, cast

from langgraph.store.base import Op, Result, SearchItem, SearchOp

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import ItemRow, Prefilter, StoreStatements, scoped
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, EncryptionError
from langgraph_checkpoint_agent_memory.rerank import Reordered, RerankerLike, Reranking
from langgraph_checkpoint_agent_memory.store.index import Rows, item_row
from langgraph_checkpoint_agent_memory.store.values import MAX_COUNT
from langgraph_checkpoint_agent_memory.text import tokens
from langgraph_checkpoint_agent_memory.when import TimeRange, time_range

if TYPE_CHECKING:  # below them: the ranker, sealing and feedback read this module's logic
    from langgraph_checkpoint_agent_memory.store.ranking import Ranker
    from langgraph_checkpoint_agent_memory.store.sealing import Sealer

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
    return "string" if isinstance(value, str) else "other"


def _equal(actual: Any, expected: Any) -> bool:
    return _kind(actual) == _kind(expected) and bool(actual == expected)


#: The order comparisons, of numbers or of strings.
_ORDERS = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def compare(actual: Any, op: str, expected: Any) -> bool:
    if actual is MISSING:
        return False
    if op in ("$eq", "$ne"):
        return _equal(actual, expected) == (op == "$eq")
    if op in ("$in", "$nin"):
        return any(_equal(actual, e) for e in expected) == (op == "$in")
    kind = _kind(actual)
    if kind not in ("number", "string") or kind != _kind(expected):
        return False
    return bool(_ORDERS[op](actual, expected))


def matches(value: Any, conds: Iterable[tuple[list[str], str, Any]]) -> bool:
    return all(compare(lookup(value, path), op, expected) for path, op, expected in conds)


def terms(text: str) -> list[str]:
    """A query's distinct terms, at most 32, in order."""
    return list(dict.fromkeys(tokens(text)))[:32]


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
    #: How many lexical and vector candidates a query fuses, at least (a query ranked by
    #: its words alone, :meth:`keeps_lexical_order`, considers its page).
    candidates: int

    def keeps_lexical_order(self, ranks: int) -> bool:
        """Whether the fusion of the lexical list alone keeps its order down to rank
        ``ranks``: a positive weight, and each rank's score above the next one's (an
        ``rrf_k`` too large for the floats to tell ranks apart ties them all).

        Example:
            >>> Ranking(1.0, 1.0, 60, 50).keeps_lexical_order(10)
            True
            >>> Ranking(0.0, 1.0, 60, 50).keeps_lexical_order(10)
            False
        """
        w, k = self.lexical_weight, self.rrf_k
        return w > 0 and w / (k + ranks) > w / (k + ranks + 1)

    def fuse(self, lexical: Sequence[Any], vector: Sequence[Any]) -> list[tuple[Any, float]]:
        """The lexical and vector lists fused (either may be empty: it adds nothing)."""
        return fuse([lexical, vector], [self.lexical_weight, self.vector_weight], k=self.rrf_k)


def fuse(
    rankings: Sequence[Sequence[Any]], weights: Sequence[float], *, k: int = 60
) -> list[tuple[Any, float]]:
    """Reciprocal rank fusion: each list adds ``weight / (k + rank)`` to its items."""
    scores: dict[Any, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def row_value(row: ItemRow, sealer: Sealer | None = None) -> Any:
    """An item row's value as a dict, opened with ``sealer`` (its keys loaded first)."""
    if sealer is not None:
        return sealer.open_value(row.prefix, row.key, row.value, row.sealed)
    if row.sealed is not None:
        raise EncryptionError(
            f"store item {row.prefix!r} / {row.key!r} is encrypted: open the store with "
            "its encryption setting (encryption=..., or AGENT_MEMORY_MASTER_KEY)"
        )
    return row.value if isinstance(row.value, dict) else json.loads(row.value)


def item_fields(row: ItemRow, sealer: Sealer | None = None, value: Any = None) -> dict[str, Any]:
    """The fields of ``row``'s ``Item`` (``value``: its value, when known already)."""
    return dict(
        value=row_value(row, sealer) if value is None else value,
        key=row.key,
        namespace=tuple(row.prefix.split(".")),
        created_at=datetime.fromtimestamp(row.created_at, tz=timezone.utc),
        updated_at=datetime.fromtimestamp(row.updated_at, tz=timezone.utc),
    )


class _Page:
    """One page of search results, each as ``(SearchItem, ttl_minutes)``."""

    def __init__(
        self, conds: list[tuple[list[str], str, Any]], op: SearchOp, sealer: Sealer | None
    ) -> None:
        self._conds, self._sealer = conds, sealer
        self._skip, self._limit = op.offset, op.limit
        self.items: list[tuple[SearchItem, Any]] = []

    @property
    def full(self) -> bool:
        return len(self.items) >= self._limit

    def offer(self, row: ItemRow, score: float | None) -> bool:
        """Take ``row`` if it passes the filter and the offset; ``True`` once the page is full."""
        value = row_value(row, self._sealer)  # the rest only for rows the filter keeps
        if self._conds and not matches(value, self._conds):
            return False
        if self._skip:
            self._skip -= 1
            return False
        fields = item_fields(row, value=value)
        self.items.append((SearchItem(**fields, score=score), row.ttl_minutes))
        return self.full


def sealed_of(rows: list[ItemRow]) -> list[bytes | None]:
    """The sealed values of item rows (whose keys a page must load before opening them)."""
    return [None if r.sealed is None else bytes(r.sealed) for r in rows]


class Searcher:
    """Builds the search plans of one store (whose statements' shard rule may change in place)."""

    def __init__(self, statements: StoreStatements, ranker: Ranker) -> None:
        self.statements = statements
        self.ranker = ranker
        self.sealer: Sealer | None = None  # encryption at rest (``None``: off)

    def ranked_plan(
        self, op: SearchOp, now: float, vector: list[float] | None
    ) -> Plan[list[tuple[SearchItem, Any]]]:
        conds = conditions(op.filter)
        base = {**self.statements.prefix_params(op.namespace_prefix), "now": now}
        filters: Prefilter = ()
        if self.sealer is None:
            filters, fparams = self.statements.prefilter(conds)
            base.update(fparams)
        words = terms(op.query) if op.query else []
        if not op.query or (not words and vector is None):
            if self.sealer is not None and conds:  # narrowed by keyed hashes, if any
                filters, fparams = yield from self.sealer.prefilter_plan(
                    self.statements, conds, base
                )
                base.update(fparams)
            return (yield from self._recent_plan(op, conds, filters, base))
        forms = None
        if self.sealer is not None and words:
            shards = yield from self.sealer.shards_plan(self.statements, base)
            forms = yield from self.sealer.term_forms_plan(self.statements, words, shards)
        want = max(op.limit + op.offset, 1)  # a limit of 0 still ranks (its page is empty)
        alone = vector is None and self.ranker.feedback is None
        if not (alone and self.ranker.ranking.keeps_lexical_order(want)):
            # a list fused with another (or expanded from its first matches) is considered
            # past the page; one list alone gives the page in its own order: the lexical
            # ranking reads the rows of as many as it keeps (50 of them: 0.31 ms a search of
            # 1,000 items on SQLite, 10: 0.25)
            want = max(self.ranker.ranking.candidates, 4 * want)
        want = min(want, MAX_COUNT)
        read: Rows = {}  # the rows the ranking read, not read again
        if self.sealer is not None and conds:
            decide = self._decider(conds, now, read)
            fused = yield from self.ranker.kept_plan(words, vector, base, want, decide, forms, read)
            return (yield from self._read_ranked(fused, conds, op, now, read))
        # Without a filter the postings (and vectors) alone rank; should expired items leave
        # too few, rank again joined with the items. With a filter, the database's pre-filter
        # narrows the candidates and the filter is decided here: should it keep too few of a
        # full list, rank again with more candidates, until the lists hold every match.
        joined, feedback = bool(filters), self.ranker.feedback
        while True:
            fused, cut = yield from self.ranker.fused_plan(
                words,
                vector,
                filters,
                base,
                want,
                joined=joined,
                forms=forms,
                feedback=feedback,
                read=read,
            )
            out = yield from self._read_ranked(fused, conds, op, now, read)
            if len(out) >= op.limit or not cut:
                return out
            if joined:
                want *= 4
            joined = True

    def _decider(
        self, conds: list[tuple[list[str], str, Any]], now: float, read: Rows
    ) -> Callable[[list[tuple[str, str]]], Plan[set[tuple[str, str]]]]:
        """Of the keys given, the live items whose decrypted values pass the filter (rows of
        ``read`` not read again)."""
        sealer = self.sealer
        assert sealer is not None
        decided: dict[tuple[str, str], bool] = {}

        def decide(keys: list[tuple[str, str]]) -> Plan[set[tuple[str, str]]]:
            todo = [k for k in dict.fromkeys(keys) if k not in decided]
            for start in range(0, len(todo), 64):
                chunk = todo[start : start + 64]
                found = yield from self._rows_plan(chunk, now, read)
                decided.update(dict.fromkeys(chunk, False))
                for row in found:
                    decided[(row.prefix, row.key)] = matches(row_value(row, sealer), conds)
            return {k for k in keys if decided.get(k)}

        return decide

    def _rows_plan(
        self, keys: list[tuple[str, str]], now: float, read: Rows
    ) -> Plan[list[ItemRow]]:
        """The rows of the live items among ``keys`` (at most 64), their data keys loaded:
        those of ``read``, the others read by key."""
        found = [item_row(read[k]) for k in keys if k in read]
        if rest := [k for k in keys if k not in read]:
            params = self.statements.key_params(rest)
            params["now"] = now
            [rows] = yield Batch([Stmt(self.statements.by_keys(len(rest)), params, fetch=True)])
            found += map(ItemRow._make, rows)
        if self.sealer is not None:
            yield from self.sealer.ids_plan(sealed_of(found))
        return found

    def _read_ranked(
        self,
        fused: list[tuple[tuple[str, str], float]],
        conds: list[tuple[list[str], str, Any]],
        op: SearchOp,
        now: float,
        read: Rows,
    ) -> Plan[list[tuple[SearchItem, Any]]]:
        """The live items of ``fused`` that pass the filter exactly, in its order, paged
        (rows of ``read`` not read again)."""
        page = _Page(conds, op, self.sealer)
        if page.full:
            return page.items
        # the first read asks for little more than a page: most candidates pass
        start, size = 0, min(64, 2 * (op.limit + op.offset) + 8)
        while start < len(fused):
            chunk = fused[start : start + size]
            start, size = start + size, 64
            rows = yield from self._rows_plan([k for k, _ in chunk], now, read)
            by_key = {(r.prefix, r.key): r for r in rows}
            for item_key, score in chunk:
                row = by_key.get(item_key)
                if row is not None and page.offer(row, score):
                    return page.items
        return page.items

    def _recent_plan(
        self,
        op: SearchOp,
        conds: list[tuple[list[str], str, Any]],
        filters: Prefilter,
        base: dict[str, Any],
    ) -> Plan[list[tuple[Any, Any]]]:
        """No query: newest first, pre-filtered in SQL, decided exactly here (with encryption
        on, a filter reads pages growing faster: only filterable fields are pre-filtered)."""
        page = _Page(conds, op, self.sealer)
        if page.full:
            return page.items
        sealer = self.sealer
        grow = 4 if sealer is not None and conds else 2
        cursor, size = 0, min(max(op.limit + op.offset, 16) * (grow if grow == 4 else 1), MAX_COUNT)
        last: ItemRow | None = None  # the previous page's last row, with encryption on
        params: dict[str, Any]
        while True:
            if last is None:
                sql, params = self.statements.recent(filters, scoped(base)), {"skip": cursor}
            else:
                sql = self.statements.recent_after(scoped(base), filters)
                params = {"a_updated": last.updated_at, "a_prefix": last.prefix, "a_key": last.key}
            [rows] = yield Batch([Stmt(sql, {**base, **params, "n": size}, fetch=True)])
            found = list(map(ItemRow._make, rows))
            if sealer is not None:
                yield from sealer.ids_plan(sealed_of(found))
            for row in found:
                if page.offer(row, None):
                    return page.items
            if len(found) < size:
                return page.items
            cursor += size
            last = found[-1] if sealer is not None else None
            size = min(size * grow, MAX_COUNT)  # what a LIMIT may be


#: What ``search(..., reranker=)`` accepts: a reranker, ``False`` for none, ``None``: the store's.
PerCall = RerankerLike | Literal[False] | None


@dataclass(frozen=True)
class Stages:
    """What a search does beyond the database's ranking (see the module)."""

    reranking: Reranking | None = None
    time_field: str | None = None


#: The item columns a ``time_field`` may name; any other name is a field of the value.
COLUMNS = ("created_at", "updated_at")


@dataclass
class Staged:
    """What a batch runs for its searches with a query, and how each is answered."""

    #: The batch's operations (such searches widened to their candidates), then dated ones.
    ops: list[Op]
    #: How many operations the batch itself has (the first of ``ops``).
    asked: int = 0
    #: Each such search, by its position in the batch.
    searches: dict[int, SearchOp] = field(default_factory=dict)
    #: The span of time a search names, by its position (when it names one).
    spans: dict[int, TimeRange] = field(default_factory=dict)
    #: The positions in ``ops`` of a search's dated searches, with its query and without.
    dated: dict[int, tuple[int, int]] = field(default_factory=dict)

    def candidates(self, i: int, results: Sequence[Result], time_field: str) -> list[SearchItem]:
        """The candidates of search ``i``: those inside the span it names first."""
        found: list[SearchItem] = list(results[i])  # type: ignore[arg-type]
        if (span := self.spans.get(i)) is None:
            return found
        if i in self.dated:  # those its words match, then the newest, with fused scores
            scored = {(it.namespace, it.key): it for it in found}
            inside: dict[tuple[tuple[str, ...], str], SearchItem] = {}
            for j in self.dated[i]:
                for it in cast(list[SearchItem], results[j]):
                    key = (it.namespace, it.key)
                    inside.setdefault(key, scored.get(key, it))
        else:
            inside = {(it.namespace, it.key): it for it in found if _moment(it, time_field) in span}
        return [*inside.values(), *(it for it in found if (it.namespace, it.key) not in inside)]

    def searched(
        self, results: list[Result], time_field: str | None
    ) -> list[tuple[int, SearchOp, list[SearchItem]]]:
        """Each staged search, by its position, with its candidates (:meth:`candidates`)."""
        field = time_field or ""
        return [(i, op, self.candidates(i, results, field)) for i, op in self.searches.items()]

    def paged(
        self,
        results: list[Result],
        searched: list[tuple[int, SearchOp, list[SearchItem]]],
        answers: Sequence[Reordered],
    ) -> list[Result]:
        """The batch's results: each staged search's page, in its answer's order."""
        out = results[: self.asked]
        for (i, search, items), reordered in zip(searched, answers, strict=True):
            out[i] = page(search, items, reordered)
        return out


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
        span = time_range(op.query, now) if time_field is not None else None
        span = span if span is not None and span.start <= now else None  # a span begun
        if reranking is None and span is None:
            continue
        want = max(op.offset + op.limit, reranking.top_n if reranking else 0)
        if span is not None:
            want = max(want, 50)  # a search naming a time considers 50 candidates at least
            staged.spans[i] = span
        want = min(want, MAX_COUNT)  # what a limit may be
        staged.searches[i] = op
        # candidates are read without refreshing their TTL: the page returned is refreshed
        staged.ops[i] = SearchOp(op.namespace_prefix, op.filter, want, 0, op.query, False)
        # a field of the value the search does not filter on itself: found through the filter
        filterable = time_field not in (*COLUMNS, *(op.filter or {}))
        if span is not None and time_field is not None and filterable:
            staged.dated[i] = (len(ops) + len(extra), len(ops) + len(extra) + 1)
            within = {**(op.filter or {}), time_field: {"$gte": span.start, "$lt": span.end}}
            for query in (op.query, None):
                extra.append(SearchOp(op.namespace_prefix, within, want, 0, query, False))
    if not staged.searches:
        return None
    staged.ops += extra
    return staged


def _moment(item: SearchItem, time_field: str) -> float:
    """An item's moment by ``time_field`` (NaN for none, which no span holds)."""
    if time_field in COLUMNS:
        when: Any = item.created_at if time_field == "created_at" else item.updated_at
        return float(when.timestamp()) if when is not None else float("nan")
    value = item.value.get(time_field)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return float("nan")


def page(op: SearchOp, items: Sequence[SearchItem], reordered: Reordered) -> list[SearchItem]:
    """The page ``op`` asks for in the reranker's order, with the reranker's scores."""
    out = []
    for i in reordered.order[op.offset : op.offset + op.limit]:
        it, score = items[i], reordered.scores.get(i, items[i].score)
        out.append(SearchItem(it.namespace, it.key, it.value, it.created_at, it.updated_at, score))
    return out
