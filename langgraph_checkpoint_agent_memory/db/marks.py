"""What a database records about itself: the rows of ``am_settings``, read and written here.

- ``shard_depth``: the store's shard-key rule, recorded by the first setup and fixed once rows
  carry keys computed by it (see :func:`.migrations.migrate_plan`).
- ``encrypted_at_rest``: the mark that makes an encrypted database fail closed, recorded with
  a setup's migrations or a component's first write; in the data's own database, as the key
  store may be a database of its own, which holds no data.
- ``created_by``: who made the database, so that a program (the demo) writes to, or deletes,
  only a database that carries its mark (or one that holds no table at all).
"""

from __future__ import annotations

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import settings
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, EncryptionError

#: The row that marks a database encrypted, and its value (what it says to a reader).
MARK = "encrypted_at_rest"
MARK_VALUE = "sealed rows: open with the master key"
CREATED_BY = "created_by"
SHARD_DEPTH = "shard_depth"

# catalogs, named as the databases name them (not tables of the package)
_SQLITE_MASTER = sa.table("sqlite_master", sa.column("type"))
_PG_TABLES = sa.table(
    "tables", sa.column("table_schema"), sa.column("table_type"), schema="information_schema"
)


def read_setting(dialect: Dialect) -> Sql:
    """The value of the row named ``:b_name``."""
    return dialect.sql(
        "read_setting",
        lambda: sa.select(settings.c.value).where(settings.c.name == sa.bindparam("b_name")),
    )


def record_setting(dialect: Dialect) -> Sql:
    """Insert the row ``:b_name`` = ``:b_value``."""
    return dialect.sql(
        "record_setting",
        lambda: sa.insert(settings).values(
            name=sa.bindparam("b_name"), value=sa.bindparam("b_value")
        ),
    )


def mark_statement(dialect: Dialect) -> Stmt:
    """The statement that marks the database encrypted (nothing when it is marked)."""
    insert = dialect.sql(
        "write_encryption_mark", lambda: dialect.insert_row_ignore(settings, ["name"])
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
    """In the migrations' held transaction: mark the database if ``encrypted``, or refuse it."""
    read = Stmt(read_setting(dialect), {"b_name": MARK}, fetch=True)
    [rows] = yield Batch([read], hold=True)
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
    """Whether the database is marked encrypted (one without ``am_settings`` is not); reads
    only, any other failure is raised, so that no component goes on unchecked."""
    try:
        [rows] = yield Batch([Stmt(read_setting(dialect), {"b_name": MARK}, fetch=True)])
    except Exception as exc:
        if missing_table(exc):  # a database never set up
            return False
        raise
    return bool(rows)


def mark_plan(dialect: Dialect) -> Plan[str | None]:
    """The program that created the database (``None``: no mark or no table); reads only."""
    try:
        [rows] = yield Batch([Stmt(read_setting(dialect), {"b_name": CREATED_BY}, fetch=True)])
    except Exception:  # no settings table: nothing of ours marked it
        return None
    return str(rows[0][0]) if rows else None


def holds_tables_plan(dialect: Dialect) -> Plan[bool]:
    """Whether the database holds any table (on PostgreSQL: a base table in the schema the
    package's tables would go to). Reads only; ``ConfigurationError`` on SAP HANA."""
    params: dict[str, str | None] = {}
    if dialect.name == "sqlite":
        catalog, where = _SQLITE_MASTER, [_SQLITE_MASTER.c.type == "table"]
    elif dialect.name == "postgresql":
        given, t = sa.bindparam("b_schema", type_=sa.Text), _PG_TABLES.c
        schema = t.table_schema == sa.func.coalesce(given, sa.func.current_schema())
        # base tables: views hold no data of their own
        catalog, where = _PG_TABLES, [schema, t.table_type == "BASE TABLE"]
        params = {"b_schema": getattr(dialect, "schema", None)}
    else:
        raise ConfigurationError(f"whether a {dialect.name} database is empty is not looked up")
    sql = dialect.sql(
        "count_tables", lambda: sa.select(sa.func.count()).select_from(catalog).where(*where)
    )
    [rows] = yield Batch([Stmt(sql, params, fetch=True)])
    return int(rows[0][0]) > 0


def write_mark_plan(dialect: Dialect, owner: str) -> Plan[None]:
    """Mark the database as ``owner``'s (its ``am_settings`` table must exist)."""
    row = {"b_name": CREATED_BY, "b_value": owner}
    yield Batch([Stmt(record_setting(dialect), row)], write=True)
