"""The store's SQL for one dialect, SQLAlchemy Core over :mod:`.schema`'s tables (only the
dialects' vector operators are raw fragments); the store builds plans from it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple, TypeAlias

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, VectorIndex, same_item
from langgraph_checkpoint_agent_memory.db.schema import (
    STORE_NS_TABLES,
    items_i,
    matching,
    metadata,
    rows_named,
    store_blocks,
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
#: The most filter conditions the database narrows rows by (a chain of ANDs is as deep as it is
#: long, and SQLite refuses a tree deeper than 1000); the store decides the rest in Python.
MAX_PREFILTER = 32

#: :meth:`StoreStatements.prefilter`'s per condition parameter name and shape (a cache key).
Prefilter: TypeAlias = tuple[tuple[str, Hashable], ...]
#: A pre-filter on keyed hashes (sealed fields): ``(HASHED_EQUALITY, values, marks)``.
HASHED_EQUALITY = "hashed"


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
    """A row of :meth:`StoreStatements.fingerprint`: a namespace's live count, latest update."""

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


class SealedVectorRow(NamedTuple):
    """A row of :meth:`StoreStatements.sealed_vectors`: sealed unless ``plain`` (no encryption)."""

    prefix: str
    key: str
    field: str
    vector: bytes
    plain: bool


class PlainItem(NamedTuple):
    """A row of :meth:`StoreStatements.plaintext_items`."""

    shard: str
    prefix: str
    key: str
    value: Any


class PostingRow(NamedTuple):
    """A row of :meth:`StoreStatements.item_postings`."""

    term: str
    tf: int
    dl: int


class FieldVectorRow(NamedTuple):
    """A row of :meth:`StoreStatements.item_vectors`."""

    field: str
    vector: bytes


def vector_text(vector: bytes | Sequence[float]) -> str:
    """A vector (float32 bytes or numbers) as the text ``[x,y,...]`` vector columns read."""
    values: Any = vector
    if isinstance(vector, bytes):
        import numpy as np  # here: the checkpointer's path imports this module, not numpy

        values = np.frombuffer(vector, dtype="<f4")
    return json.dumps([float(x) for x in values], separators=(",", ":"))


def index_rows(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lexical index rows of item rows; sets each item's ``doc_len``, empties its ``doc``
    (nothing reads it back) and takes out ``term_of`` and ``filter_terms`` (encryption)."""
    out: list[dict[str, Any]] = []
    for item in items:
        doc, item["doc"] = item.get("doc"), None
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
            counts = Counter()
            for term, n in found.items():
                counts[term_of(term)] += n
        item["doc_len"] = length
        out += [{"term": t, **ident, "tf": n, "dl": length} for t, n in counts.items()]
    return out


def _hashed(t: Any, name: str, values: int, marks: int) -> Any:
    """Core: ``t``'s postings hold a hash ``:<name>_v<j>``, or no mark ``:<name>_m<j>``."""

    def holds(kind: str, n: int) -> Any:
        p = store_terms.alias(f"{name}_{kind}")
        terms = [sa.bindparam(f"{name}_{kind}{j}", type_=sa.String) for j in range(n)]
        return sa.exists().where(p.c.term.in_(terms), same_item(p, t))

    return sa.or_(holds("v", values), ~holds("m", marks))


def key_match(t: Any) -> Any:
    """Core: ``t``'s row of one item (``:shard``, ``:prefix``, ``:key``), routable by shard."""
    return sa.and_(*matching(t, "shard", "prefix", "key"))


def live(t: Any) -> Any:
    """``t``'s item has not expired at ``:now``."""
    return sa.or_(t.c.expires_at.is_(None), t.c.expires_at > sa.bindparam("now", type_=sa.Float))


def ns_text(namespace: Sequence[str]) -> str:
    """A namespace as the store keeps it: its labels joined by dots."""
    return ".".join(namespace)


def prefix_params(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> dict[str, Any]:
    """Parameters matching a namespace and below, without LIKE (labels may hold % or _); with
    ``shard`` when the namespace covers the shard key (:func:`.shard.covers`)."""
    ns = ns_text(namespace)
    params: dict[str, Any] = dict(ns=ns, ns_dot=ns + ".", ns_len=len(ns) + 1, ns_end=ns + "/")
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
    """The store's SQL for one dialect. Statements of one item or namespace name ``:shard``;
    a prefix shorter than the shard key (``scoped=False``) reads every shard."""

    def __init__(self, d: Dialect, shard_depth: int = DEFAULT_SHARD_DEPTH) -> None:
        self.d = d
        self.shard_depth = checked_depth(shard_depth)

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
        """Core: the vector ``v`` lies under the namespace (``scoped``: on ``:shard``)."""
        return _scoped(vectors_v, self.d.vector_under_clause(vectors_v.c.prefix), scoped)

    def prefilter(
        self, conds: list[tuple[list[str], str, Any]]
    ) -> tuple[Prefilter, dict[str, Any]]:
        """The SQL pre-filter of ``conds`` and its parameters (at most :data:`MAX_PREFILTER`)."""
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
        """Core: the conditions of ``filters`` on the item ``value`` column."""
        return [
            _hashed(value.table, name, shape[1], shape[2])
            if isinstance(shape, tuple) and shape[0] == HASHED_EQUALITY
            else self.d.json_condition(value, shape, name)
            for name, shape in filters
        ]

    def statement(self, key: Hashable, build: Callable[[], sa.sql.ClauseElement]) -> Sql:
        return self.d.sql(("store", key), build)

    def get(self) -> Sql:
        """One live item by ``:shard``, ``:prefix``, ``:key``."""
        return self.statement("get", lambda: _items(key_match(store_items)))

    def by_keys(self, n: int) -> Sql:
        """Live items of ``n`` keys (``:s<j>``, ``:p<j>``, ``:k<j>``)."""
        return self.statement(("by_keys", n), lambda: _items(items_named(store_items, n)))

    def fingerprint(self) -> Sql:
        """Live item count and latest update of the namespace ``:prefix`` (``:shard``)."""
        return self.statement(
            "fingerprint", lambda: _fingerprint(*matching(store_items, "shard", "prefix"))
        )

    def vectors_exact(self) -> Sql:
        """``(key, vector)`` of the live items of the namespace ``:prefix`` (``:shard``)."""
        return self._vectors_of_namespace("vectors_exact", vectors_v.c.key, vectors_v.c.vector)

    def _vectors_of_namespace(self, name: str, *columns: Any) -> Sql:
        """``columns`` of the vectors ``v`` of live items ``i`` of ``:prefix`` (``:shard``)."""
        v, i = vectors_v, items_i
        return self.statement(
            name,
            lambda: (
                sa.select(*columns)
                .select_from(v.join(i, same_item(v, i)))
                .where(*matching(v, "shard", "prefix"), live(i))
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
        if not self.d.conditional_upsert:
            update.append("created_at")
        keys = ["shard", "prefix", "key"]
        return self.statement("upsert", lambda: self.d.upsert(store_items, keys, update))

    def created_at(self) -> Sql:
        return self._of_item("created_at", store_items, "created_at")

    def _of_item(self, name: str, t: sa.Table, *columns: str) -> Sql:
        """``columns`` of ``t``'s rows of one item (``:shard``, ``:prefix``, ``:key``)."""
        return self.statement(
            name, lambda: sa.select(*(t.c[c] for c in columns)).where(key_match(t))
        )

    def delete_item(self) -> list[Sql]:
        """Per table of :data:`STORE_ROW_TABLES`: delete one item's rows."""
        return [
            self.statement(("delete", t.name), partial(_delete_item, t))
            for t in (store_vectors, store_terms, store_items)
        ]

    def recent(self, filters: Prefilter, scoped: bool) -> Sql:
        """Live items under the namespace passing the pre-filter, newest first, ``:n``."""
        return self.statement(
            ("recent", filters, scoped),
            lambda: self._newest(scoped, filters).offset(sa.bindparam("skip", type_=sa.Integer)),
        )

    def _newest(self, scoped: bool, filters: Prefilter, *where: Any) -> Any:
        t = store_items
        return (
            sa.select(*(t.c[f] for f in ITEM_FIELDS))
            .where(
                *self.namespace_of(t, scoped), live(t), *where, *self.filtered(t.c.value, filters)
            )
            .order_by(t.c.updated_at.desc(), t.c.prefix, t.c.key)
            .limit(sa.bindparam("n", type_=sa.Integer))
        )

    def vector_where(self, filters: Prefilter, scoped: bool) -> list[Any]:
        """Core: vector ``v`` under the namespace, its item ``i`` live and passing the filter."""
        i = items_i
        return [*self._vector_under(scoped), live(i), *self.filtered(i.c.value, filters)]

    def vectors(self, filters: Prefilter, scoped: bool) -> Sql:
        """``(prefix, key, vector)`` of the live vectors under the namespace (for numpy)."""
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
        """Core: ``t``'s row lies at or below ``:ns`` (``scoped``: on ``:shard``)."""
        return _scoped(t, self.d.under_clause(t.c.prefix), scoped)

    def namespaces(self, under: bool, scoped: bool = False) -> Sql:
        """The distinct namespaces of live items (under ``:ns`` when ``under``)."""
        t = store_items
        where = self.namespace_of(t, scoped) if under else []
        return self.statement(
            ("namespaces", under, scoped),
            lambda: sa.select(t.c.prefix).distinct().where(*where, live(t)),
        )

    def insert_vector(self, native: bool = True) -> Sql:
        """Insert a vector row; ``native`` off: the bytes only, the vector columns NULL."""
        return (self.d.insert_vector() if native else None) or self._insert(store_vectors)

    def vector_search(
        self, filters: Prefilter, dims: int, *, joined: bool, scoped: bool
    ) -> Sql | None:
        """Exact similarity in SQL (``None``: no vector column); unjoined: items not read."""
        where = self.vector_where(filters, scoped) if joined else self._vector_under(scoped)
        return self.d.vector_search((filters, scoped), where, dims, joined=joined)

    def ann_search(self, index: VectorIndex, filters: Prefilter, scoped: bool) -> list[Sql]:
        return self.d.ann_search(index, (filters, scoped), self.vector_where(filters, scoped))

    def vector_counts(self, index: VectorIndex, scoped: bool) -> Sql:
        return self.d.vector_counts(index, self._vector_under(scoped), scoped)

    def insert_terms(self) -> Sql:
        return self._insert(store_terms)

    def insert_terms_stmt(self, rows: list[dict[str, Any]]) -> Stmt:
        """Insert postings: as column arrays where the dialect takes them; on a distributed
        database one statement per item, routed to its shard (arrays go via the coordinator)."""
        if self.d.distributed and rows:
            routed = self.d.insert_owned(store_terms, store_items, rows)
            if routed is not None:
                return routed
        arrays = self.d.insert_arrays(store_terms)
        if arrays is None or not rows:
            return Stmt(self.insert_terms(), rows, many=True)
        return Stmt(arrays, {c.name: [r[c.name] for r in rows] for c in written(store_terms)})

    def _insert(self, table: sa.Table) -> Sql:
        cols = [c.name for c in written(table)]
        return self.statement(
            ("insert", table.name),
            lambda: sa.insert(table).values({c: sa.bindparam(c) for c in cols}),
        )

    def delete_under(self, scoped: bool, tables: Sequence[str] = STORE_NS_TABLES) -> list[Sql]:
        """Per table (default :data:`STORE_NS_TABLES`): delete the rows under a namespace."""

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
        """Upsert item rows (with ``doc``) and delete ``removed`` keys, with their postings;
        ``vectors`` ``None``: keep the old ones; ``native_vectors`` off: bytes only.

        The item's row goes first: its lock makes a concurrent put of the same key wait, so the
        deletes that follow (each statement sees what committed before it) find every old vector
        and posting and the inserts never collide."""
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
            out += [Stmt(vec_sql, keys, many=True), self._insert_vectors_stmt(vectors, native)]
        return out

    def _insert_vectors_stmt(self, rows: list[dict[str, Any]], native: bool) -> Stmt:
        """Insert vector rows (distributed, bytes only: one statement per item's shard)."""
        if self.d.distributed and not native and rows:
            routed = self.d.insert_owned(store_vectors, store_items, rows)
            if routed is not None:
                return routed
        return Stmt(self.insert_vector(native), rows, many=True)

    def ns_of(self, t: Any, exact: bool, scoped: bool) -> list[Any]:
        """Core: ``t``'s row is in the namespace ``:ns`` (``exact``) or under it."""
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
                *self.ns_of(t, exact, scoped), live(t), t.c.doc_len.is_not(None)
            ),
        )

    def lexical(self, n: int, exact: bool, filters: Prefilter, joined: bool, scoped: bool) -> Sql:
        """The best ``:n`` items for ``n`` terms by BM25, ``(prefix, key, score)``, summed from
        the postings alone (an index-only read): ``:w<j>`` is term j's idf times (k1 + 1),
        ``:k_base`` and ``:k_len`` the length norm; ``joined``: expiry and pre-filter too."""
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
            limit = sa.bindparam("n", type_=sa.Integer)
            # unjoined: a namespace's prefix is its key's, so the key need not group
            item = (t.c.shard, t.c.prefix, t.c.key) if joined else (t.c.prefix, t.c.key)
            grouped = (
                sa.select(*item, score())
                .where(terms_in(t, n), *self.ns_of(t, exact, scoped))
                .group_by(*item)
            )
            if not joined:
                return grouped.order_by(sa.desc("score"), t.c.prefix, t.c.key).limit(limit)
            s = grouped.subquery("s")
            # the shard key named on both sides, so a distributed database routes the join
            routed = [i.c.shard == sa.bindparam("shard")] if exact or scoped else []
            return (  # the postings already kept the namespace: expiry and filter remain
                sa.select(s.c.prefix, s.c.key, s.c.score)
                .select_from(s.join(i, same_item(i, s)))
                .where(*routed, live(i), *self.filtered(i.c.value, filters))
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

    def expired_stats(self) -> Sql:
        """How many items expired by ``:now``, and the size of their values and text."""

        def build() -> Any:
            zero = sa.literal_column("0", sa.Integer)
            c = store_items.c
            # PostgreSQL's JSONB has no length of its own: it is measured as its text there
            value = sa.cast(c.value, sa.Text) if self.d.sa.name == "postgresql" else c.value
            size = (
                sa.func.coalesce(sa.func.length(value), zero)
                + sa.func.coalesce(sa.func.length(c.doc), zero)
                + sa.func.coalesce(sa.func.length(c.sealed), zero)  # encryption at rest
            )
            return sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(size), zero)).where(
                c.expires_at <= sa.bindparam("now", type_=sa.Float)
            )

        return self.statement("expired_stats", build)

    def expired(self) -> Sql:
        """Up to ``:n`` items expired by ``:now``, ``(shard, prefix, key)``, read without locks."""
        t = store_items
        return self.statement(
            "expired",
            lambda: (
                sa.select(t.c.shard, t.c.prefix, t.c.key)
                .where(t.c.expires_at <= sa.bindparam("now", type_=sa.Float))
                .limit(sa.bindparam("n", type_=sa.Integer))
            ),
        )

    def sealed_vectors(self, scoped: bool) -> Sql:
        """``(prefix, key, field, vector, plain)`` of the live vectors under the namespace."""
        v, i = vectors_v, items_i
        return self.statement(
            ("sealed_vectors", scoped),
            lambda: (
                sa.select(*_SEALED_COLUMNS)
                .select_from(v.join(i, same_item(i, v)))
                .where(*self.vector_where((), scoped))
            ),
        )

    def sealed_vectors_exact(self) -> Sql:
        """:meth:`sealed_vectors` of exactly the namespace ``:prefix`` (``:shard``)."""
        return self._vectors_of_namespace("sealed_vectors_exact", *_SEALED_COLUMNS)

    def shards_under(self) -> Sql:
        """The distinct shard keys of the items (expired too) under ``:ns``, as a range of the
        primary key (:meth:`Dialect.under_range`): their data keys hash a query's terms."""
        t = store_items
        return self.statement(
            "shards_under",
            lambda: sa.select(t.c.shard).distinct().where(self.d.under_range(t.c.shard)),
        )

    def sealed_in_shard(self) -> Sql:
        """One sealed value under ``:shard`` (it names the data key the shard's items use)."""
        t = store_items
        return self.statement(
            "sealed_in_shard",
            lambda: (
                sa.select(t.c.sealed)
                .where(t.c.shard == sa.bindparam("shard"), t.c.sealed.is_not(None))
                .limit(1)
            ),
        )

    def recent_after(self, scoped: bool, filters: Prefilter = ()) -> Sql:
        """:meth:`recent`'s ``:n`` items after ``(:a_updated, :a_prefix, :a_key)``, by keyset."""
        t = store_items
        after = (t.c.updated_at.desc(), t.c.prefix, t.c.key)
        return self.statement(
            ("recent_after", scoped, filters),
            lambda: self._newest(scoped, filters, _after(after, ("updated", "prefix", "key"))),
        )

    def plaintext_items(self) -> Sql:
        """Up to ``:n`` unsealed ``(shard, prefix, key, value)`` after ``:a_shard, ...``."""
        t = store_items
        order = (t.c.shard, t.c.prefix, t.c.key)
        return self.statement(
            "plaintext_items",
            lambda: (
                sa.select(*order, t.c.value)
                .where(t.c.sealed.is_(None), _after(order, ("shard", "prefix", "key")))
                .order_by(*order)
                .limit(sa.bindparam("n", type_=sa.Integer))
            ),
        )

    def item_postings(self) -> Sql:
        return self._of_item("item_postings", store_terms, "term", "tf", "dl")

    def item_vectors(self) -> Sql:
        return self._of_item("item_vectors", store_vectors, "field", "vector")

    def seal_item(self) -> Sql:
        """Seal one unsealed item: ``:sealed`` in, ``value`` emptied, ``doc`` dropped."""
        t = store_items
        sealed = sa.bindparam("sealed", type_=sa.LargeBinary)
        value = sa.bindparam("value", type_=t.c.value.type)
        return self.statement(
            "seal_item",
            lambda: (
                sa.update(t)
                .where(key_match(t), t.c.sealed.is_(None))
                .values(sealed=sealed, value=value, doc=None)
            ),
        )

    def seal_vector(self) -> Sql:
        """Replace one vector by ``:vector``, its native columns emptied."""
        t = store_vectors
        columns = {c: None for c in self.d.vector_columns()} if self.d.native_vectors else {}

        def build() -> Any:
            table = self.d.native_vectors_table(list(columns)) if columns else t
            return (
                sa.update(table)
                .where(*matching(table, "shard", "prefix", "key", "field"))
                .values(vector=sa.bindparam("vector", type_=sa.LargeBinary), **columns)
            )

        return self.statement(("seal_vector", tuple(columns)), build)

    def fingerprint_under(self, scoped: bool) -> Sql:
        """Live item count and latest update under ``:ns`` (a decrypted vectors' cache key)."""
        return self.statement(
            ("fingerprint_under", scoped),
            lambda: _fingerprint(*self.namespace_of(store_items, scoped)),
        )

    def feedback_postings(self, n: int) -> Sql:
        """``(prefix, key, term, tf, dl)`` of every posting of ``n`` items (``:s<j>`` ...)."""
        return self.statement(
            ("feedback_postings", n),
            lambda: sa.select(*_POSTINGS).where(items_named(store_terms, n)),
        )

    def blocks_read(self, n: int, exact: bool, scoped: bool) -> Sql:
        """In one snapshot: the blocks of ``n`` terms (``:t<j>``) under the namespace, ``(term,
        shard, prefix, NULL, entries, NULL, built)``, and up to ``:cap`` unpacked postings per
        term, ``(..., key, tf, dl, NULL)``, read in the order of :meth:`.Dialect.fresh_lead`."""
        b, t = store_blocks, store_terms

        lead = self.d.fresh_lead(t)
        unpacked_where = [t.c.packed.is_(None)]
        if lead is not t.c.packed:
            unpacked_where.append(lead == 0)

        def fresh(j: int) -> Any:
            term = t.c.term == sa.bindparam(f"t{j}", type_=sa.String)
            part = (
                sa.select(t.c.term, t.c.shard, t.c.prefix, t.c.key, t.c.tf, t.c.dl)
                .where(*unpacked_where, term, *self.ns_of(t, exact, scoped))
                .order_by(lead, t.c.term, t.c.shard, t.c.prefix, t.c.key)
                .limit(sa.bindparam("cap", type_=sa.Integer))
                .subquery(f"f{j}")
            )
            return sa.select(*part.c, _null(sa.BigInteger, "built"))

        def build() -> Any:
            blocks = sa.select(
                b.c.term,
                b.c.shard,
                b.c.prefix,
                _null(t.c.key.type, "key"),
                b.c.entries.label("tf"),
                _null(sa.Integer, "dl"),
                b.c.built,
            ).where(terms_in(b, n), *self.ns_of(b, exact, scoped))
            return sa.union_all(blocks, *(fresh(j) for j in range(n)))

        return self.statement(("blocks_read", n, exact, scoped), build)

    def blocks_fresh_counts(self, n: int, exact: bool, scoped: bool) -> Sql:
        """``(term, shard, prefix, count)`` where a term has at least ``:at`` unpacked postings."""
        t = store_terms

        def build() -> Any:
            return (
                sa.select(t.c.term, t.c.shard, t.c.prefix, sa.func.count())
                .where(terms_in(t, n), *self.ns_of(t, exact, scoped), t.c.packed.is_(None))
                .group_by(t.c.term, t.c.shard, t.c.prefix)
                .having(sa.func.count() >= sa.bindparam("at", type_=sa.Integer))
            )

        return self.statement(("blocks_fresh_counts", n, exact, scoped), build)

    def blocks_payloads(self, n: int) -> Sql:
        """``(term, shard, prefix, built, entries, postings, keys)`` of ``n`` blocks."""
        b = store_blocks
        return self.statement(
            ("blocks_payloads", n),
            lambda: sa.select(
                b.c.term, b.c.shard, b.c.prefix, b.c.built, b.c.entries, b.c.postings, b.c["keys"]
            ).where(rows_named(b, n, (("term", "bt"), ("shard", "bs"), ("prefix", "bp")))),
        )

    def blocks_postings_in(self, terms: int, keys: int) -> Sql:
        """``(prefix, key, term, tf, dl)`` of ``terms`` terms in one namespace's items of keys
        ``:k`` (:meth:`.Dialect.one_of`). One part per term: two lists in one condition leave
        PostgreSQL 15 filtering every posting of the terms by key."""
        t = store_terms

        def part(j: int) -> Any:
            return sa.select(*_POSTINGS).where(
                t.c.term == sa.bindparam(f"t{j}", type_=sa.String),
                *matching(t, "shard", "prefix"),
                self.d.one_of(t.c.key, "k", keys),
            )

        return self.statement(
            ("blocks_postings_in", terms, keys),
            lambda: sa.union_all(*(part(j) for j in range(terms))),
        )

    def blocks_claim(self) -> Sql:
        """A build's first statement: the block's row with ``:built``, locked: builds take turns."""
        return self.statement(
            ("blocks_claim",),
            lambda: self.d.upsert(store_blocks, ["term", "shard", "prefix"], ["built"]),
        )

    def blocks_mark(self) -> Sql:
        """Mark the term's postings in the namespace packed but those a write holds: never waits."""
        t = store_terms

        def build() -> Any:
            where = [*_one_block(t), t.c.packed.is_(None)]
            stmt = sa.update(t).values(packed=1)
            if not self.d.row_locks:
                return stmt.where(*where)
            free = self.d.skip_locked(sa.select(t.c.key).where(*where))
            return stmt.where(*where, t.c.key.in_(free))

        return self.statement(("blocks_mark",), build)

    def blocks_postings(self) -> Sql:
        """``(key, tf, dl)`` of the term's packed postings in the namespace."""
        t = store_terms
        return self.statement(
            ("blocks_postings",),
            lambda: sa.select(t.c.key, t.c.tf, t.c.dl).where(*_one_block(t), t.c.packed == 1),
        )

    def blocks_drop(self) -> Sql:
        """Delete the blocks of one namespace (``:shard``, ``:prefix``)."""
        b = store_blocks
        return self.statement(
            ("blocks_drop",), lambda: sa.delete(b).where(*matching(b, "shard", "prefix"))
        )

    def blocks_fill(self) -> Sql:
        """A build's last statement: the block's entries and keys."""
        b = store_blocks
        return self.statement(
            ("blocks_fill",),
            lambda: (
                sa.update(b)
                .values({n: sa.bindparam(n) for n in ("entries", "postings", "keys")})
                .where(*_one_block(b), b.c.built == sa.bindparam("built"))
            ),
        )


def items_named(t: Any, n: int) -> Any:
    """Core: ``t``'s row is one of ``n`` items (``:s<j>``, ``:p<j>``, ``:k<j>``)."""
    return rows_named(t, n, (("shard", "s"), ("prefix", "p"), ("key", "k")))


def terms_in(t: Any, n: int) -> Any:
    """Core: ``t.term`` is one of ``:t0`` ... ``:t<n-1>``."""
    return t.c.term.in_([sa.bindparam(f"t{j}", type_=sa.String) for j in range(n)])


def _after(order: Sequence[Any], names: Sequence[str]) -> Any:
    """Core: the row comes after ``:a_<name>`` values in ``order`` (keyset pagination)."""
    (term, *rest), (name, *more) = order, names
    column = getattr(term, "element", term)  # a desc() wraps its column
    value = sa.bindparam(f"a_{name}", type_=column.type)
    first = column < value if term is not column else column > value
    return sa.or_(first, sa.and_(column == value, _after(rest, more))) if rest else first


def _items(*where: Any) -> Any:
    t = store_items
    return sa.select(*(t.c[f] for f in ITEM_FIELDS)).where(*where, live(t))


#: ``(prefix, key, term, tf, dl)`` of postings.
_POSTINGS = tuple(store_terms.c[n] for n in ("prefix", "key", "term", "tf", "dl"))
#: The columns of :class:`SealedVectorRow`.
_SEALED_COLUMNS = (
    *(vectors_v.c[n] for n in ("prefix", "key", "field", "vector")),
    items_i.c.sealed.is_(None),
)


def _delete_item(t: sa.Table) -> Any:
    return sa.delete(t).where(key_match(t))


def _fingerprint(*where: Any) -> Any:
    t = store_items
    return sa.select(sa.func.count(), sa.func.max(t.c.updated_at)).where(*where, live(t))


def _null(type_: Any, name: str) -> Any:
    return sa.cast(sa.null(), type_).label(name)


def _scoped(t: Any, under: Any, scoped: bool) -> list[Any]:
    return [t.c.shard == sa.bindparam("shard"), under] if scoped else [under]


def _one_block(t: Any) -> list[Any]:
    return matching(t, "term", "shard", "prefix")
