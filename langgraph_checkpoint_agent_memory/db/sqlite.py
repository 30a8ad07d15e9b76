"""SQLite through the standard library, in WAL mode; writes take the write lock up front
(``BEGIN IMMEDIATE``) so two writers never deadlock on a lock upgrade. A WAL file this process
cannot share with a writer is read as immutable only if no one may write it (:func:`_frozen`);
any other is refused, naming the fix.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sa_sqlite
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.checkpoint import get_tuple_statement
from langgraph_checkpoint_agent_memory.db.database import Database, Plan, PoolUsage, T
from langgraph_checkpoint_agent_memory.db.dbapi import DbApiPool, DbApiSession
from langgraph_checkpoint_agent_memory.db.dialect import (
    JSON_OPS,
    Columns,
    Dialect,
    FastWrite,
    Source,
    Sql,
)
from langgraph_checkpoint_agent_memory.db.schema import (
    blobs,
    checkpoints,
    store_items,
    store_retractions,
    threads,
    writes,
)
from langgraph_checkpoint_agent_memory.errors import (
    ClosedError,
    ConfigurationError,
    DatabaseNotFoundError,
    DatabaseUnavailableError,
    ReadOnlyDatabaseError,
)


class SQLiteDialect(Dialect):
    name = "sqlite"

    def _make_sa_dialect(self) -> SADialect:
        return sa_sqlite.dialect(paramstyle="named")

    row_locks = False
    list_cap = None

    def list_size(self, n: int) -> int:
        return 1

    def one_of(self, column: Any, param: str, size: int) -> Any:
        # one JSON array: one statement text for any count, and no limit of bound variables
        values = sa.func.json_each(sa.bindparam(param, type_=sa.Text)).table_valued("value")
        return column.in_(sa.select(values.c.value))

    def list_params(self, param: str, values: Sequence[Any]) -> dict[str, Any]:
        return {param: json.dumps(list(values))}

    def new_num(self) -> Any:
        # under the write lock; a deleted item's number returns once its retraction is
        # applied, not before (a query takes a retracted number out of every list it reads)
        most = [
            sa.select(sa.func.max(t.c.num)).scalar_subquery()
            for t in (store_items, store_retractions)
        ]
        return sa.func.coalesce(sa.func.max(*most), most[0], most[1], 0) + 1

    def insert(self, table: sa.Table) -> Any:
        return sa_sqlite.insert(table)

    bytewise = True

    def under_range(self, column: Any) -> Any:
        return sa.or_(
            column == sa.bindparam("ns"),
            sa.and_(column >= sa.bindparam("ns_dot"), column < sa.bindparam("ns_end")),
        )

    def _insert_select(self, table: sa.Table, cols: Columns, source: Source) -> Any:
        if source.whereclause is None:  # SQLite parses "SELECT ... ON CONFLICT" only after WHERE
            source = source.where(sa.true())
        return super()._insert_select(table, cols, source)

    def cast_param(self, param: sa.BindParameter[Any], type_: Any) -> Any:
        return param  # SQLite stores what it is given; a CAST would only add work

    def write_rows_ddl(self) -> list[str]:
        """A view whose INSTEAD OF triggers file each inserted row by its ``kind``, so one
        INSERT, atomic by itself, does a whole put or put_writes (each call of a
        transaction releases the GIL). The first row (``kind = 'l'``) checks the thread."""
        columns = ", ".join(f"NULL AS {c}" for c in ("kind", *_FIXED, *_SLOTS))
        write = _ROW_COLUMNS[writes]
        bodies = {
            "l": _LIVE_CHECK,
            "t": _filing(threads, _THREAD_COLUMNS, upsert=True, nulls=("deleted_at",)),
            "b": _filing(blobs, _ROW_COLUMNS[blobs], upsert=False),
            "c": _filing(checkpoints, _ROW_COLUMNS[checkpoints], upsert=True),
            "w": _filing(writes, write, upsert=False),
            "r": _filing(writes, write, upsert=True),
        }
        # raw: the view and INSTEAD OF triggers, no Core form
        return [f"CREATE VIEW am_write_rows AS SELECT {columns} WHERE 0"] + [
            f"CREATE TRIGGER am_write_rows_{kind} INSTEAD OF INSERT ON am_write_rows "
            f"WHEN NEW.kind = '{kind}' BEGIN {body}; END"
            for kind, body in bodies.items()
        ]

    def fast_get_tuple(self, by_id: bool) -> Sql | None:
        """``get_tuple`` in one statement, one snapshot without ``BEGIN``/``COMMIT``."""
        if not self.recursive_cte:
            return None
        build = functools.partial(get_tuple_statement, by_id, _version_rows, _blob)
        return self.sql(("fast_get_tuple", by_id), build)

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """A whole put or put_writes as one INSERT into ``am_write_rows``."""
        out: list[tuple[Any, ...]] = [("l", fixed["named"], None, None, None, None, None, None)]
        if touch:
            out.append(("t", *_THREAD_SLOTS(fixed), None, None, None, None))
        if kind == "put":
            out += [("b", *_BLOB_SLOTS(r), None, None) for r in rows["b"]]
            out.append(("c", *_CHECKPOINT_SLOTS(fixed)))
        else:
            out += [("w", *_WRITE_SLOTS(r)) for r in rows["f"]]
            out += [("r", *_WRITE_SLOTS(r)) for r in rows["r"]]
        size = len(out)
        if size > MAX_WRITE_ROWS:
            return None
        shared = (fixed["thread_id"], fixed["checkpoint_ns"], fixed["live_after"])
        return FastWrite(
            self.sql(("write_rows", size), lambda: _write_rows_text(size)),
            (*chain.from_iterable(out), *shared),
            fetch=False,
        )

    def thread_gone(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and THREAD_GONE in str(exc)

    tells_unique_violations = True

    def unique_violation(self, exc: BaseException, index: sa.Index) -> bool:
        # SQLite names the index's columns: "UNIQUE constraint failed: t.a, t.b"
        assert index.table is not None
        columns = ", ".join(f"{index.table.name}.{c.name}" for c in index.columns)
        return isinstance(exc, sqlite3.IntegrityError) and str(exc).endswith(
            f"UNIQUE constraint failed: {columns}"
        )

    def erase_session(self) -> tuple[list[str], list[str]]:
        # zero what the erase frees, drop free pages that may hold old copies, empty the WAL
        return (
            # raw: PRAGMAs and VACUUM, no Core form
            ["PRAGMA secure_delete = ON"],
            ["PRAGMA secure_delete = OFF", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"],
        )

    def json_prefilter(self, path: list[str], op: str, value: Any) -> Hashable | None:
        """One ``json_extract`` per condition; Python drops the rows of another JSON type."""
        if any(json.dumps(part, ensure_ascii=False)[1:-1] != part for part in path):
            # a quoted path label cannot hold a JSON escape: Python alone decides
            return None
        if isinstance(value, bool):
            return ("is", int(value)) if op == "$eq" else ("exists",)
        if value is None:
            return ("null",) if op == "$eq" else ("exists",)
        if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            return ("exists",)  # beyond SQLite's integers: Python compares it exactly
        if op in JSON_OPS and isinstance(value, (int, float, str)):
            return ("compare", op)
        return ("exists",)

    def json_condition(self, value: Any, shape: Hashable, param: str) -> Any:
        path: Any = sa.bindparam(f"{param}_path")
        kind, *rest = cast(tuple[Any, ...], shape)
        if kind == "exists":
            return sa.func.json_type(value, path).is_not(None)  # JSON null included
        if kind == "null":
            return sa.func.json_type(value, path) == sa.literal_column("'null'")
        at = sa.func.json_extract(value, path)
        if kind == "is":  # a boolean, which json_extract reads as 0 or 1
            return at == sa.literal_column(str(int(rest[0])))
        return JSON_OPS[rest[0]](at, sa.bindparam(param))

    def json_path(self, path: list[str]) -> Any:
        return "$" + "".join(f'."{part}"' for part in path)

    def skip_locked(self, select: sa.Select[Any]) -> sa.Select[Any]:
        return select  # BEGIN IMMEDIATE already holds the database's only write lock

    def metadata_prefilter(self, column: Any, key: str, value: Any) -> Any:
        if not key.isidentifier():  # anything else would need JSON path quoting: Python only
            return None
        return sa.func.json_extract(column, f"$.{key}") == value


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

THREAD_GONE = "am_thread_gone"
#: The columns every row of one write shares, and the slots each kind fills its own way.
_FIXED = ("thread_id", "checkpoint_ns", "live_after")
_SLOTS = tuple(f"s{i}" for i in range(1, 8))
MAX_WRITE_ROWS = 64
# each kind's slots s1..s7: its table's columns after thread_id (and checkpoint_ns), in order
_THREAD_COLUMNS = ("last_active", "ttl_seconds", "expires_at")
_ROW_COLUMNS = {t: tuple(c.name for c in t.columns)[2:] for t in (blobs, checkpoints, writes)}
_THREAD_SLOTS = itemgetter(*_THREAD_COLUMNS)
_BLOB_SLOTS = itemgetter(*_ROW_COLUMNS[blobs])
_CHECKPOINT_SLOTS = itemgetter(*_ROW_COLUMNS[checkpoints])
_WRITE_SLOTS = itemgetter(*_ROW_COLUMNS[writes])
#: Refuses a gone thread, and a write naming (``s1``) a checkpoint of its ended history.
# raw: a trigger body with RAISE(ABORT), no Core form
_LIVE_CHECK = (
    f"SELECT RAISE(ABORT, '{THREAD_GONE}') WHERE EXISTS (SELECT 1 FROM am_threads "
    "WHERE thread_id = NEW.thread_id AND (deleted_at IS NOT NULL "
    "OR expires_at < NEW.live_after OR ended_after >= NEW.s1))"
)


def _filing(table: sa.Table, slots: Sequence[str], upsert: bool, nulls: Sequence[str] = ()) -> str:
    """A trigger body (raw: NEW.<column>) that inserts NEW into ``table``: its key's lead from
    NEW's columns, ``slots`` from s1..., ``nulls`` NULL; with ``upsert``, a conflict on the
    primary key updates the slots' columns outside it."""
    lead = [c for c in _FIXED[:2] if c in table.c]
    cols = ", ".join([*lead, *slots, *nulls])
    new = [*(f"NEW.{c}" for c in lead), *(f"NEW.s{i}" for i in range(1, len(slots) + 1))]
    text = (
        f"INSERT INTO {table.name} ({cols}) VALUES ({', '.join([*new, *['NULL'] * len(nulls)])}) "
    )
    if not upsert:
        return text + "ON CONFLICT DO NOTHING"
    keys = [c.name for c in table.primary_key.columns]
    sets = ", ".join(f"{c} = excluded.{c}" for c in slots if c not in keys)
    return text + f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"


def _version_rows(c: Any) -> Any:
    return sa.func.json_each(c.c.blob_versions).table_valued("key", "value").alias("v")


def _blob(channel: Any, version: Any) -> tuple[Any, Any, bool]:
    """One blob by full key, outer-joined: an inner join lets SQLite scan a thread's blobs."""
    bb = blobs.alias("bb")
    return (
        bb,
        sa.and_(
            bb.c.thread_id == sa.bindparam("thread_id"),
            bb.c.checkpoint_ns == sa.bindparam("checkpoint_ns"),
            bb.c.channel == channel,
            bb.c.version == version,
        ),
        True,
    )


_CELLS = ("kind", *_SLOTS)
_BY_POSITION = sa_sqlite.dialect(paramstyle="qmark")


def _write_rows_text(rows: int) -> str:
    """``INSERT INTO am_write_rows`` from a ``VALUES`` CTE, the shared values once, binding
    by position (a flat tuple costs less than a mapping)."""
    cells: list[tuple[Any, ...]] = [
        tuple(sa.bindparam(f"r{i}_{c}") for c in _CELLS) for i in range(rows)
    ]
    v = sa.values(*(sa.column(c) for c in _CELLS), name="v").data(cells).cte("v")
    picked = [v.c.kind, *(sa.bindparam(c) for c in _FIXED), *(v.c[c] for c in _SLOTS)]
    target = sa.table("am_write_rows", *(sa.column(c) for c in ("kind", *_FIXED, *_SLOTS)))
    insert = sa.insert(target).from_select(["kind", *_FIXED, *_SLOTS], sa.select(*picked))
    compiled: Any = insert.compile(dialect=_BY_POSITION)
    expected = (*(f"r{i}_{c}" for i in range(rows) for c in _CELLS), *_FIXED)
    if tuple(compiled.positiontup) != expected:  # the order fast_write binds in
        raise RuntimeError(f"unexpected parameter order: {compiled.positiontup}")
    return str(compiled)


#: SQLite's primary result codes (https://sqlite.org/rescode.html), not yet in the stubs.
SQLITE_IOERR, SQLITE_READONLY, SQLITE_FULL, SQLITE_CANTOPEN = 10, 8, 13, 14


class SQLiteDatabase(Database[Any]):
    """A small pool of connections to one SQLite file; or one connection every plan uses in turn
    (``:memory:``, or a ``sqlite3.Connection`` passed in, never closed here). ``mode``: ``"rwc"``
    creates the file and its folders, ``"rw"`` and ``"ro"`` raise :class:`DatabaseNotFoundError`
    for a missing one; ``"ro"`` never makes it WAL."""

    def __init__(
        self,
        path: str | Path | sqlite3.Connection,
        *,
        pool_size: int = 4,
        durability: Literal["normal", "full", "off"] = "normal",
        busy_timeout_ms: int = 30_000,
        mode: Literal["rwc", "rw", "ro"] = "rwc",  # SQLite's URI parameter
    ) -> None:
        self.given: sqlite3.Connection | None = None
        if isinstance(path, sqlite3.Connection):
            self.given, path = path, ":memory:"
        elif not isinstance(path, (str, Path)):
            raise ConfigurationError(
                "SQLite needs a file path, a sqlite:/// URL or a sqlite3.Connection, "
                f"got {type(path).__name__}"
            )
        if str(path) == "":
            raise ConfigurationError("SQLite needs a file path, e.g. sqlite:///./memory.db")
        self.memory = str(path) == ":memory:"
        if durability not in ("normal", "full", "off"):
            raise ConfigurationError(f"durability must be normal, full or off, got {durability!r}")
        if mode not in ("rwc", "rw", "ro"):
            raise ConfigurationError(f"mode must be rwc, rw or ro, got {mode!r}")
        self.mode = mode
        self.path = Path(path)
        self.dialect = SQLiteDialect()
        self.durability = durability
        self.busy_timeout_ms = busy_timeout_ms
        self.pool_size = 1 if self.memory else pool_size  # each :memory: connection is a database
        self._closed = False
        self._fresh_connections()
        if not self.memory:  # a child's copy of a private in-memory database is its own
            fork.register(self)

    def _fresh_connections(self) -> None:
        self._write_lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._single: sqlite3.Connection | None = None
        self._single_lock = threading.Lock()
        self._pool: DbApiPool | None = None

    def after_fork(self) -> None:
        pool = self._pool
        self._fresh_connections()
        self._pool = pool

    def pool_usage(self) -> list[PoolUsage]:
        return [] if self._pool is None else [self._pool.usage(self.describe())]

    def namespace(self) -> str | None:
        return None if self.memory else str(self.path)

    def describe(self) -> str:
        if self.given is not None:
            return "sqlite (a sqlite3.Connection)"
        return "memory" if self.memory else f"sqlite:///{self.path}"

    def _connect(self) -> sqlite3.Connection:
        if self.given is not None:
            return self.given
        # one at a time: switching to WAL fails at once while another connection opens
        with self._connect_lock:
            try:
                conn = self._open()
                try:
                    # raw: connection PRAGMAs
                    conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
                    journal = conn.execute("PRAGMA journal_mode").fetchone()[0].lower()
                    if journal != "wal" and self.mode != "ro" and not isinstance(conn, Snapshot):
                        _to_wal(conn)
                    conn.execute(f"PRAGMA synchronous = {self.durability.upper()}")
                except BaseException:
                    conn.close()
                    raise
            except (OSError, sqlite3.DatabaseError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise DatabaseUnavailableError(
                    f"cannot open the SQLite database {self.describe()}: {reason}"
                ) from exc
            return conn

    def _open(self) -> sqlite3.Connection:
        """A new connection (a :class:`Snapshot` of a file SQLite cannot share)."""
        connect = functools.partial(
            sqlite3.connect, isolation_level=None, check_same_thread=False, timeout=30
        )
        uri = f"file:{quote(str(self.path.absolute()))}?mode="
        if not self.memory and _unshareable(self.path):
            if not _frozen(self.path):
                raise DatabaseUnavailableError(
                    "this process may not write it or its folder, and no writer has it open "
                    f"(no {_wal_of(self.path).name} beside it), so SQLite cannot read it "
                    "beside the -wal and -shm files it shares with a writer; read as "
                    "immutable, it would not see what its writer changes. Read it while "
                    "a writer has it open, let this process write the file and its folder, "
                    "or, if nothing writes it any more, make it read-only for everyone "
                    f"(chmod a-w {self.path}) or read a copy"
                )
            opened = _identity(self.path)
            conn = cast(Snapshot, connect(uri + "ro&immutable=1", uri=True, factory=Snapshot))
            conn.path, conn.opened = self.path, opened
            return conn
        if self.memory or self.mode == "rwc":
            if not self.memory:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            return connect(str(self.path))
        try:
            return connect(uri + self.mode, uri=True)
        except sqlite3.OperationalError as exc:
            if self.path.exists():
                raise
            raise DatabaseNotFoundError(
                f"the SQLite database {self.describe()} does not exist (nothing was created)"
            ) from exc

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise ClosedError(f"the SQLite saver for {self.describe()} was closed")
        if self.given is None and not self.memory:
            with self._connections().connection() as conn:
                try:
                    yield conn
                finally:
                    if conn.in_transaction:  # never hand a connection back mid-transaction
                        conn.rollback()
                    if isinstance(conn, Snapshot) and conn.rewritten():
                        raise DatabaseUnavailableError(
                            f"the SQLite database {self.describe()} changed while it was read "
                            "as a file no one writes (the read may mix old and new pages): retry"
                        )
            return
        with self._single_lock:
            if self._single is None:
                self._single = self._connect()
            conn = self._single
            if conn is self.given and conn.in_transaction:
                raise ConfigurationError(
                    "the sqlite3.Connection given to the saver is in a transaction of yours: "
                    "commit or roll it back first (the saver never ends a transaction it did "
                    "not begin)"
                )
            try:
                yield conn
            finally:
                if conn.in_transaction:  # never leave a connection mid-transaction
                    conn.rollback()

    def open_connections(self) -> list[sqlite3.Connection]:
        if self._pool is not None:
            return self._pool.open_connections()
        return [] if self._single is None else [self._single]

    def _connections(self) -> DbApiPool:
        with self._single_lock:
            if self._pool is None:
                self._pool = DbApiPool(
                    self._connect,
                    dialect=SQLiteDialect_pysqlite(dbapi=sqlite3),
                    size=self.pool_size,
                    timeout=max(1.0, self.busy_timeout_ms / 1000),
                    describe=self.describe,
                    check=_check,
                    reset=False,  # connection() rolls back a transaction left open
                )
            return self._pool

    def _run_sync(self, plan: Plan[T]) -> T:
        with self.connection() as conn:
            session = DbApiSession(
                conn,
                # raw: transaction control
                begin_write="BEGIN IMMEDIATE",
                begin_read="BEGIN",
                write_lock=self._write_lock,
                # a caller's connection in sqlite3's legacy mode: BEGIN every write
                lone_writes=conn.isolation_level is None,
            )
            try:
                return session.run(plan)
            except sqlite3.OperationalError as exc:
                raise self._unusable(exc) or exc from exc

    def _unusable(self, exc: sqlite3.OperationalError) -> DatabaseUnavailableError | None:
        """The package's error for a read-only file, a full disk, an I/O error, or ``None``."""
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary result code
        where = self.describe()
        if code == SQLITE_READONLY:
            return ReadOnlyDatabaseError(
                f"the SQLite database {where} is read-only ({exc}): reads work, writes "
                "need write access to the file and its folder"
            )
        if code == SQLITE_FULL:
            return DatabaseUnavailableError(
                f"the SQLite database {where} is full ({exc}): nothing of this call was "
                "written; free disk space (or raise max_page_count) and retry"
            )
        if code in (SQLITE_IOERR, SQLITE_CANTOPEN):
            return DatabaseUnavailableError(f"cannot use the SQLite database {where}: {exc}")
        return None

    def close(self) -> None:
        """Close idle connections now and busy ones when their plan ends."""
        self._closed = True
        if self._pool is not None:
            self._pool.close()
        with self._single_lock:
            if self._single is not None and self._single is not self.given:
                self._single.close()
            self._single = None


class Snapshot(sqlite3.Connection):
    """A connection that reads a file as immutable (see :func:`_unshareable`, :func:`_frozen`)."""

    path: Path
    opened: tuple[int, ...] | None

    def rewritten(self) -> bool:
        return _identity(self.path) != self.opened


def _check(conn: sqlite3.Connection) -> None:
    """Raise for a closed connection, or a :class:`Snapshot` of a file changed or written."""
    conn.total_changes  # noqa: B018
    if isinstance(conn, Snapshot) and (conn.rewritten() or _wal_of(conn.path).exists()):
        raise sqlite3.OperationalError("the file changed: read it afresh")


def _unshareable(path: Path) -> bool:
    """Whether ``path`` is a WAL file this process cannot write and no writer has open. The
    file is opened last: closing any descriptor of it drops this process's POSIX locks."""
    if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
        return False
    if _wal_of(path).exists():
        return False
    try:
        with path.open("rb") as file:
            header = file.read(20)
    except OSError:
        return False
    return header.startswith(b"SQLite format 3\x00") and header[18:20] == b"\x02\x02"


def _frozen(path: Path) -> bool:
    """Whether no process may write ``path`` (``chmod a-w``, or a read-only mount)."""
    return not os.stat(path).st_mode & 0o222 or bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _wal_of(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _to_wal(conn: sqlite3.Connection) -> None:
    """Switch ``conn``'s file to WAL; a read-only file stays as it is, for reads."""
    try:
        conn.execute("PRAGMA journal_mode = WAL")  # raw: a connection PRAGMA
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF != SQLITE_READONLY:
            raise
