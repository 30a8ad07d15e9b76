"""One batch on one psycopg connection, sync or async: the only code that sends statements.

A batch of one statement, which every checkpoint write and read is, goes through a cursor by
itself, without a transaction of its own; psycopg prepares it once it has run
``prepare_threshold`` times on a connection. A longer batch travels through pipeline mode:
``BEGIN`` and the statements in one round trip, then ``COMMIT`` by itself. Rows come back in
binary format (``binary=True``): checkpoints and blobs are ``bytea``, which the text format
would send as hex, twice the bytes, to be decoded on the client.

The commit is not in the pipeline because psycopg ends a pipeline with a Sync and then a
Flush. After a Sync that ends the transaction a transaction pooler (PgBouncer in
``pool_mode = transaction``) has handed the server connection back, and may read the Flush
only then: it links a server connection to the client for the Flush, which the server does
not answer, and keeps it until the client sends its next query; a connection left idle in
its pool holds it for good, and the other clients wait until ``query_wait_timeout`` drops
them. With the transaction still open at the pipeline's Sync the Flush reaches the server
connection the client already holds, and the lone ``COMMIT`` ends with a Sync alone.

Nothing is set for the session, so no setting outlives a transaction on a server connection
that a transaction pooler hands to another client next: a relaxed commit
(``synchronous_commit=False``) is :data:`RELAX_COMMIT` in the write's own transaction.
``BEGIN``, ``COMMIT``, ``ROLLBACK`` and the relaxed commit are never prepared
(``prepare=False``): there is nothing to plan in them, and each prepared statement is one
more name on the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, DatabaseUnavailableError

#: A relaxed commit for the current transaction only: ``set_config``'s third argument is
#: ``SET LOCAL``'s. (Raw SQL: a server setting, which SQLAlchemy Core has no form for.)
RELAX_COMMIT = "SELECT set_config('synchronous_commit', 'off', true)"


class PgSession:
    """What a plan's batches send on one psycopg connection, decided without I/O.

    A lone statement (every checkpoint read and write) goes out by itself, atomic as any
    single statement is; anything else goes in one pipeline, ``BEGIN`` and the statements,
    followed, unless the batch holds its transaction open for the plan's next batch, by
    ``COMMIT`` (:meth:`closing`).
    :func:`execute` and :func:`aexecute` are the two shells that send it.
    """

    def __init__(
        self,
        conn: Any,
        *,
        synchronous_commit: bool = True,
        qualify: Callable[[str], str] | None = None,
    ) -> None:
        if not conn.autocommit:
            raise ConfigurationError(
                "PostgreSQL connections must be in autocommit mode: use "
                "psycopg.connect(..., autocommit=True) or "
                "ConnectionPool(..., kwargs={'autocommit': True})"
            )
        self.conn = conn
        self.synchronous_commit = synchronous_commit
        #: The statement text as sent: the tables named in the package's schema, where it
        #: has one (see :meth:`PostgresDialect.qualify`).
        self.text: Callable[[Stmt], str] = (
            (lambda stmt: stmt.sql.text)
            if qualify is None
            else (lambda stmt: qualify(stmt.sql.text))
        )
        self.in_tx = False
        #: A pipelined batch failed on this connection: psycopg's cache of prepared
        #: statements and the server's may no longer agree, so a pool discards it.
        self.unsure = False

    def _single(self, batch: Batch) -> Stmt | None:
        if self.in_tx or batch.hold or batch.lock or len(batch.statements) != 1:
            return None
        stmt = batch.statements[0]
        return None if stmt.many else stmt

    def lone(self, batch: Batch) -> Stmt | None:
        """The statement to send alone, or ``None`` when the batch needs a transaction
        (several statements, a held one, a write with a relaxed commit)."""
        stmt = self._single(batch)
        if stmt is None or (batch.write and not self.synchronous_commit):
            return None
        return stmt

    def opening(self, batch: Batch) -> tuple[str, ...]:
        """What starts the batch's transaction (nothing when a held one goes on)."""
        if self.in_tx:
            return ()
        self.in_tx = True
        if batch.write and not self.synchronous_commit:
            return ("BEGIN", RELAX_COMMIT)
        return ("BEGIN",)

    def closing(self, batch: Batch) -> str | None:
        """What ends the batch's transaction, sent after its pipeline (``None``: the batch
        holds it open for the plan's next batch)."""
        if batch.hold:
            return None
        return "ROLLBACK" if batch.rollback else "COMMIT"

    def ended(self, batch: Batch, ok: bool) -> bool:
        """Record how the batch ended; whether a transaction is left to roll back."""
        left_open = self.in_tx
        if not ok or not batch.hold:
            self.in_tx = False
        return left_open and not ok

    def lost(self, exc: BaseException) -> BaseException:
        """A broken connection becomes :class:`DatabaseUnavailableError`; any other error
        (a constraint, a lock timeout, a cancelled query) stays as the server raised it.

        Broken is: the connection says so, the server ended the session (SQLSTATE class
        ``08`` or ``57P01``-``57P03``: a shutdown, a restart, a crash), Citus's coordinator
        found its postmaster gone (:data:`POSTMASTER_GONE`), or libpq failed with no
        SQLSTATE at all, which only the client side does (a socket closed mid-pipeline
        gives "cannot exit pipeline mode while busy" before psycopg marks the connection
        broken)."""
        if self.conn.closed or self.conn.broken or connection_failure(exc):
            return DatabaseUnavailableError(f"the connection to PostgreSQL was lost: {_line(exc)}")
        return exc


#: What Citus's coordinator raises when its postmaster died while a backend waited on a
#: worker (``kill -9`` of the postmaster under load), under SQLSTATE ``XX000``: Citus gives
#: it no code of its own, and ``XX000`` alone is any internal error.
POSTMASTER_GONE = "postmaster was shut down"


def failures() -> tuple[type[Exception], ...]:
    """psycopg's errors that may say the connection failed (:func:`connection_failure`
    decides): the shells catch these and ask :meth:`PgSession.lost`."""
    import psycopg

    return (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.InternalError_)


def connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection failed, rather than a statement."""
    import psycopg

    if isinstance(exc, psycopg.errors.InternalError_):
        return _line(exc).startswith(POSTMASTER_GONE)
    if not isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    if isinstance(exc, psycopg.errors.PipelineAborted):
        return False  # a statement before it failed: that error is the one to report
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(("08", "57P01", "57P02", "57P03"))


def _line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _prepare(stmt: Stmt) -> bool | None:
    """psycopg's ``prepare`` for ``stmt``: its threshold decides (``None``), unless the
    statement asks to be planned with its values every time (``False``)."""
    return None if stmt.prepare else False


def _params(stmt: Stmt) -> Any:
    if stmt.many:
        return [stmt.sql.bind(p) for p in stmt.params]
    return stmt.sql.bind(stmt.params)


def execute(session: PgSession, batch: Batch) -> list[Any]:
    """Send one batch on a sync connection."""
    lone = session.lone(batch)
    try:
        if lone is not None:
            cur = session.conn.execute(
                session.text(lone), _params(lone), binary=lone.fetch, prepare=_prepare(lone)
            )
            return [cur.fetchall() if lone.fetch else cur.rowcount]
        return _pipeline(session, batch)
    except failures() as exc:
        raise session.lost(exc) from exc


def _pipeline(session: PgSession, batch: Batch) -> list[Any]:
    """The batch's statements in one pipeline, inside its transaction, which ends after
    the pipeline (see the module's docstring)."""
    conn = session.conn
    sent = []
    try:
        with conn.pipeline():
            for sql in session.opening(batch):
                conn.execute(sql, prepare=False)
            for stmt in batch.statements:
                cur = conn.cursor(binary=stmt.fetch)
                if not stmt.many:
                    cur.execute(session.text(stmt), _params(stmt), prepare=_prepare(stmt))
                elif stmt.params:
                    cur.executemany(session.text(stmt), _params(stmt))
                sent.append((cur, stmt))
        if (closing := session.closing(batch)) is not None:
            conn.execute(closing, prepare=False)
    except BaseException:
        session.unsure = True
        if session.ended(batch, ok=False):
            rollback(conn)
        raise
    session.ended(batch, ok=True)
    return [c.fetchall() if s.fetch else _count(c, s) for c, s in sent]


async def aexecute(session: PgSession, batch: Batch) -> list[Any]:
    """Send one batch on an async connection."""
    conn = session.conn
    lone = session.lone(batch)
    try:
        if lone is not None:
            cur = await conn.execute(
                session.text(lone), _params(lone), binary=lone.fetch, prepare=_prepare(lone)
            )
            return [await cur.fetchall() if lone.fetch else cur.rowcount]
        return await _apipeline(session, batch)
    except failures() as exc:
        raise session.lost(exc) from exc


async def _apipeline(session: PgSession, batch: Batch) -> list[Any]:
    """:func:`_pipeline` on an async connection."""
    conn = session.conn
    sent = []
    try:
        async with conn.pipeline():
            for sql in session.opening(batch):
                await conn.execute(sql, prepare=False)
            for stmt in batch.statements:
                cur = conn.cursor(binary=stmt.fetch)
                if stmt.many and stmt.params:
                    await cur.executemany(session.text(stmt), _params(stmt))
                elif not stmt.many:
                    await cur.execute(session.text(stmt), _params(stmt), prepare=_prepare(stmt))
                sent.append((cur, stmt))
        if (closing := session.closing(batch)) is not None:
            await conn.execute(closing, prepare=False)
    except BaseException:
        session.unsure = True
        if session.ended(batch, ok=False):
            await arollback(conn)
        raise
    session.ended(batch, ok=True)
    return [await c.fetchall() if s.fetch else _count(c, s) for c, s in sent]


def _count(cur: Any, stmt: Stmt) -> int:
    return 0 if stmt.many and not stmt.params else int(cur.rowcount)


def rollback(conn: Any) -> None:
    try:
        if not conn.closed:
            conn.execute("ROLLBACK", prepare=False)
    except Exception:
        pass  # a broken connection: the pool discards it


async def arollback(conn: Any) -> None:
    try:
        if not conn.closed:
            await conn.execute("ROLLBACK", prepare=False)
    except Exception:
        pass
