"""The store's SQL for one dialect, SQLAlchemy Core over :mod:`.schema`'s tables (only the
dialects' vector operators are raw fragments); the store builds plans from it."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple, TypeAlias

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, VectorIndex, same_item
from langgraph_checkpoint_agent_memory.db.schema import (
    STORE_NS_TABLES,
    items_i,
    matching,
    metadata,
    store_chunks,
    store_items,
    store_retractions,
    store_tags,
    store_unlisted,
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
from langgraph_checkpoint_agent_memory.db.term_index import merge_lock_id

#: The columns of :class:`ItemRow`.
ITEM_FIELDS = ("prefix", "key", "value", "created_at", "updated_at", "ttl_minutes", "sealed")
#: What ``value`` holds when ``sealed`` holds the item's value (encryption at rest).
SEALED_VALUE = "{}"
#: The most filter conditions the database narrows rows by (a chain of ANDs is as deep as it is
#: long, and SQLite refuses a tree deeper than 1000); the store decides the rest in Python.
MAX_PREFILTER = 32

#: The columns of an item's key and their parameters in a statement of several items
#: (:meth:`.Dialect.rows_named`).
_KEY_NAMES = (("shard", "s"), ("prefix", "p"), ("key", "k"))
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


def _hashed(t: Any, name: str, values: int, marks: int) -> Any:
    """Core: ``t``'s item has a tag ``:<name>_v<j>``, or no mark ``:<name>_m<j>``."""

    def holds(kind: str, n: int) -> Any:
        p = store_tags.alias(f"{name}_{kind}")
        tags = [sa.bindparam(f"{name}_{kind}{j}", type_=sa.String) for j in range(n)]
        return sa.exists().where(p.c.tag.in_(tags), same_item(p, t))

    return sa.or_(holds("v", values), ~holds("m", marks))


def key_match(t: Any) -> Any:
    """Core: ``t``'s row of one item (``:shard``, ``:prefix``, ``:key``), routable by shard."""
    return sa.and_(*matching(t, "shard", "prefix", "key"))


def item_gone(t: Any) -> Any:
    """Core: ``t``'s row names an item that has no row (any more)."""
    i = store_items
    return ~sa.exists().where(same_item(i, t))


def live(t: Any) -> Any:
    """``t``'s item has not expired at ``:now``."""
    return sa.or_(t.c.expires_at.is_(None), t.c.expires_at > sa.bindparam("now", type_=sa.Float))


def ns_text(namespace: Sequence[str]) -> str:
    """A namespace as the store keeps it: its labels joined by dots."""
    return ".".join(namespace)


#: A string above every namespace in code-point (and UTF-8 byte) order.
_AFTER_ALL = chr(0x10FFFF)


def prefix_params(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> dict[str, Any]:
    """Parameters matching a namespace and below, without LIKE (labels may hold % or _); with
    ``shard`` when the namespace covers the shard key (:func:`.shard.covers`)."""
    ns = ns_text(namespace)
    params: dict[str, Any] = dict(ns=ns, ns_dot=ns + ".", ns_len=len(ns) + 1, ns_end=ns + "/")
    if not namespace:  # the whole store: every prefix starts with "" and sorts below the end
        params.update(ns_dot="", ns_len=0, ns_end=_AFTER_ALL)
    if covers(namespace, depth):
        params["shard"] = shard_key(namespace, depth)
        params.update(rest_params(ns, params["shard"]))
    return params


def rest_params(ns: str, shard: str) -> dict[str, Any]:
    """``:rest`` (the labels of the namespace ``ns`` after its shard key) and what
    :meth:`.Dialect.under_clause` needs of it, for the term lists' rows."""
    rest = ns[len(shard) + 1 :]
    return dict(rest=rest, rest_dot=rest + ".", rest_len=len(rest) + 1, rest_end=rest + "/")


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
        """Live items of ``n`` keys (:meth:`key_params`)."""
        return self.statement(
            ("by_keys", n, self.d.distributed), lambda: _items(self.items_named(store_items, n))
        )

    def items_named(self, t: Any, n: int) -> Any:
        """Core: ``t``'s row is one of ``n`` items (:meth:`key_params`)."""
        return self.d.rows_named(t, n, _KEY_NAMES)

    def key_params(self, keys: Iterable[tuple[str, str]]) -> dict[str, Any]:
        """The parameters of :meth:`items_named` naming the items ``(prefix, key)``."""
        rows = [(self.shard(prefix), prefix, key) for prefix, key in keys]
        return self.d.named_params([p for _, p in _KEY_NAMES], rows)

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
        update = ["value", "updated_at", "ttl_minutes", "expires_at", "doc_len", "terms"]
        update.append("sealed")
        if not self.d.conditional_upsert:
            update.append("created_at")
        keys = ["shard", "prefix", "key"]
        return self.statement("upsert", lambda: self.d.upsert(store_items, keys, update))

    def upsert_unlisted(self) -> Sql:
        """Give one item (``:shard``, ``:prefix``, ``:key``) ``:terms`` to list, with its
        number and length from its row (written before, in the same transaction)."""
        i, u = store_items, store_unlisted

        def build() -> Any:
            terms = sa.bindparam("terms", type_=sa.LargeBinary)
            row = sa.select(i.c.shard, i.c.prefix, i.c.key, i.c.num, i.c.doc_len, terms)
            cols = [*_KEY_COLUMNS, "num", "doc_len", "terms"]
            update = ["num", "doc_len", "terms"]
            return self.d.upsert_select(u, cols, row.where(key_match(i)), _KEY_COLUMNS, update)

        return self.statement("upsert_unlisted", build)

    def created_at(self) -> Sql:
        return self._of_item("created_at", store_items, "created_at")

    def _of_item(self, name: str, t: sa.Table, *columns: str) -> Sql:
        """``columns`` of ``t``'s rows of one item (``:shard``, ``:prefix``, ``:key``)."""
        return self.statement(
            name, lambda: sa.select(*(t.c[c] for c in columns)).where(key_match(t))
        )

    def delete_item(self) -> list[Sql]:
        """Retract one item from the term lists, then delete its rows (per table of
        :data:`STORE_ROW_TABLES`: vectors, tags, the item, its terms to list)."""
        deletes = [
            self.statement(("delete", t.name), partial(_delete_item, t))
            for t in (store_vectors, store_tags, store_items, store_unlisted)
        ]
        return [self.retract(), *deletes]

    def retract(self) -> Sql:
        """Record one listed item (``:shard``, ``:prefix``, ``:key``: it has terms, and none
        waiting to be listed) as retracted from its lists: it is about to be rewritten or
        deleted. Its rows are locked first, and read as the locks found them: a merge
        holding them may list the item before this write goes on (OFFSET 0 keeps the
        conditions above the locks)."""
        i, u, r = store_items, store_unlisted, store_retractions

        def build() -> Any:
            cols = ["shard", "prefix", "num", "terms"]
            keys = ["shard", "prefix", "num"]
            if not self.d.row_locks:
                found = sa.select(*(i.c[c] for c in cols)).where(
                    key_match(i), i.c.terms.is_not(None), ~sa.exists().where(same_item(u, i))
                )
                return self.d.insert_missing(r, cols, found, keys)
            item = sa.select(*(i.c[c] for c in cols)).where(key_match(i))
            locked = item.with_for_update().offset(0).subquery("locked")
            waiting = sa.select(u.c.key).where(key_match(u)).with_for_update().offset(0)
            waiting_q = waiting.subquery("waiting")
            always = sa.literal_column("1") == sa.literal_column("1")  # no boolean literal
            found = (
                sa.select(*(locked.c[c] for c in cols))
                .select_from(locked.outerjoin(waiting_q, always))
                .where(locked.c.terms.is_not(None), waiting_q.c.key.is_(None))
            )
            return self.d.insert_missing(r, cols, found, keys)

        return self.statement("retract", build)

    def lock_item(self) -> list[Sql]:
        """Two reads of one item (``:shard``, ``:prefix``, ``:key``), its rows locked and
        read as the locks found them, after any merge that held them: its number and
        terms; its terms waiting to be listed (none: the lists hold its terms)."""
        i, u = store_items, store_unlisted
        return [
            self.statement(
                "lock_item",
                lambda: sa.select(i.c.num, i.c.terms).where(key_match(i)).with_for_update(),
            ),
            self.statement(
                "lock_unlisted",
                lambda: sa.select(u.c.key).where(key_match(u)).with_for_update(),
            ),
        ]

    def insert_retraction(self) -> Sql:
        """Record an item (``:shard``, ``:prefix``, ``:num``, ``:terms``) as retracted."""
        return self.statement(
            "insert_retraction",
            lambda: self.d.insert_row_ignore(store_retractions, ["shard", "prefix", "num"]),
        )

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

    def _insert(self, table: sa.Table) -> Sql:
        cols = [c.name for c in written(table)]
        return self.statement(
            ("insert", table.name),
            lambda: sa.insert(table).values({c: sa.bindparam(c) for c in cols}),
        )

    def delete_under(
        self, scoped: bool, tables: Sequence[str] = STORE_NS_TABLES, deeper: bool = True
    ) -> list[Sql]:
        """Per table (default :data:`STORE_NS_TABLES`): delete the rows under a namespace
        (``deeper``: it goes below its shard key, see :meth:`chunks_under`)."""

        def build(t: sa.Table) -> Any:
            if t is store_chunks:
                return sa.delete(t).where(*self.chunks_under(False, scoped, deeper))
            if t is store_unlisted:  # after the items: whatever committed since, none left
                return sa.delete(t).where(*self.namespace_of(t, scoped), item_gone(t))
            return sa.delete(t).where(*self.namespace_of(t, scoped))

        return [
            self.statement(
                ("delete_under", name, scoped, deeper), partial(build, metadata.tables[name])
            )
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
        """Upsert item rows (their terms in them, ``store.index``) and delete ``removed`` keys;
        a listed item is retracted first. ``vectors`` ``None``: keep the old ones;
        ``native_vectors`` off: bytes only; an item with ``tags`` (encryption) replaces its
        tags."""
        retract, vec_sql, tags_sql, item_sql, unlisted_sql = self.delete_item()
        items = in_lock_order(self.keyed(items))
        removed = self.keyed(removed)
        keys = item_keys(items, removed)
        unlisted, unindexed = [], []  # an item's terms to list; the keys of those with none
        for row in items:
            terms = row.pop("unlisted", None)
            key = _key_of(row)
            if terms:
                unlisted.append({**key, "terms": terms})
            else:
                unindexed.append(key)
        tagged = bool(removed) or any("tags" in r for r in items)
        tags = [
            {"shard": r["shard"], "prefix": r["prefix"], "key": r["key"], "tag": t}
            for r in items
            for t in r.pop("tags", ())
        ]
        # the generic plans of the two that read the item's row may walk the namespace (the
        # terms to list's made a PostgreSQL load of 10,000 items 9.8 s, not 3.7): planned
        # for their values each time
        out = [
            Stmt(retract, keys, many=True, prepare=False),
            Stmt(self.upsert_item(), items, many=True),
            Stmt(self.upsert_unlisted(), unlisted, many=True, prepare=False),
            Stmt(unlisted_sql, [*unindexed, *item_keys(removed)], many=True),
            Stmt(item_sql, list(removed), many=True),
        ]
        if tagged:
            out += [
                Stmt(tags_sql, keys, many=True),
                Stmt(self._insert(store_tags), tags, many=True),
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

    def put_plan(
        self,
        items: list[dict[str, Any]],
        vectors: list[dict[str, Any]] | None = None,
        removed: Sequence[dict[str, Any]] = (),
        *,
        native_vectors: bool = True,
    ) -> Plan[list[Stmt]]:
        """:meth:`writes`, except for a put of one item that writes nothing else (no vectors,
        tags or deletes): its row is first inserted alone, unless its key exists, and then
        only its terms to list are left to write. A new key has no row to lock, nothing listed
        to retract and no vectors or tags to replace (they go with their item), so two
        statements replace a transaction of six (on Citus each one a trip to the shard's
        node); an existing key costs the insert more. Returns the statements left to write.

        On PostgreSQL a rewrite of one item locks and reads its row first, in the
        transaction's first batch with the writes, and records its retraction if it was listed
        in its second (a read by key, routed on Citus, where ``retract``'s ``INSERT ... SELECT``
        is planned as a distributed one at several times the cost). A batch of several keys
        keeps ``retract``, one statement for them all (a read per key would be a round trip
        each: a load of 10,000 items took 8.4 s instead of 2.1)."""
        new = len(items) == 1 and not vectors and not removed and "tags" not in items[0]
        if new and self.d.conditional_upsert:  # HANA: its put reads created_at first, locked
            [row] = self.keyed(items)
            terms = row.pop("unlisted", None)
            both = self._insert_new_listing() if terms is not None else None
            if both is not None:  # one statement: the row, and its terms if it was new
                [inserted] = yield Batch([Stmt(both, {**row, "unlisted": terms})], write=True)
            else:  # the row, and its terms in the transaction it leaves open
                inserted = yield from self._insert_new_plan(row, terms)
            if inserted == 1:  # a count, so a driver that cannot tell (-1) writes it all
                return []
            row["unlisted"] = terms  # the key exists: a rewrite
        out = self.writes(items, vectors, removed, native_vectors=native_vectors)
        if not (self.d.row_locks and self.d.conditional_upsert) or len(items) + len(removed) > 1:
            return out  # SQLite, HANA, a batch: as written
        keys = item_keys(self.keyed(items), self.keyed(removed))
        locks = [Stmt(sql, k, fetch=True) for k in keys for sql in self.lock_item()]
        found = yield Batch([*locks, *out[1:]], write=True, hold=True)  # out[0]: retract
        listed = [
            {**k, "num": num, "terms": terms}
            for j, k in enumerate(keys)
            for num, terms in found[2 * j]
            if terms is not None and not found[2 * j + 1]  # none waits: the lists hold them
        ]
        retractions = Stmt(self.insert_retraction(), listed, many=True)
        yield Batch([retractions] if listed else [], write=True)
        return []

    def _insert_new_plan(self, row: dict[str, Any], terms: bytes | None) -> Plan[int]:
        """Insert one item's row unless its key exists, then its ``terms`` to list (if any)
        in the same transaction, left open unless the row went in; the count inserted. On
        PostgreSQL (Citus) the insert returns the item's number and the terms go in as
        values: Citus plans an ``INSERT ... SELECT`` of the item's row at about 0.6 ms
        more. SQLite, whose ``RETURNING`` is recent (3.35), reads the row in SQL."""
        i = store_items
        pg = self.d.sa.name == "postgresql"

        def insert() -> Any:
            ignored = self.d.insert_row_ignore(i, list(_KEY_COLUMNS))
            return ignored.returning(i.c.num) if pg else ignored  # type: ignore[attr-defined]

        sql = self.statement(("insert_new", pg), insert)
        [found] = yield Batch([Stmt(sql, row, fetch=pg)], write=True, hold=terms is not None)
        inserted = len(found) if pg else int(found)
        if inserted == 1 and terms is not None:
            if pg:
                values = {**_key_of(row), "num": found[0][0], "doc_len": row["doc_len"]}
                add = Stmt(self._insert_unlisted(), {**values, "terms": terms})
            else:
                add = Stmt(self.upsert_unlisted(), {**_key_of(row), "terms": terms})
            yield Batch([add], write=True)
        return inserted

    def _insert_unlisted(self) -> Sql:
        """An item's terms to list (``:terms``) with its number and length (``:num``,
        ``:doc_len``) as values; a row left of an item gone (no write leaves one) replaced."""
        update = ["num", "doc_len", "terms"]
        return self.statement(
            "insert_unlisted", lambda: self.d.upsert(store_unlisted, list(_KEY_COLUMNS), update)
        )

    def _insert_new_listing(self) -> Sql | None:
        """An item's row inserted unless its key exists and, if it was, its terms to list
        (``:unlisted``), in one statement, which counts 1 if it inserted; ``None`` where a
        data-modifying ``WITH`` is not one statement to a node (only PostgreSQL has one, and
        Citus plans it as several)."""
        if self.d.sa.name != "postgresql" or self.d.distributed:
            return None
        i, u = store_items, store_unlisted

        def build() -> Any:
            row = self.d.insert_row_ignore(i, list(_KEY_COLUMNS))
            written = (i.c.shard, i.c.prefix, i.c.key, i.c.num, i.c.doc_len)
            new = row.returning(*written).cte("new")  # type: ignore[attr-defined]
            terms = sa.bindparam("unlisted", type_=sa.LargeBinary)
            listing = sa.select(*(new.c[c.name] for c in written), terms)
            cols = [*_KEY_COLUMNS, "num", "doc_len", "terms"]
            insert = self.d.insert(u).from_select(cols, listing)
            # a row left of an item gone (no write leaves one) is the new item's to replace
            kept = {c: insert.excluded[c] for c in ("num", "doc_len", "terms")}
            return insert.on_conflict_do_update(
                index_elements=list(_KEY_COLUMNS), set_=kept
            ).add_cte(new)

        return self.statement("insert_new_listing", build)

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

    def text_stats(self, exact: bool, scoped: bool) -> Sql:
        """How many live indexed items the namespace holds, and their total length."""
        t = store_items
        return self.statement(
            ("text_stats", exact, scoped),
            lambda: sa.select(sa.func.count(), sa.func.sum(t.c.doc_len)).where(
                *self.ns_of(t, exact, scoped), live(t), t.c.doc_len.is_not(None)
            ),
        )

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
            u = store_unlisted
            waiting = sa.select(sa.func.length(u.c.terms)).where(same_item(u, store_items))
            size = (
                sa.func.coalesce(sa.func.length(value), zero)
                + sa.func.coalesce(sa.func.length(c.terms), zero)
                + sa.func.coalesce(waiting.scalar_subquery(), zero)  # terms to list
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
                .order_by(t.c.shard, t.c.prefix, t.c.key)  # locked in one order: no deadlock
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
        """The distinct shard keys of the items (expired too) under ``:ns``, by
        :meth:`.Dialect.shard_keys` or as a range of the primary key
        (:meth:`.Dialect.under_range`): their data keys hash a query's terms."""
        t = store_items

        def build() -> Any:
            keys = self.d.shard_keys(t)
            if keys is None:
                return sa.select(t.c.shard).distinct().where(self.d.under_range(t.c.shard))
            return keys

        return self.statement("shards_under", build)

    def shard_under(self, t: Any) -> Any:
        """Core: the shard key of ``t`` lies under ``:ns`` (read by key where the dialect
        finds the keys by :meth:`.Dialect.shard_keys`)."""
        keys = self.d.shard_keys(t)
        return self.d.under_clause(t.c.shard) if keys is None else t.c.shard.in_(keys)

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

    def item_index(self) -> Sql:
        """One item's terms (``:shard``, ``:prefix``, ``:key``): those waiting to be listed,
        else the row's (what a retraction needs), and whether they are the row's."""
        i, u = store_items, store_unlisted

        def build() -> Any:
            terms = sa.func.coalesce(u.c.terms, i.c.terms)
            return (
                sa.select(terms, sa.case((u.c.key.is_(None), 1), else_=0))
                .select_from(i.outerjoin(u, same_item(u, i)))
                .where(key_match(i))
            )

        return self.statement("item_index", build)

    def reindex_item(self) -> Sql:
        """Give one item (``:shard``, ``:prefix``, ``:key``) new ``:terms`` in its row (their
        listed form), to go with new terms to list (:meth:`upsert_unlisted`)."""
        t = store_items
        terms = sa.bindparam("terms", type_=sa.LargeBinary)
        return self.statement(
            "reindex_item", lambda: sa.update(t).where(key_match(t)).values(terms=terms)
        )

    def insert_tags(self) -> Sql:
        return self._insert(store_tags)

    def item_vectors(self) -> Sql:
        return self._of_item("item_vectors", store_vectors, "field", "vector")

    def seal_item(self) -> Sql:
        """Seal one unsealed item: ``:sealed`` in, ``value`` emptied."""
        t = store_items
        sealed = sa.bindparam("sealed", type_=sa.LargeBinary)
        value = sa.bindparam("value", type_=t.c.value.type)
        return self.statement(
            "seal_item",
            lambda: (
                sa.update(t)
                .where(key_match(t), t.c.sealed.is_(None))
                .values(sealed=sealed, value=value)
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

    def chunks_under(self, exact: bool, scoped: bool, deeper: bool) -> list[Any]:
        """Core: a chunk lies in the namespace (``exact``) or under it; ``deeper``: the
        namespace goes below its shard key (``:rest`` is not empty)."""
        c = store_chunks
        if not scoped:  # a prefix shorter than the shard key: every namespace of its shards
            if exact:
                return [c.c.shard == sa.bindparam("ns"), c.c.rest == ""]
            return [self.shard_under(c)]
        where = [c.c.shard == sa.bindparam("shard")]
        if exact:
            return [*where, c.c.rest == sa.bindparam("rest")]
        return [*where, self.d.under_clause(c.c.rest, "rest")] if deeper else where

    def lists(self, exact: bool, scoped: bool, size: int, deeper: bool) -> Sql:
        """In one snapshot, under the namespace: the chunks of the terms whose high parts are
        ``:his`` (:meth:`.Dialect.one_of`), ``(0, prefix, hi, lo, start, entries, payload)``;
        the items' terms not yet listed, ``(1, prefix, NULL, NULL, num, doc_len, terms)``; the
        retractions, ``(2, prefix, NULL, NULL, num, NULL, terms)`` (see :meth:`chunks_under`
        for ``deeper``)."""
        c, r, u = store_chunks, store_retractions, store_unlisted

        def build() -> Any:
            def kind(n: int) -> Any:
                return sa.literal(n, sa.Integer).label("kind")

            def pending(t: Any) -> list[Any]:  # under a short prefix: its shard keys first
                under = [] if exact or scoped else [self.shard_under(t)]
                return [*under, *self.ns_of(t, exact, scoped)]

            none = sa.cast(sa.null(), sa.Integer)
            chunks = sa.select(
                kind(0), c.c.rest, c.c.hi, c.c.lo, c.c.start, none, c.c.payload
            ).where(*self.chunks_under(exact, scoped, deeper), self.d.one_of(c.c.hi, "his", size))
            unlisted = sa.select(
                kind(1), u.c.prefix, none, none, u.c.num, u.c.doc_len, u.c.terms
            ).where(*pending(u))
            retracted = sa.select(kind(2), r.c.prefix, none, none, r.c.num, none, r.c.terms).where(
                *pending(r)
            )
            return sa.union_all(chunks, unlisted, retracted)

        return self.statement(("lists", exact, scoped, size, deeper), build)

    def by_nums(
        self, filters: Prefilter, exact: bool, scoped: bool, size: int, rows: bool = True
    ) -> Sql:
        """``(num, *ITEM_FIELDS)`` of the live items numbered ``:nums`` (all under the
        namespace: the lists were read there) that pass the pre-filter; ``rows`` off:
        ``(num, prefix, key)``."""
        i = store_items
        fields = ITEM_FIELDS if rows else ITEM_FIELDS[:2]
        return self.statement(
            ("by_nums", filters, exact, scoped, size, rows),
            lambda: sa.select(i.c.num, *(i.c[f] for f in fields)).where(
                self.d.one_of(i.c.num, "nums", size),
                # a number names one item: the shard key routes it, and leads the numbers' index
                *([i.c.shard == sa.bindparam("shard")] if scoped else []),
                live(i),
                *self.filtered(i.c.value, filters),
            ),
        )

    def in_key_order(self, filters: Prefilter, exact: bool, scoped: bool, rows: bool = True) -> Sql:
        """:meth:`by_nums` of every item in ``(prefix, key)`` order after ``(:a_prefix,
        :a_key)`` (``exact``: in key order after ``:a_key``), ``:n`` of them: the first of
        many tied items."""
        i = store_items
        # one namespace: after the key alone (SQLite, given the prefix's range too, walked
        # the shard key's every namespace from there and sorted it: 42 ms at 100,000 items)
        order = (i.c.key,) if exact else (i.c.prefix, i.c.key)
        names = ("key",) if exact else ("prefix", "key")
        fields = ITEM_FIELDS if rows else ITEM_FIELDS[:2]
        return self.statement(
            ("in_key_order", filters, exact, scoped, rows),
            lambda: (
                sa.select(i.c.num, *(i.c[f] for f in fields))
                .where(
                    *self.ns_of(i, exact, scoped),
                    live(i),
                    *self.filtered(i.c.value, filters),
                    _after(order, names),
                )
                .order_by(*order)
                .limit(sa.bindparam("n", type_=sa.Integer))
            ),
        )

    def item_terms(self, n: int) -> Sql:
        """``(prefix, key, num, terms)`` of ``n`` items (:meth:`key_params`), their terms as
        their rows keep them (the ids' high parts)."""
        i = store_items
        return self.statement(
            ("item_terms", n, self.d.distributed),
            lambda: sa.select(i.c.prefix, i.c.key, i.c.num, i.c.terms).where(
                self.items_named(i, n)
            ),
        )

    def unlisted(self) -> Sql:
        """A merge's first read: up to ``:cap`` of the namespace ``:prefix``'s terms waiting
        to be listed, ``(key, terms, num, doc_len)``, locked (a write holding one: it waits
        for the next merge)."""
        u = store_unlisted

        def build() -> Any:
            found = (
                sa.select(u.c.key, u.c.terms, u.c.num, u.c.doc_len)
                .where(*matching(u, "shard", "prefix"))
                .order_by(u.c.key)
                .limit(sa.bindparam("cap", type_=sa.Integer))
            )
            return found.with_for_update(skip_locked=True) if self.d.row_locks else found

        return self.statement("unlisted", build)

    def listing(self, size: int) -> Sql:
        """A merge's second read: the keys of the namespace's items ``:keys``
        (:meth:`.Dialect.one_of`), their rows locked, those a write holds skipped: a writer
        locks an item's row before its terms to list, so one that waits for the merge
        finds the item listed when it goes on (it read its terms to list as its statement
        began, before the merge deleted them), and retracts it."""
        i = store_items

        def build() -> Any:
            found = sa.select(i.c.key).where(
                *matching(i, "shard", "prefix"), self.d.one_of(i.c.key, "keys", size)
            )
            return found.with_for_update(skip_locked=True) if self.d.row_locks else found

        return self.statement(("listing", size), build)

    def retracted(self) -> Sql:
        """A merge's second read: the namespace's retractions ``(num, terms)``, locked."""
        r = store_retractions

        def build() -> Any:
            found = sa.select(r.c.num, r.c.terms).where(*matching(r, "shard", "prefix"))
            return found.with_for_update() if self.d.row_locks else found

        return self.statement("retracted", build)

    def chunks_to_merge(self, size: int) -> Sql:
        """The chunks a merge rewrites, of the namespace ``:shard``, ``:rest``: of the terms
        whose high parts are ``:his``, those starting at item ``:min`` or later, and the one
        before, which may hold ``:min`` (or is the term's last, appended to). A window, not a
        correlated subquery: Citus sends it to the shard whole."""
        c = store_chunks

        def build() -> Any:
            after = sa.func.lead(c.c.start).over(partition_by=(c.c.hi, c.c.lo), order_by=c.c.start)
            q = (
                sa.select(c.c.hi, c.c.lo, c.c.start, c.c.payload, after.label("next"))
                .where(*matching(c, "shard", "rest"), self.d.one_of(c.c.hi, "his", size))
                .subquery("q")
            )
            least = sa.bindparam("min", type_=sa.BigInteger)
            return sa.select(q.c.hi, q.c.lo, q.c.start, q.c.payload).where(
                sa.or_(q.c.start >= least, q.c.next.is_(None), q.c.next > least)
            )

        return self.statement(("chunks_to_merge", size), build)

    def merge_locks(self, shards: Iterable[str]) -> list[Stmt]:
        """Take the merge locks of ``shards``, sorted (none where the write lock serves): a
        namespace's delete or erase and its merges take turns."""
        lock = self.d.merge_lock()
        if lock is None:
            return []
        return [Stmt(lock, {"lock": merge_lock_id(s)}, fetch=True) for s in sorted(set(shards))]

    def drop_unlisted(self, size: int) -> Sql:
        """Delete the terms to list of the namespace's items ``:keys`` (listed now)."""
        u = store_unlisted
        return self.statement(
            ("drop_unlisted", size),
            lambda: sa.delete(u).where(
                *matching(u, "shard", "prefix"), self.d.one_of(u.c.key, "keys", size)
            ),
        )

    def drop_retractions(self, size: int) -> Sql:
        """Delete the namespace's retractions numbered ``:nums``."""
        r = store_retractions
        return self.statement(
            ("drop_retractions", size),
            lambda: sa.delete(r).where(
                *matching(r, "shard", "prefix"), self.d.one_of(r.c.num, "nums", size)
            ),
        )

    def drop_chunk(self) -> Sql:
        """Delete one chunk (``:shard``, ``:hi``, ``:lo``, ``:rest``, ``:start``)."""
        c = store_chunks
        return self.statement(
            "drop_chunk",
            lambda: sa.delete(c).where(*matching(c, "shard", "hi", "lo", "rest", "start")),
        )

    def insert_chunk(self) -> Sql:
        return self._insert(store_chunks)

    def fingerprint_under(self, scoped: bool) -> Sql:
        """Live item count and latest update under ``:ns`` (a decrypted vectors' cache key)."""
        return self.statement(
            ("fingerprint_under", scoped),
            lambda: _fingerprint(*self.namespace_of(store_items, scoped)),
        )


def in_lock_order(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item rows in the one order every writer locks items in: by shard key, namespace and
    key as Python compares them (two writers locking in two orders could deadlock; the
    database's collation may order them otherwise)."""
    return sorted(rows, key=itemgetter("shard", "prefix", "key"))


def item_keys(*rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``shard``, ``prefix`` and ``key`` of each row, in lock order."""
    return in_lock_order(
        {c: r[c] for c in ("shard", "prefix", "key")} for group in rows for r in group
    )


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


#: The columns of :class:`SealedVectorRow`.
_SEALED_COLUMNS = (
    *(vectors_v.c[n] for n in ("prefix", "key", "field", "vector")),
    items_i.c.sealed.is_(None),
)


#: The columns of an item's key.
_KEY_COLUMNS = ("shard", "prefix", "key")


def _key_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The ``shard``, ``prefix`` and ``key`` of an item row."""
    return {c: row[c] for c in _KEY_COLUMNS}


def _delete_item(t: sa.Table) -> Any:
    return sa.delete(t).where(key_match(t))


def _fingerprint(*where: Any) -> Any:
    t = store_items
    return sa.select(sa.func.count(), sa.func.max(t.c.updated_at)).where(*where, live(t))


def _scoped(t: Any, under: Any, scoped: bool) -> list[Any]:
    return [t.c.shard == sa.bindparam("shard"), under] if scoped else [under]
