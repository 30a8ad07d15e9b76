"""PostgreSQL through psycopg 3: a connection string, a connection or a pool, sync or async.

Statements go out through :mod:`.pg_session`; pools opened from a connection string are
configured by :mod:`.pg_pool`. Given a pool there is no lock around the database object: the
pool is the concurrency control. Given a single connection, a lock serializes its users, as
a connection can run one statement at a time. Connections must be in autocommit mode (the
driver sends its own ``BEGIN``/``COMMIT``); the pools opened here are configured so.

Nothing relies on session state, so a transaction pooler (PgBouncer in ``pool_mode =
transaction``, a managed service's pooler) may sit between the pools and the server: settings
are per transaction, and a pool that prepares statements by default checks once, as it
opens, that it talks to the server itself (:func:`.pg_pool.pooler_error`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import (
    Batch,
    Database,
    Plan,
    PoolUsage,
    T,
    adrive,
    connection_waited,
    drive,
)
from langgraph_checkpoint_agent_memory.db.pg_pool import (
    BACKEND_PID_SQL,
    IdleCheck,
    PostgresOptions,
    checked_conninfo,
    definite_refusal,
    option_error,
    pooler_error,
    prepare_threshold_of,
    require_psycopg,
    with_keepalives,
)
from langgraph_checkpoint_agent_memory.db.pg_session import (
    PgSession,
    aexecute,
    arollback,
    execute,
    failures,
    rollback,
)
from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect
from langgraph_checkpoint_agent_memory.db.url import (
    PREPARE_THRESHOLD,
    SCHEMA,
    mask_conninfo,
    take_prepare_threshold,
    take_url_option,
)
from langgraph_checkpoint_agent_memory.errors import (
    ClosedError,
    ConfigurationError,
    DatabaseUnavailableError,
)


class PostgresDatabase(Database[Any]):
    """PostgreSQL from a connection string, a connection or a pool (sync or async).

    With a connection string, ``psycopg_pool`` pools are opened on first use: a
    ``ConnectionPool`` for the sync API and, per event loop, an ``AsyncConnectionPool`` for
    the async one. Both check a connection that sat unused for ``check_after_idle`` seconds
    before they hand it out, and every connection for a goodbye of the server already on its
    socket (:class:`IdleCheck`), so connections a server restart or a network cut left behind
    are replaced instead of failing a call. They retire connections idle for ``max_idle`` or
    open for ``max_lifetime`` seconds, and turn TCP keepalives on. A definite refusal at the
    first connect fails at once (:meth:`_first_contact`).
    Objects passed in are used as given, never closed.
    """

    def __init__(self, source: Any, **options: Any) -> None:
        psycopg, psycopg_pool = require_psycopg()
        #: the conninfo's parameters, as libpq reads them (a bad one is refused here)
        self._given: dict[str, Any] = {}
        if isinstance(source, str):
            source = self._take_url_options(source, options)
            self._given = checked_conninfo(source, mask_conninfo(source))
        if PREPARE_THRESHOLD in options:
            options[PREPARE_THRESHOLD] = prepare_threshold_of(options[PREPARE_THRESHOLD])
        self.options = PostgresOptions(**options)
        #: whether to check, once, that a connection that prepares statements reaches the
        #: server itself: unless the caller chose a threshold (then it is the caller's call)
        self._check_pooler = PREPARE_THRESHOLD not in options
        self._pooler_checked = False
        self._idle_check = IdleCheck(self.options.check_after_idle)
        self.dialect = PostgresDialect(schema=self.options.schema)
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

    @staticmethod
    def _take_url_options(conninfo: str, options: dict[str, Any]) -> str:
        """``conninfo`` without this package's ``prepare_threshold``, moved into ``options``
        (libpq refuses keywords it does not know); the URL and an argument that disagree
        are refused."""
        conninfo, schema = take_url_option(conninfo, SCHEMA)
        if schema is not None:
            if options.get(SCHEMA) not in (None, schema):
                raise ConfigurationError(
                    f"the {SCHEMA} of {mask_conninfo(conninfo)} is {schema!r} but the schema "
                    f"argument is {options[SCHEMA]!r}: give one of them"
                )
            options[SCHEMA] = schema
        conninfo, raw = take_prepare_threshold(conninfo)
        if raw is None:
            return conninfo
        where = f"the {PREPARE_THRESHOLD} of {mask_conninfo(conninfo)}"
        value = prepare_threshold_of(raw, where)
        if PREPARE_THRESHOLD in options:
            given = prepare_threshold_of(options[PREPARE_THRESHOLD])
            if given != value:
                raise ConfigurationError(
                    f"{where} is {raw!r} but the prepare_threshold argument is "
                    f"{options[PREPARE_THRESHOLD]!r}: give one of them"
                )
        options[PREPARE_THRESHOLD] = value
        return conninfo

    def _fresh_locks(self) -> None:
        self._sync_lock = threading.Lock()
        self._async_lock: asyncio.Lock | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        self._open_lock = threading.Lock()
        self._aopen_lock: asyncio.Lock | None = None
        self._aopen_loop: asyncio.AbstractEventLoop | None = None

    def after_fork(self) -> None:
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

    def server(self) -> tuple[str | None, int | None]:
        """The host and port of the conninfo (the first of a list), as libpq reads them."""
        if self._conninfo is None:
            return None, None
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(self._conninfo)
        except Exception:  # an unreadable conninfo fails later, with a message of its own
            return None, None
        host = str(params.get("host") or params.get("hostaddr") or "").split(",")[0]
        port = str(params.get("port") or "").split(",")[0]
        return host or None, int(port) if port.isdigit() else None

    def namespace(self) -> str | None:
        """``{database}|{schema}``, as OpenTelemetry's conventions name a PostgreSQL
        namespace: the conninfo's database and the ``schema`` option (either alone)."""
        parts = (self._given.get("dbname"), self.options.schema)
        return "|".join(str(p) for p in parts if p) or None

    def pool_usage(self) -> list[PoolUsage]:
        """The usage of the pools (sync and async) open now, from psycopg_pool's
        ``get_stats()``; a single connection passed in has no pool to report."""
        import psycopg_pool

        usage = []
        for kind, pool in (("sync", self._sync), ("async", self._async)):
            if not isinstance(
                pool, (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool)
            ):
                continue
            stats = pool.get_stats()
            size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
            usage.append(
                PoolUsage(
                    name=f"{self.describe()} ({kind})",
                    used=max(size - available, 0),
                    idle=available,
                    max=stats.get("pool_max", pool.max_size),
                    pending=stats.get("requests_waiting", 0),
                )
            )
        return usage

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
            # a reconnection that failed for this long starts afresh at the next request,
            # instead of backing off (1, 2, 4, ... s) for the 5 minutes psycopg_pool
            # defaults to: once an outage ends, the next call connects at once
            "reconnect_timeout": self.connect_timeout,
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
        import psycopg
        import psycopg_pool

        with self._open_lock:
            if self._sync is None:
                self._first_contact()
                pool = psycopg_pool.ConnectionPool(**self._pool_options(sync=True))
                try:
                    pool.open(wait=True, timeout=self.connect_timeout)
                    with pool.connection() as conn:
                        self._verify(conn)
                except psycopg_pool.PoolTimeout:
                    pool.close()
                    raise self._unavailable(self._probe()) from None
                except psycopg.OperationalError as exc:
                    pool.close()
                    raise self._unavailable(str(exc)) from exc
                except BaseException:
                    pool.close()
                    raise
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
            lease = _Lease(self._getconn(source), source)
            try:
                yield lease
            finally:
                self._idle_check.returned(lease.conn)
                source.putconn(lease.conn)
        else:
            with self._sync_lock:
                yield _Lease(source, None)

    def _getconn(self, pool: Any) -> Any:
        import psycopg_pool

        started = time.perf_counter()
        try:
            conn = pool.getconn()
        except psycopg_pool.PoolTimeout:
            raise self._unavailable(self._probe()) from None
        connection_waited(lambda: f"{self.describe()} (sync)", started)
        return conn

    def _session(self, conn: Any) -> PgSession:
        return PgSession(
            conn, synchronous_commit=self._session_commit(), qualify=self.dialect.qualify
        )

    def _run_sync(self, plan: Plan[T]) -> T:

        if self._sync is None and self._conninfo is None:
            return self._run_on_async_loop(plan)
        with self._connection() as lease:
            session = self._session(lease.conn)
            first = True

            def run(batch: Batch) -> list[Any]:
                """One batch; the plan's first, a read, once more on a fresh connection
                when its own was found lost (nothing it sent could have changed data)."""
                nonlocal session, first
                resendable, first = first and lease.pool is not None and _reads(batch), False
                try:
                    return execute(session, batch)
                except DatabaseUnavailableError:
                    if not resendable:
                        raise
                lease.conn.close()  # lost, if not yet broken: the pool discards it
                lease.pool.putconn(lease.conn)
                lease.conn = self._getconn(lease.pool)
                session = self._session(lease.conn)
                return execute(session, batch)

            try:
                self._verify(lease.conn)
                return drive(plan, run)
            except failures() as exc:
                raise session.lost(exc) from exc
            finally:
                if session.in_tx:
                    session.in_tx = False
                    rollback(lease.conn)
                if session.unsure and lease.pool is not None:
                    lease.conn.close()  # a pooled one: putconn discards a closed connection

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
        import psycopg
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
                await self._afirst_contact()
                pool = psycopg_pool.AsyncConnectionPool(**self._pool_options(sync=False))
                try:
                    await pool.open(wait=True, timeout=self.connect_timeout)
                    async with pool.connection() as conn:
                        await self._averify(conn)
                except psycopg_pool.PoolTimeout:
                    await pool.close()
                    raise self._unavailable(await self._aprobe()) from None
                except psycopg.OperationalError as exc:
                    await pool.close()
                    raise self._unavailable(str(exc)) from exc
                except BaseException:
                    await pool.close()
                    raise
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
            lease = _Lease(await self._agetconn(target), target)
            try:
                return await self._asession(lease, plan)
            finally:
                self._idle_check.returned(lease.conn)
                await target.putconn(lease.conn)
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        self._async_loop = loop
        async with self._async_lock:
            return await self._asession(_Lease(target, None), plan)

    async def _agetconn(self, pool: Any) -> Any:
        import psycopg_pool

        started = time.perf_counter()
        try:
            conn = await pool.getconn()
        except psycopg_pool.PoolTimeout:
            raise self._unavailable(await self._aprobe()) from None
        connection_waited(lambda: f"{self.describe()} (async)", started)
        return conn

    async def _asession(self, lease: _Lease, plan: Plan[T]) -> T:
        """:meth:`_run_sync`'s plan on an async connection."""

        session = self._session(lease.conn)
        first = True

        async def run(batch: Batch) -> list[Any]:
            nonlocal session, first
            resendable, first = first and lease.pool is not None and _reads(batch), False
            try:
                return await aexecute(session, batch)
            except DatabaseUnavailableError:
                if not resendable:
                    raise
            await lease.conn.close()
            await lease.pool.putconn(lease.conn)
            lease.conn = await self._agetconn(lease.pool)
            session = self._session(lease.conn)
            return await aexecute(session, batch)

        try:
            await self._averify(lease.conn)
            return await adrive(plan, run)
        except failures() as exc:
            raise session.lost(exc) from exc
        finally:
            if session.in_tx:
                session.in_tx = False
                await arollback(lease.conn)
            if session.unsure and lease.pool is not None:
                await lease.conn.close()  # a pooled one: putconn discards a closed connection

    def _session_commit(self) -> bool:
        """The commit mode each write transaction sets for itself (``SET LOCAL``): never
        for the session, whose settings a transaction pooler would hand to other clients."""
        return self.options.synchronous_commit

    def _unverified(self, conn: Any) -> bool:
        """Whether ``conn`` prepares statements on a server not yet known to be reached
        directly: then :meth:`_verify` asks, once per database object (a pool opened here
        as it opens; a connection or pool passed in at its first use)."""
        return (
            self._check_pooler and not self._pooler_checked and conn.prepare_threshold is not None
        )

    def _verify(self, conn: Any) -> None:
        if self._unverified(conn):
            server_pid = conn.execute(BACKEND_PID_SQL, prepare=False).fetchone()[0]
            self._refuse_pooler(conn, server_pid)

    async def _averify(self, conn: Any) -> None:
        if self._unverified(conn):
            cur = await conn.execute(BACKEND_PID_SQL, prepare=False)
            self._refuse_pooler(conn, (await cur.fetchone())[0])

    def _refuse_pooler(self, conn: Any, server_pid: int) -> None:
        """Raise :func:`.pg_pool.pooler_error` when ``conn`` does not reach the server
        itself, before any statement is prepared; else remember that it does."""
        error = pooler_error(
            conn.info.backend_pid,
            server_pid,
            self.describe(),
            passed_in=self._conninfo is None,
        )
        if error is not None:
            raise error
        self._pooler_checked = True

    # -- errors ----------------------------------------------------------------------------

    def _first_contact(self) -> None:
        """Before a pool opens: one direct connect, so a definite refusal (a database or
        role that does not exist, a wrong password, nothing listening on the port) is an
        error at once, not after the pool retried it for ``connect_timeout`` seconds, and so
        is a parameter value libpq refuses (a :class:`ConfigurationError`). A transient
        failure (a server starting up) is left to the pool, which retries."""
        import psycopg

        try:
            psycopg.connect(self._contact_info()).close()
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            self._refuse(exc)

    async def _afirst_contact(self) -> None:
        import psycopg

        try:
            conn = await psycopg.AsyncConnection.connect(self._contact_info())
            await conn.close()
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            self._refuse(exc)

    def _refuse(self, exc: BaseException) -> None:
        """Raise the error of a first connect that trying again cannot cure."""
        wrong = option_error(exc)
        if wrong is not None:
            where = f"PostgreSQL at {self.describe()}"
            raise ConfigurationError(f"{where}: {self._reason(wrong)}") from None
        if definite_refusal(exc):
            raise self._refused(exc) from None

    def _contact_info(self) -> str:
        """The first connect's conninfo: with keepalives, and with :meth:`_whole_timeout` as
        its ``connect_timeout`` unless it sets its own (which bounds every pooled connect
        too, so a bad value must show here)."""
        from psycopg.conninfo import make_conninfo

        conninfo = with_keepalives(self._conninfo or "")
        if "connect_timeout" in self._given:
            return conninfo
        return make_conninfo(conninfo, connect_timeout=self._whole_timeout())

    def _whole_timeout(self) -> int:
        """libpq's ``connect_timeout``: whole seconds, at least 1 (0 would mean never)."""
        return max(1, int(self.connect_timeout))

    def _refused(self, exc: BaseException) -> DatabaseUnavailableError:
        """The error for a server that refused the connection, in its words."""
        return DatabaseUnavailableError(
            f"PostgreSQL at {self.describe()} refused the connection: {self._reason(str(exc))}"
        )

    def _reason(self, error: str) -> str:
        """The server's words from libpq's message (after its last ``failed:``), on one
        line, the password masked."""
        import psycopg

        lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
        reason = lines[0].rsplit("failed: ", 1)[-1] if lines else error
        reason = reason.replace("FATAL:  ", "")
        try:
            secret = psycopg.conninfo.conninfo_to_dict(self._conninfo or "").get("password")
        except psycopg.Error:
            secret = None
        if secret:
            reason = reason.replace(str(secret), "***")
        return reason

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
        reason = (
            self._reason(error)
            if error and error.strip()
            else "every pooled connection stayed busy"
        )
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


class _Lease:
    """The connection a plan runs on, and the pool it came from (``None``: a connection
    passed in, which cannot be replaced)."""

    def __init__(self, conn: Any, pool: Any) -> None:
        self.conn = conn
        self.pool = pool


def _reads(batch: Batch) -> bool:
    """Whether ``batch`` only reads, so sending it again cannot change data twice."""
    return not (batch.write or batch.hold or batch.lock)
