"""The reads behind ``agent-memory stats`` (they lock and write nothing): threads by expiry,
and each table's size with its indexes, as the database measures it, by component.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db import checkpoint, schema
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.distribution import detect_plan

#: The package's tables by component, in the order ``stats`` shows them.
COMPONENT_TABLES: dict[str, tuple[sa.Table, ...]] = {
    "checkpoint": schema.CHECKPOINT_TABLES,
    "store": (*schema.STORE_TABLES, schema.settings),
    "memory": (*schema.MEMORY_TABLES, schema.memory_erasures),
    "keys": (schema.data_keys,),
    "migrations": (schema.migrations,),
}

#: SQLite's virtual table of each table's and index's pages (in most builds).
DBSTAT = "dbstat"

TABLE_NAMES = tuple(t.name for tables in COMPONENT_TABLES.values() for t in tables)


@dataclass(frozen=True)
class ThreadCounts:
    """The checkpointer's threads by expiry (:func:`thread_counts_plan`): ``expired``, live ones
    past it (what the next sweep takes); ``expiring``, live ones within ``within_seconds``."""

    threads: int
    expired: int
    expiring: int
    within_seconds: float


def thread_counts_plan(d: Dialect, now: float, within: float) -> Plan[ThreadCounts]:
    """How many threads hold checkpoints, have expired at ``now`` (seconds since the epoch),
    or expire before ``now + within`` (seconds); two statements in one batch.

    Example:
        >>> far = 4e9  # long after both threads' one-hour TTL
        >>> counts = saver.db.run(thread_counts_plan(saver.dialect, now=far, within=3600))
        >>> counts.threads, counts.expired, counts.expiring
        (2, 2, 0)
    """
    total, expiry = checkpoint.thread_counts(d)
    window = {"now": now, "until": now + within}
    [[(threads,)], [(expired, soon)]] = yield Batch(
        [Stmt(total, fetch=True), Stmt(expiry, window, fetch=True)]
    )
    return ThreadCounts(int(threads), int(expired), int(soon) - int(expired), within)


@dataclass(frozen=True)
class Sizes:
    """Bytes per existing table with its indexes (``None``: unknown), read by :func:`sizes_plan`;
    ``measured_by``: the function or view that measured them; ``file_bytes``: SQLite's file."""

    measured_by: str | None
    tables: dict[str, int | None]
    file_bytes: int | None = None

    def components(self) -> dict[str, int | None]:
        """Bytes per component that has a table here; ``None`` where a table's size is unknown."""
        out: dict[str, int | None] = {}
        for name, tables in COMPONENT_TABLES.items():
            found = [self.tables[t.name] for t in tables if t.name in self.tables]
            if found:
                out[name] = None if None in found else sum(n or 0 for n in found)
        return out

    @property
    def total(self) -> int | None:
        """Bytes of all the package's tables; ``None`` where a size is unknown."""
        sizes = list(self.tables.values())
        return None if None in sizes else sum(n or 0 for n in sizes)

    def as_dict(self) -> dict[str, Any]:
        """The sizes as a JSON-ready dict, components and total included."""
        return {
            "measured_by": self.measured_by,
            "total_bytes": self.total,
            "file_bytes": self.file_bytes,
            "components": self.components(),
            "tables": dict(self.tables),
        }


def sizes_plan(d: Dialect) -> Plan[Sizes]:
    """The size of each of the package's tables, as the database measures it (see the
    module); tables that do not exist are left out. On PostgreSQL, ``d`` learns if it is Citus.

    Example:
        >>> sizes = store.run_plan(sizes_plan(store.dialect))
        >>> sizes.measured_by, sizes.components()["store"] > 0
        ('dbstat', True)
    """
    if d.name == "sqlite":
        return (yield from _sqlite_sizes(d))
    if d.name == "hana":
        return (yield from _hana_sizes(d))
    distributed = yield from detect_plan(d)
    names = [d.qualified(n) for n in TABLE_NAMES]
    query = d.sql(("table_sizes", distributed), lambda: _pg_sizes(len(names), distributed))
    [[row]] = yield Batch([Stmt(query, {f"t{i}": n for i, n in enumerate(names)}, fetch=True)])
    found: dict[str, int | None] = {
        n: int(size) for n, size in zip(TABLE_NAMES, row, strict=True) if size is not None
    }
    how = "citus_total_relation_size" if distributed else "pg_total_relation_size"
    return Sizes(how, found)


def _pg_sizes(n: int, distributed: bool) -> Any:
    """One row: the size of each table ``:t0`` ... (NULL where none); on Citus, its shards'."""
    known = sa.table("pg_dist_partition", sa.column("logicalrelid"))
    columns = []
    for i in range(n):
        rel = sa.func.to_regclass(sa.bindparam(f"t{i}", type_=sa.String))
        size: Any = sa.func.pg_total_relation_size(rel)
        if distributed:
            citus = sa.exists().where(known.c.logicalrelid == rel)
            size = sa.case((citus, sa.func.citus_total_relation_size(rel)), else_=size)
        columns.append(size.label(f"t{i}"))
    return sa.select(*columns)


def _sqlite_sizes(d: Dialect) -> Plan[Sizes]:
    """SQLite: the file's size, then each table's pages from ``dbstat``, where it exists."""
    master = sa.table("sqlite_master", sa.column("type"), sa.column("name"), sa.column("tbl_name"))
    pages = sa.func.pragma_page_count().table_valued("page_count")
    page_size = sa.func.pragma_page_size().table_valued("page_size")
    tables = d.sql(
        "sqlite_tables", lambda: sa.select(master.c.name).where(master.c.type == "table")
    )
    file_size = d.sql(
        "sqlite_file_size", lambda: sa.select(pages.c.page_count * page_size.c.page_size)
    )
    [rows, [(file_bytes,)]] = yield Batch([Stmt(tables, fetch=True), Stmt(file_size, fetch=True)])
    there = {str(name) for (name,) in rows}
    present = [n for n in TABLE_NAMES if n in there]
    stat = sa.table(DBSTAT, sa.column("name"), sa.column("pgsize"))

    def build() -> Any:
        return (
            sa.select(master.c.tbl_name, sa.func.sum(stat.c.pgsize))
            .select_from(stat.join(master, stat.c.name == master.c.name))
            .group_by(master.c.tbl_name)
        )

    try:
        [rows] = yield Batch([Stmt(d.sql(("sqlite_table_sizes", DBSTAT), build), fetch=True)])
    except Exception:  # a library built without dbstat: "no such table"
        return Sizes(None, dict.fromkeys(present), int(file_bytes))
    measured = {str(name): int(size) for name, size in rows}
    return Sizes("dbstat", {n: measured.get(n, 0) for n in present}, int(file_bytes))


def _hana_sizes(d: Dialect) -> Plan[Sizes]:
    """SAP HANA: each table's disk size in the current schema, from the monitoring view."""
    names = ("schema_name", "table_name", "disk_size")
    stats = sa.table("m_table_persistence_statistics", *map(sa.column, names), schema="sys")

    def build() -> Any:
        return (
            sa.select(stats.c.table_name, sa.func.sum(stats.c.disk_size))
            .where(stats.c.schema_name == sa.literal_column("CURRENT_SCHEMA"))
            .group_by(stats.c.table_name)
        )

    [rows] = yield Batch([Stmt(d.sql("hana_table_sizes", build), fetch=True)])
    measured = {str(name).lower(): int(size or 0) for name, size in rows}
    found: dict[str, int | None] = {n: measured[n] for n in TABLE_NAMES if n in measured}
    return Sizes("M_TABLE_PERSISTENCE_STATISTICS", found)


__all__ = ["COMPONENT_TABLES", "Sizes", "ThreadCounts", "sizes_plan", "thread_counts_plan"]
