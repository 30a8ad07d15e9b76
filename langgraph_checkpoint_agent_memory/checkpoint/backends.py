"""The SQL saver under the names LangGraph users know, one per database.

Each class is :class:`SQLSaver` bound to one database; every instance serves both the sync
and the async API. ``from_conn_string`` is a context manager that closes what it opened;
the ``Async*`` names make ``from_conn_string`` an async context manager, as in LangGraph.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Literal

from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
from langgraph_checkpoint_agent_memory.db.url import hana_connect_args, parse


class _FromConnString:
    """LangGraph's ``from_conn_string`` conventions: context managers that close the saver."""

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[Any]:
        saver: Any = cls(conn_string, **kwargs)  # type: ignore[call-arg]
        try:
            yield saver
        finally:
            saver.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(cls, conn_string: str, **kwargs: Any) -> AsyncIterator[Any]:
        saver: Any = cls(conn_string, **kwargs)  # type: ignore[call-arg]
        try:
            yield saver
        finally:
            await saver.aclose()


class SqliteSaver(_FromConnString, SQLSaver):
    """Checkpoints in a SQLite file: ``SqliteSaver("memory.db", ttl_seconds=3600)``.

    Args:
        path: The file (created with its folders when missing), or a ``sqlite:///`` URL.
        durability: ``"normal"`` (survives a killed process; the default), ``"full"`` (also a
            power cut, one fsync per commit) or ``"off"``.
        pool_size: Connections kept open (readers run in parallel in WAL mode).
        native_writes: Run each put and put_writes as one statement on a connection that
            keeps the GIL, so a write inside a graph is not queued behind the graph's
            thread. ``None`` (the default) turns it on where it is safe: Linux with a
            shared SQLite library, and durability other than ``"full"``.
        **kwargs: :class:`SQLSaver` options (``ttl_seconds``, ``strategy``, ``serde``, ...).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        durability: Literal["normal", "full", "off"] = "normal",
        pool_size: int = 4,
        native_writes: bool | None = None,
        **kwargs: Any,
    ) -> None:
        from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

        if isinstance(path, str) and path.startswith("sqlite:"):
            path = parse(path).options["path"]
        db = SQLiteDatabase(
            path, durability=durability, pool_size=pool_size, native_writes=native_writes
        )
        super().__init__(db, **kwargs)


class PostgresSaver(_FromConnString, SQLSaver):
    """Checkpoints in PostgreSQL.

    Args:
        conn: A connection string, or a psycopg ``Connection`` / ``AsyncConnection`` /
            ``psycopg_pool`` ``ConnectionPool`` / ``AsyncConnectionPool`` in autocommit mode.
            Objects passed in are not closed by the saver.
        pool_size: Size of the pools opened for a connection string.
        connect_timeout: Seconds to wait for the server before raising
            :class:`DatabaseUnavailableError`.
        synchronous_commit: ``True`` (the default): a write returns once PostgreSQL has
            flushed it to disk. ``False``: it returns before the flush (``SET LOCAL
            synchronous_commit TO OFF`` per write transaction), which roughly halves the cost
            of each graph step; a crash of the *server* may then lose the last fraction of a
            second of checkpoints, never leave a half-written one.
        prepare_threshold: For the pools opened for a connection string: a statement runs
            this many times (at least 1) before it is prepared on a connection (psycopg's
            setting, and its default). ``None`` never prepares, for PgBouncer in transaction
            mode before 1.21; a connection or pool passed in keeps its own setting.
        **kwargs: :class:`SQLSaver` options.
    """

    def __init__(
        self,
        conn: Any,
        *,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        synchronous_commit: bool = True,
        prepare_threshold: int | None = 5,
        **kwargs: Any,
    ) -> None:
        from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

        super().__init__(
            PostgresDatabase(
                conn,
                pool_size=pool_size,
                connect_timeout=connect_timeout,
                synchronous_commit=synchronous_commit,
                prepare_threshold=prepare_threshold,
            ),
            **kwargs,
        )


class HanaSaver(_FromConnString, SQLSaver):
    """Checkpoints in SAP HANA (Cloud).

    Args:
        conn: A ``hana://user:password@host:port/?encrypt=true&currentSchema=S`` URL or a dict
            of ``hdbcli.dbapi.connect`` arguments.
        pool_size: Connections kept open (hdbcli connections are not shared between threads).
        **kwargs: :class:`SQLSaver` options.
    """

    def __init__(self, conn: str | dict[str, Any], *, pool_size: int = 4, **kwargs: Any) -> None:
        from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

        if isinstance(conn, str):
            database = HanaDatabase(hana_connect_args(conn), pool_size=pool_size, url=conn)
        else:
            database = HanaDatabase(conn, pool_size=pool_size)
        super().__init__(database, **kwargs)


# the async context manager, re-bound to each Async* subclass so it builds that class
_ASYNC_FROM_CONN_STRING: Any = classmethod(
    _FromConnString.afrom_conn_string.__func__  # type: ignore[attr-defined]
)


class AsyncSqliteSaver(SqliteSaver):
    """:class:`SqliteSaver` whose ``from_conn_string`` is an async context manager."""

    from_conn_string = _ASYNC_FROM_CONN_STRING  # type: ignore[assignment]


class AsyncPostgresSaver(PostgresSaver):
    """:class:`PostgresSaver` whose ``from_conn_string`` is an async context manager."""

    from_conn_string = _ASYNC_FROM_CONN_STRING  # type: ignore[assignment]


class AsyncHanaSaver(HanaSaver):
    """:class:`HanaSaver` whose ``from_conn_string`` is an async context manager."""

    from_conn_string = _ASYNC_FROM_CONN_STRING  # type: ignore[assignment]
