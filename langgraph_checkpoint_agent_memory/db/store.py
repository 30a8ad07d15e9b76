"""The store's SQL, for one dialect: items, their vectors and their lexical index.

Statements are SQLAlchemy Core over :mod:`.schema`'s tables; joined statements name them by
the aliases :data:`.schema.vectors_v` and :data:`.schema.items_i`. A filter's pre-filter is a
Core condition per dialect (:meth:`Dialect.json_prefilter` chooses its shape,
:meth:`Dialect.json_condition` builds it over the item's ``value`` column), and BM25's
per-query weights are a ``CASE term WHEN ...`` of bound parameters. Only the dialects' vector
operators are raw SQL fragments (see :mod:`.postgres`, :mod:`.hana`). The store builds plans
from these statements and decodes their rows; it writes no SQL itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, VectorIndex, same_item
from langgraph_checkpoint_agent_memory.db.schema import (
    STORE_NS_TABLES,
    items_i,
    metadata,
    store_items,
    store_terms,
    store_vectors,
    vectors_v,
    written,
)
from langgraph_checkpoint_agent_memory.db.shard import (
    DEFAULT_SHARD_DEPTH,
    checked_depth,
    covers,
    prefix_shard,
    shard_key,
)
from langgraph_checkpoint_agent_memory.text import postings

#: The columns of :class:`ItemRow`.
ITEM_FIELDS = ("prefix", "key", "value", "created_at", "updated_at", "ttl_minutes", "sealed")
#: What ``value`` holds when ``sealed`` holds the item's value (encryption at rest).
SEALED_VALUE = "{}"
#: The most conditions of a filter the database narrows rows by. A chain of ANDs is as deep
#: as it is long, and SQLite refuses an expression tree deeper than 1000 ("Expression tree is
#: too large"), so a filter of any size narrows by its first conditions (equalities first) and
#: the store decides the rest on the rows that pass: the same results on every backend.
MAX_PREFILTER = 32

#: A filter's pre-filter, as :meth:`StoreStatements.prefilter` returns it: per condition the
#: name of its parameter and the shape the dialect chose (hashable: a statement cache key).
Prefilter: TypeAlias = tuple[tuple[str, Hashable], ...]
#: The shape of a pre-filter condition decided by keyed hashes (encryption at rest's
#: filterable fields, see ``store/filterable.py``): ``(HASHED_EQUALITY, values, marks)``.
HASHED_EQUALITY = "hashed"


class text_length(sa.sql.functions.GenericFunction[int]):
    """``length()`` of a value kept as text, JSON included: PostgreSQL's JSONB has no
    length of its own, so it is measured as its text there."""

    type = sa.Integer()
    inherit_cache = True


@compiles(text_length)
def _text_length(element: text_length, compiler: Any, **kw: Any) -> str:
    return f"length({compiler.process(element.clauses, **kw)})"


@compiles(text_length, "postgresql")
def _text_length_pg(element: text_length, compiler: Any, **kw: Any) -> str:
    return f"length(CAST({compiler.process(element.clauses, **kw)} AS TEXT))"


class ItemRow(NamedTuple):
    """A row of :data:`ITEM_FIELDS`."""

    prefix: str
    key: str
    value: Any  # JSON text, or a dict where the driver decodes JSON (psycopg's JSONB)
    created_at: float
    updated_at: float
    ttl_minutes: float | None
    sealed: bytes | None  # the value sealed (encryption at rest), else None


class ScoredRow(NamedTuple):
    """A row of :meth:`StoreStatements.lexical` and of a dialect's vector search."""

    prefix: str
    key: str
    score: float


class VectorRow(NamedTuple):
    """A row of :meth:`StoreStatements.vectors`: one embedded field of an item."""

    prefix: str
    key: str
    vector: bytes  # float32, little-endian


class KeyVectorRow(NamedTuple):
    """A row of :meth:`StoreStatements.vectors_exact` (one namespace, so no prefix)."""

    key: str
    vector: bytes


class Fingerprint(NamedTuple):
    """A row of :meth:`StoreStatements.fingerprint`: a namespace's live item count and its
    latest update, which any write to the namespace changes."""

    items: int
    latest: float | None


class TextStats(NamedTuple):
    """A row of :meth:`StoreStatements.text_stats`: what BM25 needs of the searched items."""

    docs: int
    total_len: int | None


class ItemKey(NamedTuple):
    """A row of :meth:`StoreStatements.expired`."""

    shard: str
    prefix: str
    key: str


def vector_text(vector: bytes | Sequence[float]) -> str:
    """A vector (float32 bytes or numbers) as ``[x,y,...]``, the text form that vector
    columns read (HANA's ``TO_REAL_VECTOR``)."""
    values = np.frombuffer(vector, dtype="<f4") if isinstance(vector, bytes) else vector
    return json.dumps([float(x) for x in values], separators=(",", ":"))


def index_rows(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lexical index rows of store item rows (each with ``shard``, ``prefix``, ``key``,
    ``doc``); sets each item's ``doc_len``. An item may carry ``index_text`` (indexed in
    place of ``doc``, which then is not stored), ``term_of`` (what is stored for each
    term: its keyed hash, with encryption on) and ``filter_terms`` (keyed hashes of its
    filterable fields, stored as they are); all are taken out of the row."""
    out: list[dict[str, Any]] = []
    for item in items:
        doc = item.pop("index_text", item.get("doc"))
        term_of: Callable[[str], str] | None = item.pop("term_of", None)
        ident = {"shard": item["shard"], "prefix": item["prefix"], "key": item["key"]}
        # keyed hashes of filterable fields (encryption at rest): postings no query term has
        out += [{"term": t, **ident, "tf": 0, "dl": 0} for t in item.pop("filter_terms", ())]
        if doc is None:
            item["doc_len"] = None
            continue
        found, length = postings(doc)
        counts: dict[str, int] = dict(found)
        if term_of is not None:
            counts = {}
            for term, n in found.items():
                stored = term_of(term)
                counts[stored] = counts.get(stored, 0) + n
        item["doc_len"] = length
        shard, prefix, key = item["shard"], item["prefix"], item["key"]
        out += [
            {"term": t, "shard": shard, "prefix": prefix, "key": key, "tf": n, "dl": length}
            for t, n in counts.items()
        ]
    return out


def _hashed(t: Any, name: str, values: int, marks: int) -> Any:
    """Core: item ``t`` holds one of the keyed hashes ``:<name>_v<j>`` in its postings, or
    none of its field's marks ``:<name>_m<j>`` (it was not indexed for the field)."""

    def holds(kind: str, n: int) -> Any:
        p = store_terms.alias(f"{name}_{kind}")
        terms = [sa.bindparam(f"{name}_{kind}{j}", type_=sa.String) for j in range(n)]
        return sa.exists().where(
            p.c.term.in_(terms),
            p.c.shard == t.c.shard,
            p.c.prefix == t.c.prefix,
            p.c.key == t.c.key,
        )

    return sa.or_(holds("v", values), ~holds("m", marks))


def key_match(t: Any, names: str = "") -> Any:
    """Core: ``t``'s row of one item: its shard key, namespace and key (``:shard``,
    ``:prefix``, ``:key``, each name after ``names``), the shard key first, so a distributed
    database routes it to one shard."""
    return sa.and_(
        t.c.shard == sa.bindparam(f"{names}shard"),
        t.c.prefix == sa.bindparam(f"{names}prefix"),
        t.c.key == sa.bindparam(f"{names}key"),
    )


def _delete_item(t: sa.Table) -> Any:
    return sa.delete(t).where(key_match(t))


def _live(t: Any) -> Any:
    """``t``'s item has not expired at ``:now``."""
    return sa.or_(t.c.expires_at.is_(None), t.c.expires_at > sa.bindparam("now", type_=sa.Float))


#: :func:`_live`, for the statements of other modules (:mod:`.store_sealed`).
live = _live


def ns_text(namespace: Sequence[str]) -> str:
    """A namespace as the store keeps it: its labels joined by dots."""
    return ".".join(namespace)


def prefix_params(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> dict[str, Any]:
    """Parameters matching a namespace and everything below it, by exact comparison
    (no LIKE: labels may hold % or _, and LIKE ignores case on SQLite); with ``shard`` when
    the namespace covers the shard key (see :func:`.shard.covers`), so statements name it."""
    ns = ns_text(namespace)
    params: dict[str, Any] = {
        "ns": ns,
        "ns_dot": ns + ".",
        "ns_len": len(ns) + 1,
        "ns_end": ns + "/",
    }
    if covers(namespace, depth):
        params["shard"] = shard_key(namespace, depth)
    return params


def scoped(params: Mapping[str, Any]) -> bool:
    """Whether parameters of :func:`prefix_params` name one shard key."""
    return "shard" in params


def expired_stats_plan(statements: StoreStatements, now: float) -> Plan[tuple[int, int]]:
    """How many items a sweep at ``now`` would delete, and their size; a read."""
    [rows] = yield Batch([Stmt(statements.expired_stats(), {"now": now}, fetch=True)])
    count, size = rows[0]
    return int(count), int(size or 0)


class StoreStatements:
    """The store's SQL for one dialect: SQLAlchemy Core over :mod:`.schema`'s tables (the
    dialects' vector searches carry their vector operators as raw fragments).

    Every statement of one item or one namespace names its shard key (``:shard``, computed
    by :meth:`shard`), so a distributed database routes it to one shard; a namespace prefix
    shorter than the key (``scoped=False``) matches by prefix alone and reads every shard.
    """

    def __init__(self, d: Dialect, shard_depth: int = DEFAULT_SHARD_DEPTH) -> None:
        self.d = d
        self.shard_depth = checked_depth(shard_depth)

    # -- the shard key ---------------------------------------------------------------------

    def shard(self, prefix: str) -> str:
        """The shard key of the namespace kept as ``prefix`` (see :mod:`.shard`)."""
        return prefix_shard(prefix, self.shard_depth)

    def keyed(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (each with a ``prefix``), each given its ``shard``."""
        out = list(rows)
        for row in out:
            row["shard"] = self.shard(row["prefix"])
        return out

    def prefix_params(self, namespace: Sequence[str]) -> dict[str, Any]:
        """:func:`prefix_params` under this store's rule."""
        return prefix_params(namespace, self.shard_depth)

    def _vector_under(self, scoped: bool) -> list[Any]:
        """Core: the vector ``v`` lies under the namespace, through the dialect's namespace
        index on vectors; when ``scoped``, first its shard key is ``:shard``."""
        v = vectors_v
        under = self.d.vector_under_clause(v.c.prefix)
        return [v.c.shard == sa.bindparam("shard"), under] if scoped else [under]

    def prefilter(
        self, conds: list[tuple[list[str], str, Any]]
    ) -> tuple[Prefilter, dict[str, Any]]:
        """The SQL pre-filter of ``conds`` (``(path, operator, value)``) and its parameters:
        the conditions the database can decide, at most :data:`MAX_PREFILTER` of them, ANDed
        to the WHERE clause by :meth:`filtered`; the store applies every condition exactly to
        what comes back."""
        parts: list[tuple[str, Hashable]] = []
        params: dict[str, Any] = {}
        # equalities first: the database tests them first, and they drop the most rows
        order = sorted(range(len(conds)), key=lambda i: conds[i][1] != "$eq")
        for i, (path, op, value) in ((i, conds[i]) for i in order):
            name = f"f{i}"
            shape = self.d.json_prefilter(path, op, value)
            if shape is None:
                continue
            if len(parts) == MAX_PREFILTER:  # the rest are decided on the rows that come back
                break
            parts.append((name, shape))
            params[f"{name}_path"] = self.d.json_path(path)
            params[name] = value
        return tuple(parts), params

    def filtered(self, value: Any, filters: Prefilter) -> list[Any]:
        """Core: the conditions of ``filters`` on the item ``value`` column (and its table's
        postings, for conditions of keyed hashes)."""
        return [
            _hashed(value.table, name, shape[1], shape[2])
            if isinstance(shape, tuple) and shape[0] == HASHED_EQUALITY
            else self.d.json_condition(value, shape, name)
            for name, shape in filters
        ]

    def statement(self, key: Hashable, build: Callable[[], sa.sql.ClauseElement]) -> Sql:
        """The store's statement ``key``, built by ``build`` and compiled on first use only:
        the store's registry of cached statements (in the dialect's cache, under
        ``"store"``)."""
        return self.d.sql(("store", key), build)

    # -- one item --------------------------------------------------------------------------

    def get(self) -> Sql:
        """One live item by ``:shard``, ``:prefix``, ``:key``."""
        t = store_items
        return self.statement(
            "get",
            lambda: sa.select(*(t.c[n] for n in ITEM_FIELDS)).where(key_match(t), _live(t)),
        )

    def by_keys(self, n: int) -> Sql:
        """Live items of ``n`` keys (``:s<j>``, ``:p<j>``, ``:k<j>``)."""
        t = store_items

        def build() -> Any:
            return sa.select(*(t.c[f] for f in ITEM_FIELDS)).where(items_named(t, n), _live(t))

        return self.statement(("by_keys", n), build)

    def fingerprint(self) -> Sql:
        """Live item count and latest update of the namespace ``:prefix`` (``:shard``)."""
        t = store_items
        return self.statement(
            "fingerprint",
            lambda: sa.select(sa.func.count(), sa.func.max(t.c.updated_at)).where(
                t.c.shard == sa.bindparam("shard"), t.c.prefix == sa.bindparam("prefix"), _live(t)
            ),
        )

    def vectors_exact(self) -> Sql:
        """``(key, vector)`` of the live items of the namespace ``:prefix`` (``:shard``)."""
        v, i = store_vectors.alias("v"), store_items.alias("i")
        return self.statement(
            "vectors_exact",
            lambda: (
                sa.select(v.c.key, v.c.vector)
                .select_from(v.join(i, same_item(v, i)))
                .where(
                    v.c.shard == sa.bindparam("shard"),
                    v.c.prefix == sa.bindparam("prefix"),
                    _live(i),
                )
            ),
        )

    def refresh(self) -> Sql:
        """Restart the TTL of one item (``:shard``, ``:prefix``, ``:key``) at ``:now``."""
        t = store_items
        return self.statement(
            "refresh",
            lambda: (
                sa.update(t)
                .where(key_match(t), t.c.ttl_minutes.is_not(None))
                .values(expires_at=sa.bindparam("now", type_=sa.Float) + t.c.ttl_minutes * 60)
            ),
        )

    def upsert_item(self) -> Sql:
        update = ["value", "updated_at", "ttl_minutes", "expires_at", "doc", "doc_len", "sealed"]
        keys = ["shard", "prefix", "key"]
        if self.d.conditional_upsert:
            return self.statement("upsert", lambda: self.d.upsert(store_items, keys, update))
        return self.statement(
            "upsert",
            lambda: self.d.upsert(store_items, keys, [*update, "created_at"]),
        )

    def created_at(self) -> Sql:
        t = store_items
        return self.statement("created_at", lambda: sa.select(t.c.created_at).where(key_match(t)))

    def delete_item(self) -> list[Sql]:
        """Per table of :data:`STORE_ROW_TABLES`: delete one item's rows."""
        return [
            self.statement(("delete", t.name), partial(_delete_item, t))
            for t in (store_vectors, store_terms, store_items)
        ]

    # -- a namespace prefix ----------------------------------------------------------------

    def recent(self, filters: Prefilter, scoped: bool) -> Sql:
        """Live items under the namespace passing the pre-filter, newest first, ``:n`` from
        ``:skip``."""
        t = store_items
        return self.statement(
            ("recent", filters, scoped),
            lambda: (
                sa.select(*(t.c[f] for f in ITEM_FIELDS))
                .where(*self.namespace_of(t, scoped), _live(t), *self.filtered(t.c.value, filters))
                .order_by(t.c.updated_at.desc(), t.c.prefix, t.c.key)
                .limit(sa.bindparam("n", type_=sa.Integer))
                .offset(sa.bindparam("skip", type_=sa.Integer))
            ),
        )

    def vector_where(self, filters: Prefilter, scoped: bool) -> list[Any]:
        """Core: the conditions of a statement over vectors ``v`` joined with their items
        ``i``: the vector under the namespace (through the dialect's namespace index on
        vectors), its item live and passing the filter's pre-filter."""
        i = items_i
        return [*self._vector_under(scoped), _live(i), *self.filtered(i.c.value, filters)]

    def vectors(self, filters: Prefilter, scoped: bool) -> Sql:
        """``(prefix, key, vector)`` of the live vectors under the namespace that pass the
        pre-filter (exact search in numpy)."""
        v, i = vectors_v, items_i
        return self.statement(
            ("vectors", filters, scoped),
            lambda: (
                sa.select(v.c.prefix, v.c.key, v.c.vector)
                .select_from(v.join(i, same_item(i, v)))
                .where(*self.vector_where(filters, scoped))
            ),
        )

    def namespace_of(self, t: Any, scoped: bool) -> list[Any]:
        """Core: ``t``'s row lies at or below the namespace ``:ns``; when ``scoped``, first
        its shard key is ``:shard``."""
        under = self.d.under_clause(t.c.prefix)
        return [t.c.shard == sa.bindparam("shard"), under] if scoped else [under]

    def namespaces(self, under: bool, scoped: bool = False) -> Sql:
        """The distinct namespaces of live items (under ``:ns`` when ``under``)."""
        t = store_items
        where = self.namespace_of(t, scoped) if under else []
        return self.statement(
            ("namespaces", under, scoped),
            lambda: sa.select(t.c.prefix).distinct().where(*where, _live(t)),
        )

    def insert_vector(self, native: bool = True) -> Sql:
        """Insert a vector row; ``native`` off: the sealed bytes only, whatever the
        database's vector columns (they stay NULL)."""
        return (self.d.insert_vector() if native else None) or self._insert(store_vectors)

    def vector_search(
        self, filters: Prefilter, dims: int, *, joined: bool, scoped: bool
    ) -> Sql | None:
        """Exact similarity in SQL (``None`` where the database has no vector column);
        unjoined, of every vector under the namespace, without reading the items."""
        where = self.vector_where(filters, scoped) if joined else self._vector_under(scoped)
        return self.d.vector_search((filters, scoped), where, dims, joined=joined)

    def ann_search(self, index: VectorIndex, filters: Prefilter, scoped: bool) -> list[Sql]:
        """An approximate search through ``index``: settings, then the query."""
        return self.d.ann_search(index, (filters, scoped), self.vector_where(filters, scoped))

    def vector_counts(self, index: VectorIndex, scoped: bool) -> Sql:
        return self.d.vector_counts(index, self._vector_under(scoped), scoped)

    def insert_terms(self) -> Sql:
        return self._insert(store_terms)

    def insert_terms_stmt(self, rows: list[dict[str, Any]]) -> Stmt:
        """Insert postings: in one statement where the dialect takes column arrays."""
        arrays = self.d.insert_arrays(store_terms)
        if arrays is None or not rows or self.d.distributed:
            return Stmt(self.insert_terms(), rows, many=True)
        return Stmt(arrays, {c.name: [r[c.name] for r in rows] for c in written(store_terms)})

    def _insert(self, table: sa.Table) -> Sql:
        cols = [c.name for c in written(table)]
        return self.statement(
            ("insert", table.name),
            lambda: sa.insert(table).values({c: sa.bindparam(c) for c in cols}),
        )

    def delete_under(self, scoped: bool, tables: Sequence[str] = STORE_NS_TABLES) -> list[Sql]:
        """Per table (of :data:`STORE_NS_TABLES` by default: the items' rows and the blocks
        of their postings): delete the rows under a namespace."""

        def build(t: sa.Table) -> Any:
            return sa.delete(t).where(*self.namespace_of(t, scoped))

        return [
            self.statement(("delete_under", name, scoped), partial(build, metadata.tables[name]))
            for name in tables
        ]

    def writes(
        self,
        items: list[dict[str, Any]],
        vectors: list[dict[str, Any]] | None = None,
        removed: Sequence[dict[str, Any]] = (),
        *,
        native_vectors: bool = True,
    ) -> list[Stmt]:
        """Upsert item rows (with ``doc``) and delete ``removed`` keys, keeping the lexical
        index in step; ``vectors``: the items' new vectors (``None``: keep the old ones).
        Every row gets its shard key here, from its ``prefix``. ``native_vectors`` off
        (encryption at rest): vectors go in as the bytes given, the database's vector
        columns stay empty.

        The item's row goes first: its lock makes a concurrent put of the same key wait, so
        the deletes that follow (each statement sees what committed before it) find every old
        vector and posting, and the inserts never collide with another put's rows."""
        vec_sql, terms_sql, item_sql = self.delete_item()
        items = self.keyed(items)
        removed = self.keyed(removed)
        keys = [
            {"shard": r["shard"], "prefix": r["prefix"], "key": r["key"]}
            for r in (*items, *removed)
        ]
        out = [
            Stmt(self.upsert_item(), items, many=True),
            Stmt(item_sql, list(removed), many=True),
            Stmt(terms_sql, keys, many=True),
            self.insert_terms_stmt(index_rows(items)),
        ]
        if vectors is not None:
            vectors = self.keyed(vectors)
            native = native_vectors and self.d.native_vectors
            if native:
                for row in vectors:
                    row["embedding"] = vector_text(row["vector"])
                    self.d.vector_row(row)
            out += [
                Stmt(vec_sql, keys, many=True),
                Stmt(self.insert_vector(native), vectors, many=True),
            ]
        return out

    def ns_of(self, t: Any, exact: bool, scoped: bool) -> list[Any]:
        """Core: ``t``'s row is in the namespace ``:ns`` (``exact``: an index seek after the
        term) or under it (a range)."""
        if not exact:
            return self.namespace_of(t, scoped)
        return [t.c.shard == sa.bindparam("shard"), t.c.prefix == sa.bindparam("ns")]

    def term_counts(self, n: int, exact: bool, scoped: bool) -> Sql:
        """How many items under the namespace hold each of ``n`` terms (BM25's df)."""
        t = store_terms
        return self.statement(
            ("term_counts", n, exact, scoped),
            lambda: (
                sa.select(t.c.term, sa.func.count())
                .where(terms_in(t, n), *self.ns_of(t, exact, scoped))
                .group_by(t.c.term)
            ),
        )

    def text_stats(self, exact: bool, scoped: bool) -> Sql:
        """How many live indexed items the namespace holds, and their total length."""
        t = store_items
        return self.statement(
            ("text_stats", exact, scoped),
            lambda: sa.select(sa.func.count(), sa.func.sum(t.c.doc_len)).where(
                *self.ns_of(t, exact, scoped), _live(t), t.c.doc_len.is_not(None)
            ),
        )

    def lexical(self, n: int, exact: bool, filters: Prefilter, joined: bool, scoped: bool) -> Sql:
        """The best ``:n`` items for ``n`` terms by BM25, ``(prefix, key, score)``.

        The score is summed from the postings alone, an index-only read; ``:w<j>`` is term
        j's idf times (k1 + 1), bound per query in a ``CASE term WHEN :t<j> THEN :w<j>``;
        ``:k_base`` and ``:k_len`` fold in the length norm. Joined with the items, it also
        applies expiry and the filter's pre-filter (for searches with a filter, or when
        unjoined candidates turned out expired)."""
        t = store_terms
        i = items_i

        def score() -> Any:
            weight = sa.case(
                *(
                    (sa.bindparam(f"t{j}", type_=sa.String), sa.bindparam(f"w{j}", type_=sa.Float))
                    for j in range(n)
                ),
                value=t.c.term,
            )
            # a float first, so no dialect adds a cast for a division of integers
            norm = (
                sa.bindparam("k_base", type_=sa.Float)
                + t.c.tf
                + sa.bindparam("k_len", type_=sa.Float) * t.c.dl
            )
            return sa.func.sum(weight * t.c.tf / norm).label("score")

        def build() -> Any:
            where = (terms_in(t, n), *self.ns_of(t, exact, scoped))
            limit = sa.bindparam("n", type_=sa.Integer)
            if not joined:  # a namespace's prefix is its key's: the key need not group
                return (
                    sa.select(t.c.prefix, t.c.key, score())
                    .where(*where)
                    .group_by(t.c.prefix, t.c.key)
                    .order_by(sa.desc("score"), t.c.prefix, t.c.key)
                    .limit(limit)
                )
            s = (
                sa.select(t.c.shard, t.c.prefix, t.c.key, score())
                .where(*where)
                .group_by(t.c.shard, t.c.prefix, t.c.key)
                .subquery("s")
            )
            # the shard key named on both sides, so a distributed database routes the join
            routed = [i.c.shard == sa.bindparam("shard")] if exact or scoped else []
            return (  # the postings already kept the namespace: expiry and filter remain
                sa.select(s.c.prefix, s.c.key, s.c.score)
                .select_from(s.join(i, same_item(i, s)))
                .where(*routed, _live(i), *self.filtered(i.c.value, filters))
                .order_by(s.c.score.desc(), s.c.prefix, s.c.key)
                .limit(limit)
            )

        return self.statement(("lexical", n, exact, filters, joined, scoped), build)

    def count_under(self, scoped: bool) -> Sql:
        t = store_items
        return self.statement(
            ("count_under", scoped),
            lambda: sa.select(sa.func.count()).where(*self.namespace_of(t, scoped)),
        )

    # -- across shards ---------------------------------------------------------------------

    def expired_stats(self) -> Sql:
        """How many items expired by ``:now`` (what a sweep deletes), and the size of their
        values and text, as the database measures them."""

        def build() -> Any:
            zero = sa.literal_column("0", sa.Integer)
            c = store_items.c
            size = (
                sa.func.coalesce(text_length(c.value), zero)
                + sa.func.coalesce(sa.func.length(c.doc), zero)
                + sa.func.coalesce(sa.func.length(c.sealed), zero)  # encryption at rest
            )
            return sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(size), zero)).where(
                c.expires_at <= sa.bindparam("now", type_=sa.Float)
            )

        return self.statement("expired_stats", build)

    def expired(self) -> Sql:
        """Up to ``:n`` items expired by ``:now``, ``(shard, prefix, key)``: candidates read
        without locks (across shards); each is deleted by its own key."""
        t = store_items
        return self.statement(
            "expired",
            lambda: (
                sa.select(t.c.shard, t.c.prefix, t.c.key)
                .where(t.c.expires_at <= sa.bindparam("now", type_=sa.Float))
                .limit(sa.bindparam("n", type_=sa.Integer))
            ),
        )


def rows_named(t: Any, n: int, names: Sequence[tuple[str, str]]) -> Any:
    """Core: ``t``'s row is one of ``n``, each named by its ``(column, parameter prefix)``
    values ``:<prefix><j>``."""
    return sa.or_(
        *(
            sa.and_(*(t.c[column] == sa.bindparam(f"{prefix}{j}") for column, prefix in names))
            for j in range(n)
        )
    )


def items_named(t: Any, n: int) -> Any:
    """Core: ``t``'s row is one of ``n`` items (``:s<j>``, ``:p<j>``, ``:k<j>``)."""
    return rows_named(t, n, (("shard", "s"), ("prefix", "p"), ("key", "k")))


def terms_in(t: Any, n: int) -> Any:
    """Core: ``t.term`` is one of ``:t0`` ... ``:t<n-1>``."""
    return t.c.term.in_([sa.bindparam(f"t{j}", type_=sa.String) for j in range(n)])
