"""Citus: the package's tables distributed by their shard key, found and set up on first use.

On a PostgreSQL database where the ``citus`` extension is installed, :func:`distribute_plan`
(run by every ``setup()`` after the migrations) turns each of the package's tables into a
Citus table, as ``db/schema.py`` marks it:

- ``info={"shard_key": column}``: hash-distributed by that column, which is part of the
  table's primary key (``thread_id`` for the checkpoint tables; the namespace's shard key for
  the store's and agent memory's). Tables with the same shard key column are co-located, so
  a statement that joins them on one key value runs on one node.
- ``info={"reference": True}``: small tables every node keeps a copy of (the migration
  ledger, the store's recorded settings).

It is idempotent, and runs under the migrations' advisory lock, so processes starting
together distribute each table once; rows already in a table move into its shards.
:func:`detect_plan` only finds out, for a process that does not run ``setup()``; either sets
:attr:`Dialect.distributed`, which switches the statements that differ.
"""

from __future__ import annotations

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import metadata
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

# Raw SQL throughout: Citus's catalog and its functions have no SQLAlchemy Core form.
CITUS_INSTALLED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
#: Each of the package's tables that exists: whether Citus knows it, and whether this role
#: owns it (only the owner may distribute a table).
TABLE_STATE = (
    "SELECT c.relname, EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid), "
    "pg_get_userbyid(c.relowner), pg_has_role(c.relowner, 'USAGE') "
    "FROM pg_class c WHERE c.oid IN "
    "(SELECT to_regclass(n) FROM unnest(CAST(%(tables)s AS text[])) AS n)"
)


def shard_key(table: sa.Table) -> str | None:
    """The column ``table`` is distributed by, or ``None`` (a reference table or neither)."""
    key = table.info.get("shard_key")
    return str(key) if key is not None else None


def citus_tables() -> list[sa.Table]:
    """The package's tables that have a place on Citus: distributed, then reference ones."""
    tables = [t for t in metadata.sorted_tables if shard_key(t) or t.info.get("reference")]
    return sorted(tables, key=lambda t: (shard_key(t) or "~", t.name))


def detect_plan(dialect: Dialect, *, hold: bool = False) -> Plan[bool]:
    """Whether the database is distributed (Citus installed); records it on ``dialect``.

    Args:
        dialect: The dialect to record it on.
        hold: Inside a transaction the caller goes on with (setup's, under its lock): keep
            it open.
    """
    if dialect.name != "postgresql":
        return False
    [rows] = yield Batch([Stmt(Sql(CITUS_INSTALLED), fetch=True)], hold=hold)
    dialect.distributed = bool(rows[0][0])
    return dialect.distributed


def distribute_plan(dialect: Dialect) -> Plan[list[str]]:
    """Distribute (or replicate) every table of the package that exists and Citus does not
    know yet; return their names. Nothing happens where Citus is not installed.

    Meant to run inside the migrations' transaction, after their statements and under their
    lock (see :func:`~.migrations.migrate_plan`).
    """
    distributed = yield from detect_plan(dialect, hold=True)
    if not distributed:
        return []
    tables = citus_tables()
    [rows] = yield Batch(
        [
            Stmt(
                Sql(TABLE_STATE),
                {"tables": [dialect.qualified(t.name) for t in tables]},
                fetch=True,
            )
        ],
        hold=True,
    )
    state: dict[str, tuple[bool, str, bool]] = {
        name: (bool(known), owner, bool(owned)) for name, known, owner, owned in rows
    }
    todo = [t for t in tables if t.name in state and not state[t.name][0]]
    foreign = sorted({state[t.name][1] for t in todo if not state[t.name][2]})
    if foreign:
        raise ConfigurationError(
            "this database has Citus, and the tables "
            + ", ".join(t.name for t in todo)
            + f" are not distributed yet; they belong to {', '.join(foreign)}, and only "
            "their owner can distribute them: run `agent-memory migrate` (or setup()) once "
            "as that role"
        )
    # each group of one shard key column co-located with a table of it that Citus knows,
    # else with the first of the group distributed here (which starts the group)
    anchors = {shard_key(t): t.name for t in tables if t.name in state and state[t.name][0]}
    statements = []
    for table in todo:
        key = shard_key(table)
        anchor = anchors.setdefault(key, table.name)
        statements.append(Stmt(Sql(_distribute(table, anchor)), fetch=True))
    if statements:
        yield Batch(statements, hold=True)
    return [t.name for t in todo]


def _distribute(table: sa.Table, anchor: str) -> str:
    """The call that makes ``table`` a Citus table, co-located with table ``anchor`` (a
    new co-location group when it is ``table`` itself); then the coordinator's local copy of
    the rows it moved into shards is emptied."""
    key = shard_key(table)
    name = table.name
    if key is None:
        call = f"create_reference_table('{name}')"
    else:
        colocate = "none" if anchor == name else anchor
        call = f"create_distributed_table('{name}', '{key}', colocate_with => '{colocate}')"
    return f"SELECT {call}, truncate_local_data_after_distributing_table('{name}')"


__all__ = ["citus_tables", "detect_plan", "distribute_plan", "shard_key"]
