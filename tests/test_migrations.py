"""Per-component migrations: each component creates only its own tables, and what the
baseline steps create is the schema recorded in ``tests/fixtures/schema`` (made by
``python -m tests.schema_snapshot`` from the steps the baseline replaced), table by table and
index by index, on SQLite, each PostgreSQL server and Citus."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_agent_memory import create_store
from langgraph_checkpoint_agent_memory.memory import AgentMemory
from tests.helpers import sql_checkpointer
from tests.pg import backend_params, backend_url, server_id
from tests.schema_snapshot import FIXTURES as SCHEMAS
from tests.schema_snapshot import expected, migrated

CHECKPOINT_TABLES = {
    "am_checkpoints",
    "am_checkpoint_blobs",
    "am_checkpoint_writes",
    "am_threads",
    "am_settings",  # where the database records that it is encrypted
}
STORE_TABLES = {
    "am_store_items",
    "am_store_vectors",
    "am_store_terms",
    "am_settings",
    "am_store_blocks",
}
MEMORY_TABLES = {
    "am_memory_scopes",
    "am_memory_pending",
    "am_memory_jobs",
    "am_memory_decay",
    "am_memory_threads",
    "am_memory_erasures",
}
#: The ledger once every data component is current: block * 1000 + version.
CURRENT = {1001, 2001, 3001}


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as pg:
        return pg.execute(sql).fetchall()


def tables(url: str) -> set[str]:
    if url.startswith("sqlite:///"):
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    return {name for (name,) in query(url, sql) if name.startswith("am_")}


def ledger(url: str) -> set[int]:
    return {int(v) for (v,) in query(url, "SELECT version FROM am_migrations")}


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_each_component_creates_only_its_tables(database_url: str) -> None:
    saver = sql_checkpointer(database_url)
    try:
        saver.put(config("t"), empty_checkpoint(), {}, {})
    finally:
        saver.close()
    assert tables(database_url) == CHECKPOINT_TABLES | {"am_migrations"}
    assert ledger(database_url) == {1001}

    store = create_store(database_url)
    try:
        store.put(("docs",), "a", {"text": "hello"})
        assert tables(database_url) == CHECKPOINT_TABLES | STORE_TABLES | {"am_migrations"}
        memory = AgentMemory(store)
        assert memory.facts("user=alice") == []
    finally:
        store.close()
    assert tables(database_url) == CHECKPOINT_TABLES | STORE_TABLES | MEMORY_TABLES | {
        "am_migrations"
    }
    assert ledger(database_url) == CURRENT


def test_a_store_alone_has_no_checkpoint_or_memory_tables(database_url: str) -> None:
    store = create_store(database_url)
    try:
        store.put(("docs",), "a", {"text": "hello"})
    finally:
        store.close()
    assert tables(database_url) == STORE_TABLES | {"am_migrations"}
    assert ledger(database_url) == {2001}


@pytest.fixture(params=backend_params("sqlite", "postgres", "citus"))
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = backend_url(request, str(request.param), tmp_path / "a.db")
    assert url is not None
    return url


def test_a_new_database_has_the_recorded_schema(
    request: pytest.FixtureRequest, new_database: str
) -> None:
    """``agent-memory migrate`` on an empty database makes exactly the recorded schema:
    columns (type, nullability, default), keys, indexes (their full definition), storage
    parameters, views and triggers, extensions, and on Citus each table's distribution
    column and co-location group."""
    server = server_id(request.node.callspec.params["new_database"])
    if not (SCHEMAS / f"{server}.json").exists():
        pytest.skip(f"no schema recorded for the server {server!r}")
    made, recorded = migrated(new_database), expected(server)
    assert made.keys() == recorded.keys()
    for part in made:
        if part != "tables":
            assert made[part] == recorded[part], part
    assert sorted(made["tables"]) == sorted(recorded["tables"])
    for name, table in made["tables"].items():
        for part, value in table.items():
            assert value == recorded["tables"][name][part], (name, part)
