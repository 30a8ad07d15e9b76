"""PostgreSQL through psycopg 3: a connection string, a connection or a pool, sync or async.

Each batch travels in one round trip (psycopg pipeline mode: ``BEGIN``, the statements and
``COMMIT`` are sent together); a batch of one statement, which every checkpoint write and read
is, goes through a cursor by itself, without a transaction of its own, and psycopg prepares it
once it has run ``prepare_threshold`` times on a connection. Rows come back in binary format
(``binary=True``): checkpoints and blobs are ``bytea``, which the text format would send as
hex, twice the bytes, to be decoded on the client. Given a pool there is no lock
around the database object: the pool is the concurrency control. Given a single connection, a
lock serializes its users, as a connection can run one statement at a time.

Connections must be in autocommit mode (the driver sends its own ``BEGIN``/``COMMIT``); the
``psycopg_pool`` pools this module opens from a connection string are configured so.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import (
    Batch,
    Database,
    Plan,
    Stmt,
    T,
    adrive,
    drive,
)
from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect
from langgraph_checkpoint_agent_memory.db.url import mask_conninfo
from langgraph_checkpoint_agent_memory.errors import (
    ClosedError,
    ConfigurationError,
    DatabaseUnavailableError,
)


class PgSession:
    """What a plan's batches send on one psycopg connection, decided without I/O.

    A lone statement (every checkpoint read and write) goes out by itself, atomic as any
    single statement is; anything else goes in one pipeline: ``BEGIN``, the statements and,
    unless the batch holds its transaction open for the plan's next batch, ``COMMIT``.
    :func:`execute` and :func:`aexecute` are the two shells that send it.
    """

    def __init__(self, conn: Any, *, synchronous_commit: bool = True) -> None:
        if not conn.autocommit:
            raise ConfigurationError(
                "PostgreSQL connections must be in autocommit mode: use "
                "psycopg.connect(..., autocommit=True) or "
                "ConnectionPool(..., kwargs={'autocommit': True})"
            )
        self.conn = conn
        self.synchronous_commit = synchronous_commit
        self.in_tx = False

    def lone(self, batch: Batch) -> Stmt | None:
        """The statement to send alone, or ``None`` when the batch needs a transaction
        (several statements, a held one, or a relaxed commit to set for it)."""
        if self.in_tx or batch.hold or batch.lock or len(batch.statements) != 1:
            return None
        stmt = batch.statements[0]
        if stmt.many or (batch.write and not self.synchronous_commit):
            return None
        return stmt

    def opening(self, batch: Batch) -> tuple[str, ...]:
        """What starts the batch's transaction (nothing when a held one goes on)."""
        if self.in_tx:
            return ()
        self.in_tx = True
        if batch.write and not self.synchronous_commit:
            return ("BEGIN", "SET LOCAL synchronous_commit TO OFF")
        return ("BEGIN",)

    def ended(self, batch: Batch, ok: bool) -> bool:
        """Record how the batch ended; whether a transaction is left to roll back."""
        left_open = self.in_tx
        if not ok or not batch.hold:
            self.in_tx = False
        return left_open and not ok

    def lost(self, exc: BaseException) -> BaseException:
        """A broken connection becomes :class:`DatabaseUnavailableError`; any other error
        (a constraint, a lock timeout, a cancelled query) stays as the server raised it."""
        if self.conn.closed or self.conn.broken:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return DatabaseUnavailableError(f"the connection to PostgreSQL was lost: {message}")
        return exc


def _params(stmt: Stmt) -> Any:
    if stmt.many:
        return [stmt.sql.bind(p) for p in stmt.params]
    return stmt.sql.bind(stmt.params)


def execute(session: PgSession, batch: Batch) -> list[Any]:
    """Send one batch on a sync connection."""
    import psycopg

    conn = session.conn
    lone = session.lone(batch)
    try:
        if lone is not None:
            cur = conn.execute(lone.sql.text, _params(lone), binary=lone.fetch)
            return [cur.fetchall() if lone.fetch else cur.rowcount]
        sent = []
        try:
            with conn.pipeline():
                for sql in session.opening(batch):
                    conn.execute(sql)
                for stmt in batch.statements:
                    cur = conn.cursor(binary=stmt.fetch)
                    if not stmt.many:
                        cur.execute(stmt.sql.text, _params(stmt))
                    elif stmt.params:
                        cur.executemany(stmt.sql.text, _params(stmt))
                    sent.append((cur, stmt))
                if not batch.hold:
                    conn.execute("COMMIT")
        except BaseException:
            if session.ended(batch, ok=False):
                _rollback(conn)
            raise
        session.ended(batch, ok=True)
        return [c.fetchall() if s.fetch else _count(c, s) for c, s in sent]
    except psycopg.OperationalError as exc:
        raise session.lost(exc) from exc


async def aexecute(session: PgSession, batch: Batch) -> list[Any]:
    """Send one batch on an async connection."""
    import psycopg

    conn = session.conn
    lone = session.lone(batch)
    try:
        if lone is None:
            return await _apipeline(session, batch)
        cur = await conn.execute(lone.sql.text, _params(lone), binary=lone.fetch)
        return [await cur.fetchall() if lone.fetch else cur.rowcount]
    except psycopg.OperationalError as exc:
        raise session.lost(exc) from exc


async def _apipeline(session: PgSession, batch: Batch) -> list[Any]:
    conn = session.conn
    sent = []
    try:
        async with conn.pipeline():
            for sql in session.opening(batch):
                await conn.execute(sql)
            for stmt in batch.statements:
                cur = conn.cursor(binary=stmt.fetch)
                if stmt.many and stmt.params:
                    await cur.executemany(stmt.sql.text, _params(stmt))
                elif not stmt.many:
                    await cur.execute(stmt.sql.text, _params(stmt))
                sent.append((cur, stmt))
            if not batch.hold:
                await conn.execute("COMMIT")
    except BaseException:
        if session.ended(batch, ok=False):
            await _arollback(conn)
        raise
    session.ended(batch, ok=True)
    return [await c.fetchall() if s.fetch else _count(c, s) for c, s in sent]


def _count(cur: Any, stmt: Stmt) -> int:
    return 0 if stmt.many and not stmt.params else int(cur.rowcount)


def _rollback(conn: Any) -> None:
    try:
        if not conn.closed:
            conn.execute("ROLLBACK")
    except Exception:
        pass  # a broken connection: the pool discards it


async def _arollback(conn: Any) -> None:
    try:
        if not conn.closed:
            await conn.execute("ROLLBACK")
    except Exception:
        pass


_RELAX_COMMIT = "SET synchronous_commit TO off"


class IdleCheck:
    """The ``configure`` and ``check`` hooks of the pools opened here, and :meth:`returned`,
    which the database calls as it gives a connection back.

    psycopg_pool's ``check_connection`` costs a round trip; run on every checkout it adds one
    to every saver call, ten per graph invoke. A connection can only have been broken unseen
    (a server restart, a network cut) while it sat unused, so it is checked when it has been
    idle for ``after`` seconds since it was opened or returned (``0``: at every checkout).
    Under load connections come back within milliseconds and go out unchecked; after a
    restart, which takes longer than ``after``, each is checked and replaced before use.
    """

    def __init__(self, after: float, relax_commit: bool) -> None:
        self.after = after
        self.relax_commit = relax_commit
        self._since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def _stamp(self, conn: Any) -> None:
        self._since[conn] = time.monotonic()

    def _due(self, conn: Any) -> bool:
        return time.monotonic() - self._since.get(conn, -math.inf) >= self.after

    def configure(self, conn: Any) -> None:
        if self.relax_commit:
            conn.execute(_RELAX_COMMIT)
        self._stamp(conn)

    def returned(self, conn: Any) -> None:
        """Note that ``conn`` goes back to its pool now. (Not psycopg_pool's ``reset`` hook:
        with one, an async pool hands every return to a background task.)"""
        self._stamp(conn)

    def check(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            psycopg_pool.ConnectionPool.check_connection(conn)

    async def aconfigure(self, conn: Any) -> None:
        if self.relax_commit:
            await conn.execute(_RELAX_COMMIT)
        self._stamp(conn)

    async def acheck(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            await psycopg_pool.AsyncConnectionPool.check_connection(conn)


#: Connection parameters a connection string gets unless it sets them: a dead peer (a server
#: gone without closing the socket, a dropped NAT entry) is noticed in about a minute.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


def with_keepalives(conninfo: str) -> str:
    """``conninfo`` with TCP keepalives turned on, where it does not choose otherwise."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in KEEPALIVES.items() if k not in given})


def require_psycopg() -> tuple[Any, Any]:
    """psycopg and psycopg_pool, or an error that says how to install them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "PostgreSQL needs psycopg 3: pip install 'langgraph-checkpoint-agent-memory[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


@dataclass(frozen=True)
class PostgresOptions:
    """How a PostgreSQL saver or store connects; see :class:`PostgresSaver` for each one.

    Only ``synchronous_commit`` applies to a connection or pool passed in; the others shape
    the pools opened from a connection string.
    """

    pool_size: int = 8
    connect_timeout: float = 10.0
    synchronous_commit: bool = True
    #: ``None`` for PgBouncer in transaction mode (before 1.21)
    prepare_threshold: int | None = 5
    max_idle: float = 600.0
    max_lifetime: float = 3600.0
    #: seconds a pooled connection sits unused before it is checked at checkout (IdleCheck)
    check_after_idle: float = 1.0

    def __post_init__(self) -> None:
        if not _whole(self.pool_size, 1):
            raise ConfigurationError(f"pool_size must be an int >= 1, got {self.pool_size!r}")
        # not 0: psycopg would then prepare a pipeline's BEGIN in the same round trip as the
        # DEALLOCATE ALL it sends after an ALTER or a ROLLBACK, and lose it
        if self.prepare_threshold is not None and not _whole(self.prepare_threshold, 1):
            raise ConfigurationError(
                f"prepare_threshold must be None or an int >= 1, got {self.prepare_threshold!r}"
            )
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


class PostgresDatabase(Database[Any]):
    """PostgreSQL from a connection string, a connection or a pool (sync or async).

    With a connection string, ``psycopg_pool`` pools are opened on first use: a
    ``ConnectionPool`` for the sync API and, per event loop, an ``AsyncConnectionPool`` for
    the async one. Both check a connection that sat unused for ``check_after_idle`` seconds
    before they hand it out (:class:`IdleCheck`), so connections a server restart or a
    network cut left behind are replaced instead of failing a call; they retire connections
    idle for ``max_idle`` or open for ``max_lifetime`` seconds, and turn TCP keepalives on.
    Objects passed in are used as given, never closed.
    """

    def __init__(self, source: Any, **options: Any) -> None:
        psycopg, psycopg_pool = require_psycopg()
        self.options = PostgresOptions(**options)
        self._idle_check = IdleCheck(
            self.options.check_after_idle, relax_commit=not self.options.synchronous_commit
        )
        self.dialect = PostgresDialect()
        self.pool_size = self.options.pool_size
        self.connect_timeout = self.options.connect_timeout
        self._closed = False
        self._conninfo: str | None = None
        self._sync: Any = None  # a ConnectionPool or a Connection
        self._async: Any = None  # an AsyncConnectionPool or an AsyncConnection
        self._owned_sync = self._owned_async = False
        self._fresh_locks()
        if isinstance(source, str):
            self._conninfo = source
        elif isinstance(source, (psycopg.Connection, psycopg_pool.ConnectionPool)):
            self._sync = source
        elif isinstance(source, (psycopg.AsyncConnection, psycopg_pool.AsyncConnectionPool)):
            self._async = source
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
        self._aopen_lock: asyncio.Lock | None = None
        self._aopen_loop: asyncio.AbstractEventLoop | None = None

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

    def _pool_options(self, *, sync: bool) -> dict[str, Any]:

        hooks = self._idle_check
        return {
            "conninfo": with_keepalives(self._conninfo or ""),
            "min_size": 1,
            "max_size": self.pool_size,
            "kwargs": {"autocommit": True, "prepare_threshold": self.options.prepare_threshold},
            "open": False,
            "name": "agent-memory",
            "timeout": self.connect_timeout,
            "configure": hooks.configure if sync else hooks.aconfigure,
            "check": hooks.check if sync else hooks.acheck,
            "max_idle": self.options.max_idle,
            "max_lifetime": self.options.max_lifetime,
        }

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the PostgreSQL saver for {self.describe()} was closed")

    # -- sync ------------------------------------------------------------------------------

    def _sync_pool(self) -> Any:
        import psycopg_pool

        with self._open_lock:
            if self._sync is None:
                pool = psycopg_pool.ConnectionPool(**self._pool_options(sync=True))
                try:
                    pool.open(wait=True, timeout=self.connect_timeout)
                except psycopg_pool.PoolTimeout:
                    pool.close()
                    raise self._unavailable(self._probe()) from None
                self._sync, self._owned_sync = pool, True
        return self._sync

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        import psycopg_pool

        self._check_open()
        if self._sync is None:
            if self._conninfo is None:
                raise ConfigurationError(
                    "this PostgreSQL saver was given an async connection; call the async "
                    "methods (aput, aget_tuple, ...) or pass a sync connection or pool"
                )
            self._sync_pool()
        source = self._sync
        if isinstance(source, psycopg_pool.ConnectionPool):
            try:
                conn = source.getconn()
            except psycopg_pool.PoolTimeout:
                raise self._unavailable(self._probe()) from None
            try:
                yield conn
            finally:
                self._idle_check.returned(conn)
                source.putconn(conn)
        else:
            with self._sync_lock:
                yield source

    def _run_sync(self, plan: Plan[T]) -> T:
        if self._sync is None and self._conninfo is None:
            return self._run_on_async_loop(plan)
        with self._connection() as conn:
            session = PgSession(conn, synchronous_commit=self._session_commit())
            try:
                return drive(plan, lambda batch: execute(session, batch))
            finally:
                if session.in_tx:
                    session.in_tx = False
                    _rollback(conn)

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

    async def _async_pool(self, loop: asyncio.AbstractEventLoop) -> Any:
        """The async pool of this event loop, opened once however many tasks ask at once."""
        import psycopg_pool

        if self._aopen_lock is None or self._aopen_loop is not loop:
            # set before any await, so every task of this loop shares the one lock
            self._aopen_lock, self._aopen_loop = asyncio.Lock(), loop
        async with self._aopen_lock:
            if self._async is not None and self._async_loop is not loop:
                # a pool belongs to the loop that opened it; a new loop gets a new pool
                old, self._async, self._owned_async = self._async, None, False
                try:
                    await old.close()
                except Exception:
                    pass
            if self._async is None:
                pool = psycopg_pool.AsyncConnectionPool(**self._pool_options(sync=False))
                try:
                    await pool.open(wait=True, timeout=self.connect_timeout)
                except psycopg_pool.PoolTimeout:
                    await pool.close()
                    raise self._unavailable(await self._aprobe()) from None
                self._async, self._owned_async = pool, True
                self._async_loop = loop
        return self._async

    async def arun(self, plan: Plan[T]) -> T:
        import psycopg_pool

        if self._async is None and self._conninfo is None:
            return await asyncio.to_thread(self._run_sync, plan)
        self._check_open()
        loop = asyncio.get_running_loop()
        target = self._async
        if self._conninfo is not None and (target is None or self._async_loop is not loop):
            target = await self._async_pool(loop)
        if isinstance(target, psycopg_pool.AsyncConnectionPool):
            try:
                conn = await target.getconn()
            except psycopg_pool.PoolTimeout:
                raise self._unavailable(await self._aprobe()) from None
            try:
                return await self._asession(conn, plan)
            finally:
                self._idle_check.returned(conn)
                await target.putconn(conn)
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        self._async_loop = loop
        async with self._async_lock:
            return await self._asession(target, plan)

    async def _asession(self, conn: Any, plan: Plan[T]) -> T:
        session = PgSession(conn, synchronous_commit=self._session_commit())
        try:
            return await adrive(plan, lambda batch: aexecute(session, batch))
        finally:
            if session.in_tx:
                session.in_tx = False
                await _arollback(conn)

    def _session_commit(self) -> bool:
        """Whether each transaction must set its own commit mode: pools opened here set it
        once per connection, so their writes stay single statements."""
        return self.options.synchronous_commit or self._conninfo is not None

    # -- errors ----------------------------------------------------------------------------

    def _probe(self) -> str | None:
        """Why no connection came: one direct attempt (the pool's timeout does not say);
        ``None`` for a pool the caller passed in, whose server we do not know."""
        import psycopg

        if self._conninfo is None:
            return None
        try:
            timeout = max(1, int(self.connect_timeout))
            psycopg.connect(self._conninfo or "", connect_timeout=timeout).close()
        except psycopg.Error as exc:
            return str(exc)
        return None

    async def _aprobe(self) -> str | None:
        import psycopg

        if self._conninfo is None:
            return None
        try:
            timeout = max(1, int(self.connect_timeout))
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo or "", connect_timeout=timeout
            )
            await conn.close()
        except psycopg.Error as exc:
            return str(exc)
        return None

    def _unavailable(self, error: str | None) -> DatabaseUnavailableError:
        """The error for a server not reached (or a pool whose every connection stayed
        busy), naming the server with its password masked."""
        import psycopg

        reason = (
            error.strip().splitlines()[0]
            if error and error.strip()
            else "every pooled connection stayed busy"
        )
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
