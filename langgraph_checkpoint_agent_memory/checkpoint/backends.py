"""The SQL saver under the names LangGraph users know, one per database; the ``Async*`` names
make ``from_conn_string`` an async context manager, as in LangGraph."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, asynccontextmanager, closing, contextmanager
from pathlib import Path
from typing import Any, Literal

from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
from langgraph_checkpoint_agent_memory.db.url import hana_connect_args, parse, sqlite_mode


@contextmanager
def _from_conn_string(cls: Callable[..., Any], /, conn_string: str, **kwargs: Any) -> Iterator[Any]:
    """Open the saver ``conn_string`` names, and close it on exit."""
    with closing(cls(conn_string, **kwargs)) as saver:
        yield saver


@asynccontextmanager
async def _afrom_conn_string(
    cls: Callable[..., Any], /, conn_string: str, **kwargs: Any
) -> AsyncIterator[Any]:
    """Open the saver ``conn_string`` names, and close it on exit (``async with``)."""
    async with aclosing(cls(conn_string, **kwargs)) as saver:
        yield saver


#: LangGraph's ``from_conn_string`` conventions, bound to each saver class.
_FROM_CONN_STRING: Any = classmethod(_from_conn_string)
_AFROM_CONN_STRING: Any = classmethod(_afrom_conn_string)


class SqliteSaver(SQLSaver):
    """Checkpoints in SQLite: a file, or a ``sqlite3.Connection`` you own.

    Args:
        conn: The file (created with its folders when missing, unless ``mode`` says
            otherwise), a ``sqlite:///`` URL, or a ``sqlite3.Connection`` opened with
            ``check_same_thread=False`` (used as it is, one plan at a time, never closed).
        durability: For a file: ``"normal"`` (survives a killed process; the default),
            ``"full"`` (also a power cut, one fsync per commit) or ``"off"``.
        pool_size: For a file: connections kept open (readers run in parallel in WAL mode).
        mode: For a file: ``"rwc"`` (the default) creates it when missing; ``"rw"`` opens an
            existing file only, and ``"ro"`` reads one without changing it; both raise
            :class:`DatabaseNotFoundError` at the first call when the file does not exist.
        **kwargs: :class:`SQLSaver` options (``ttl_seconds``, ``strategy``, ``serde``,
            ``encryption``, ...).

    Example:
        >>> import sqlite3
        >>> from langgraph_checkpoint_agent_memory import SqliteSaver
        >>> saver = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
        >>> saver.get_tuple({"configurable": {"thread_id": "t1"}}) is None
        True
    """

    from_conn_string = _FROM_CONN_STRING
    afrom_conn_string = _AFROM_CONN_STRING

    def __init__(
        self,
        conn: str | Path | sqlite3.Connection,
        *,
        durability: Literal["normal", "full", "off"] = "normal",
        pool_size: int = 4,
        mode: Literal["rwc", "rw", "ro"] = "rwc",
        **kwargs: Any,
    ) -> None:
        from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

        if isinstance(conn, str) and conn.startswith("sqlite:"):
            target = parse(conn)
            conn, mode = target.options["path"], sqlite_mode(target, mode)
        database = SQLiteDatabase(conn, durability=durability, pool_size=pool_size, mode=mode)
        super().__init__(database, **kwargs)


class PostgresSaver(SQLSaver):
    """Checkpoints in PostgreSQL.

    Args:
        conn: A connection string, or a psycopg ``Connection`` / ``AsyncConnection`` /
            ``psycopg_pool`` ``ConnectionPool`` / ``AsyncConnectionPool`` in autocommit mode.
            Objects passed in are not closed by the saver.

    Keyword Args:
        pool_size: Size of the pools opened for a connection string.
        connect_timeout: Seconds to wait for the server before raising
            :class:`DatabaseUnavailableError`.
        synchronous_commit: ``True`` (the default): a write returns once PostgreSQL has
            flushed it to disk. ``False``: before the flush (set in each write's own
            transaction, never for the session), saving each graph step's flush wait; a
            server crash may then lose the last fraction of a second of checkpoints, never
            leave a half-written one (see the user guide).
        prepare_threshold: For the pools opened for a connection string: runs of a statement
            (at least 1) before psycopg prepares it on a connection (default 5). ``None`` (or
            ``"none"``, or ``?prepare_threshold=none`` in the URL) never prepares, as a
            transaction pooler needs; under the default, a pool found behind one fails at its
            first call with a :class:`ConfigurationError` saying so. A connection or pool
            passed in keeps its own setting, checked the same way unless this is given.
        max_idle: For the pools opened for a connection string: seconds an unused
            connection stays open.
        max_lifetime: For those pools: seconds after which a connection is replaced.
        check_after_idle: For those pools: a connection unused for this many seconds (default
            1) is checked with a round trip before it is handed out, so one a server restart
            broke is replaced instead of failing a call; ``0`` checks at every checkout.
        schema: The PostgreSQL schema of the package's tables (created at setup when
            missing; also ``?schema=name`` in the URL), so apps or tenants share one
            database. ``None``: the search path's (``public``).
        **kwargs: :class:`SQLSaver` options (``encryption=`` among them: sealed values,
            data keys in the ``am_keys`` table of this database unless a key store URL is
            given).

    Example:
        ```python
        # not run: needs a PostgreSQL server
        from langgraph_checkpoint_agent_memory import PostgresSaver

        with PostgresSaver.from_conn_string("postgresql://localhost/agents") as saver:
            graph = builder.compile(checkpointer=saver)
        ```
    """

    from_conn_string = _FROM_CONN_STRING
    afrom_conn_string = _AFROM_CONN_STRING

    def __init__(self, conn: Any, **kwargs: Any) -> None:
        from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase, PostgresOptions

        options = {k: kwargs.pop(k) for k in PostgresOptions.names() & kwargs.keys()}
        super().__init__(PostgresDatabase(conn, **options), **kwargs)


class HanaSaver(SQLSaver):
    """Checkpoints in SAP HANA (Cloud).

    Args:
        conn: A ``hana://user:password@host:port/?encrypt=true&currentSchema=S`` URL or a dict
            of ``hdbcli.dbapi.connect`` arguments.
        pool_size: Connections kept open (hdbcli connections are not shared between threads).
        **kwargs: :class:`SQLSaver` options (``encryption=`` among them).
    """

    from_conn_string = _FROM_CONN_STRING
    afrom_conn_string = _AFROM_CONN_STRING

    def __init__(self, conn: str | dict[str, Any], *, pool_size: int = 4, **kwargs: Any) -> None:
        from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

        if isinstance(conn, str):
            database = HanaDatabase(hana_connect_args(conn), pool_size=pool_size, url=conn)
        else:
            database = HanaDatabase(conn, pool_size=pool_size)
        super().__init__(database, **kwargs)


class AsyncSqliteSaver(SqliteSaver):
    """:class:`SqliteSaver` whose ``from_conn_string`` is an async context manager."""

    from_conn_string = _AFROM_CONN_STRING


class AsyncPostgresSaver(PostgresSaver):
    """:class:`PostgresSaver` whose ``from_conn_string`` is an async context manager."""

    from_conn_string = _AFROM_CONN_STRING


class AsyncHanaSaver(HanaSaver):
    """:class:`HanaSaver` whose ``from_conn_string`` is an async context manager."""

    from_conn_string = _AFROM_CONN_STRING
