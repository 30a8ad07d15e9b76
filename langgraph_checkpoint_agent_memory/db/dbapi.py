"""The DB-API drivers (a SQLite file, SAP HANA): one small pool, and the session that runs a
plan's batches on one of its connections. Not SQLAlchemy's ``QueuePool``: measured on SQLite,
its checkout and checkin added 9 to 14 us to a ``get_tuple`` of 31 us.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import (
    Batch,
    Plan,
    PoolUsage,
    Stmt,
    T,
    connection_waited,
    drive,
)
from langgraph_checkpoint_agent_memory.errors import ClosedError, DatabaseUnavailableError


@dataclass(eq=False)
class DbApiPool:
    """At most ``size`` DB-API connections made by ``creator`` (raising the package's errors),
    checked on checkout by ``check`` (raising the driver's error, without a round trip) or the
    ``dialect``'s ping, closed only on an error the dialect calls a disconnect, rolled back on
    return if ``reset``. A caller waits ``timeout`` seconds for one; ``describe`` names the
    database in errors, the password masked.

    Example:
        >>> import sqlite3
        >>> from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
        >>> pool = DbApiPool(
        ...     lambda: sqlite3.connect(":memory:", check_same_thread=False),
        ...     dialect=SQLiteDialect_pysqlite(dbapi=sqlite3), size=2, timeout=1,
        ...     describe=lambda: "memory", check=lambda conn: conn.total_changes,
        ... )
        >>> with pool.connection() as conn:
        ...     conn.execute("SELECT 1").fetchone(), pool.usage("memory").used
        ((1,), 1)
        >>> pool.usage("memory").idle
        1
        >>> pool.close()
    """

    creator: Callable[[], Any]
    _: KW_ONLY
    dialect: SADialect
    size: int
    timeout: float
    describe: Callable[[], str]
    check: Callable[[Any], Any] | None = None
    reset: bool = True

    def __post_init__(self) -> None:
        self._closed = False
        self._fresh()
        fork.register(self)

    def _fresh(self) -> None:
        self._lock = threading.Lock()
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(self.size)
        self._open: dict[int, Any] = {}
        self._pending = 0

    def after_fork(self) -> None:
        """In a forked child: the parent's connections are set aside untouched."""
        fork.set_aside(*self._open.values())
        self._fresh()

    def open_connections(self) -> list[Any]:
        with self._lock:
            return list(self._open.values())

    def lost(self, error: BaseException, conn: Any) -> bool:
        if not isinstance(error, self.dialect.loaded_dbapi.Error):
            return False
        try:
            return bool(self.dialect.is_disconnect(error, conn, None))
        except Exception:
            return False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A checked connection for one plan; back to the pool afterwards unless lost."""
        if self._closed:
            raise ClosedError(f"the saver for {self.describe()} was closed")
        started = time.perf_counter()
        if not self._slots.acquire(blocking=False) and not self._wait_for_slot():
            raise DatabaseUnavailableError(
                f"every connection to {self.describe()} stayed busy for {self.timeout:g} s"
            )
        try:
            conn = self._checkout()
            connection_waited(self.describe, started)
            keep = True
            try:
                yield conn
            except BaseException as error:
                keep = not self.lost(error, conn)
                raise
            finally:
                if self.reset and keep:
                    keep = self._works(conn.rollback)
                if keep and not self._closed:
                    self._idle.put(conn)
                else:
                    self._discard(conn)
        finally:
            self._slots.release()

    def _wait_for_slot(self) -> bool:
        """Wait, counted for :meth:`usage`, for a connection to come back in time."""
        with self._lock:
            self._pending += 1
        try:
            return self._slots.acquire(timeout=self.timeout)
        finally:
            with self._lock:
                self._pending -= 1

    def usage(self, name: str) -> PoolUsage:
        with self._lock:
            open_now, pending = len(self._open), self._pending
        idle = min(self._idle.qsize(), open_now)
        return PoolUsage(name, open_now - idle, idle, self.size, pending)

    def _checkout(self) -> Any:
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self.creator()
                with self._lock:
                    self._open[id(conn)] = conn
                return conn
            if self._works(self.check or self.dialect.do_ping, conn):
                return conn
            self._discard(conn)

    def _works(self, call: Callable[..., Any], *args: Any) -> bool:
        try:
            call(*args)
        except self.dialect.loaded_dbapi.Error:
            return False
        return True

    def _discard(self, conn: Any) -> None:
        with self._lock:
            self._open.pop(id(conn), None)
        with suppress(Exception):  # a broken connection may fail to close
            conn.close()

    def close(self) -> None:
        """Close idle connections now, busy ones when their plan ends."""
        self._closed = True
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return
            self._discard(conn)


@dataclass(eq=False)
class DbApiSession:
    """Runs a plan's batches on one DB-API connection. ``begin_write``/``begin_read`` start a
    transaction (``None``: manual-commit mode, HANA's); ``write_lock``: the mutex this process's
    writers queue on; ``lone_writes``: one plain write runs without ``BEGIN``."""

    conn: Any
    _: KW_ONLY
    begin_write: str | None
    begin_read: str | None
    write_lock: Any = None
    lone_writes: bool = True
    in_tx: bool = field(default=False, init=False)
    _holds_lock: bool = field(default=False, init=False)

    def _begin(self, cur: Any, batch: Batch) -> None:
        writing = batch.write or batch.lock or batch.hold
        sql = self.begin_write if writing else self.begin_read
        if writing and self.write_lock is not None:
            # Writers of this process queue on a mutex, not in SQLite's busy handler,
            # which sleeps in coarse steps; other processes still meet busy_timeout.
            self.write_lock.acquire()
            self._holds_lock = True
        try:
            if sql:
                cur.execute(sql)
        except BaseException:
            self._release()
            raise
        self.in_tx = True

    def _release(self) -> None:
        if self._holds_lock:
            self._holds_lock = False
            self.write_lock.release()

    def _end(self, commit: bool) -> None:
        self.in_tx = False
        try:
            if self.begin_write is None:  # a driver in manual-commit mode (HANA)
                (self.conn.commit if commit else self.conn.rollback)()
            else:
                self.conn.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            self._release()

    def _single_write(self, batch: Batch) -> bool:
        """One plain statement of an autocommit driver is a transaction by itself."""
        if batch.hold or batch.lock or self.in_tx or not (self.lone_writes and self.begin_write):
            return False
        return batch.write and len(batch.statements) == 1 and not batch.statements[0].many

    def execute(self, batch: Batch) -> list[Any]:
        if self._single_write(batch):
            return self._lone_write(batch.statements[0])
        cur = self.conn.cursor()
        try:
            if not self.in_tx and (
                batch.write or batch.hold or batch.lock or len(batch.statements) > 1
            ):
                self._begin(cur, batch)
            results = [_run(cur, stmt) for stmt in batch.statements]
            if self.in_tx and not batch.hold:
                self._end(commit=not batch.rollback)
            elif not self.in_tx and self.begin_write is None:
                self.conn.commit()  # manual-commit drivers: a lone read still ends its snapshot
        except BaseException:
            if self.in_tx:
                with suppress(Exception):
                    self._end(commit=False)
            raise
        finally:
            cur.close()
        return results

    def _lone_write(self, stmt: Stmt) -> list[Any]:
        # acquire() explicitly, not `with`: a profile then counts the wait as the lock's
        if self.write_lock is not None:
            self.write_lock.acquire()
        try:
            cur = self.conn.execute(stmt.sql.text, stmt.sql.bind(stmt.params))
            return [cur.fetchall() if stmt.fetch else cur.rowcount]
        finally:
            if self.write_lock is not None:
                self.write_lock.release()

    def run(self, plan: Plan[T]) -> T:
        """Run ``plan``; a transaction it left held open is rolled back."""
        try:
            return drive(plan, self.execute)
        finally:
            if self.in_tx:
                self._end(commit=False)


def _run(cur: Any, stmt: Stmt) -> Any:
    if stmt.many:
        params = [stmt.sql.bind(p) for p in stmt.params]
        if params:
            cur.executemany(stmt.sql.text, params)
        return [] if stmt.fetch else (cur.rowcount if params else 0)
    cur.execute(stmt.sql.text, stmt.sql.bind(stmt.params))
    return cur.fetchall() if stmt.fetch else cur.rowcount
