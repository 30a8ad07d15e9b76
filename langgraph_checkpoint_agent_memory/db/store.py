"""The store's SQL, for one dialect: items, their vectors and their lexical index.

Writes come from SQLAlchemy; reads are text with a slot for a filter's pre-filter (the
store builds the filter from :meth:`Dialect.json_prefilter`). The store builds plans from
these statements and decodes their rows; it writes no SQL itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, VectorIndex
from langgraph_checkpoint_agent_memory.db.schema import (
    STORE_ROW_TABLES,
    store_items,
    store_terms,
    store_vectors,
)
from langgraph_checkpoint_agent_memory.text import postings

ITEM_COLUMNS = "prefix, key, value, created_at, updated_at, ttl_minutes"


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
    """A row of :data:`ITEM_COLUMNS`."""

    prefix: str
    key: str
    value: Any  # JSON text, or a dict where the driver decodes JSON (psycopg's JSONB)
    created_at: float
    updated_at: float
    ttl_minutes: float | None


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

    prefix: str
    key: str


def vector_text(vector: bytes | Sequence[float]) -> str:
    """A vector (float32 bytes or numbers) as ``[x,y,...]``, the text form that vector
    columns read (HANA's ``TO_REAL_VECTOR``)."""
    values = np.frombuffer(vector, dtype="<f4") if isinstance(vector, bytes) else vector
    return json.dumps([float(x) for x in values], separators=(",", ":"))


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


def _delete_item(t: sa.Table) -> Any:
    return sa.delete(t).where(t.c.prefix == sa.bindparam("prefix"), t.c.key == sa.bindparam("key"))


def ns_text(namespace: Sequence[str]) -> str:
    """A namespace as the store keeps it: its labels joined by dots."""
    return ".".join(namespace)


def prefix_params(namespace: Sequence[str]) -> dict[str, Any]:
    """Parameters matching a namespace and everything below it, by exact comparison
    (no LIKE: labels may hold % or _, and LIKE ignores case on SQLite)."""
    ns = ns_text(namespace)
    return {"ns": ns, "ns_dot": ns + ".", "ns_len": len(ns) + 1, "ns_end": ns + "/"}


def expired_stats_plan(statements: StoreStatements, now: float) -> Plan[tuple[int, int]]:
    """How many items a sweep at ``now`` would delete, and their size; a read."""
    [rows] = yield Batch([Stmt(statements.expired_stats(), {"now": now}, fetch=True)])
    count, size = rows[0]
    return int(count), int(size or 0)


class StoreStatements:
    """The store's SQL for one dialect: writes from SQLAlchemy, reads as text with a slot
    for the filter's pre-filter."""

    def __init__(self, d: Dialect) -> None:
        self.d = d
        p = d.param
        self.under = d.under()
        self.live = f"(expires_at IS NULL OR expires_at > {p('now')})"

    def prefilter(self, conds: list[tuple[list[str], str, Any]]) -> tuple[str, dict[str, Any]]:
        """The SQL pre-filter of ``conds`` (``(path, operator, value)``) and its parameters:
        the conditions the database can decide, ANDed after the WHERE clause; the store
        applies every condition exactly to what comes back."""
        parts: list[str] = []
        params: dict[str, Any] = {}
        # equalities first: the database tests them first, and they drop the most rows
        order = sorted(range(len(conds)), key=lambda i: conds[i][1] != "$eq")
        for i, (path, op, value) in ((i, conds[i]) for i in order):
            name = f"f{i}"
            sql = self.d.json_prefilter(path, op, value, name)
            if sql is None:
                continue
            parts.append(sql)
            params[f"{name}_path"] = self.d.json_path(path)
            params[name] = value
        return "".join(f" AND {p}" for p in parts), params

    def text(self, key: Any, build: Callable[[], str]) -> Sql:
        return self.d.sql(("store", key), build)

    def get(self) -> Sql:
        p = self.d.param
        return self.text(
            "get",
            lambda: (
                f"SELECT {ITEM_COLUMNS} FROM am_store_items WHERE prefix = {p('prefix')} "
                f"AND key = {p('key')} AND {self.live}"
            ),
        )

    def recent(self, filters: str) -> Sql:
        p = self.d.param
        return self.text(
            ("recent", filters),
            lambda: (
                f"SELECT {ITEM_COLUMNS} FROM am_store_items WHERE {self.under} AND {self.live}"
                f"{filters} ORDER BY updated_at DESC, prefix, key "
                f"LIMIT {p('n')} OFFSET {p('skip')}"
            ),
        )

    def by_keys(self, n: int) -> Sql:
        p = self.d.param
        keys = " OR ".join(f"(prefix = {p(f'p{i}')} AND key = {p(f'k{i}')})" for i in range(n))
        return self.text(
            ("by_keys", n),
            lambda: f"SELECT {ITEM_COLUMNS} FROM am_store_items WHERE ({keys}) AND {self.live}",
        )

    def on_items(self, filters: str) -> str:
        """The WHERE condition of a statement joined with the items as ``i``: under the
        namespace, live, and the filter's pre-filter."""
        return (
            f"{self.under.replace('prefix', 'i.prefix')} "
            f"AND {self.live.replace('expires_at', 'i.expires_at')}"
            f"{filters.replace('value', 'i.value')}"
        )

    def vector_where(self, filters: str) -> str:
        """The WHERE condition of a statement over vectors ``v`` joined with their items
        ``i``: the vector under the namespace (through the dialect's namespace index on
        vectors), its item live and passing the filter's pre-filter."""
        return (
            f"{self.d.vector_under()} AND {self.live.replace('expires_at', 'i.expires_at')}"
            f"{filters.replace('value', 'i.value')}"
        )

    def vectors(self, filters: str) -> Sql:
        return self.text(
            ("vectors", filters),
            lambda: (
                "SELECT v.prefix, v.key, v.vector FROM am_store_vectors v JOIN am_store_items i "
                f"ON i.prefix = v.prefix AND i.key = v.key WHERE {self.vector_where(filters)}"
            ),
        )

    def namespaces(self, under: bool) -> Sql:
        where = f"{self.under} AND " if under else ""
        return self.text(
            ("namespaces", under),
            lambda: f"SELECT DISTINCT prefix FROM am_store_items WHERE {where}{self.live}",
        )

    def fingerprint(self) -> Sql:
        p = self.d.param
        return self.text(
            "fingerprint",
            lambda: (
                "SELECT COUNT(*), MAX(updated_at) FROM am_store_items WHERE prefix = "
                f"{p('prefix')} AND {self.live}"
            ),
        )

    def vectors_exact(self) -> Sql:
        p = self.d.param
        return self.text(
            "vectors_exact",
            lambda: (
                "SELECT v.key, v.vector FROM am_store_vectors v JOIN am_store_items i "
                f"ON i.prefix = v.prefix AND i.key = v.key WHERE v.prefix = {p('prefix')} "
                f"AND {self.live.replace('expires_at', 'i.expires_at')}"
            ),
        )

    def refresh(self) -> Sql:
        p = self.d.param
        return self.text(
            "refresh",
            lambda: (
                f"UPDATE am_store_items SET expires_at = {p('now')} + ttl_minutes * 60 "
                f"WHERE prefix = {p('prefix')} AND key = {p('key')} AND ttl_minutes IS NOT NULL"
            ),
        )

    def upsert_item(self) -> Sql:
        update = ["value", "updated_at", "ttl_minutes", "expires_at", "doc", "doc_len"]
        if self.d.conditional_upsert:
            return self.d.sql(
                ("store", "upsert"), lambda: self.d.upsert(store_items, ["prefix", "key"], update)
            )
        return self.d.sql(
            ("store", "upsert"),
            lambda: self.d.upsert(store_items, ["prefix", "key"], [*update, "created_at"]),
        )

    def created_at(self) -> Sql:
        p = self.d.param
        return self.text(
            "created_at",
            lambda: (
                f"SELECT created_at FROM am_store_items WHERE prefix = {p('prefix')} "
                f"AND key = {p('key')}"
            ),
        )

    def delete_item(self) -> list[Sql]:
        """Per table of :data:`STORE_ROW_TABLES`: delete one item's rows."""
        return [
            self.d.sql(("store", "delete", t.name), partial(_delete_item, t))
            for t in (store_vectors, store_terms, store_items)
        ]

    def insert_vector(self) -> Sql:
        return self.d.insert_vector() or self._insert(store_vectors)

    def vector_search(self, filters: str, dims: int, *, joined: bool) -> Sql | None:
        """Exact similarity in SQL (``None`` where the database has no vector column);
        unjoined, of every vector under the namespace, without reading the items."""
        where = self.vector_where(filters) if joined else self.d.vector_under()
        return self.d.vector_search(filters, where, dims, joined=joined)

    def ann_search(self, index: VectorIndex, filters: str) -> list[Sql]:
        """An approximate search through ``index``: settings, then the query."""
        return self.d.ann_search(index, filters, self.vector_where(filters))

    def vector_counts(self, index: VectorIndex) -> Sql:
        return self.d.vector_counts(index)

    def insert_terms(self) -> Sql:
        return self._insert(store_terms)

    def insert_terms_stmt(self, rows: list[dict[str, Any]]) -> Stmt:
        """Insert postings: in one statement where the dialect takes column arrays."""
        arrays = self.d.insert_arrays(store_terms)
        if arrays is None or not rows:
            return Stmt(self.insert_terms(), rows, many=True)
        return Stmt(arrays, {c.name: [r[c.name] for r in rows] for c in store_terms.columns})

    def _insert(self, table: sa.Table) -> Sql:
        cols = [c.name for c in table.columns]
        return self.d.sql(
            ("store", "insert", table.name),
            lambda: sa.insert(table).values({c: sa.bindparam(c) for c in cols}),
        )

    def delete_under(self) -> list[Sql]:
        """Per table of :data:`STORE_ROW_TABLES`: delete the rows under a namespace."""
        return [
            self.text(
                ("delete_under", t), partial(str.format, "DELETE FROM {} WHERE {}", t, self.under)
            )
            for t in STORE_ROW_TABLES
        ]

    def writes(
        self,
        items: list[dict[str, Any]],
        vectors: list[dict[str, Any]] | None = None,
        removed: Sequence[dict[str, Any]] = (),
    ) -> list[Stmt]:
        """Upsert item rows (with ``doc``) and delete ``removed`` keys, keeping the lexical
        index in step; ``vectors``: the items' new vectors (``None``: keep the old ones).

        The item's row goes first: its lock makes a concurrent put of the same key wait, so
        the deletes that follow (each statement sees what committed before it) find every old
        vector and posting, and the inserts never collide with another put's rows."""
        vec_sql, terms_sql, item_sql = self.delete_item()
        keys = [{"prefix": r["prefix"], "key": r["key"]} for r in (*items, *removed)]
        out = [
            Stmt(self.upsert_item(), items, many=True),
            Stmt(item_sql, list(removed), many=True),
            Stmt(terms_sql, keys, many=True),
            self.insert_terms_stmt(index_rows(items)),
        ]
        if vectors is not None:
            if self.d.native_vectors:
                for row in vectors:
                    row["embedding"] = vector_text(row["vector"])
                    self.d.vector_row(row)
            out += [
                Stmt(vec_sql, keys, many=True),
                Stmt(self.insert_vector(), vectors, many=True),
            ]
        return out

    def _where_ns(self, exact: bool) -> str:
        # an exact namespace is an index seek after the term; a prefix is a range under it
        return f"prefix = {self.d.param('ns')}" if exact else self.under

    def term_counts(self, n: int, exact: bool) -> Sql:
        """How many items under the namespace hold each of ``n`` terms (BM25's df)."""
        p = self.d.param
        terms = ", ".join(p(f"t{j}") for j in range(n))
        return self.text(
            ("term_counts", n, exact),
            lambda: (
                f"SELECT term, COUNT(*) FROM am_store_terms WHERE term IN ({terms}) "
                f"AND {self._where_ns(exact)} GROUP BY term"
            ),
        )

    def text_stats(self, exact: bool) -> Sql:
        """How many live indexed items the namespace holds, and their total length."""
        return self.text(
            ("text_stats", exact),
            lambda: (
                "SELECT COUNT(*), SUM(doc_len) FROM am_store_items WHERE "
                f"{self._where_ns(exact)} AND {self.live} AND doc_len IS NOT NULL"
            ),
        )

    def lexical(self, n: int, exact: bool, filters: str, joined: bool) -> Sql:
        """The best ``:n`` items for ``n`` terms by BM25, ``(prefix, key, score)``.

        The score is summed from the postings alone, an index-only read; ``:w<j>`` is term
        j's idf times (k1 + 1), ``:k_base`` and ``:k_len`` fold in the length norm. Joined
        with the items, it also applies expiry and the filter's pre-filter (for searches
        with a filter, or when unjoined candidates turned out expired)."""
        p = self.d.param
        terms = ", ".join(p(f"t{j}") for j in range(n))
        weight = " ".join(f"WHEN {p(f't{j}')} THEN {p(f'w{j}')}" for j in range(n))

        def build() -> str:
            scored = (
                f"SELECT prefix, key, SUM((CASE term {weight} END) * tf / "
                f"(tf + {p('k_base')} + {p('k_len')} * dl)) AS score FROM am_store_terms "
                f"WHERE term IN ({terms}) AND {self._where_ns(exact)} GROUP BY prefix, key"
            )
            if not joined:
                return f"{scored} ORDER BY score DESC, prefix, key LIMIT {p('n')}"
            return (  # the postings already kept the namespace: expiry and filter remain
                f"SELECT s.prefix, s.key, s.score FROM ({scored}) s JOIN am_store_items i "
                f"ON i.prefix = s.prefix AND i.key = s.key WHERE "
                f"{self.live.replace('expires_at', 'i.expires_at')}"
                f"{filters.replace('value', 'i.value')} "
                f"ORDER BY s.score DESC, s.prefix, s.key LIMIT {p('n')}"
            )

        return self.text(("lexical", n, exact, filters, joined), build)

    def count_under(self) -> Sql:
        return self.text(
            "count_under", lambda: f"SELECT COUNT(*) FROM am_store_items WHERE {self.under}"
        )

    def expired_stats(self) -> Sql:
        """How many items expired by ``:now`` (what a sweep deletes), and the size of their
        values and text, as the database measures them."""

        def build() -> Any:
            zero = sa.literal_column("0", sa.Integer)
            c = store_items.c
            size = sa.func.coalesce(text_length(c.value), zero) + sa.func.coalesce(
                sa.func.length(c.doc), zero
            )
            return sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(size), zero)).where(
                c.expires_at <= sa.bindparam("now", type_=sa.Float)
            )

        return self.d.sql(("store", "expired_stats"), build)

    def expired(self) -> Sql:
        p = self.d.param
        return self.text(
            "expired",
            lambda: (
                f"SELECT prefix, key FROM am_store_items WHERE expires_at <= {p('now')} "
                f"LIMIT {p('n')}"
            ),
        )
