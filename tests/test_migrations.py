"""Per-component migrations: each component creates only its own tables, and a database
written by the single global migration list (versions 1-7) upgrades in place."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_agent_memory import create_store
from langgraph_checkpoint_agent_memory.memory import AgentMemory
from tests.helpers import sql_checkpointer

FIXTURES = Path(__file__).parent / "fixtures"
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
#: The ledger once every component is current: block * 1000 + version.
CURRENT = {
    1001,
    1002,
    1003,
    1004,
    2001,
    2002,
    2003,
    2004,
    2005,
    2006,
    2007,
    2008,
    2009,
    2010,
    3001,
    3002,
    3003,
    3004,
    3005,
    3006,
}


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
    assert ledger(database_url) == {1001, 1002, 1003, 1004}

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
    assert ledger(database_url) == {2001, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009, 2010}


def test_a_database_of_the_global_migration_list_upgrades_and_keeps_its_data(
    tmp_path: Path, capsys: Any
) -> None:
    """The fixture is a SQLite dump written by the code before per-component migrations
    (global versions 1-7): an item, a consolidated fact and a checkpoint."""
    from langgraph_checkpoint_agent_memory.cli import main

    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / "legacy_global_v7.sql").read_text())
    conn.close()
    url = f"sqlite:///{path}"
    assert ledger(url) == {1, 2, 3, 4, 5, 6, 7}

    store = create_store(url)
    try:
        [found] = store.search(("docs",), query="printer")
        assert found.key == "a"
        [fact] = AgentMemory(store).facts("user=alice")
        assert (fact.attribute, fact.value) == ("city", "Munich")
    finally:
        store.close()
    # mapped, nothing re-applied (the DDL would have failed); the checkpoint's third and
    # fourth migrations wait for a checkpointer
    assert ledger(url) == CURRENT - {1003, 1004}
    descriptions = dict(query(url, "SELECT version, description FROM am_migrations"))
    assert descriptions[1002] == "checkpoint one-statement writes"
    assert descriptions[2003] == "store lexical index"

    saver = sql_checkpointer(url)
    try:
        saved = saver.get_tuple(config("t1"))
        assert saved is not None and saved.checkpoint["channel_values"] == {"x": "hello"}
    finally:
        saver.close()
    assert ledger(url) == CURRENT

    assert main(["migrate", "--url", url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # opening the saver, store and memory made their tables; the key store's table (of
    # encryption at rest) comes with `migrate`
    assert data["applied"] == {"checkpoint": [], "store": [], "memory": [], "keys": [1]}
    assert ledger(url) == CURRENT | {4001}


def test_every_postgresql_key_of_the_postings_includes_what_bm25_reads() -> None:
    """The steps that create or re-key the postings' primary key on PostgreSQL include
    ``tf`` and ``dl`` in it, so a search reads postings from the key alone (the copy of the
    table as of an earlier step left them out of step 6's re-keying, since step 8)."""
    from langgraph_checkpoint_agent_memory.db.migrations import STORE
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect

    d = PostgresDialect()
    keyed = {
        step.version: " ".join(sql.split())
        for step in STORE.steps
        for sql in step.statements(d)
        if "am_store_terms" in sql and "PRIMARY KEY" in sql
    }
    assert sorted(keyed) == [3, 6, 9]  # created, re-keyed by shard, repaired
    assert all("INCLUDE (tf, dl)" in sql for sql in keyed.values()), keyed


def test_items_older_than_the_lexical_index_are_looked_for_until_none_are_left(
    database_url: str,
) -> None:
    """The backfill's search for items older than the lexical index reads the whole items
    table when it finds none (every shard, on Citus): a setup runs it until it finds none,
    records that in ``am_settings``, and later setups do not run it again."""
    from tests.helpers import Recorder

    pending = "doc_len IS NULL"
    first = create_store(database_url, auto_setup=False)
    first_log = Recorder(first)
    first.setup()
    assert first_log.count(pending) == 1  # looked, found none
    first.put(("docs", "u1"), "k", {"text": "tea"})
    first.close()
    for _ in range(2):
        again = create_store(database_url, auto_setup=False)
        log = Recorder(again)
        again.setup()
        assert log.count(pending) == 0
        assert [i.key for i in again.search(("docs",), query="tea")] == ["k"]
        again.close()
    assert query(database_url, "SELECT value FROM am_settings WHERE name = 'lexical_filled'")
