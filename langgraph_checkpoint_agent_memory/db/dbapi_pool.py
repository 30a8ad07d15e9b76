"""The pool of the DB-API databases (a SQLite file, SAP HANA): one small pool for both.

What it guarantees:

- A connection is checked as it is handed out; one found closed or disconnected is
  replaced, the call never sees it. The check is the dialect's ping (SQLAlchemy's
  ``do_ping``: ``SELECT 1 FROM DUMMY`` on HANA, a round trip, as only the server knows it
  dropped a session), or a local ``check`` (SQLite: a file has no server to lose, only a
  connection closed in-process, which a property read finds without running a statement).
- A connection goes back to the pool after any error of the application (a
  :class:`~langgraph_checkpoint_agent_memory.errors.ThreadDeletedError` raised inside a
  plan, a constraint): only an error the dialect calls a disconnect (its
  ``is_disconnect``) closes it.
- At most ``size`` connections; a caller that finds them all busy for ``timeout`` seconds
  gets :class:`DatabaseUnavailableError`.

Why not SQLAlchemy's ``QueuePool`` (with a ``creator``, ``pre_ping`` and a ``checkout``
event, which does all of the above through its public API): measured on SQLite, its
checkout and checkin (a connection record, a weakref'd proxy, event dispatch, reset on
return) added 9 to 14 us to a ``get_tuple`` of 31 us, a third of the hot path, where this
pool adds none measurable. The SQLAlchemy dialects still judge connections (``do_ping``,
``is_disconnect``). psycopg_pool serves PostgreSQL.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import PoolUsage, connection_waited
from langgraph_checkpoint_agent_memory.errors import ClosedError, DatabaseUnavailableError


class DbApiPool:
    """``size`` DB-API connections made by ``creator``, checked on checkout.

    Args:
        creator: Opens one connection (raising the package's errors for a database that
            cannot be opened).
        dialect: The SQLAlchemy dialect of the driver, with its DB-API module loaded: its
            ``do_ping`` checks a connection, its ``is_disconnect`` names a lost one.
        size: The most connections open at once.
        timeout: Seconds a caller waits for a free connection.
        describe: Names the database in errors, the password masked.
        check: Raises the driver's error for an unusable connection, without a round
            trip; ``None``: the dialect's ping.
        reset: Roll back whatever a connection holds as it comes back (``False`` where
            the caller ends its own transactions and a rollback would be one more call).

    Example:
        >>> import sqlite3
        >>> from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
        >>> pool = DbApiPool(
        ...     lambda: sqlite3.connect(":memory:", check_same_thread=False),
        ...     dialect=SQLiteDialect_pysqlite(dbapi=sqlite3), size=1, timeout=1,
        ...     describe=lambda: "memory", check=lambda conn: conn.total_changes,
        ... )
        >>> with pool.connection() as conn:
        ...     conn.execute("SELECT 1").fetchone()
        (1,)
        >>> pool.close()
    """

    def __init__(
        self,
        creator: Callable[[], Any],
        *,
        dialect: SADialect,
        size: int,
        timeout: float,
        describe: Callable[[], str],
        check: Callable[[Any], Any] | None = None,
        reset: bool = True,
    ) -> None:
        self._creator = creator
        self._check = check
        self._reset = reset
        self._dialect = dialect
        self._size = size
        self._timeout = timeout
        self._describe = describe
        self._closed = False
        self._fresh()
        fork.register(self)

    def _fresh(self) -> None:
        self._lock = threading.Lock()
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(self._size)
        #: every connection open now, for :meth:`close` and for a forked child
        self._open: dict[int, Any] = {}
        #: callers waiting for a connection, and the seconds callers have waited
        self._pending = 0

    def after_fork(self) -> None:
        """In a forked child: the parent's connections are set aside untouched; new ones
        open on first use."""
        fork.set_aside(*self._open.values())
        self._fresh()

    def open_connections(self) -> list[Any]:
        """The connections open now, idle or in use."""
        with self._lock:
            return list(self._open.values())

    def lost(self, error: BaseException, conn: Any) -> bool:
        """Whether ``error`` says ``conn`` is disconnected (the dialect's judgement)."""
        if not isinstance(error, self._dialect.loaded_dbapi.Error):
            return False
        try:
            return bool(self._dialect.is_disconnect(error, conn, None))
        except Exception:
            return False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A checked connection for one plan; back to the pool afterwards, unless an error
        said it was lost (then it is closed, and the next checkout opens another)."""
        if self._closed:
            raise ClosedError(f"the saver for {self._describe()} was closed")
        started = time.perf_counter()
        if not self._slots.acquire(blocking=False) and not self._wait_for_slot():
            raise DatabaseUnavailableError(
                f"every connection to {self._describe()} stayed busy for {self._timeout:g} s"
            )
        try:
            conn = self._checkout()
            connection_waited(self._describe, started)
            keep = True
            try:
                yield conn
            except BaseException as error:
                keep = not self.lost(error, conn)
                raise
            finally:
                if self._reset and keep:
                    keep = self._rolled_back(conn)
                if keep and not self._closed:
                    self._idle.put(conn)
                else:
                    self._discard(conn)
        finally:
            self._slots.release()

    def _wait_for_slot(self) -> bool:
        """Wait for a connection to come back (every one is lent out), counted for
        :meth:`usage`; whether one did within the timeout."""
        with self._lock:
            self._pending += 1
        try:
            return self._slots.acquire(timeout=self._timeout)
        finally:
            with self._lock:
                self._pending -= 1

    def usage(self, name: str) -> PoolUsage:
        """What the pool holds now, named ``name``.

        Example:
            >>> import sqlite3
            >>> from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
            >>> pool = DbApiPool(
            ...     lambda: sqlite3.connect(":memory:", check_same_thread=False),
            ...     dialect=SQLiteDialect_pysqlite(dbapi=sqlite3), size=2, timeout=1,
            ...     describe=lambda: "memory", check=lambda conn: conn.total_changes,
            ... )
            >>> with pool.connection():
            ...     pool.usage("memory").used
            1
            >>> pool.usage("memory").idle
            1
        """
        with self._lock:
            open_now, pending = len(self._open), self._pending
        idle = min(self._idle.qsize(), open_now)
        return PoolUsage(name, open_now - idle, idle, self._size, pending)

    def _checkout(self) -> Any:
        """An idle connection that passes the check, or a new one."""
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._creator()
                with self._lock:
                    self._open[id(conn)] = conn
                return conn
            if self._usable(conn):
                return conn
            self._discard(conn)

    def _usable(self, conn: Any) -> bool:
        try:
            if self._check is not None:
                self._check(conn)
            else:
                self._dialect.do_ping(conn)
        except self._dialect.loaded_dbapi.Error:
            return False
        return True

    def _rolled_back(self, conn: Any) -> bool:
        """Roll back what ``conn`` holds; whether it still works."""
        try:
            conn.rollback()
        except self._dialect.loaded_dbapi.Error:
            return False
        return True

    def _discard(self, conn: Any) -> None:
        with self._lock:
            self._open.pop(id(conn), None)
        try:
            conn.close()
        except Exception:
            pass  # a broken connection may fail to close, and that is fine

    def close(self) -> None:
        """Close idle connections now, busy ones when their plan ends (closing one another
        thread is using would crash a driver)."""
        self._closed = True
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return
            self._discard(conn)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its class's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
