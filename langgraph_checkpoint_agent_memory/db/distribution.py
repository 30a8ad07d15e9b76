"""Citus: the package's tables distributed as ``db/schema.py`` marks them
(``info={"shard_key": column}``, co-located by that column, or ``{"reference": True}``), at
every ``setup()`` under the migrations' lock, so each table once.
"""

from __future__ import annotations

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import metadata
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

# Raw SQL throughout: Citus's catalog and its functions have no SQLAlchemy Core form.
CITUS_INSTALLED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
#: Each existing table: whether Citus knows it, and whether this role owns it.
TABLE_STATE = (
    "SELECT c.relname, EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid), "
    "pg_get_userbyid(c.relowner), pg_has_role(c.relowner, 'USAGE') "
    "FROM pg_class c WHERE c.oid IN "
    "(SELECT to_regclass(n) FROM unnest(CAST(%(tables)s AS text[])) AS n)"
)


def shard_key(table: sa.Table) -> str | None:
    key = table.info.get("shard_key")
    return str(key) if key is not None else None


def citus_tables() -> list[sa.Table]:
    tables = [t for t in metadata.sorted_tables if shard_key(t) or t.info.get("reference")]
    return sorted(tables, key=lambda t: (shard_key(t) or "~", t.name))


def detect_plan(dialect: Dialect, *, hold: bool = False) -> Plan[bool]:
    """Whether the database is distributed (Citus installed); records it on ``dialect``.
    ``hold``: keep open the transaction the caller goes on with (setup's, under its lock)."""
    if dialect.name != "postgresql":
        return False
    [rows] = yield Batch([Stmt(Sql(CITUS_INSTALLED), fetch=True)], hold=hold)
    dialect.distributed = bool(rows[0][0])
    return dialect.distributed


def distribute_plan(dialect: Dialect) -> Plan[list[str]]:
    """Distribute (or replicate) every table Citus does not know yet; return their names."""
    distributed = yield from detect_plan(dialect, hold=True)
    if not distributed:
        return []
    tables = citus_tables()
    names = {"tables": [dialect.qualified(t.name) for t in tables]}
    [rows] = yield Batch([Stmt(Sql(TABLE_STATE), names, fetch=True)], hold=True)
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
    # co-located with a table of the same key Citus knows, else the group's first here
    anchors = {shard_key(t): t.name for t in tables if t.name in state and state[t.name][0]}
    calls = [_distribute(t, anchors.setdefault(shard_key(t), t.name)) for t in todo]
    if calls:
        yield Batch([Stmt(Sql(call), fetch=True) for call in calls], hold=True)
    return [t.name for t in todo]


def _distribute(table: sa.Table, anchor: str) -> str:
    """The call that makes ``table`` a Citus table co-located with ``anchor``."""
    key = shard_key(table)
    name = table.name
    if key is None:
        call = f"create_reference_table('{name}')"
    else:
        colocate = "none" if anchor == name else anchor
        call = f"create_distributed_table('{name}', '{key}', colocate_with => '{colocate}')"
    return f"SELECT {call}, truncate_local_data_after_distributing_table('{name}')"


__all__ = ["citus_tables", "detect_plan", "distribute_plan", "shard_key"]
