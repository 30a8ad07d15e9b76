"""SAP HANA through ``hdbcli`` (a pooled connection per plan: not thread-safe), compiled
by ``sqlalchemy-hana``. No ``ON CONFLICT``: ``UPSERT ... WITH PRIMARY KEY`` and ``INSERT
... WHERE NOT EXISTS``; DDL commits by itself, so an object found created counts as applied.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect as SADialect
from sqlalchemy.ext.compiler import compiles

from langgraph_checkpoint_agent_memory.db.database import (
    Batch,
    Database,
    Plan,
    PoolUsage,
    Stmt,
    T,
    first_line,
)
from langgraph_checkpoint_agent_memory.db.dbapi import DbApiPool, DbApiSession
from langgraph_checkpoint_agent_memory.db.dialect import (
    AnnConfig,
    Columns,
    Dialect,
    Source,
    Sql,
    VectorIndex,
    nearest,
    values_params,
    vectors_near,
)
from langgraph_checkpoint_agent_memory.db.schema import store_vectors, vectors_v
from langgraph_checkpoint_agent_memory.db.url import mask_url
from langgraph_checkpoint_agent_memory.errors import DatabaseUnavailableError, require

logger = logging.getLogger(__name__)

NEEDS = "SAP HANA needs sqlalchemy-hana and hdbcli"
#: hdbcli error codes meaning "that object already exists".
ALREADY_EXISTS = {288, 289, 307}
# raw: HANA catalog lookups (a column of the vectors' table; the migrations' table)
COLUMN_EXISTS = (
    "SELECT COUNT(*) FROM SYS.TABLE_COLUMNS WHERE SCHEMA_NAME = CURRENT_SCHEMA "
    "AND TABLE_NAME = 'AM_STORE_VECTORS' AND COLUMN_NAME = :column"
)
MIGRATIONS_EXIST = (
    "SELECT COUNT(*) FROM TABLES WHERE SCHEMA_NAME = CURRENT_SCHEMA "
    "AND TABLE_NAME = 'AM_MIGRATIONS'"
)


@functools.cache
def upsert_by_key() -> Any:
    """sqlalchemy-hana's (optional) ``Upsert`` with ``WITH PRIMARY KEY``, built on first use."""
    from sqlalchemy_hana.elements import Upsert

    class UpsertByKey(Upsert):
        inherit_cache = False

    @compiles(UpsertByKey)
    def _compile(element: Any, compiler: Any, **kw: Any) -> str:
        return f"{compiler.visit_upsert(element, **kw)} WITH PRIMARY KEY"

    return UpsertByKey


def _column(name: str) -> Any:
    """Raw: a vector column :mod:`.schema` does not declare."""
    return sa.literal_column(f"{vectors_v.name}.{name}")


def _similarity(embedding: Any) -> Any:
    query = sa.func.TO_REAL_VECTOR(sa.bindparam("query_vector"))
    return sa.func.COSINE_SIMILARITY(embedding, query).label("sim")


class HanaDialect(Dialect):
    name = "hana"
    conditional_upsert = False
    create_if_not_exists = False
    recursive_cte = False
    substr = "SUBSTRING"

    def _make_sa_dialect(self) -> SADialect:
        dialect: SADialect = require("sqlalchemy_hana.dialect", "hana", NEEDS).HANAHDBCLIDialect()
        return dialect

    native_vectors = True

    def new_num(self) -> Any:
        return sa.literal_column("am_store_item_numbers.NEXTVAL", sa.BigInteger)

    def num_ddl(self) -> list[str]:
        # raw: a sequence has no Core DDL here
        return ["CREATE SEQUENCE am_store_item_numbers"]

    def merge_lock(self) -> Sql:
        # raw: a table lock, no Core form (HANA has no advisory locks)
        return Sql("LOCK TABLE am_store_chunks IN EXCLUSIVE MODE")

    def __init__(self) -> None:
        super().__init__()
        #: The dimension counts with a typed, HNSW-indexed column ``embedding_<dims>``.
        self.indexed_dims: frozenset[int] = frozenset()

    def vector_ddl(self) -> list[str]:
        # raw: ALTER TABLE and HANA's REAL_VECTOR type have no Core form
        return ["ALTER TABLE am_store_vectors ADD (embedding REAL_VECTOR)"]

    def to_vector(self, text: Any) -> Any:
        return sa.func.TO_REAL_VECTOR(text)

    def vector_columns(self) -> tuple[str, ...]:
        return ("embedding", *(f"embedding_{d}" for d in sorted(self.indexed_dims)))

    def vector_row(self, row: dict[str, Any]) -> None:
        for dims in self.indexed_dims:
            row[f"embedding_{dims}"] = row["embedding"] if len(row["vector"]) == 4 * dims else None

    def _fill_typed(self, dims: int) -> Any:
        """Copy the vectors of ``dims`` dimensions into their typed column, where empty."""
        typed = f"embedding_{dims}"
        t = self.native_vectors_table(["embedding", typed])
        return (
            sa.update(t)
            .where(
                t.c[typed].is_(None),
                t.c.embedding.is_not(None),
                sa.func.length(t.c.vector) == sa.literal_column(str(4 * int(dims))),
            )
            .values({typed: t.c.embedding})
        )

    def vector_search(
        self, filters: Hashable, where: Sequence[Any], dims: int, *, joined: bool
    ) -> Sql:
        def build() -> Any:
            embedding = _column("embedding")
            sized = sa.func.length(vectors_v.c.vector) == sa.literal_column(str(4 * int(dims)))
            order = [sa.desc("sim"), vectors_v.c.prefix, vectors_v.c.key]
            conditions = [*where, embedding.is_not(None), sized]
            return nearest(_similarity(embedding), conditions, order, joined=joined)

        return self.sql(("vector_search", filters, dims, joined), build)

    # HANA's HNSW index needs one dimension count per column: a typed column per count
    def ann_index(self, dims: int, config: AnnConfig) -> VectorIndex | None:
        if config.kind != "hnsw":
            return None
        return VectorIndex(
            name=f"am_store_vectors_hnsw_{int(dims)}",
            dims=int(dims),
            vector_type="REAL_VECTOR",
            column=f"v.embedding_{int(dims)}",
            ef_search=config.ef_search,
        )

    def ann_index_plan(self, index: VectorIndex, config: AnnConfig, *, create: bool) -> Plan[bool]:
        column = f"embedding_{index.dims}"
        probe = self.sql("ann_column_exists", lambda: COLUMN_EXISTS)
        [[(found,)]] = yield Batch([Stmt(probe, {"column": column.upper()}, fetch=True)])
        if create:
            if not found:
                # raw: ALTER TABLE and REAL_VECTOR have no Core form
                add = f"ALTER TABLE am_store_vectors ADD ({column} REAL_VECTOR({index.dims}))"
                sql = self.sql(("ann_column", index.dims), lambda: add)
                yield from _unless_there(Batch([Stmt(sql)], write=True))
            fill = self.sql(("ann_fill", index.dims), lambda: self._fill_typed(index.dims))
            yield Batch([Stmt(fill)], write=True)
            build = json.dumps({"M": config.m, "efConstruction": config.ef_construction})
            search = json.dumps({"efSearch": config.ef_search})
            # raw: HANA's HNSW vector index DDL has no Core form
            ddl = (
                f"CREATE HNSW VECTOR INDEX {index.name} ON am_store_vectors ({column}) "
                f"SIMILARITY FUNCTION COSINE_SIMILARITY BUILD CONFIGURATION '{build}' "
                f"SEARCH CONFIGURATION '{search}' ONLINE"
            )
            try:
                sql = self.sql(("ann_index", index.name, build, search), lambda: ddl)
                yield Batch([Stmt(sql)], write=True)
            except Exception as exc:
                if _error_code(exc) not in ALREADY_EXISTS:
                    # a HANA without the HNSW index: the typed column still ranks exactly
                    logger.warning(
                        "no HNSW vector index on this SAP HANA (%s): similarity search over "
                        "%s stays exact",
                        exc,
                        column,
                    )
        if create or found:
            self.indexed_dims = self.indexed_dims | {index.dims}
        return create or bool(found)

    def ann_search(self, index: VectorIndex, filters: Hashable, where: Sequence[Any]) -> list[Sql]:
        def build() -> Any:
            embedding = _column(f"embedding_{index.dims}")
            conditions = [*where, embedding.is_not(None)]
            return nearest(_similarity(embedding), conditions, [sa.desc("sim")])

        return [self.sql(("ann_search", index.name, filters), build)]

    def vector_counts(self, index: VectorIndex, under: Sequence[Any], scoped: bool) -> Sql:
        def build() -> Any:
            typed: Any = sa.literal_column(f"embedding_{index.dims}")  # raw: see _column
            indexed = (
                sa.select(sa.func.count())
                .select_from(store_vectors)
                .where(typed.is_not(None))
                .scalar_subquery()
            )
            return sa.select(vectors_near(under), indexed)

        return self.sql(("vector_counts", index.name, scoped), build)

    def upsert(self, table: sa.Table, keys: Columns, update: Columns, where: Any = None) -> Any:
        if where is not None:
            raise NotImplementedError("HANA plans do not use conditional upserts")
        cols = [c.name for c in table.columns]
        return upsert_by_key()(table).values({**values_params(table, cols), **self.computed(table)})

    def upsert_select(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns, update: Columns
    ) -> Any:
        from sqlalchemy_hana.elements import Upsert

        # UPSERT <table> (<cols>) <subquery> matches on the primary key
        return Upsert(table).from_select(list(cols), source)

    def insert_row_ignore(self, table: sa.Table, keys: Columns) -> sa.sql.ClauseElement:
        return self.insert_ignore(table, keys)  # no ON CONFLICT: INSERT ... WHERE NOT EXISTS

    def insert_missing(self, table: sa.Table, cols: Columns, source: Source, keys: Columns) -> Any:
        src = source.subquery("src")
        target = table.alias("existing")
        fresh = sa.select(*[src.c[c] for c in cols]).where(
            ~sa.exists().where(*[target.c[k] == src.c[k] for k in keys])
        )
        return sa.insert(table).from_select(list(cols), fresh)

    def unless_exists(self, table: str, create: str) -> str:
        # raw: an anonymous SQLScript block (conditional DDL), no Core form
        return (
            "DO BEGIN DECLARE found INTEGER; SELECT COUNT(*) INTO found FROM TABLES "
            f"WHERE SCHEMA_NAME = CURRENT_SCHEMA AND TABLE_NAME = '{table.upper()}'; "
            f"IF :found = 0 THEN EXEC '{create.replace(chr(39), chr(39) * 2)}'; END IF; END"
        )

    def create_if_missing(self, create: Sql) -> Any:
        lookup = self.sql("migrations_table_exists", lambda: MIGRATIONS_EXIST)
        [[(found,)]] = yield Batch([Stmt(lookup, fetch=True)])
        if not found:
            yield from _unless_there(Batch([Stmt(create)], write=True))

    def migration_lock(self) -> str | None:
        return "LOCK TABLE am_migrations IN EXCLUSIVE MODE"


def _unless_there(batch: Batch) -> Plan[None]:
    """Run ``batch``, which creates something a concurrent setup may have created first."""
    try:
        yield batch
    except Exception as exc:
        if _error_code(exc) not in ALREADY_EXISTS:
            raise


def _error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "errorcode", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    return code


class HanaSession(DbApiSession):
    """Manual-commit session whose fetched LOBs are read into bytes and text."""

    def execute(self, batch: Batch) -> list[Any]:
        return [
            [tuple(v.read() if hasattr(v, "read") else v for v in row) for row in r]
            if isinstance(r, list)
            else r
            for r in super().execute(batch)
        ]


class HanaDatabase(Database[Any]):
    """SAP HANA from ``hdbcli.dbapi.connect`` arguments, through :class:`.dbapi.DbApiPool`."""

    def __init__(
        self, connect_args: dict[str, Any], *, pool_size: int = 4, url: str | None = None
    ) -> None:
        self.dialect = HanaDialect()
        self.connect_args = dict(connect_args)
        self._url = url
        self.pool_size = pool_size
        self._pool: DbApiPool | None = None

    def _connections(self) -> DbApiPool:
        if self._pool is None:
            dbapi = require("hdbcli.dbapi", "hana", NEEDS)
            HANAHDBCLIDialect = require("sqlalchemy_hana.dialect", "hana", NEEDS).HANAHDBCLIDialect
            self._pool = DbApiPool(
                self._connect,
                # hdbcli names two paramstyles; the ping needs one
                dialect=HANAHDBCLIDialect(dbapi=dbapi, paramstyle="qmark"),
                size=self.pool_size,
                timeout=30,
                describe=self.describe,
            )
        return self._pool

    def pool_usage(self) -> list[PoolUsage]:
        return [] if self._pool is None else [self._pool.usage(self.describe())]

    def server(self) -> tuple[str | None, int | None]:
        """hdbcli's ``address`` and ``port``."""
        port = self.connect_args.get("port")
        return self.connect_args.get("address"), int(port) if port is not None else None

    def namespace(self) -> str | None:
        """hdbcli's ``databaseName`` and ``currentSchema``, as ``{database}|{schema}``."""
        parts = (self.connect_args.get(k) for k in ("databaseName", "currentSchema"))
        return "|".join(str(p) for p in parts if p) or None

    def describe(self) -> str:
        if self._url:
            return mask_url(self._url)
        return f"hana://{self.connect_args.get('user')}:***@{self.connect_args.get('address')}"

    def __repr__(self) -> str:
        return f"HanaDatabase({self.describe()})"

    def _connect(self) -> Any:
        """A new connection in manual-commit mode."""
        from hdbcli import dbapi

        try:
            conn = dbapi.connect(**self.connect_args)
        except dbapi.Error as exc:
            raise DatabaseUnavailableError(
                f"cannot reach SAP HANA at {self.describe()}: {_hana_reason(exc)}"
            ) from exc
        conn.setautocommit(False)
        return conn

    @contextmanager
    def connection(self) -> Iterator[Any]:
        pool = self._connections()
        with pool.connection() as conn:
            try:
                yield conn
            except Exception as exc:
                if pool.lost(exc, conn):
                    raise DatabaseUnavailableError(
                        f"the connection to SAP HANA at {self.describe()} was lost: "
                        f"{_hana_reason(exc)}"
                    ) from exc
                raise

    def _run_sync(self, plan: Plan[T]) -> T:
        with self.connection() as conn:
            return HanaSession(conn, begin_write=None, begin_read=None).run(plan)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _hana_reason(exc: BaseException) -> str:
    """hdbcli's error text on one line, with its code."""
    line = first_line(getattr(exc, "errortext", "") or exc)
    code = _error_code(exc)
    return f"{line} (error {code})" if code is not None else line
