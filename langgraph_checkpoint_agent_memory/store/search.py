"""The store's search: filters, query terms, BM25 weights and rank fusion (no I/O), and the
search plans: candidates ranked (see :mod:`.ranking`) or newest first, then read back in pages
and decided exactly against the filter.

Filter semantics, the same on every backend: ``{"a.b": 3}`` or ``{"a.b": {"$gt": 2}}`` look
up nested keys; ``$eq $ne $gt $gte $lt $lte $in $nin``; numbers compare as numbers and strings
as strings (a string never equals or orders against a number); an item that lacks the key
never matches. SQL backends narrow rows with a pre-filter and this module decides exactly.

With encryption on, values are sealed, so the database cannot pre-filter them; filters are
decided here on decrypted values, with the same results, scores, limit and offset. What it
costs: a filtered search with a query ranks only the items the filter keeps, so it reads and
decrypts the candidates of each ranked list, best first, until the list holds enough kept
items; a filtered search without a query reads and decrypts items newest first until the
page is full (most of the namespace, for a filter that keeps few items), unless its
``$eq``/``$in`` conditions are on fields marked filterable, whose keyed hashes narrow the
items in the database first (see :mod:`.sealing`). An unfiltered search decrypts only the
items it returns (and, with vectors, every vector under the prefix: see :mod:`.ranking`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from langgraph.store.base import Item, SearchItem, SearchOp

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import (
    ItemRow,
    Prefilter,
    StoreStatements,
    ns_text,
    scoped,
)
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, EncryptionError
from langgraph_checkpoint_agent_memory.text import tokens

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


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def row_value(row: ItemRow, sealer: Sealer | None = None) -> Any:
    """An item row's value as a dict (the driver may have decoded its JSON already);
    opened with ``sealer`` when encryption is on (its keys loaded first: see
    :meth:`Sealer.ids_plan`)."""
    if sealer is not None:
        return sealer.open_value(row.prefix, row.key, row.value, row.sealed)
    if row.sealed is not None:
        raise EncryptionError(
            f"store item {row.prefix!r} / {row.key!r} is encrypted: open the store with "
            "its encryption setting (encryption=..., or AGENT_MEMORY_MASTER_KEY)"
        )
    return row.value if isinstance(row.value, dict) else json.loads(row.value)


def item_fields(row: ItemRow, sealer: Sealer | None = None, value: Any = None) -> dict[str, Any]:
    """The fields of an ``Item`` (and of a ``SearchItem``, with its score) of ``row``
    (``value``: its value, when :func:`row_value` gave it already)."""
    return dict(
        value=row_value(row, sealer) if value is None else value,
        key=row.key,
        namespace=tuple(row.prefix.split(".")),
        created_at=_time(row.created_at),
        updated_at=_time(row.updated_at),
    )


class _Page:
    """One page of search results: the rows that pass the filter exactly, after skipping
    ``op.offset`` of them, up to ``op.limit``; each as ``(SearchItem, ttl_minutes)``."""

    def __init__(
        self, conds: list[tuple[list[str], str, Any]], op: SearchOp, sealer: Sealer | None
    ) -> None:
        self._conds = conds
        self._sealer = sealer
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


def item_of(row: ItemRow, sealer: Sealer | None = None) -> Item:
    """The ``Item`` of an item row."""
    return Item(**item_fields(row, sealer))


def sealed_of(rows: list[ItemRow]) -> list[bytes | None]:
    """The sealed values of item rows (whose keys a page must load before opening them)."""
    return [None if r.sealed is None else bytes(r.sealed) for r in rows]


class Searcher:
    """Builds the search plans of one store.

    Args:
        statements: The store's statements (their shard rule may be set later, in place).
        ranker: Ranks a namespace's items by terms and vectors.
    """

    def __init__(self, statements: StoreStatements, ranker: Ranker) -> None:
        self.statements = statements
        self.ranker = ranker
        #: Encryption at rest (``None``: off).
        self.sealer: Sealer | None = None

    def search_plan(
        self, op: SearchOp, now: float, query_vector: list[float] | None
    ) -> Plan[tuple[list[SearchItem], list[tuple[str, str]]]]:
        """Results, and the keys among them that have a TTL to refresh."""
        found = yield from self.ranked_plan(op, now, query_vector)
        return [item for item, _ in found], [
            (ns_text(item.namespace), item.key) for item, ttl in found if ttl is not None
        ]

    def ranked_plan(
        self, op: SearchOp, now: float, query_vector: list[float] | None
    ) -> Plan[list[tuple[SearchItem, Any]]]:
        conds = conditions(op.filter)
        base = {**self.statements.prefix_params(op.namespace_prefix), "now": now}
        filters: Prefilter = ()
        if self.sealer is None:
            filters, fparams = self.statements.prefilter(conds)
            base.update(fparams)
        query_terms = terms(op.query) if op.query else []
        if not op.query or (not query_terms and query_vector is None):
            if self.sealer is not None and conds:  # narrowed by keyed hashes, if any
                filters, fparams = yield from self.sealer.prefilter_plan(
                    self.statements, conds, base
                )
                base.update(fparams)
            return (yield from self._recent_plan(op, conds, filters, base))
        forms = None
        if self.sealer is not None and query_terms:
            forms = yield from self._term_forms(query_terms, base)
        want = max(self.ranker.ranking.candidates, 4 * (op.limit + op.offset))
        if self.sealer is not None and conds:
            fused = yield from self.ranker.kept_plan(
                query_terms, query_vector, base, want, self._decider(conds, now), forms
            )
            return (yield from self._read_ranked(fused, conds, op, now))
        # Without a filter the postings (and vectors) alone rank; should expired items fill
        # the list so that too few remain, rank again joined with the items, which leaves
        # them out. With a filter, the database's pre-filter narrows the candidates and the
        # filter is decided here: should it keep too few of a full list, rank again with
        # more candidates, until the lists hold every match.
        joined = bool(filters)
        while True:
            fused, cut = yield from self.ranker.fused_plan(
                query_terms,
                query_vector,
                filters,
                base,
                want,
                joined=joined,
                forms=forms,
                feedback=self.ranker.feedback,
            )
            out = yield from self._read_ranked(fused, conds, op, now)
            if len(out) >= op.limit or not cut:
                return out
            if joined:
                want *= 4
            joined = True

    def _decider(
        self, conds: list[tuple[list[str], str, Any]], now: float
    ) -> Callable[[list[tuple[str, str]]], Plan[set[tuple[str, str]]]]:
        """For a filtered search with encryption on: of the item keys given, the live ones
        whose decrypted values pass the filter; each item read and decided once per search,
        only when a ranked list reaches it."""
        sealer = self.sealer
        assert sealer is not None
        decided: dict[tuple[str, str], bool] = {}

        def decide(keys: list[tuple[str, str]]) -> Plan[set[tuple[str, str]]]:
            todo = [k for k in dict.fromkeys(keys) if k not in decided]
            for start in range(0, len(todo), 64):
                chunk = todo[start : start + 64]
                found = yield from self._rows_plan(chunk, now)
                yield from sealer.ids_plan(sealed_of(found))
                decided.update(dict.fromkeys(chunk, False))
                for row in found:
                    decided[(row.prefix, row.key)] = matches(row_value(row, sealer), conds)
            return {k for k in keys if decided.get(k)}

        return decide

    def _rows_plan(self, keys: list[tuple[str, str]], now: float) -> Plan[list[ItemRow]]:
        """The rows of the live items among ``keys`` (at most 64 of them)."""
        params: dict[str, Any] = {"now": now}
        for j, (prefix, key) in enumerate(keys):
            params[f"p{j}"], params[f"k{j}"] = prefix, key
            params[f"s{j}"] = self.statements.shard(prefix)
        [rows] = yield Batch([Stmt(self.statements.by_keys(len(keys)), params, fetch=True)])
        return list(map(ItemRow._make, rows))

    def _newest_plan(
        self, filters: Prefilter, base: dict[str, Any], size: int, last: ItemRow | None
    ) -> Plan[list[ItemRow]]:
        """Up to ``size`` live items under the namespace passing the pre-filter, newest
        first, after ``last`` (the previous page's last row; ``None``: from the first)."""
        one = scoped(base)
        if last is None:
            stmt = Stmt(self.statements.recent(filters, one), {**base, "n": size, "skip": 0})
        else:  # with encryption on: the next page by keyset
            after = {"a_updated": last.updated_at, "a_prefix": last.prefix, "a_key": last.key}
            sql = self.statements.recent_after(one, filters)
            stmt = Stmt(sql, {**base, "n": size, **after})
        [rows] = yield Batch([Stmt(stmt.sql, stmt.params, fetch=True)])
        return list(map(ItemRow._make, rows))

    def _term_forms(self, terms: list[str], base: dict[str, Any]) -> Plan[list[list[str]]]:
        """Per query term, its keyed hash under each shard key the search reads (see
        :meth:`Sealer.shards_plan`)."""
        assert self.sealer is not None
        shards = yield from self.sealer.shards_plan(self.statements, base)
        return (yield from self.sealer.term_forms_plan(self.statements, terms, shards))

    def _read_ranked(
        self,
        fused: list[tuple[tuple[str, str], float]],
        conds: list[tuple[list[str], str, Any]],
        op: SearchOp,
        now: float,
    ) -> Plan[list[tuple[SearchItem, Any]]]:
        """The live items of ``fused`` that pass the filter exactly, in its order, paged."""
        page = _Page(conds, op, self.sealer)
        if page.full:
            return page.items
        # the first read asks for little more than a page: most candidates pass
        start, size = 0, min(64, 2 * (op.limit + op.offset) + 8)
        while start < len(fused):
            chunk = fused[start : start + size]
            start, size = start + size, 64
            rows = yield from self._rows_plan([k for k, _ in chunk], now)
            by_key = {(r.prefix, r.key): r for r in rows}
            if self.sealer is not None:
                yield from self.sealer.ids_plan(sealed_of(list(by_key.values())))
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
        """No query: newest first, pre-filtered in SQL, decided exactly here. With
        encryption on, only conditions on filterable fields are pre-filtered (by their
        keyed hashes): a filter reads pages growing faster, each read on from the last row
        of the one before."""
        page = _Page(conds, op, self.sealer)
        if page.full:
            return page.items
        cursor, size = 0, max(op.limit + op.offset, 16)
        sealed = self.sealer is not None
        grow = 4 if sealed and conds else 2
        if grow == 4:
            size *= grow
        last: ItemRow | None = None
        while True:
            if sealed:
                found = yield from self._newest_plan(filters, base, size, last)
            else:
                params = {**base, "n": size, "skip": cursor}
                recent = self.statements.recent(filters, scoped(base))
                [rows] = yield Batch([Stmt(recent, params, fetch=True)])
                found = list(map(ItemRow._make, rows))
            if self.sealer is not None:
                yield from self.sealer.ids_plan(sealed_of(found))
            for row in found:
                if page.offer(row, None):
                    return page.items
            if len(found) < size:
                return page.items
            cursor += size
            last = found[-1]
            size *= grow
