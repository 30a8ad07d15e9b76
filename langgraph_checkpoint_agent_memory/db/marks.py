"""Who made a database: the mark a program writes into a database it created, so that it
later writes to, or deletes, only a database that carries its mark (the demo does).

The mark is a row of ``am_settings`` named ``created_by``; the store's migrations create that
table. A database that holds no table at all (a new SQLite file, an empty PostgreSQL
database or schema) has nothing to lose and may be claimed; any other needs the mark.
"""

from __future__ import annotations

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.schema import settings
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: The name of the ``am_settings`` row that holds the mark.
CREATED_BY = "created_by"

# catalogs, named as the databases name them (not tables of the package)
_SQLITE_MASTER = sa.table("sqlite_master", sa.column("type"))
_PG_TABLES = sa.table(
    "tables", sa.column("table_schema"), sa.column("table_type"), schema="information_schema"
)


def mark_plan(dialect: Dialect) -> Plan[str | None]:
    """The mark of the database (``None``: it has none, or no ``am_settings`` table). Reads
    only."""
    read = dialect.sql(
        "read_mark",
        lambda: sa.select(settings.c.value).where(settings.c.name == sa.bindparam("b_name")),
    )
    try:
        [rows] = yield Batch([Stmt(read, {"b_name": CREATED_BY}, fetch=True)])
    except Exception:  # no settings table: nothing of ours marked it
        return None
    return str(rows[0][0]) if rows else None


def holds_tables_plan(dialect: Dialect) -> Plan[bool]:
    """Whether the database holds any table (on PostgreSQL: a base table in the schema the
    package's tables would go to). Reads only.

    Raises:
        ConfigurationError: On SAP HANA, where this is not looked up.
    """
    if dialect.name == "sqlite":
        sql = dialect.sql(
            "count_tables",
            lambda: (
                sa.select(sa.func.count())
                .select_from(_SQLITE_MASTER)
                .where(_SQLITE_MASTER.c.type == "table")
            ),
        )
        params: dict[str, str | None] = {}
    elif dialect.name == "postgresql":
        given = sa.bindparam("b_schema", type_=sa.Text)
        sql = dialect.sql(
            "count_tables",
            lambda: (
                sa.select(sa.func.count())
                .select_from(_PG_TABLES)
                .where(
                    _PG_TABLES.c.table_schema == sa.func.coalesce(given, sa.func.current_schema()),
                    _PG_TABLES.c.table_type == "BASE TABLE",  # views hold no data of their own
                )
            ),
        )
        params = {"b_schema": getattr(dialect, "schema", None)}
    else:
        raise ConfigurationError(f"whether a {dialect.name} database is empty is not looked up")
    [rows] = yield Batch([Stmt(sql, params, fetch=True)])
    return int(rows[0][0]) > 0


def write_mark_plan(dialect: Dialect, owner: str) -> Plan[None]:
    """Mark the database as ``owner``'s (its ``am_settings`` table must exist)."""
    insert = dialect.sql(
        "write_mark",
        lambda: sa.insert(settings).values(
            name=sa.bindparam("b_name"), value=sa.bindparam("b_value")
        ),
    )
    yield Batch([Stmt(insert, {"b_name": CREATED_BY, "b_value": owner})], write=True)
