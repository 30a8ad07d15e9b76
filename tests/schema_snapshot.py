"""The schema a set-up database holds, as JSON that compares across runs and databases.

``tests/fixtures/schema/<server>.json`` records what ``agent-memory migrate`` makes on SQLite,
on each PostgreSQL server of the test harness and on Citus; ``tests/test_migrations.py``
checks that a new database still gets exactly that, and that a database made before a
migration step (``tests/fixtures/old_index``) ends with exactly that once migrated.
Regenerate them (after a schema change made on purpose, with a migration step for databases
that exist) with::

    PYTHONPATH=$PWD python -m tests.schema_snapshot [sqlite pg15 pg18vector citus]

Normalised: tables, columns, indexes and constraints by name, sorted; SQL text with its
whitespace collapsed and its quotes and schema name dropped; no OIDs, and Citus co-location
groups named by their first table. Columns are compared by name, not position: a column added
by ``ALTER TABLE`` comes last where a ``CREATE TABLE`` may have put it first, and no statement
of the package depends on the order.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "schema"
SERVERS = ("sqlite", "pg15", "pg18vector", "citus")


def _sql(text: str | None, schema: str = "") -> str | None:
    if text is None:
        return None
    text = " ".join(text.replace('"', "").split())
    return text.replace(f"{schema}.", "") if schema else text


def sqlite_schema(path: str) -> dict[str, Any]:
    """The tables (columns, key, ``WITHOUT ROWID``), indexes, views and triggers of a
    SQLite file."""
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%'"
        ).fetchall()
        tables: dict[str, Any] = {}
        for kind, name, _, sql in sorted(objects):
            if kind != "table":
                continue
            columns = {
                col: {"type": type_, "notnull": bool(notnull), "default": dflt, "pk": pk}
                for _, col, type_, notnull, dflt, pk in conn.execute(f"PRAGMA table_info('{name}')")
            }
            indexes = {}
            for _, index, unique, origin, partial in conn.execute(f"PRAGMA index_list('{name}')"):
                cols = [c for _, _, c in conn.execute(f"PRAGMA index_info('{index}')")]
                indexes[index] = {
                    "unique": bool(unique),
                    "origin": origin,
                    "partial": bool(partial),
                    "columns": cols,
                }
            tables[name] = {
                "columns": dict(sorted(columns.items())),
                "indexes": dict(sorted(indexes.items())),
                "without_rowid": "WITHOUT ROWID" in (sql or "").upper(),
            }
        others = {
            name: {"type": kind, "table": table, "sql": _sql(sql)}
            for kind, name, table, sql in sorted(objects)
            if kind != "table" and sql is not None
        }
        return {"tables": tables, "objects": others}
    finally:
        conn.close()


_PG_TABLES = """
SELECT c.relname, c.relkind, c.reloptions FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v')
"""
_PG_COLUMNS = """
SELECT table_name, column_name, data_type, udt_name, character_maximum_length,
       is_nullable, column_default, is_generated
FROM information_schema.columns WHERE table_schema = current_schema()
"""
_PG_CONSTRAINTS = """
SELECT t.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
WHERE t.relnamespace = current_schema()::regnamespace
"""
_PG_INDEXES = """
SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()
"""
_PG_TRIGGERS = """
SELECT c.relname, g.tgname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
WHERE NOT g.tgisinternal AND c.relnamespace = current_schema()::regnamespace
"""
_CITUS = """
SELECT logicalrelid::regclass::text, partmethod,
       CASE WHEN partkey IS NULL THEN NULL ELSE column_to_column_name(logicalrelid, partkey) END,
       colocationid
FROM pg_dist_partition
"""


def postgres_schema(url: str) -> dict[str, Any]:
    """The tables (columns, constraints, indexes, storage parameters, triggers), the
    extensions and, on Citus, each table's distribution column and co-location group."""
    import psycopg

    with psycopg.connect(url) as conn:
        [(schema,)] = conn.execute("SELECT current_schema()").fetchall()
        tables: dict[str, Any] = {}
        for name, kind, options in conn.execute(_PG_TABLES).fetchall():
            tables[name] = {
                "kind": kind,
                "options": sorted(options or []),
                "columns": {},
                "constraints": {},
                "indexes": {},
                "triggers": [],
            }
        for table, col, type_, udt, length, nullable, default, generated in conn.execute(
            _PG_COLUMNS
        ).fetchall():
            tables[table]["columns"][col] = {
                "type": type_ if type_ != "USER-DEFINED" else udt,
                "length": length,
                "nullable": nullable == "YES",
                "default": default,
                "generated": generated,
            }
        for table, name, kind, definition in conn.execute(_PG_CONSTRAINTS).fetchall():
            tables[table]["constraints"][name] = {"type": kind, "definition": definition}
        for table, name, definition in conn.execute(_PG_INDEXES).fetchall():
            tables[table]["indexes"][name] = _sql(definition, schema)
        for table, name in conn.execute(_PG_TRIGGERS).fetchall():
            tables[table]["triggers"].append(name)
        extensions = sorted(
            name for (name,) in conn.execute("SELECT extname FROM pg_extension").fetchall()
        )
        distribution: dict[str, Any] | None = None
        if "citus" in extensions:
            rows = conn.execute(_CITUS).fetchall()
            groups: dict[int, str] = {}
            for table, _, _, group in sorted(rows):
                groups.setdefault(group, table)
            distribution = {
                table: {"method": method, "column": column, "colocated_with": groups[group]}
                for table, method, column, group in sorted(rows)
            }
    for info in tables.values():
        for key in ("columns", "constraints", "indexes"):
            info[key] = dict(sorted(info[key].items()))
        info["triggers"].sort()
    return {
        "tables": dict(sorted(tables.items())),
        "extensions": extensions,
        "distribution": distribution,
    }


def schema_of(url: str) -> dict[str, Any]:
    """The normalised schema of the database at ``url`` (SQLite or PostgreSQL)."""
    if url.startswith("sqlite:///"):
        return sqlite_schema(url.removeprefix("sqlite:///"))
    return postgres_schema(url)


def expected(server: str) -> dict[str, Any]:
    """The recorded schema of ``server`` (``sqlite``, ``pg15``, ``pg18vector``, ``citus``)."""
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{server}.json").read_text())
    return loaded


def migrated(url: str) -> dict[str, Any]:
    """What ``agent-memory migrate`` makes of the empty database at ``url``."""
    from langgraph_checkpoint_agent_memory.cli import main

    assert main(["migrate", "--url", url]) == 0
    return schema_of(url)


def _write(server: str, url: str) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    text = json.dumps(migrated(url), indent=1, sort_keys=True) + "\n"
    (FIXTURES / f"{server}.json").write_text(text)


def main(servers: list[str]) -> None:
    from tests.pg import PgServers

    running = PgServers()
    try:
        for server in servers:
            if server == "sqlite":
                with tempfile.TemporaryDirectory() as tmp:
                    _write(server, f"sqlite:///{tmp}/snapshot.db")
                continue
            pg = running.get(server)
            url = pg.fresh_database()
            try:
                _write(server, url)
            finally:
                pg.drop(url)
    finally:
        running.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or list(SERVERS))
