"""PostgreSQL through psycopg 3: dialect (one-statement checkpoint SQL included), connection
options, session and database. Connections are in autocommit mode (the session sends its own
``BEGIN``/``COMMIT``) and carry no session state (settings are ``SET LOCAL``), so a
transaction pooler may sit in front of the server.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, fields
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as sa_pg
from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db import checkpoint as checkpoint_sql
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.checkpoint import takes_write, thread_takes
from langgraph_checkpoint_agent_memory.db.database import (
    Batch,
    Database,
    Plan,
    PoolUsage,
    Stmt,
    T,
    adrive,
    connection_waited,
    first_line,
)
from langgraph_checkpoint_agent_memory.db.dialect import (
    HNSW_MAX_DIMS,
    JSON_OPS,
    AnnConfig,
    Dialect,
    FastWrite,
    Sql,
    VectorIndex,
    nearest,
    vectors_near,
)
from langgraph_checkpoint_agent_memory.db.schema import (
    TIME,
    blobs,
    checkpoints,
    metadata,
    threads,
    vectors_v,
    writes,
    written,
)
from langgraph_checkpoint_agent_memory.db.url import (
    PREPARE_THRESHOLD,
    SCHEMA,
    mask_url,
    take_url_option,
)
from langgraph_checkpoint_agent_memory.errors import (
    ClosedError,
    ConfigurationError,
    DatabaseUnavailableError,
    require,
)

logger = logging.getLogger(__name__)

#: Serializes migrations, and the setups that change the schema, until the transaction ends.
#: The sequence numbering store items for the term index.
NUM_SEQUENCE = "am_store_item_numbers"
MIGRATION_LOCK = f"SELECT pg_advisory_xact_lock({0x616D5F6D6967})"  # raw: "am_mig"
#: The first key of the two-key advisory locks of shard keys, apart from the one-key locks.
SCOPE_LOCK_CLASS = 0x616D5F73  # "am_s"

#: Where pgvector is installed or can be: the extension and an untyped ``embedding`` column
#: (stores of any dimension share it), kept inline (``MAIN``) so exact search reads no TOAST.
# raw: a PL/pgSQL block (CREATE EXTENSION, ALTER TABLE), no Core form
PGVECTOR_SETUP = (
    "DO $$ BEGIN "
    "IF to_regtype('vector') IS NULL AND EXISTS "
    "(SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN "
    "BEGIN CREATE EXTENSION IF NOT EXISTS vector; "
    "EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE "
    "'pgvector is available but this role may not create it: vector search stays exact'; "
    "END; END IF; "
    "IF to_regtype('vector') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_attribute "
    "WHERE attrelid = 'am_store_vectors'::regclass AND attname = 'embedding' "
    "AND NOT attisdropped) THEN "
    "EXECUTE 'ALTER TABLE am_store_vectors ADD COLUMN embedding vector'; "
    "EXECUTE 'ALTER TABLE am_store_vectors ALTER COLUMN embedding SET STORAGE MAIN'; "
    "EXECUTE 'CREATE INDEX am_store_vectors_unconverted ON am_store_vectors (prefix) "
    "WHERE embedding IS NULL'; "
    "END IF; END $$"
)
# raw: PostgreSQL catalog lookups (the vector type, the embedding column, the extension)
PGVECTOR_STATE = (
    "SELECT to_regtype('vector') IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute "
    "WHERE attrelid = to_regclass('am_store_vectors') AND attname = 'embedding' "
    "AND NOT attisdropped), EXISTS (SELECT 1 FROM pg_available_extensions "
    "WHERE name = 'vector')"
)
# raw: PostgreSQL catalog lookup
ANN_INDEX_STATE = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%(index)s)"
# raw: a byte-order namespace index, which the prefix range of vector_under can walk
VECTOR_NAMESPACE_INDEX = 'CREATE INDEX am_store_vectors_ns ON am_store_vectors (prefix COLLATE "C")'


class PgVector(sa.types.UserDefinedType[Any]):
    """pgvector's types (``vector``, ``halfvec(n)``), for casts: raw, SQLAlchemy has none."""

    cache_ok = True

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def get_col_spec(self, **kw: Any) -> str:
        return self.spec


_ONE: Any = sa.literal_column("1")
#: Raw: the pgvector column, which :mod:`.schema` does not declare.
_EMBEDDING: Any = sa.literal_column(f"{vectors_v.name}.embedding")


def _query_vector(spec: str) -> Any:
    return sa.cast(sa.bindparam("query_vector"), PgVector(spec))


def _dims_are(dims: int) -> Any:
    """A literal, as in the partial HNSW index's predicate, so the planner can use it."""
    return sa.func.vector_dims(_EMBEDDING) == sa.literal_column(str(int(dims)))


def _version_rows(c: Any) -> Any:
    """The checkpoint's ``blob_versions`` as rows ``(key, value)``."""
    return (
        sa.func.jsonb_each_text(sa.cast(c.c.blob_versions, sa_pg.JSONB))
        .table_valued("key", "value")
        .render_derived(name="v")
        .lateral()
    )


def _blob(channel: Any, version: Any) -> tuple[Any, Any, bool]:
    """One blob by its full key, the thread by parameter (Citus routes a recursive query only
    when every table is filtered on thread_id), as LATERAL ... LIMIT 1: never a thread scan."""
    bb = blobs.alias("bb")
    lookup = sa.select(*(bb.c[n] for n in checkpoint_sql.BLOB_COLUMNS)).where(
        bb.c.thread_id == sa.bindparam("thread_id"),
        bb.c.checkpoint_ns == sa.bindparam("checkpoint_ns"),
        bb.c.channel == channel,
        bb.c.version == version,
    )
    return lookup.limit(sa.literal_column("1", sa.Integer)).lateral("b"), sa.true(), False


#: The row groups of a fast write, by kind (see :meth:`PostgresDialect.fast_write`).
GROUPS = {"put": ("b",), "writes": ("f", "r")}
#: Per row group: the table, its CTE's name, and whether a key conflict overwrites the row.
_ROW_GROUPS = {
    "b": (blobs, "blobs", False),
    "f": (writes, "first", False),
    "r": (writes, "special", True),
}
#: The columns whose value is a fixed parameter of their name (the others: the row's cell).
_FIXED = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path")
_OVERWRITTEN = ("channel", "type", "blob", "task_path")


def routed_insert(group: str, count: int) -> Any:
    """``INSERT ... VALUES`` of ``count`` rows of ``group`` (parameters: :func:`cell_names`)."""
    table, _, overwrite = _ROW_GROUPS[group]
    rows: list[dict[str, Any]] = [
        {
            c.name: sa.bindparam(c.name if c.name in _FIXED else f"{group}{i}_{c.name}")
            for c in table.columns
        }
        for i in range(count)
    ]
    stmt = sa_pg.insert(table).values(rows)
    if not overwrite:
        return stmt.on_conflict_do_nothing()
    return stmt.on_conflict_do_update(
        index_elements=list(table.primary_key.columns),
        set_={c: stmt.excluded[c] for c in _OVERWRITTEN},
    )


def routed_touch() -> Any:
    """Touch the thread's activity row where it takes the write, returning a row if so."""
    t = threads
    cols = ("thread_id", "last_active", "ttl_seconds", "expires_at")
    stmt = sa_pg.insert(t).values({**{c: sa.bindparam(c) for c in cols}, "deleted_at": sa.null()})
    return stmt.on_conflict_do_update(
        index_elements=[t.c.thread_id],
        set_={c: stmt.excluded[c] for c in cols[1:]},
        where=sa.and_(*takes_write(t)),
    ).returning(sa.literal_column("1"))


def routed_live() -> Any:
    """The thread's activity row, locked for share, where it takes the write."""
    t = threads.alias("t")
    return (
        sa.select(sa.literal_column("1"))
        .select_from(t)
        .where(t.c.thread_id == sa.bindparam("thread_id"), *takes_write(t))
        .with_for_update(read=True)
    )


def fast_write_statement(d: Dialect, kind: str, touch: bool, counts: tuple[int, ...]) -> Any:
    """The one statement of :meth:`PostgresDialect.fast_write`: data-modifying CTEs, each
    inserting its rows only while the ``live`` CTE holds a row; the count of that row."""
    live = (
        sa.select(sa.literal_column("1").label("ok"))
        .where(thread_takes(sa.bindparam("thread_id")))
        .cte("live")
    )
    inserts: list[tuple[str, Any]] = []
    if touch:
        touched: Any = sa.select(
            sa.bindparam("thread_id"),
            sa.bindparam("last_active"),
            sa.cast(sa.bindparam("ttl_seconds"), sa.Integer),
            sa.cast(sa.bindparam("expires_at"), TIME),
            sa.null(),
        ).select_from(live)
        cols = ["thread_id", "last_active", "ttl_seconds", "expires_at", "deleted_at"]
        inserts.append(("touch", d.upsert_select(threads, cols, touched, ["thread_id"], cols[1:4])))
    for group, count in zip(GROUPS[kind], counts, strict=True):
        if count:
            inserts.append((_ROW_GROUPS[group][1], _rows_insert(d, group, count, live)))
    if kind == "put":
        cols = [c.name for c in checkpoints.columns]
        row: Any = sa.select(*(sa.bindparam(c) for c in cols)).select_from(live)
        keys = [c.name for c in checkpoints.primary_key.columns]
        inserts.append(("cp", d.upsert_select(checkpoints, cols, row, keys, cols[len(keys) :])))
    ctes = [insert.cte(name) for name, insert in inserts]
    return sa.select(sa.func.count()).select_from(live).add_cte(*ctes)


def _rows_insert(d: Dialect, group: str, count: int, live: Any) -> Any:
    """``INSERT ... SELECT <fixed parameters, cells> FROM live, (VALUES ...) AS u`` of ``count``
    rows; the first row carries the types (a parameter alone in VALUES is taken as text)."""
    table, _, overwrite = _ROW_GROUPS[group]
    columns = _ROW_COLUMNS["put" if table is blobs else "writes"]
    cells: list[tuple[Any, ...]] = [
        tuple(sa.bindparam(f"{group}{i}_{c}") for c, _ in columns) for i in range(1, count)
    ]
    first = tuple(sa.cast(sa.bindparam(f"{group}0_{c}"), t) for c, t in columns)
    rows = sa.values(*(sa.column(c, t) for c, t in columns), name="u").data([first, *cells])
    cols = [c.name for c in table.columns]
    source = sa.select(*(sa.bindparam(c) if c in _FIXED else rows.c[c] for c in cols))
    keys = [c.name for c in table.primary_key.columns]
    update = _OVERWRITTEN if overwrite else None
    return d.insert_from_select(table, cols, source.select_from(live, rows), keys, update)


#: Rows one fast write sends as plain parameters; more take the generic statements.
MAX_VALUES_ROWS = 64
#: The row keys a fast write's rows carry, in order, with their SQL types.
_ROW_COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "put": [
        ("channel", sa.Text),
        ("version", sa.Text),
        ("type", sa.Text),
        ("blob", sa_pg.BYTEA),
        ("base_version", sa.Text),
    ],
    "writes": [("idx", sa.Integer), ("channel", sa.Text), ("type", sa.Text), ("blob", sa_pg.BYTEA)],
}


@functools.cache
def cell_names(kind: str, group: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Per row of a fast write, each column with the parameter that carries it."""
    return tuple(
        tuple((column, f"{group}{i}_{column}") for column, _ in _ROW_COLUMNS[kind])
        for i in range(MAX_VALUES_ROWS)
    )


class PostgresDialect(Dialect):
    """PostgreSQL's SQL; with ``schema``, statements name its tables (``search_path``: session)."""

    name = "postgresql"

    def __init__(self, schema: str | None = None) -> None:
        super().__init__()
        self.schema = schema
        self._qualified: dict[str, str] = {}
        self._tables = re.compile(
            r'(?<![\w".])(' + "|".join(sorted(metadata.tables, key=len, reverse=True)) + r")\b"
        )

    def qualified(self, table: str) -> str:
        return table if self.schema is None else f'"{self.schema}".{table}'

    def qualify(self, text: str) -> str:
        """A table name is a whole word, inside string literals too (``to_regclass``)."""
        if self.schema is None:
            return text
        done = self._qualified.get(text)
        if done is None:
            done = self._tables.sub(lambda m: self.qualified(m.group(1)), text)
            self._qualified[text] = done
        return done

    def schema_ddl(self) -> list[str]:
        """A block, as ``IF NOT EXISTS`` would still check the privilege to create it."""
        if self.schema is None:
            return []
        return [
            # raw: a PL/pgSQL block (conditional CREATE SCHEMA), no Core form
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = "
            f"'{self.schema}') THEN EXECUTE 'CREATE SCHEMA \"{self.schema}\"'; END IF; END $$"
        ]

    def _make_sa_dialect(self) -> SADialect:
        # SQLAlchemy leaves this dialect's __init__ unannotated
        return sa_pg.psycopg.dialect()  # type: ignore[no-untyped-call]

    def insert(self, table: sa.Table) -> Any:
        return sa_pg.insert(table)

    def cast_param(self, param: sa.BindParameter[Any], type_: Any) -> Any:
        # a CAST to VARCHAR(n) would truncate silently; the column's limit raises
        if isinstance(type_, sa.String) and not getattr(type_, "_variant_mapping", None):
            type_ = sa.Text()
        return sa.cast(param, type_)

    def metadata_prefilter(self, column: Any, key: str, value: Any) -> Any:
        return sa.cast(column, sa_pg.JSONB).op("@>")(sa.cast(value, sa_pg.JSONB))

    def prefilter_value(self, key: str, value: Any) -> Any:
        return json.dumps({key: value})

    def migration_lock(self) -> str | None:
        return MIGRATION_LOCK

    def scope_lock(self) -> sa.sql.ClauseElement | None:
        # released at commit or rollback, so a transaction pooler may hand the connection on
        key = sa.func.hashtext(sa.bindparam("lock_key", type_=sa.Text))
        return sa.select(
            sa.func.pg_advisory_xact_lock(sa.literal_column(str(SCOPE_LOCK_CLASS)), key)
        )

    def param(self, name: str) -> str:
        return f"%({name})s"

    def unless_exists(self, table: str, create: str) -> str:
        return (
            # raw: a PL/pgSQL block (conditional DDL), no Core form
            f"DO $$ BEGIN IF to_regclass('{table}') IS NULL THEN "
            f"EXECUTE '{create.replace(chr(39), chr(39) * 2)}'; END IF; END $$"
        )

    def vector_index_ddl(self) -> list[str]:
        return [VECTOR_NAMESPACE_INDEX, PGVECTOR_SETUP]

    def vectors_plan(self, *, create: bool = True) -> Plan[None]:
        state = Stmt(self.sql("pgvector_state", lambda: PGVECTOR_STATE), fetch=True)
        [rows] = yield Batch([state])
        has_type, has_column, available = rows[0]
        if create and not has_column and (has_type or available):
            lock = Stmt(Sql(MIGRATION_LOCK), fetch=True)
            yield Batch(
                [lock, Stmt(self.sql("pgvector_setup", lambda: PGVECTOR_SETUP))], write=True
            )
            [rows] = yield Batch([state])
            has_column = rows[0][1]
            if not has_column:
                logger.info(
                    "pgvector is available on this server but could not be created "
                    "(CREATE EXTENSION vector needs a superuser): vector search stays exact"
                )
        self.native_vectors = bool(has_column)

    def to_vector(self, text: Any) -> Any:
        return sa.cast(text, PgVector("vector"))

    def vector_under_clause(self, column: Any) -> Any:
        # the range am_store_vectors_ns walks, then the exact test ("a-b" sorts inside it)
        c = column.collate("C")
        return sa.and_(
            c >= sa.bindparam("ns"),
            c < sa.bindparam("ns_end"),
            sa.or_(column == sa.bindparam("ns"), c >= sa.bindparam("ns_dot")),
        )

    def vector_search(
        self, filters: Hashable, where: Sequence[Any], dims: int, *, joined: bool
    ) -> Sql | None:
        if not self.native_vectors:
            return None

        def build() -> Any:
            # NULLIF: a zero vector's cosine is NaN, which would sort first
            sim = sa.func.nullif(
                _ONE - _EMBEDDING.op("<=>", return_type=sa.Float)(_query_vector("vector")),
                sa.literal_column("'NaN'"),
            ).label("sim")
            order = [sa.nulls_last(sa.desc("sim")), vectors_v.c.prefix, vectors_v.c.key]
            return nearest(sim, [_dims_are(dims), *where], order, joined=joined)

        return self.sql(("vector_search", filters, dims, joined), build)

    def ann_index(self, dims: int, config: AnnConfig) -> VectorIndex | None:
        if not self.native_vectors or config.kind != "hnsw":
            return None
        kind = config.vector_type or ("vector" if dims <= HNSW_MAX_DIMS["vector"] else "halfvec")
        if dims > HNSW_MAX_DIMS[kind]:
            return None  # more dimensions than pgvector indexes: exact search
        return VectorIndex(
            name=f"am_store_vectors_{kind}_{int(dims)}",
            dims=int(dims),
            vector_type=kind,
            column=f"CAST(v.embedding AS {kind}({int(dims)}))",
            ef_search=config.ef_search,
            relation=self.qualified(f"am_store_vectors_{kind}_{int(dims)}"),
        )

    def ann_index_plan(self, index: VectorIndex, config: AnnConfig, *, create: bool) -> Plan[bool]:
        sql = self.sql("ann_index_state", lambda: ANN_INDEX_STATE)
        state = Stmt(sql, {"index": index.relation}, fetch=True)
        if not create:
            [rows] = yield Batch([state])
            return bool(rows and rows[0][0])
        lock = Stmt(Sql(MIGRATION_LOCK), fetch=True)
        _, rows = yield Batch([lock, state], lock=True, hold=True)
        if rows:  # there already (built by another process, or by hand)
            yield Batch([], write=True)
            if not rows[0][0]:
                logger.warning(
                    "the vector index %s is not valid (a CREATE INDEX CONCURRENTLY that failed "
                    "or is still running): vector search stays exact until it is rebuilt",
                    index.name,
                )
            return bool(rows[0][0])
        kind = index.vector_type
        create_sql = self.sql(
            ("ann_index_create", index.name, config.m, config.ef_construction),
            lambda: (
                # raw: pgvector's HNSW index (operator class, WITH options), no Core form
                f"CREATE INDEX IF NOT EXISTS {index.name} ON am_store_vectors USING hnsw "
                f"((CAST(embedding AS {kind}({index.dims}))) {kind}_cosine_ops) "
                f"WITH (m = {int(config.m)}, ef_construction = {int(config.ef_construction)}) "
                f"WHERE vector_dims(embedding) = {index.dims}"
            ),
        )
        yield Batch([Stmt(create_sql)], write=True)
        return True

    def ann_search(self, index: VectorIndex, filters: Hashable, where: Sequence[Any]) -> list[Sql]:
        def build() -> Any:
            # raw: the indexed expression and pgvector's operator have no Core form
            distance = sa.literal_column(index.column).op("<=>", return_type=sa.Float)(
                _query_vector(f"{index.vector_type}({index.dims})")
            )
            sim = (_ONE - distance).label("sim")
            return nearest(sim, [_dims_are(index.dims), *where], [distance])

        # iterative scans read on until :n rows pass the filters (the store re-sorts)
        return [
            # raw: pgvector's settings, no Core form
            self.sql(
                ("ann_ef_search", index.ef_search),
                lambda: f"SET LOCAL hnsw.ef_search = {int(index.ef_search)}",
            ),
            self.sql("ann_iterative", lambda: "SET LOCAL hnsw.iterative_scan = relaxed_order"),
            # else a generic (prepared) plan, blind to the namespace's size, may sort it all
            self.sql("ann_no_sort", lambda: "SET LOCAL enable_sort = off"),
            self.sql(("ann_search", index.name, filters), build),
        ]

    def vector_counts(self, index: VectorIndex, under: Sequence[Any], scoped: bool) -> Sql:
        def build() -> Any:
            c = sa.table("pg_class", sa.column("oid"), sa.column("reltuples")).c
            rows = sa.func.nullif(c.reltuples, sa.literal_column("-1"))
            index_rows = sa.select(rows).where(c.oid == sa.func.to_regclass(sa.bindparam("index")))
            # a literal, which qualify() places in the schema
            table: Any = sa.literal_column("'am_store_vectors'")
            table_rows = sa.select(c.reltuples).where(c.oid == sa.func.to_regclass(table))
            known = (index_rows.scalar_subquery(), table_rows.scalar_subquery())
            return sa.select(vectors_near(under), sa.func.coalesce(*known, sa.literal_column("0")))

        return self.sql(("vector_counts", index.name, scoped), build)

    list_cap = None

    def new_num(self) -> Any:
        return sa.func.nextval(self.qualified(NUM_SEQUENCE))

    def num_ddl(self) -> list[str]:
        # raw: a sequence has no Core DDL here
        return [f"CREATE SEQUENCE IF NOT EXISTS {self.qualified(NUM_SEQUENCE)}"]

    def merge_lock(self) -> Sql:
        lock = sa.bindparam("lock", type_=sa.BigInteger)
        return self.sql("merge_lock", lambda: sa.select(sa.func.pg_advisory_xact_lock(lock)))

    def list_size(self, n: int) -> int:
        return 1

    def one_of(self, column: Any, param: str, size: int) -> Any:
        # one array: one statement text for any count
        return column == sa.any_(self._array(column, param))

    def list_params(self, param: str, values: Sequence[Any]) -> dict[str, Any]:
        return {param: list(values)}

    def rows_named(self, t: Any, n: int, names: Sequence[tuple[str, str]]) -> Any:
        # the rows as arrays, a column each: a semi-join that looks each row up in the index,
        # one statement text for any count. An OR of rows, or a list of keys under one
        # namespace, is planned as a walk of the namespace's range of the index whenever the
        # planner thinks it small (no statistics yet, or a generic plan's average namespace).
        columns = [t.c[c] for c, _ in names]
        arrays = [self._array(t.c[c], p) for c, p in names]
        wanted = sa.func.unnest(*arrays).table_valued(*(p for _, p in names)).render_derived("u")
        found = sa.tuple_(*columns).in_(sa.select(*wanted.c))
        shard = t.info.get("shard_key")
        if not self.distributed or shard not in dict(names):
            return found
        # Citus routes on the shard key's values, not on a join: rows of one shard key go to
        # its shard. Not elsewhere: the planner may walk the shard key's range for it
        return sa.and_(t.c[shard] == sa.any_(self._array(t.c[shard], dict(names)[shard])), found)

    def _array(self, column: Any, param: str) -> Any:
        """``:param`` as an array of ``column``'s values (text[] for strings: varchar(n) would
        cut them)."""
        item = sa.Text() if isinstance(column.type, sa.String) else column.type
        return sa.cast(sa.bindparam(param), sa_pg.ARRAY(item))

    def named_params(self, params: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        return {p: [row[i] for row in rows] for i, p in enumerate(params)}

    def insert_arrays(self, table: sa.Table) -> Sql:
        def build() -> Any:
            cols = [c.name for c in written(table)]
            arrays = [sa.cast(sa.bindparam(c), sa_pg.ARRAY(table.c[c].type)) for c in cols]
            rows = sa.func.unnest(*arrays).table_valued(*cols).render_derived(name="u")
            return sa.insert(table).from_select(cols, sa.select(*rows.c))

        return self.sql(("insert_arrays", table.name), build)

    def insert_owned(
        self, table: sa.Table, owner: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> Stmt | None:
        """One statement per owner row, routed by Citus to its shard. On Citus 13 (4/12/32
        rows) ``VALUES`` took 0.48/0.82/1.54 ms, ``unnest`` joined to the owner 0.75/0.80/1.06
        ms: up to :data:`VALUES_OWNED_ROWS` rows take ``VALUES`` of a power of two of rows
        (padded with a repeated row, which ``ON CONFLICT DO NOTHING`` skips), more the arrays."""
        keys = [c.name for c in owner.primary_key.columns]
        listed = [c.name for c in written(table) if c.name not in keys]
        by_owner: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for row in rows:
            by_owner.setdefault(tuple(row[k] for k in keys), []).append(row)
        if not by_owner:
            return None
        most = max(map(len, by_owner.values()))
        size = 1 << (most - 1).bit_length()
        arrays = most > VALUES_OWNED_ROWS
        params: list[dict[str, Any]] = []
        for ident, owned in by_owner.items():
            one = dict(zip(keys, ident, strict=True))
            if arrays:
                one |= {c: [r[c] for r in owned] for c in listed}
            else:
                for i, row in enumerate([*owned, *[owned[0]] * (size - len(owned))]):
                    one.update((f"{c}_{i}", row[c]) for c in listed)
            params.append(one)
        if arrays:
            key: Hashable = ("owned_arrays", table.name, owner.name)
            sql = self.sql(key, lambda: owned_arrays(table, owner))
        else:
            key = ("owned_values", table.name, owner.name, size)
            sql = self.sql(key, lambda: owned_values(table, owner, size))
        return Stmt(sql, params, many=True)

    def under_clause(self, column: Any, name: str = "ns") -> Any:
        # a byte-order range, which the planner estimates from statistics (substr(): blind)
        c = column.collate("C")
        return sa.or_(
            column == sa.bindparam(name),
            sa.and_(c >= sa.bindparam(f"{name}_dot"), c < sa.bindparam(f"{name}_end")),
        )

    def json_prefilter(self, path: list[str], op: str, value: Any) -> Hashable | None:
        """One comparison per condition in jsonb's order, which may admit rows of another
        type (Python drops them) but never loses a match; strings in byte order ("C")."""
        if isinstance(value, bool):
            return ("boolean",) if op == "$eq" else None
        if value is None:
            return ("null",) if op == "$eq" else None
        if op in JSON_OPS and isinstance(value, (int, float)):
            return ("number", op) if value == value else None  # NaN: let Python decide
        if op in JSON_OPS and isinstance(value, str):
            return ("string", op)
        return ("exists",)

    def json_condition(self, value: Any, shape: Hashable, param: str) -> Any:
        kind, *rest = cast(tuple[Any, ...], shape)
        doc = sa.cast(value, sa_pg.JSONB)
        path = sa.cast(sa.bindparam(f"{param}_path"), sa_pg.ARRAY(sa.Text))
        compared: Any = sa.bindparam(param)
        if kind == "string":
            text = doc.op("#>>", return_type=sa.Text)(path).self_group().collate("C")
            return JSON_OPS[rest[0]](text, compared)
        at = doc.op("#>", return_type=sa_pg.JSONB)(path)
        if kind == "boolean":
            return at == sa.func.to_jsonb(sa.cast(compared, sa.Boolean))
        if kind == "null":
            return sa.func.jsonb_typeof(at) == sa.literal_column("'null'")
        if kind == "number":
            # through text: float8 straight to numeric keeps only 15 digits
            number = sa.func.to_jsonb(sa.cast(sa.cast(compared, sa.Text), sa.Numeric))
            return JSON_OPS[rest[0]](at, number)
        return at.is_not(None)

    def json_path(self, path: list[str]) -> Any:
        return list(path)

    def fast_get_tuple(self, by_id: bool) -> Sql:
        build = functools.partial(checkpoint_sql.get_tuple_statement, by_id, _version_rows, _blob)
        return self.sql(("fast_get_tuple", by_id), build)

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """One statement of data-modifying CTEs conditioned on the thread being live, rows
        as ``VALUES`` of plain parameters (psycopg inspects an array's items on every call)."""
        counts = tuple(len(rows[g]) for g in GROUPS[kind])
        if sum(counts) > MAX_VALUES_ROWS:
            return None
        params = dict(fixed)
        for group in GROUPS[kind]:
            for row, cells in zip(rows[group], cell_names(kind, group), strict=False):
                for column, name in cells:
                    params[name] = row[column]
        if self.distributed:
            return self._routed_write(kind, touch, counts, params)
        build = functools.partial(fast_write_statement, self, kind, touch, counts)
        key = ("fast_write", kind, touch, counts)
        return FastWrite(self.sql(key, build), params, fetch=True)

    tells_unique_violations = True

    def unique_violation(self, exc: BaseException, index: sa.Index) -> bool:
        import psycopg

        return (
            isinstance(exc, psycopg.errors.UniqueViolation)
            and exc.diag.constraint_name == index.name
        )

    def _routed_checkpoint(self) -> Any:
        keys = [c.name for c in checkpoints.primary_key.columns]
        update = [c.name for c in checkpoints.columns if c.name not in keys]
        return self.upsert(checkpoints, keys, update)

    def _routed_write(
        self, kind: str, touch: bool, counts: tuple[int, ...], params: dict[str, Any]
    ) -> FastWrite:
        """:meth:`fast_write` under Citus in one round trip, committed only if the thread is live:
        a check that locks the thread's row (the touch's upsert, or ``FOR SHARE``: a delete waits),
        then ``INSERT ... VALUES`` on Citus's fast path (``INSERT ... SELECT`` costs 3x)."""
        head = self.sql(("routed", touch), routed_touch if touch else routed_live)
        inserts = [
            self.sql(("routed_insert", g, n), functools.partial(routed_insert, g, n))
            for g, n in zip(GROUPS[kind], counts, strict=True)
            if n
        ]
        if kind == "put":
            inserts.append(self.sql("routed_checkpoint", self._routed_checkpoint))
        return FastWrite(head, params, fetch=True, then=tuple((sql, params) for sql in inserts))


#: The most rows per owner that :meth:`PostgresDialect.insert_owned` sends as ``VALUES``.
VALUES_OWNED_ROWS = 8


def owned_values(table: sa.Table, owner: sa.Table, size: int) -> Any:
    named = {c.name: sa.bindparam(c.name, type_=c.type) for c in owner.primary_key.columns}
    cols = written(table)
    values = [
        {c.name: named.get(c.name, sa.bindparam(f"{c.name}_{i}", type_=c.type)) for c in cols}
        for i in range(size)
    ]
    pk = [c.name for c in table.primary_key.columns]
    return sa_pg.insert(table).values(values).on_conflict_do_nothing(index_elements=pk)


def owned_arrays(table: sa.Table, owner: sa.Table) -> Any:
    """The owner's key read from its row, every other column an array."""
    keys = [c.name for c in owner.primary_key.columns]
    cols = [c.name for c in written(table)]
    listed = [c for c in cols if c not in keys]
    arrays = [sa.cast(sa.bindparam(c), sa_pg.ARRAY(table.c[c].type)) for c in listed]
    rows = sa.func.unnest(*arrays).table_valued(*listed).render_derived(name="u")
    o = owner.alias("o")
    picked = [o.c[c] if c in keys else rows.c[c] for c in cols]
    named = [o.c[k] == sa.bindparam(k, type_=o.c[k].type) for k in keys]
    source = sa.select(*picked).select_from(o).join(rows, sa.true()).where(*named)
    return sa.insert(table).from_select(cols, source)


#: What ``schema=`` accepts: a plain identifier, so it is never SQL (it is quoted where used).
SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
PREPARE_VALUES = "none (never prepare) or a whole number >= 1 (runs before a statement is prepared)"


def prepare_threshold_of(value: Any, source: str = "prepare_threshold") -> int | None:
    """``prepare_threshold`` as psycopg takes it, from an argument, a URL or a setting
    (``source``, named in the error): ``None``, ``"none"`` (any case), a whole number >= 1.
    0 is refused: psycopg would prepare in a migration's pipeline, which ``DEALLOCATE ALL``
    ends, and the next call fails ("prepared statement does not exist").

    Example:
        >>> prepare_threshold_of("None"), prepare_threshold_of("5"), prepare_threshold_of(1)
        (None, 5, 1)
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "none":
            return None
        if text.isascii() and text.isdigit() and int(text) >= 1:
            return int(text)
    elif _whole(value, 1):
        return int(value)
    raise ConfigurationError(f"{source} must be {PREPARE_VALUES}, got {value!r}")


def pooler_error(
    told_pid: int, server_pid: int, where: str, *, passed_in: bool = False
) -> ConfigurationError | None:
    """The refusal to prepare statements behind a pooler (``told_pid`` is not the server's),
    where one client's prepared statements reach others under the same names."""
    if told_pid == server_pid:
        return None
    if passed_in:
        return ConfigurationError(
            f"{where} is reached through a connection pooler (PgBouncer or a managed "
            "service's pooler), and the connection or pool passed in prepares statements "
            "(psycopg's prepare_threshold, 5 unless set), which there reach other clients: create "
            "it with prepare_threshold=None, e.g. ConnectionPool(url, kwargs={'autocommit': True, "
            "'prepare_threshold': None}). Behind a pooler that keeps prepared statements per "
            "client (PgBouncer >= 1.21 with max_prepared_statements, or session mode) pass "
            "prepare_threshold=<its threshold> to the saver or store to say so"
        )
    return ConfigurationError(
        f"{where} is reached through a connection pooler (PgBouncer or a managed service's "
        "pooler), where prepared statements of one client reach others: add "
        "?prepare_threshold=none to the URL (or pass prepare_threshold=None). Behind a pooler that "
        "keeps prepared statements per client (PgBouncer >= 1.21 with max_prepared_statements, or "
        "session mode) choose a threshold explicitly, e.g. ?prepare_threshold=5"
    )


class IdleCheck:
    """The pools' ``configure`` and ``check`` hooks: ``check_connection``'s round trip only after
    ``after`` seconds idle (else ten per graph invoke), :func:`closed_by_server` for the others."""

    def __init__(self, after: float) -> None:
        self.after = after
        self._since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def _due(self, conn: Any) -> bool:
        return time.monotonic() - self._since.get(conn, -math.inf) >= self.after

    def returned(self, conn: Any) -> None:
        """Called on return (not a ``reset`` hook, which an async pool runs in a task)."""
        self._since[conn] = time.monotonic()

    configure = returned  # a new connection counts from its opening

    def check(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            psycopg_pool.ConnectionPool.check_connection(conn)
        else:
            closed_by_server(conn)

    async def aconfigure(self, conn: Any) -> None:
        self.returned(conn)

    async def acheck(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            await psycopg_pool.AsyncConnectionPool.check_connection(conn)
        else:
            closed_by_server(conn)


def closed_by_server(conn: Any) -> None:
    """Raise ``psycopg.OperationalError`` if the server closed ``conn`` (no round trip)."""
    import psycopg

    pgconn = conn.pgconn
    # the first read takes the goodbye notice, which is_busy() parses; the second raises
    pgconn.consume_input()
    pgconn.is_busy()
    pgconn.consume_input()
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("the server closed the connection")


#: A server's refusal for now, not for good (no SQLSTATE reaches a client before a session).
TRANSIENT = re.compile(
    "starting up|shutting down|recovery|not yet accepting connections|too many clients"
    "|connection slots|too many connections"
)
#: A refusal for good: the server's ``FATAL``, nothing listening, an unknown host.
DEFINITE = re.compile("FATAL:|Connection refused|could not translate host name")


def definite_refusal(exc: BaseException) -> bool:
    """Whether a failed connect is final, so trying again would only delay the error.

    Example:
        >>> from psycopg import OperationalError as Failed
        >>> gone, starting = 'database "x" does not exist', "the database system is starting up"
        >>> [definite_refusal(Failed(f"FATAL:  {why}")) for why in (gone, starting)]
        [True, False]
    """
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return False
    return not TRANSIENT.search(str(exc)) and bool(DEFINITE.search(str(exc)))


#: libpq's refusal of a connection parameter's value, reported only as it connects.
OPTION_ERROR = re.compile(
    r"invalid (?:\w+ )?(?:value|number)\b.*|could not match \d+ .*|\w+ parameter must be .*"
)


def option_error(exc: BaseException) -> str | None:
    """What a failed connect says is wrong in the connection string, or ``None``.

    Example:
        >>> import psycopg
        >>> option_error(psycopg.OperationalError('connection is bad: invalid port number: "0"'))
        'invalid port number: "0"'
        >>> option_error(psycopg.OperationalError("Connection refused")) is None
        True
    """
    import psycopg

    if isinstance(exc, psycopg.ProgrammingError):
        return str(exc).strip()
    found = OPTION_ERROR.search(str(exc)) if isinstance(exc, psycopg.OperationalError) else None
    return found.group(0).strip() if found else None


def checked_conninfo(conninfo: str, where: str) -> dict[str, Any]:
    """The parameters of ``conninfo`` as libpq reads them; ``ConfigurationError`` in libpq's
    words, after ``where`` (masked), for a parameter it does not know or a string it cannot read."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"{where}: {str(exc).strip()} (the parameters libpq knows are listed at "
            "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS; "
            "this package adds prepare_threshold and schema)"
        ) from None


#: Unless the string sets them: a dead peer is noticed in about a minute.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


def with_keepalives(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in KEEPALIVES.items() if k not in given})


@dataclass(frozen=True)
class PostgresOptions:
    """How a PostgreSQL saver or store connects; see :class:`PostgresSaver` for each one."""

    pool_size: int = 8
    connect_timeout: float = 10.0
    synchronous_commit: bool = True
    #: psycopg's default: prepared statements make ``get_tuple`` about 4x faster (``scale``).
    prepare_threshold: int | None = 5
    max_idle: float = 600.0
    max_lifetime: float = 3600.0
    check_after_idle: float = 1.0
    schema: str | None = None

    def __post_init__(self) -> None:
        if self.schema is not None and (
            not isinstance(self.schema, str) or not SCHEMA_NAME.fullmatch(self.schema)
        ):
            raise ConfigurationError(
                "schema must be a PostgreSQL identifier of letters, digits and underscores, "
                f"starting with a letter or underscore, at most 63 characters; got {self.schema!r}"
            )
        if not _whole(self.pool_size, 1):
            raise ConfigurationError(f"pool_size must be an int >= 1, got {self.pool_size!r}")
        for name in ("connect_timeout", "max_idle", "max_lifetime", "check_after_idle"):
            value = getattr(self, name)
            least = 0 if name == "check_after_idle" else 1e-9
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise ConfigurationError(
                    f"{name} must be a number of seconds {'>= 0' if least == 0 else '> 0'}, "
                    f"got {value!r}"
                )

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


class PgSession:
    """What a plan's batches send on one psycopg connection, decided without I/O: a lone
    statement by itself, anything else in one pipeline (``BEGIN`` and the statements), then
    ``COMMIT`` outside it (a transaction pooler would keep a server connection linked for the
    pipeline's closing Flush). Rows come back binary (hex ``bytea`` is twice the bytes);
    transaction control is never prepared (each prepared statement is a name on the server)."""

    def __init__(
        self,
        conn: Any,
        *,
        synchronous_commit: bool = True,
        qualify: Callable[[str], str] | None = None,
    ) -> None:
        if not conn.autocommit:
            raise ConfigurationError(
                "PostgreSQL connections must be in autocommit mode: use psycopg.connect(..., "
                "autocommit=True) or ConnectionPool(..., kwargs={'autocommit': True})"
            )
        self.conn = conn
        self.synchronous_commit = synchronous_commit
        self.qualify = qualify
        self.in_tx = False
        #: A pipelined batch failed: the prepared statements may disagree, so discard it.
        self.unsure = False

    def text(self, stmt: Stmt) -> str:
        return stmt.sql.text if self.qualify is None else self.qualify(stmt.sql.text)

    def lone(self, batch: Batch) -> Stmt | None:
        """The statement to send alone, or ``None`` when the batch needs a transaction."""
        if self.in_tx or batch.hold or batch.lock or len(batch.statements) != 1:
            return None
        stmt = batch.statements[0]
        return None if stmt.many or (batch.write and not self.synchronous_commit) else stmt

    def opening(self, batch: Batch) -> tuple[str, ...]:
        if self.in_tx:
            return ()
        self.in_tx = True
        if batch.write and not self.synchronous_commit:
            return ("BEGIN", "SELECT set_config('synchronous_commit', 'off', true)")
        return ("BEGIN",)

    def ended(self, batch: Batch, ok: bool) -> bool:
        """Record how the batch ended; whether a transaction is left to roll back."""
        left_open = self.in_tx
        if not ok or not batch.hold:
            self.in_tx = False
        return left_open and not ok

    def lost(self, exc: BaseException) -> BaseException:
        """A broken connection's error as :class:`DatabaseUnavailableError`, any other as is."""
        if self.conn.closed or self.conn.broken or connection_failure(exc):
            return DatabaseUnavailableError(
                f"the connection to PostgreSQL was lost: {first_line(exc)}"
            )
        return exc


def failures() -> tuple[type[Exception], ...]:
    import psycopg

    return (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.InternalError_)


def connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection failed: SQLSTATE class ``08``, a shutdown, or
    none at all, which only the client side gives (a socket closed mid-pipeline says
    "cannot exit pipeline mode while busy" before psycopg marks the connection broken)."""
    import psycopg

    if isinstance(exc, psycopg.errors.InternalError_):
        # Citus's coordinator's error (XX000, any internal error) when its postmaster died
        return first_line(exc).startswith("postmaster was shut down")
    if not isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    if isinstance(exc, psycopg.errors.PipelineAborted):
        return False  # a statement before it failed: that error is the one to report
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(("08", "57P01", "57P02", "57P03"))


def _prepare(stmt: Stmt) -> bool | None:
    return None if stmt.prepare else False


def _params(stmt: Stmt) -> Any:
    if stmt.many:
        return [stmt.sql.bind(p) for p in stmt.params]
    return stmt.sql.bind(stmt.params)


# The I/O below is written once, as coroutines over either psycopg API: on a sync connection
# _done returns at once, so the coroutine never suspends and _now runs it without a loop.


async def _done(result: Any) -> Any:
    """``result`` of a psycopg call, awaited where the async API returned an awaitable."""
    return await result if inspect.isawaitable(result) else result


def _now(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` of sync calls (which never suspends) to its end; its value."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    coroutine.close()
    raise RuntimeError("a coroutine over a sync connection suspended")


async def _off_loop(call: Callable[[], T], sync: bool) -> T:
    """``call()`` (blocking I/O): here when sync, else in a worker thread."""
    return call() if sync else await asyncio.to_thread(call)


@asynccontextmanager
async def _entered(manager: Any) -> AsyncIterator[Any]:
    """``async with`` a context manager, sync or async (psycopg's, a lock)."""
    if hasattr(manager, "__aenter__"):
        async with manager as value:
            yield value
    else:
        with manager as value:
            yield value


async def execute(session: PgSession, batch: Batch) -> list[Any]:
    """Send one batch (see :class:`PgSession`); on a sync connection through :func:`_now`."""
    conn, lone, sent = session.conn, session.lone(batch), []
    try:
        if lone is not None:
            text, params = session.text(lone), _params(lone)
            cur = await _done(conn.execute(text, params, binary=lone.fetch, prepare=_prepare(lone)))
            return [await _done(cur.fetchall()) if lone.fetch else cur.rowcount]
        try:
            async with _entered(conn.pipeline()):
                for sql in session.opening(batch):
                    await _done(conn.execute(sql, prepare=False))
                for stmt in batch.statements:
                    cur = conn.cursor(binary=stmt.fetch)
                    await _send(cur, session.text(stmt), stmt)
                    sent.append((cur, stmt))
            if not batch.hold:  # else held open for the next batch
                ending = "ROLLBACK" if batch.rollback else "COMMIT"
                await _done(conn.execute(ending, prepare=False))
        except BaseException:
            session.unsure = True
            if session.ended(batch, ok=False):
                await rollback(conn)
            raise
        session.ended(batch, ok=True)
        return [await _done(c.fetchall()) if s.fetch else _count(c, s) for c, s in sent]
    except failures() as exc:
        raise session.lost(exc) from exc


async def _send(cur: Any, text: str, stmt: Stmt) -> None:
    """One statement into the pipeline; ``many`` with ``prepare`` off: each set of values
    planned for itself (``executemany`` would prepare the statement)."""
    params = _params(stmt)
    if not stmt.many:
        await _done(cur.execute(text, params, prepare=_prepare(stmt)))
    elif stmt.params and stmt.prepare:
        await _done(cur.executemany(text, params))
    else:
        for one in params:
            await _done(cur.execute(text, one, prepare=False))


def _count(cur: Any, stmt: Stmt) -> int:
    return 0 if stmt.many and not stmt.params else int(cur.rowcount)


async def rollback(conn: Any) -> None:
    with suppress(Exception):  # a broken connection: the pool discards it
        if not conn.closed:
            await _done(conn.execute("ROLLBACK", prepare=False))


class PostgresDatabase(Database[Any]):
    """PostgreSQL from a connection string (pools opened on first use, one async pool per
    event loop), a connection (a lock serializes its users) or a pool, never closed here."""

    def __init__(self, source: Any, **options: Any) -> None:
        psycopg = require("psycopg", "postgres", "PostgreSQL needs psycopg 3")
        psycopg_pool = require("psycopg_pool", "postgres", "PostgreSQL needs psycopg 3")
        self._given: dict[str, Any] = {}
        self._conninfo: str | None = None
        self._sync: Any = None  # a ConnectionPool or a Connection
        self._async: Any = None  # an AsyncConnectionPool or an AsyncConnection
        if isinstance(source, str):
            self._conninfo = self._take_url_options(source, options)
            self._given = checked_conninfo(self._conninfo, mask_url(self._conninfo))
        if PREPARE_THRESHOLD in options:
            options[PREPARE_THRESHOLD] = prepare_threshold_of(options[PREPARE_THRESHOLD])
        self.options = PostgresOptions(**options)
        if isinstance(source, (psycopg.Connection, psycopg_pool.ConnectionPool)):
            self._sync = source
        elif isinstance(source, (psycopg.AsyncConnection, psycopg_pool.AsyncConnectionPool)):
            self._async = source
        elif not isinstance(source, str):
            raise ConfigurationError(
                "PostgreSQL source must be a connection string, a psycopg (Async)Connection or "
                f"a psycopg_pool (Async)ConnectionPool, got {type(source).__name__}"
            )
        #: unless the caller chose a threshold, check once that the server is reached directly
        self._check_pooler = PREPARE_THRESHOLD not in options
        self._pooler_checked = False
        self._idle_check = IdleCheck(self.options.check_after_idle)
        self.dialect = PostgresDialect(schema=self.options.schema)
        self.pool_size = self.options.pool_size
        self.connect_timeout = self.options.connect_timeout
        self._closed = False
        self._owned_sync = self._owned_async = False
        self._fresh_locks()
        fork.register(self)

    @staticmethod
    def _take_url_options(conninfo: str, options: dict[str, Any]) -> str:
        """Move the package's own URL options into ``options`` (libpq refuses them)."""
        for name in (SCHEMA, PREPARE_THRESHOLD):
            conninfo, raw = take_url_option(conninfo, name)
            if raw is None:
                continue
            where = f"the {name} of {mask_url(conninfo)}"
            read = prepare_threshold_of if name == PREPARE_THRESHOLD else lambda v, _="": v
            value = read(raw, where)
            given = options.get(name)
            if name in options and read(given) != value and (given, name) != (None, SCHEMA):
                raise ConfigurationError(
                    f"{where} is {raw!r} but the {name} argument is {given!r}: give one of them"
                )
            options[name] = value
        return conninfo

    def _fresh_locks(self) -> None:
        self._sync_lock = threading.Lock()
        self._async_lock: asyncio.Lock | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._open_lock = threading.Lock()
        self._aopen_lock: asyncio.Lock | None = None
        self._aopen_loop: asyncio.AbstractEventLoop | None = None

    def after_fork(self) -> None:
        """Pools opened here are set aside and reopened on first use."""
        if self._owned_sync:
            fork.set_aside(self._sync)
            self._sync, self._owned_sync = None, False
        if self._owned_async:
            fork.set_aside(self._async)
            self._async, self._owned_async = None, False
        self._fresh_locks()

    def describe(self) -> str:
        if self._conninfo is not None:
            return mask_url(self._conninfo)
        return f"postgresql ({type(self._sync or self._async).__name__})"

    def server(self) -> tuple[str | None, int | None]:
        params = self._given
        host = str(params.get("host") or params.get("hostaddr") or "").split(",")[0]
        port = str(params.get("port") or "").split(",")[0]
        return host or None, int(port) if port.isdigit() else None

    def namespace(self) -> str | None:
        """``{database}|{schema}``, as OpenTelemetry names a PostgreSQL namespace."""
        parts = (self._given.get("dbname"), self.options.schema)
        return "|".join(str(p) for p in parts if p) or None

    def pool_usage(self) -> list[PoolUsage]:
        import psycopg_pool

        usage = []
        pools = (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool)
        for kind, pool in (("sync", self._sync), ("async", self._async)):
            if isinstance(pool, pools):
                stats = pool.get_stats()
                size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
                name, most = f"{self.describe()} ({kind})", stats.get("pool_max", pool.max_size)
                pending = stats.get("requests_waiting", 0)
                usage.append(PoolUsage(name, max(size - idle, 0), idle, most, pending))
        return usage

    async def _open_pool(self, *, sync: bool) -> Any:
        """A new pool of the conninfo, open and checked; its connections sync or async."""
        import psycopg
        import psycopg_pool

        await _off_loop(self._first_contact, sync)
        kind = psycopg_pool.ConnectionPool if sync else psycopg_pool.AsyncConnectionPool
        hooks = self._idle_check
        options: dict[str, Any] = dict(
            conninfo=with_keepalives(self._conninfo or ""),
            min_size=1,
            max_size=self.pool_size,
            kwargs={"autocommit": True, "prepare_threshold": self.options.prepare_threshold},
            open=False,
            name="agent-memory",
            timeout=self.connect_timeout,
            # not psycopg_pool's 5 minutes of backoff: after an outage the next call connects
            reconnect_timeout=self.connect_timeout,
            configure=hooks.configure if sync else hooks.aconfigure,
            check=hooks.check if sync else hooks.acheck,
            max_idle=self.options.max_idle,
            max_lifetime=self.options.max_lifetime,
        )
        pool: Any = kind(**options)
        try:
            await _done(pool.open(wait=True, timeout=self.connect_timeout))
            async with _entered(pool.connection()) as conn:
                await self._verify(conn)
        except BaseException as exc:
            await _done(pool.close())
            if isinstance(exc, psycopg_pool.PoolTimeout):
                raise self._unavailable(await _off_loop(self._probe, sync)) from None
            if isinstance(exc, psycopg.OperationalError):
                raise self._unavailable(str(exc)) from exc
            raise
        return pool

    async def _getconn(self, pool: Any) -> Any:
        import psycopg_pool

        sync = isinstance(pool, psycopg_pool.ConnectionPool)
        started = time.perf_counter()
        try:
            conn = await _done(pool.getconn())
        except psycopg_pool.PoolTimeout:
            raise self._unavailable(await _off_loop(self._probe, sync)) from None
        connection_waited(lambda: f"{self.describe()} ({'sync' if sync else 'async'})", started)
        return conn

    def _session(self, conn: Any) -> PgSession:
        commit = self.options.synchronous_commit  # set by each write transaction for itself
        return PgSession(conn, synchronous_commit=commit, qualify=self.dialect.qualify)

    def _run_sync(self, plan: Plan[T]) -> T:
        if self._sync is not None or self._conninfo is not None:
            if self._closed:
                raise ClosedError(f"the PostgreSQL saver for {self.describe()} was closed")
            source = self._sync
            if source is None:
                with self._open_lock:
                    if self._sync is None:
                        self._sync, self._owned_sync = _now(self._open_pool(sync=True)), True
                    source = self._sync
            return _now(self._run_on(source, self._sync_lock, plan))
        loop = self._async_loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            raise ConfigurationError(
                "this PostgreSQL saver was given an async connection: from async code use the "
                "async methods (aput, aget_tuple, ...); sync calls work only from another thread"
            )
        return asyncio.run_coroutine_threadsafe(self.arun(plan), loop).result()

    async def _async_pool(self, loop: asyncio.AbstractEventLoop) -> Any:
        if self._aopen_lock is None or self._aopen_loop is not loop:
            # set before any await, so every task of this loop shares the one lock
            self._aopen_lock, self._aopen_loop = asyncio.Lock(), loop
        async with self._aopen_lock:
            if self._async is not None and self._async_loop is not loop:
                # a pool belongs to the loop that opened it; a new loop gets a new pool
                old, self._async, self._owned_async = self._async, None, False
                with suppress(Exception):
                    await old.close()
            if self._async is None:
                self._async, self._owned_async = await self._open_pool(sync=False), True
                self._async_loop = loop
        return self._async

    async def arun(self, plan: Plan[T]) -> T:
        import psycopg_pool

        if self._async is None and self._conninfo is None:
            return await asyncio.to_thread(self._run_sync, plan)
        if self._closed:
            raise ClosedError(f"the PostgreSQL saver for {self.describe()} was closed")
        loop = asyncio.get_running_loop()
        target = self._async
        if self._conninfo is not None and (target is None or self._async_loop is not loop):
            target = await self._async_pool(loop)
        if not isinstance(target, psycopg_pool.AsyncConnectionPool):
            if self._async_lock is None:
                self._async_lock = asyncio.Lock()
            self._async_loop = loop
        return await self._run_on(target, self._async_lock, plan)

    async def _run_on(self, source: Any, lock: Any, plan: Plan[T]) -> T:
        """Run ``plan`` on a connection of the pool ``source``, or on ``source`` under ``lock``."""
        import psycopg_pool

        if not isinstance(source, (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool)):
            async with _entered(lock):
                return await self._drive(_Lease(source, None), plan)
        lease = _Lease(await self._getconn(source), source)
        try:
            return await self._drive(lease, plan)
        finally:
            if lease.conn is not None:  # None: lost, given back, and no fresh one had
                self._idle_check.returned(lease.conn)
                await _done(source.putconn(lease.conn))

    async def _drive(self, lease: _Lease, plan: Plan[T]) -> T:
        """Run ``plan`` on the leased connection (sync or async, see :func:`_now`)."""
        session = self._session(lease.conn)
        first = True

        async def run(batch: Batch) -> list[Any]:
            """The plan's first batch, a read, runs again on a fresh connection if lost."""
            nonlocal session, first
            reads = not (batch.write or batch.hold or batch.lock)
            resendable, first = first and lease.pool is not None and reads, False
            try:
                return await execute(session, batch)
            except DatabaseUnavailableError:
                if not resendable:
                    raise
            # given back once, even with no fresh one: a second return starts a second replacement
            lost, lease.conn = lease.conn, None
            await _done(lost.close())
            await _done(lease.pool.putconn(lost))
            lease.conn = await self._getconn(lease.pool)
            session = self._session(lease.conn)
            return await execute(session, batch)

        try:
            await self._verify(lease.conn)
            return await adrive(plan, run)
        except failures() as exc:
            raise session.lost(exc) from exc
        finally:
            if session.in_tx and lease.conn is not None:
                session.in_tx = False
                await rollback(lease.conn)
            if session.unsure and lease.pool is not None and lease.conn is not None:
                await _done(lease.conn.close())  # putconn discards a closed connection

    async def _verify(self, conn: Any) -> None:
        """Refuse a pooler, once, where ``conn`` prepares statements and no threshold was chosen."""
        if self._check_pooler and not self._pooler_checked and conn.prepare_threshold is not None:
            # the server's process id differs from the one told at connect time behind a pooler
            cur = await _done(conn.execute("SELECT pg_backend_pid()", prepare=False))
            server_pid = (await _done(cur.fetchone()))[0]
            where, passed_in = self.describe(), self._conninfo is None
            error = pooler_error(conn.info.backend_pid, server_pid, where, passed_in=passed_in)
            if error is not None:
                raise error
            self._pooler_checked = True

    def _first_contact(self) -> None:
        """One direct connect before a pool opens, so a definite refusal fails at once."""
        import psycopg
        from psycopg.conninfo import make_conninfo

        conninfo = with_keepalives(self._conninfo or "")
        if "connect_timeout" not in self._given:
            conninfo = make_conninfo(conninfo, connect_timeout=max(1, int(self.connect_timeout)))
        try:
            psycopg.connect(conninfo).close()
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            where = f"PostgreSQL at {self.describe()}"
            if (wrong := option_error(exc)) is not None:
                raise ConfigurationError(f"{where}: {self._reason(wrong)}") from None
            if definite_refusal(exc):
                why = self._reason(str(exc))
                raise DatabaseUnavailableError(f"{where} refused the connection: {why}") from None

    def _reason(self, error: str) -> str:
        """The server's words from libpq's message, on one line, the password masked."""
        lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
        reason = lines[0].rsplit("failed: ", 1)[-1] if lines else error
        reason = reason.replace("FATAL:  ", "")
        secret = self._given.get("password")
        if secret:
            reason = reason.replace(str(secret), "***")
        return reason

    def _probe(self) -> str | None:
        """Why no connection came, from one direct attempt (``None``: a pool passed in)."""
        import psycopg

        if self._conninfo is None:
            return None
        seconds = max(1, int(self.connect_timeout))
        try:
            psycopg.connect(self._conninfo, connect_timeout=seconds).close()
        except psycopg.Error as exc:
            return str(exc)
        return None

    def _unavailable(self, error: str | None) -> DatabaseUnavailableError:
        busy = "every pooled connection stayed busy"
        reason = self._reason(error) if error and error.strip() else busy
        return DatabaseUnavailableError(
            f"cannot reach PostgreSQL at {self.describe()} within {self.connect_timeout:g} s: "
            f"{reason}"
        )

    def close(self) -> None:
        self._closed = self._conninfo is not None
        if self._owned_sync and self._sync is not None:
            pool, self._sync, self._owned_sync = self._sync, None, False
            pool.close()
        if self._owned_async and self._async is not None:
            pool, self._async, self._owned_async = self._async, None, False
            loop = self._async_loop
            if loop is not None and not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(pool.close())

    async def aclose(self) -> None:
        self._closed = self._conninfo is not None
        if self._owned_async and self._async is not None:
            pool, self._async, self._owned_async = self._async, None, False
            await pool.close()
        if self._owned_sync and self._sync is not None:
            pool, self._sync, self._owned_sync = self._sync, None, False
            await asyncio.to_thread(pool.close)


@dataclass
class _Lease:
    conn: Any
    pool: Any  # None: a connection passed in, which cannot be replaced
