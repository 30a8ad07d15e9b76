"""A plan's batches on one DB-API connection: the session SQLite and SAP HANA share.

A batch runs in a transaction of its own unless it holds one open for the next batch; a
lone write of an autocommit driver is a transaction by itself; the drivers differ only in
how a transaction starts and ends (``BEGIN IMMEDIATE`` and ``COMMIT`` statements for
SQLite, the connection's ``commit()`` for HANA's manual-commit mode).
"""

from __future__ import annotations

from typing import Any

from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt


class DbApiSession:
    """Runs a plan's batches on one DB-API connection, keeping a held transaction open
    between batches. SQLite and HANA share it; they differ in how a transaction starts."""

    def __init__(
        self,
        conn: Any,
        *,
        begin_write: str | None,
        begin_read: str | None,
        write_lock: Any = None,
        lone_writes: bool = True,
    ) -> None:
        self.conn = conn
        self.lone_writes = lone_writes
        self.begin_write = begin_write
        self.begin_read = begin_read
        self.write_lock = write_lock
        self.in_tx = False
        self._holds_lock = False

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
        """One plain statement of an autocommit driver is a transaction by itself: it needs
        no BEGIN/COMMIT, and SQLite takes its write lock before it reads anything."""
        if not self.lone_writes or self.begin_write is None or self.in_tx:
            return False
        if batch.hold or batch.lock:
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
                try:
                    self._end(commit=False)
                except Exception:
                    pass
            raise
        finally:
            cur.close()
        return results

    def _lone_write(self, stmt: Stmt) -> list[Any]:
        """One write in its own implicit transaction, under the process's write lock."""
        if self.write_lock is not None:
            self.write_lock.acquire()
        try:
            cur = self.conn.execute(stmt.sql.text, stmt.sql.bind(stmt.params))
            return [cur.fetchall() if stmt.fetch else cur.rowcount]
        finally:
            if self.write_lock is not None:
                self.write_lock.release()

    def finish(self) -> None:
        """A plan that ended while holding a transaction did not ask for its writes."""
        if self.in_tx:
            self._end(commit=False)


def _run(cur: Any, stmt: Stmt) -> Any:
    """Execute ``stmt`` on ``cur``: its rows, or the count of rows it changed."""
    if stmt.many:
        params = [stmt.sql.bind(p) for p in stmt.params]
        if params:
            cur.executemany(stmt.sql.text, params)
        return [] if stmt.fetch else (cur.rowcount if params else 0)
    cur.execute(stmt.sql.text, stmt.sql.bind(stmt.params))
    return cur.fetchall() if stmt.fetch else cur.rowcount
