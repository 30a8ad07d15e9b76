"""The pool of the DB-API databases (a SQLite file, SAP HANA): SQLAlchemy's ``QueuePool``.

One implementation for both, from the library: ``sqlalchemy.pool.QueuePool`` with a
``creator``, through its public API. What it guarantees, and why it is configured so:

- A connection is checked as it is handed out (``pre_ping``: the dialect's ``SELECT 1`` /
  ``SELECT 1 FROM DUMMY``); one found closed or disconnected is replaced, the call never
  sees it.
- A connection goes back to the pool after any error of the application (a
  :class:`~langgraph_checkpoint_agent_memory.errors.ThreadDeletedError` raised inside a
  plan, a constraint): only an error the dialect calls a disconnect (``is_disconnect``)
  discards it (``invalidate``). Its open transaction is rolled back on return
  (``reset_on_return="rollback"``).
- At most ``size`` connections; a caller that finds them all busy for ``timeout`` seconds
  gets :class:`DatabaseUnavailableError`.

psycopg_pool serves PostgreSQL (it reconnects with backoff and checks in the background,
which a DB-API driver with no async API does not need).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine.interfaces import Dialect as SADialect
from sqlalchemy.pool import QueuePool

from langgraph_checkpoint_agent_memory.db import fork
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

    Example:
        >>> import sqlite3
        >>> from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
        >>> pool = DbApiPool(
        ...     lambda: sqlite3.connect(":memory:", check_same_thread=False),
        ...     dialect=SQLiteDialect_pysqlite(dbapi=sqlite3), size=1, timeout=1,
        ...     describe=lambda: "memory",
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
    ) -> None:
        self._creator = creator
        self._dialect = dialect
        self._size = size
        self._timeout = timeout
        self._describe = describe
        self._closed = False
        self._fresh()
        fork.register(self)

    def _fresh(self) -> None:
        self._lock = threading.Lock()
        #: every connection open now, for a forked child to set aside
        self._open: dict[int, Any] = {}
        self._pool = QueuePool(
            self._create,
            pool_size=self._size,
            max_overflow=0,
            timeout=self._timeout,
            pre_ping=True,
            dialect=self._dialect,
            reset_on_return="rollback",
        )
        event.listen(self._pool, "close", self._closed_one)
        event.listen(self._pool, "close_detached", self._closed_one_detached)

    def _create(self) -> Any:
        conn = self._creator()
        with self._lock:
            self._open[id(conn)] = conn
        return conn

    def _closed_one(self, conn: Any, _record: Any) -> None:
        with self._lock:
            self._open.pop(id(conn), None)

    def _closed_one_detached(self, conn: Any) -> None:
        self._closed_one(conn, None)

    def after_fork(self) -> None:
        """In a forked child: the parent's connections (and their pool) are set aside
        untouched; new ones open on first use."""
        fork.set_aside(self._pool, *self._open.values())
        self._fresh()

    def lost(self, error: BaseException, conn: Any) -> bool:
        """Whether ``error`` says ``conn`` is disconnected (the dialect's judgement)."""
        dbapi = self._dialect.loaded_dbapi
        if not isinstance(error, dbapi.Error):
            return False
        try:
            return bool(self._dialect.is_disconnect(error, conn, None))
        except Exception:
            return False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A checked connection for one plan; back to the pool afterwards, unless an error
        said it was lost (then it is closed and replaced at the next checkout)."""
        if self._closed:
            raise ClosedError(f"the saver for {self._describe()} was closed")
        fairy = self._checkout()
        conn = fairy.dbapi_connection
        try:
            yield conn
        except BaseException as error:
            if self.lost(error, conn):
                fairy.invalidate(error)
            raise
        finally:
            if self._closed and fairy.is_valid:
                fairy.invalidate()  # closed while in use: close it now that it is free
            fairy.close()

    def _checkout(self) -> Any:
        dbapi = self._dialect.loaded_dbapi
        try:
            return self._pool.connect()
        except sa_exc.TimeoutError:
            raise DatabaseUnavailableError(
                f"every connection to {self._describe()} stayed busy for {self._timeout:g} s"
            ) from None
        except dbapi.Error as error:  # the check of a connection failed in another way
            raise DatabaseUnavailableError(
                f"cannot use the database {self._describe()}: {first_line(error)}"
            ) from error

    def close(self) -> None:
        """Close idle connections now, busy ones when their plan ends."""
        self._closed = True
        self._pool.dispose()


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its class's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
