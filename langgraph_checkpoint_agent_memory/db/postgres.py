"""PostgreSQL through psycopg 3: a connection string, a connection or a pool, sync or async.

Each batch travels in one round trip (psycopg pipeline mode: ``BEGIN``, the statements and
``COMMIT`` are sent together); a batch of one statement, which every checkpoint write and read
is, goes through :mod:`pgwire` without a transaction of its own. Given a pool there is no lock
around the database object: the pool is the concurrency control. Given a single connection, a
lock serializes its users, as a connection can run one statement at a time.

Connections must be in autocommit mode (the driver sends its own ``BEGIN``/``COMMIT``); pools
this module opens from a connection string are configured so: a ``psycopg_pool`` pool for the
sync API, a :class:`~langgraph_checkpoint_agent_memory.db.pgpool.AsyncPool` for the async one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as sa_pg
from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Plan, T, adrive, drive
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, FastWrite, Sql
from langgraph_checkpoint_agent_memory.db.url import mask_conninfo
from langgraph_checkpoint_agent_memory.errors import (
    ClosedError,
    ConfigurationError,
    DatabaseUnavailableError,
)

MIGRATION_LOCK_KEY = 0x616D5F6D6967  # "am_mig"


class PostgresDialect(Dialect):
    name = "postgresql"
    pipelines = True

    def _make_sa_dialect(self) -> SADialect:
        return sa_pg.psycopg.dialect()

    def insert(self, table: sa.Table) -> Any:
        return sa_pg.insert(table)

    def cast_param(self, param: sa.BindParameter[Any], type_: Any) -> Any:
        # Cast to the unbounded type: a CAST to VARCHAR(n) would truncate silently, while the
        # column's own limit raises a clear error.
        if isinstance(type_, sa.String) and not getattr(type_, "_variant_mapping", None):
            type_ = sa.Text()
        return sa.cast(param, type_)

    def metadata_prefilter(self, column: Any, key: str, value: Any) -> Any:
        return sa.cast(column, sa_pg.JSONB).op("@>")(sa.cast(value, sa_pg.JSONB))

    def prefilter_value(self, key: str, value: Any) -> Any:
        return json.dumps({key: value})

    def migration_lock(self) -> str | None:
        return f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"

    def param(self, name: str) -> str:
        return f"%({name})s"

    def full_text_ddl(self) -> list[str]:
        return [
            "ALTER TABLE am_store_items ADD COLUMN doc_tsv tsvector GENERATED ALWAYS AS "
            "(to_tsvector('english', coalesce(doc, ''))) STORED",
            "CREATE INDEX am_store_items_doc_tsv ON am_store_items USING GIN (doc_tsv)",
        ]

    def insert_arrays(self, table: sa.Table) -> Sql:
        def build() -> str:
            cols = [c.name for c in table.columns]
            arrays = ", ".join(
                f"CAST(%({c})s AS {table.c[c].type.compile(dialect=self.sa)}[])" for c in cols
            )
            return f"INSERT INTO {table.name} ({', '.join(cols)}) SELECT * FROM unnest({arrays})"

        return self.sql(("insert_arrays", table.name), build)

    def drop_full_text_ddl(self) -> list[str]:
        return [
            "DROP INDEX IF EXISTS am_store_items_doc_tsv",
            "ALTER TABLE am_store_items DROP COLUMN IF EXISTS doc_tsv",
        ]

    def under(self, column: str = "prefix") -> str:
        # A byte-order range, so the planner estimates it from the column's statistics (a
        # substr() comparison is a blind guess that made it scan instead of walking indexes)
        return (
            f'({column} = %(ns)s OR ({column} COLLATE "C" >= %(ns_dot)s '
            f'AND {column} COLLATE "C" < %(ns_end)s))'
        )

    def json_prefilter(self, path: list[str], op: str, value: Any, param: str) -> str | None:
        """One comparison per condition, in jsonb's own order where it is exact: numbers
        compare numerically and sort after strings and null, before booleans, arrays and
        objects, so ``>= 8`` may admit a boolean (Python drops it) but never loses a number,
        and nothing casts a value that is not a number. Strings compare in byte order
        ("C"), as Python does. Fewer, simpler conditions also let the planner estimate
        them, and walk the newest-first index instead of scanning."""
        at = f"CAST(value AS jsonb) #> %({param}_path)s::text[]"
        text = f"(CAST(value AS jsonb) #>> %({param}_path)s::text[])"
        sql_op = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}.get(op)
        if isinstance(value, bool):
            return f"{at} = to_jsonb(%({param})s::boolean)" if op == "$eq" else None
        if value is None:
            return f"jsonb_typeof({at}) = 'null'" if op == "$eq" else None
        if sql_op is not None and isinstance(value, (int, float)):
            if isinstance(value, float) and value != value:  # NaN: let Python decide
                return None
            # through text: a float8 cast straight to numeric keeps only 15 digits, and
            # 0.22551938891410828 would no longer equal itself
            return f"{at} {sql_op} to_jsonb(CAST(CAST(%({param})s AS text) AS numeric))"
        if sql_op is not None and isinstance(value, str):
            return f'{text} COLLATE "C" {sql_op} %({param})s'
        return f"{at} IS NOT NULL"

    def json_path(self, path: list[str]) -> Any:
        return list(path)

    def fast_get_tuple(self, by_id: bool) -> Sql:
        """``get_tuple`` in one statement: the checkpoint row (tag 0); its blobs looked up by
        full primary key (a LATERAL ... LIMIT 1 per channel, so the planner cannot turn it
        into a scan of the thread's blobs), each followed down its chain of appended-list
        bases (tag 1); its writes (tag 2)."""

        def build() -> str:
            by = "AND checkpoint_id = %(checkpoint_id)s " if by_id else ""
            blob = (
                "JOIN LATERAL (SELECT channel, version, type, blob, base_version "
                "FROM am_checkpoint_blobs bb WHERE bb.thread_id = %(thread_id)s "
                "AND bb.checkpoint_ns = %(checkpoint_ns)s "
            )
            return (
                "WITH RECURSIVE c AS (SELECT thread_id, checkpoint_ns, checkpoint_id, "
                "parent_checkpoint_id, type, checkpoint, metadata, blob_versions "
                "FROM am_checkpoints WHERE thread_id = %(thread_id)s "
                f"AND checkpoint_ns = %(checkpoint_ns)s {by}"
                "AND NOT EXISTS (SELECT 1 FROM am_threads t WHERE t.thread_id = %(thread_id)s "
                "AND (t.deleted_at IS NOT NULL OR t.expires_at < %(live_after)s)) "
                "ORDER BY checkpoint_id DESC LIMIT 1), "
                "chain AS ("
                "SELECT b.channel, b.version, b.type, b.blob, b.base_version FROM c "
                "CROSS JOIN LATERAL jsonb_each_text(c.blob_versions::jsonb) AS v(key, value) "
                f"{blob}AND bb.channel = v.key AND bb.version = v.value LIMIT 1) b ON true "
                "UNION ALL "
                "SELECT b.channel, b.version, b.type, b.blob, b.base_version FROM chain "
                f"{blob}AND bb.channel = chain.channel AND bb.version = chain.base_version "
                "LIMIT 1) b ON true) "
                "SELECT 0, c.checkpoint_id::text, c.parent_checkpoint_id::text, c.type::text, "
                "c.checkpoint, c.metadata, c.blob_versions, NULL::integer FROM c "
                "UNION ALL "
                "SELECT 1, channel::text, version::text, type::text, blob, base_version::text, "
                "NULL, NULL FROM chain "
                "UNION ALL "
                "SELECT 2, w.task_id::text, w.channel::text, w.type::text, w.blob, "
                "w.task_path::text, NULL, w.idx "
                "FROM c JOIN am_checkpoint_writes w ON w.thread_id = c.thread_id "
                "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id"
            )

        return self.sql(("fast_get_tuple", by_id), build)

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """One statement, hence one implicit transaction and one round trip, with no
        BEGIN/COMMIT: every insert is a data-modifying CTE conditioned on the thread being
        live. Rows come as a ``VALUES`` list of plain parameters (psycopg adapts an array
        parameter by inspecting its items on every call, which cost more than the insert),
        so there is a statement per row count; a write of more rows takes the generic path.
        """
        groups = ("b",) if kind == "put" else ("f", "r")
        counts = tuple(len(rows[g]) for g in groups)
        if sum(counts) > MAX_VALUES_ROWS:
            return None
        params = dict(fixed)
        for group in groups:
            for row, cells in zip(rows[group], _cell_names(kind, group), strict=False):
                for column, name in cells:
                    params[name] = row[column]

        def build() -> str:
            ctes = [
                "live AS (SELECT 1 AS ok WHERE NOT EXISTS (SELECT 1 FROM am_threads "
                "WHERE thread_id = %(thread_id)s AND (deleted_at IS NOT NULL "
                "OR expires_at < %(live_after)s)))"
            ]
            if touch:
                ctes.append(
                    "touch AS (INSERT INTO am_threads (thread_id, last_active, ttl_seconds, "
                    "expires_at, deleted_at) SELECT %(thread_id)s, %(last_active)s, "
                    "%(ttl_seconds)s::integer, %(expires_at)s::double precision, NULL "
                    "FROM live ON CONFLICT (thread_id) DO UPDATE SET "
                    "last_active = EXCLUDED.last_active, ttl_seconds = EXCLUDED.ttl_seconds, "
                    "expires_at = EXCLUDED.expires_at)"
                )
            if kind == "put":
                if counts[0]:
                    ctes.append(
                        "blobs AS (INSERT INTO am_checkpoint_blobs (thread_id, checkpoint_ns, "
                        "channel, version, type, blob, base_version) SELECT %(thread_id)s, "
                        "%(checkpoint_ns)s, u.channel, u.version, u.type, u.blob, "
                        f"u.base_version FROM live, {_values(kind, 'b', counts[0])} "
                        "AS u(channel, version, type, blob, base_version) ON CONFLICT DO NOTHING)"
                    )
                ctes.append(
                    "cp AS (INSERT INTO am_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                    "parent_checkpoint_id, run_id, type, checkpoint, metadata, blob_versions) "
                    "SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, "
                    "%(parent_checkpoint_id)s, %(run_id)s, %(type)s, %(checkpoint)s, "
                    "%(metadata)s, %(blob_versions)s FROM live "
                    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                    "parent_checkpoint_id = EXCLUDED.parent_checkpoint_id, "
                    "run_id = EXCLUDED.run_id, type = EXCLUDED.type, "
                    "checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata, "
                    "blob_versions = EXCLUDED.blob_versions)"
                )
            else:
                columns = (
                    "INSERT INTO am_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, "
                    "task_id, idx, channel, type, blob, task_path) SELECT %(thread_id)s, "
                    "%(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, u.idx, u.channel, "
                    "u.type, u.blob, %(task_path)s FROM live, "
                )
                if counts[0]:
                    ctes.append(
                        f"first AS ({columns}{_values(kind, 'f', counts[0])} "
                        "AS u(idx, channel, type, blob) ON CONFLICT DO NOTHING)"
                    )
                if counts[1]:
                    ctes.append(
                        f"special AS ({columns}{_values(kind, 'r', counts[1])} "
                        "AS u(idx, channel, type, blob) "
                        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) "
                        "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, "
                        "blob = EXCLUDED.blob, task_path = EXCLUDED.task_path)"
                    )
            return "WITH " + ", ".join(ctes) + " SELECT COUNT(*) FROM live"

        key = ("fast_write", kind, touch, counts)
        return FastWrite(self.sql(key, build), params, fetch=True)


#: Rows one fast write sends as plain parameters; more take the generic statements.
MAX_VALUES_ROWS = 64
#: The row keys a fast write's rows carry, in order, with their SQL types.
_ROW_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "put": [
        ("channel", "text"),
        ("version", "text"),
        ("type", "text"),
        ("blob", "bytea"),
        ("base_version", "text"),
    ],
    "writes": [("idx", "integer"), ("channel", "text"), ("type", "text"), ("blob", "bytea")],
}


@functools.cache
def _cell_names(kind: str, group: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Per row of a fast write, each column with the parameter that carries it."""
    return tuple(
        tuple((column, f"{group}{i}_{column}") for column, _ in _ROW_COLUMNS[kind])
        for i in range(MAX_VALUES_ROWS)
    )


def _values(kind: str, group: str, count: int) -> str:
    """``(VALUES (...), ...)`` over ``count`` rows of ``group``'s parameters; the first row
    carries the types, and blobs travel in binary."""
    rows = []
    for i in range(count):
        cells = []
        for column, sql_type in _ROW_COLUMNS[kind]:
            marker = "b" if sql_type == "bytea" else "s"
            cast = f"::{sql_type}" if i == 0 else ""
            cells.append(f"%({group}{i}_{column}){marker}{cast}")
        rows.append("(" + ", ".join(cells) + ")")
    return "(VALUES " + ", ".join(rows) + ")"


class PgSession:
    """Runs a plan's batches on one psycopg connection; a held transaction stays open."""

    def __init__(self, conn: Any, *, synchronous_commit: bool = True) -> None:
        self.synchronous_commit = synchronous_commit
        if not conn.autocommit:
            raise ConfigurationError(
                "PostgreSQL connections must be in autocommit mode: use "
                "psycopg.connect(..., autocommit=True) or "
                "ConnectionPool(..., kwargs={'autocommit': True})"
            )
        from langgraph_checkpoint_agent_memory.db import pgwire  # psycopg is optional

        self.conn = conn
        self.in_tx = False
        self.pgwire = pgwire if pgwire.usable(conn) else None

    def _single(self, batch: Batch) -> bool:
        """One plain statement is atomic by itself: it needs no BEGIN/COMMIT (unless a
        relaxed commit must be set for the transaction)."""
        if self.in_tx or batch.hold or batch.lock or len(batch.statements) != 1:
            return False
        if batch.statements[0].many:
            return False
        return not (batch.write and not self.synchronous_commit)

    def execute(self, batch: Batch) -> list[Any]:
        conn = self.conn
        if self._single(batch):
            stmt = batch.statements[0]
            params = stmt.sql.bind(stmt.params)
            if self.pgwire is not None:
                return [self.pgwire.execute(conn, stmt.sql.text, params, stmt.fetch)]
            cur = conn.execute(stmt.sql.text, params)
            return [cur.fetchall() if stmt.fetch else cur.rowcount]
        cursors: list[Any] = []
        try:
            with conn.pipeline():
                if not self.in_tx:
                    conn.execute("BEGIN")
                    self.in_tx = True
                    if batch.write and not self.synchronous_commit:
                        conn.execute("SET LOCAL synchronous_commit TO OFF")
                for stmt in batch.statements:
                    cur = conn.cursor()
                    if stmt.many:
                        if stmt.params:
                            cur.executemany(stmt.sql.text, [stmt.sql.bind(p) for p in stmt.params])
                    else:
                        cur.execute(stmt.sql.text, stmt.sql.bind(stmt.params))
                    cursors.append((cur, stmt))
                if not batch.hold:
                    conn.execute("COMMIT")
        except BaseException:
            self.in_tx = False
            _rollback(conn)
            raise
        if not batch.hold:
            self.in_tx = False
        return [_result(cur, stmt) for cur, stmt in cursors]

    def finish(self) -> None:
        if self.in_tx:
            self.in_tx = False
            _rollback(self.conn)


class AsyncPgSession(PgSession):
    async def execute(self, batch: Batch) -> list[Any]:  # type: ignore[override]
        conn = self.conn
        if self._single(batch):
            stmt = batch.statements[0]
            params = stmt.sql.bind(stmt.params)
            if self.pgwire is not None:
                return [await self.pgwire.aexecute(conn, stmt.sql.text, params, stmt.fetch)]
            cur = await conn.execute(stmt.sql.text, params)
            return [await cur.fetchall() if stmt.fetch else cur.rowcount]
        cursors: list[Any] = []
        try:
            async with conn.pipeline():
                if not self.in_tx:
                    await conn.execute("BEGIN")
                    self.in_tx = True
                    if batch.write and not self.synchronous_commit:
                        await conn.execute("SET LOCAL synchronous_commit TO OFF")
                for stmt in batch.statements:
                    cur = conn.cursor()
                    if stmt.many:
                        if stmt.params:
                            await cur.executemany(
                                stmt.sql.text, [stmt.sql.bind(p) for p in stmt.params]
                            )
                    else:
                        await cur.execute(stmt.sql.text, stmt.sql.bind(stmt.params))
                    cursors.append((cur, stmt))
                if not batch.hold:
                    await conn.execute("COMMIT")
        except BaseException:
            self.in_tx = False
            await _arollback(conn)
            raise
        if not batch.hold:
            self.in_tx = False
        return [await _aresult(cur, stmt) for cur, stmt in cursors]

    async def afinish(self) -> None:
        if self.in_tx:
            self.in_tx = False
            await _arollback(self.conn)


def _relax_commit(conn: Any) -> None:
    conn.execute("SET synchronous_commit TO off")


async def _arelax_commit(conn: Any) -> None:
    await conn.execute("SET synchronous_commit TO off")


def _result(cur: Any, stmt: Any) -> Any:
    if stmt.fetch:
        return cur.fetchall()
    return 0 if stmt.many and not stmt.params else cur.rowcount


async def _aresult(cur: Any, stmt: Any) -> Any:
    if stmt.fetch:
        return await cur.fetchall()
    return 0 if stmt.many and not stmt.params else cur.rowcount


def _rollback(conn: Any) -> None:
    try:
        if not conn.closed:
            conn.execute("ROLLBACK")
    except Exception:
        pass


async def _arollback(conn: Any) -> None:
    try:
        if not conn.closed:
            await conn.execute("ROLLBACK")
    except Exception:
        pass


class PostgresDatabase(Database[Any]):
    """PostgreSQL from a connection string, a connection or a pool (sync or async).

    With a connection string, pools are opened on first use: a sync one for the sync API and,
    per event loop, an async one for the async API. Objects passed in are never closed here.
    """

    def __init__(
        self,
        source: Any,
        *,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        synchronous_commit: bool = True,
        prepare_threshold: int | None = 5,
    ) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigurationError(
                "PostgreSQL needs psycopg 3: "
                "pip install 'langgraph-checkpoint-agent-memory[postgres]'"
            ) from exc
        self.dialect = PostgresDialect()
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.synchronous_commit = synchronous_commit
        if prepare_threshold is not None and (
            isinstance(prepare_threshold, bool)
            or not isinstance(prepare_threshold, int)
            or prepare_threshold < 1
        ):
            # not 0: psycopg would then prepare a pipeline's BEGIN in the same round trip
            # as the DEALLOCATE ALL it sends after an ALTER or a ROLLBACK, and lose it
            raise ConfigurationError(
                f"prepare_threshold must be None or an int >= 1, got {prepare_threshold!r}"
            )
        # for the pools opened here; None for PgBouncer in transaction mode (before 1.21)
        self.prepare_threshold = prepare_threshold
        self._closed = False
        self._conninfo: str | None = None
        self._sync: Any = None  # a ConnectionPool or a Connection
        self._async: Any = None  # an AsyncPool, an AsyncConnectionPool or an AsyncConnection
        self._owned_sync = self._owned_async = False
        self._async_pooled = True  # a pool opened here, unless a connection is given
        self._fresh_locks()
        if isinstance(source, str):
            self._conninfo = source
        elif isinstance(source, (psycopg.Connection, psycopg_pool.ConnectionPool)):
            self._sync = source
        elif isinstance(source, (psycopg.AsyncConnection, psycopg_pool.AsyncConnectionPool)):
            self._async = source
            self._async_pooled = isinstance(source, psycopg_pool.AsyncConnectionPool)
        else:
            raise ConfigurationError(
                "PostgreSQL source must be a connection string, a psycopg (Async)Connection or "
                f"a psycopg_pool (Async)ConnectionPool, got {type(source).__name__}"
            )
        fork.register(self)

    def _fresh_locks(self) -> None:
        self._sync_lock = threading.Lock()
        self._async_lock: asyncio.Lock | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._open_lock = threading.Lock()

    def _after_fork(self) -> None:
        """Pools opened here are set aside and reopened on first use; a connection or pool
        the caller passed in is theirs to replace in the child."""
        if self._owned_sync:
            fork.set_aside(self._sync)
            self._sync, self._owned_sync = None, False
        if self._owned_async:
            fork.set_aside(self._async)
            self._async, self._owned_async = None, False
        self._fresh_locks()

    def describe(self) -> str:
        if self._conninfo is not None:
            return mask_conninfo(self._conninfo)
        return f"postgresql ({type(self._sync or self._async).__name__})"

    # -- sync ------------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        import psycopg_pool

        if self._closed:
            raise ClosedError(f"the PostgreSQL saver for {self.describe()} was closed")
        if self._sync is None:
            if self._conninfo is None:
                raise ConfigurationError(
                    "this PostgreSQL saver was given an async connection; call the async "
                    "methods (aput, aget_tuple, ...) or pass a sync connection or pool"
                )
            with self._open_lock:
                if self._sync is None:
                    pool = psycopg_pool.ConnectionPool(
                        self._conninfo,
                        min_size=1,
                        max_size=self.pool_size,
                        kwargs={"autocommit": True, "prepare_threshold": self.prepare_threshold},
                        open=False,
                        name="agent-memory",
                        timeout=self.connect_timeout,
                        configure=None if self.synchronous_commit else _relax_commit,
                    )
                    try:
                        pool.open(wait=True, timeout=self.connect_timeout)
                    except psycopg_pool.PoolTimeout:
                        pool.close()
                        raise self._unavailable() from None
                    self._sync = pool
                    self._owned_sync = True
        if isinstance(self._sync, psycopg_pool.ConnectionPool):
            # getconn/putconn, not connection(): its ``with conn`` ends each use with a
            # COMMIT check that costs as much as taking the connection (autocommit here),
            # and putconn rolls back or discards a connection left in a bad state anyway
            sync_pool = self._sync
            conn = sync_pool.getconn()
            try:
                yield conn
            finally:
                sync_pool.putconn(conn)
        else:
            with self._sync_lock:
                yield self._sync

    def _run_sync(self, plan: Plan[T]) -> T:
        if self._sync is None and self._conninfo is None:
            return self._run_on_async_loop(plan)
        with self._connection() as conn:
            session = PgSession(conn, synchronous_commit=self._session_commit())
            try:
                return drive(plan, session.execute)
            finally:
                session.finish()

    def _run_on_async_loop(self, plan: Plan[T]) -> T:
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

    # -- async -----------------------------------------------------------------------------

    async def _atarget(self) -> Any:
        """The async pool (opened on first use, per event loop) or the connection given."""
        if self._closed:
            raise ClosedError(f"the PostgreSQL saver for {self.describe()} was closed")
        loop = asyncio.get_running_loop()
        if self._async is not None and self._owned_async and self._async_loop is not loop:
            # a pool belongs to the loop that opened it; a new loop gets a new pool
            old, self._async = self._async, None
            try:
                await old.close()
            except Exception:
                pass
        if self._async is None:
            import psycopg

            from langgraph_checkpoint_agent_memory.db.pgpool import AsyncPool

            pool = AsyncPool(
                self._conninfo or "",
                max_size=self.pool_size,
                timeout=self.connect_timeout,
                kwargs={"autocommit": True, "prepare_threshold": self.prepare_threshold},
                configure=None if self.synchronous_commit else _arelax_commit,
            )
            try:
                await pool.open()
            except psycopg.OperationalError as exc:
                await pool.close()
                raise self._unavailable(str(exc)) from None
            if self._async is None:
                self._async = pool
                self._owned_async = True
            else:  # another task of this loop opened one while this one connected
                await pool.close()
        self._async_loop = loop
        return self._async

    async def arun(self, plan: Plan[T]) -> T:
        if self._async is None and self._conninfo is None:
            return await asyncio.to_thread(self._run_sync, plan)
        target = await self._atarget()
        if self._async_pooled:  # our AsyncPool, or a psycopg pool given: see _connection
            conn = await target.getconn()
            try:
                return await self._asession(conn, plan)
            finally:
                await target.putconn(conn)
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        async with self._async_lock:
            return await self._asession(target, plan)

    async def _asession(self, conn: Any, plan: Plan[T]) -> T:
        session = AsyncPgSession(conn, synchronous_commit=self._session_commit())
        try:
            return await adrive(plan, session.execute)
        finally:
            await session.afinish()

    def _session_commit(self) -> bool:
        """Whether each transaction must set its own commit mode: pools opened here set it
        once per connection, so their writes stay single statements."""
        return self.synchronous_commit or self._conninfo is not None

    def _unavailable(self, error: str | None = None) -> DatabaseUnavailableError:
        """The error for a server not reached; ``error`` is the driver's, else one more
        attempt (a pool's timeout does not say why) finds out why."""
        import psycopg

        reason = "no connection within the timeout"
        if error:
            reason = error.strip().splitlines()[0]
        else:
            try:
                timeout = max(1, int(self.connect_timeout))
                psycopg.connect(self._conninfo or "", connect_timeout=timeout).close()
            except psycopg.Error as exc:
                reason = str(exc).strip().splitlines()[0]
        try:
            secret = psycopg.conninfo.conninfo_to_dict(self._conninfo or "").get("password")
        except psycopg.Error:
            secret = None
        if secret:
            reason = reason.replace(str(secret), "***")
        return DatabaseUnavailableError(
            f"cannot reach PostgreSQL at {self.describe()} within {self.connect_timeout:g} s: "
            f"{reason}"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._closed = self._conninfo is not None
        if self._owned_sync and self._sync is not None:
            self._sync.close()
            self._sync = None
        if self._owned_async and self._async is not None:
            pool, self._async = self._async, None
            loop = self._async_loop
            if loop is not None and not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(pool.close())

    async def aclose(self) -> None:
        self._closed = self._conninfo is not None
        if self._owned_async and self._async is not None:
            pool, self._async = self._async, None
            await pool.close()
        if self._owned_sync and self._sync is not None:
            await asyncio.to_thread(self._sync.close)
            self._sync = None
