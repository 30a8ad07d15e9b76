"""Whether a database holds data encrypted at rest: the mark that makes it fail closed.

The mark is the row ``encrypted_at_rest`` of ``am_settings``, in the data's own database (the
key store may be a database of its own, which holds no data). A setup with encryption on
records it, in the transaction of its migrations: the saver's, the store's (and so agent
memory's), and ``agent-memory migrate`` with the master key; a component without setup
(``auto_setup=False``) records it with its first write. Databases encrypted before the mark
existed are marked by the migrations that brought it (checkpoint 4, store 10) when they hold
a sealed row.

A component opened without encryption reads the mark at its first use, in its setup or, with
``auto_setup=False``, on its own, and refuses a marked database before it reads or writes a
row: sealed rows are never decoded as if they were plaintext, and no plaintext is written
beside them. (``Encryption(allow_plaintext=True)``, the migration mode, reads plaintext rows
of an encrypted database; it needs the master key all the same.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateTable

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import settings
from langgraph_checkpoint_agent_memory.errors import EncryptionError

#: The name of the ``am_settings`` row that marks a database encrypted.
MARK = "encrypted_at_rest"
#: Its value (what it says to someone reading the table).
MARK_VALUE = "sealed rows: open with the master key"


def settings_ddl(dialect: Dialect) -> str:
    """CREATE TABLE of ``am_settings`` unless it exists: the checkpointer's migrations and
    the store's both create it, whichever runs first."""
    create = CreateTable(settings, if_not_exists=dialect.create_if_not_exists)
    return dialect.unless_exists(settings.name, str(create.compile(dialect=dialect.sa)).strip())


def _read(dialect: Dialect) -> Sql:
    return dialect.sql(
        "read_encryption_mark",
        lambda: sa.select(settings.c.value).where(settings.c.name == sa.bindparam("b_name")),
    )


def mark_statement(dialect: Dialect) -> Stmt:
    """The statement that marks the database encrypted (nothing when it is marked)."""
    insert = dialect.sql(
        "write_encryption_mark",
        lambda: dialect.insert_row_ignore(settings, ["name"]),
    )
    return Stmt(insert, {"name": MARK, "value": MARK_VALUE})


def refused() -> EncryptionError:
    """The error of a component opened without encryption on an encrypted database."""
    return EncryptionError(
        "this database holds data encrypted at rest, and it was opened without its master "
        "key: set AGENT_MEMORY_MASTER_KEY (or pass encryption=...) as the processes that "
        "wrote it do; nothing was read or written"
    )


def settle_plan(dialect: Dialect, encrypted: bool) -> Plan[None]:
    """Inside the migrations' transaction (held open): mark the database when ``encrypted``;
    else refuse a marked one, rolling the transaction back."""
    [rows] = yield Batch([Stmt(_read(dialect), {"b_name": MARK}, fetch=True)], hold=True)
    if rows and not encrypted:
        yield Batch([], write=True, rollback=True)
        raise refused()
    if not rows and encrypted:
        yield Batch([mark_statement(dialect)], hold=True)


def missing_table(exc: BaseException) -> bool:
    """Whether a driver's error says a table is not there (PostgreSQL's SQLSTATE 42P01,
    HANA's error 259, SQLite's "no such table"), and nothing else: a lock, a timeout, a
    lost connection or a refused privilege must not read as a database never set up.

    Example:
        >>> import sqlite3
        >>> missing_table(sqlite3.OperationalError("no such table: am_settings"))
        True
        >>> missing_table(sqlite3.OperationalError("database is locked"))
        False
    """
    sqlstate = getattr(exc, "sqlstate", None)  # psycopg
    if sqlstate is not None:
        return bool(sqlstate == "42P01")
    code = getattr(exc, "errorcode", None)  # hdbcli
    if isinstance(code, int):
        return code == 259
    return "no such table" in str(exc)


def marked_plan(dialect: Dialect) -> Plan[bool]:
    """Whether the database is marked encrypted (a database without ``am_settings`` is not).
    Reads only; any other failure of the read is raised, so that no component goes on
    unchecked."""
    try:
        [rows] = yield Batch([Stmt(_read(dialect), {"b_name": MARK}, fetch=True)])
    except Exception as exc:
        if missing_table(exc):  # a database never set up
            return False
        raise
    return bool(rows)


@dataclass(frozen=True)
class SealedRows:
    """Where a component's sealed rows show: ``table``, and the condition on its columns
    (``sealed()``) that a row is sealed."""

    table: sa.Table
    sealed: Callable[[], Any]

    def found_plan(self, dialect: Dialect, *, hold: bool = False) -> Plan[bool]:
        """Whether the table holds a sealed row (one row read at most)."""
        find = dialect.sql(
            ("sealed_row", self.table.name),
            lambda: (
                sa.select(sa.literal_column("1"))
                .select_from(self.table)
                .where(self.sealed())
                .limit(1)
            ),
        )
        [found] = yield Batch([Stmt(find, fetch=True)], hold=hold)
        return bool(found)

    def mark_plan(self, dialect: Dialect, shard_depth: int) -> Plan[int]:
        """A migration's rows plan: mark the database when the table holds a sealed row;
        1 when it did, else 0."""
        if not (yield from self.found_plan(dialect, hold=True)):
            return 0
        yield Batch([mark_statement(dialect)], hold=True)
        return 1
