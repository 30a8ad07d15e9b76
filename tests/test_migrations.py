"""Per-component migrations: each component creates only its own tables, and what the
baseline steps create is the schema recorded in ``tests/fixtures/schema`` (made by
``python -m tests.schema_snapshot``), table by table and index by index, on SQLite, each
PostgreSQL server and Citus.

A database the old term index wrote (``tests/fixtures/old_index``, made by that code: its
``make.py`` says how) is upgraded by the store's step 2 to exactly that schema; its items are
converted, resumably and side by side, and every search answers as the old store did."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_agent_memory import create_store
from langgraph_checkpoint_agent_memory.db import migrations
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.hana import HanaDialect
from langgraph_checkpoint_agent_memory.memory import AgentMemory
from tests.helpers import sql_checkpointer
from tests.pg import backend_params, backend_url, libpq_url, server_id
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
    "am_store_tags",
    "am_store_unlisted",
    "am_store_retractions",
    "am_store_chunks",
    "am_settings",
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
CURRENT = {1001, 2001, 2002, 3001}


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
    assert ledger(database_url) == {2001, 2002}


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


# -- a database of the old term index (``am_store_terms``), upgraded -------------------------

OLD = Path(__file__).parent / "fixtures" / "old_index"
#: The master key ``tests/fixtures/old_index/make.py`` encrypted ``encrypted.db.gz`` with.
OLD_MASTER_KEY = "NcXHkwSmXqEvryjKtiVdc2F6C5ewcpsErWDeD5mvDrQ="
#: The tables of the old store copied into a PostgreSQL database, parents first.
OLD_ROWS = ("am_migrations", "am_settings", "am_store_items", "am_store_terms", "am_store_vectors")


def old_sqlite(path: Path, name: str = "plain") -> str:
    """A copy of the SQLite file the old store wrote (``make.py``): its URL."""
    path.write_bytes(gzip.decompress((OLD / f"{name}.db.gz").read_bytes()))
    return f"sqlite:///{path}"


def old_postgres(url: str, citus: bool, source: Path, name: str = "plain") -> None:
    """Make the empty PostgreSQL database at ``url`` what the old store made: its DDL, its
    tables distributed as it did on Citus, the rows of the SQLite file ``name``."""
    import psycopg

    rows = sqlite3.connect(old_sqlite(source, name).removeprefix("sqlite:///"))
    ddl = json.loads((OLD / "postgres_v1.json").read_text())
    copied = [*OLD_ROWS, "am_keys"] if name == "encrypted" else OLD_ROWS
    conninfo, kwargs = libpq_url(url)
    with psycopg.connect(conninfo, autocommit=True, **kwargs) as pg:
        for statement in [*ddl["statements"], *(ddl["keys"] if name == "encrypted" else ())]:
            pg.execute(statement)
        if citus:
            for table in ("am_migrations", "am_settings", "am_keys")[: 2 + (name != "plain")]:
                pg.execute(f"SELECT create_reference_table('{table}')")
            pg.execute("SELECT create_distributed_table('am_store_items', 'shard')")
            for table in ("am_store_vectors", "am_store_terms", "am_store_blocks"):
                pg.execute(
                    f"SELECT create_distributed_table('{table}', 'shard', "
                    "colocate_with => 'am_store_items')"
                )
        for table in copied:
            cursor = rows.execute(f"SELECT * FROM {table}")
            names = [c[0] for c in cursor.description]
            found = cursor.fetchall()
            if found:
                columns = ", ".join(f'"{n}"' for n in names)
                marks = ", ".join(["%s"] * len(names))
                with pg.cursor() as cur:
                    cur.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", found)
    rows.close()


def make_old(request: pytest.FixtureRequest, backend: str, tmp_path: Path, name: str) -> str:
    """A database of ``backend`` the old store wrote (the fixture ``name``), not migrated."""
    if backend == "sqlite":
        return old_sqlite(tmp_path / "old.db", name)
    url = backend_url(request, backend, tmp_path / "unused.db")
    assert url is not None
    old_postgres(url, server_id(backend) == "citus", tmp_path / "source.db", name)
    return url


@pytest.fixture(params=backend_params("sqlite", "postgres", "citus"))
def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database the old store wrote (the plain fixture), not yet migrated."""
    return make_old(request, str(request.param), tmp_path, "plain")


def old_answers(name: str = "plain") -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((OLD / "searches.json").read_text())[name]
    return loaded


def encryption_of(name: str) -> Any:
    if name == "plain":
        return False
    pytest.importorskip("cryptography")
    from langgraph_checkpoint_agent_memory.crypto.config import Encryption

    return Encryption(master_keys=[OLD_MASTER_KEY], filterable_fields=["owner"])


def check_answers(url: str, name: str = "plain") -> None:
    """Every item the old store held, and every search answering as it did (keys and order;
    scores within float rounding), right after the conversion and again once the queries
    have merged the converted items into the lists."""
    expected = old_answers(name)
    namespaces = sorted({tuple(ns) for ns, _, _ in expected["items"]})
    with create_store(url, encryption=encryption_of(name)) as store:
        items = [
            [list(item.namespace), item.key, item.value]
            for ns in namespaces
            for item in store.search(ns, limit=1000)
        ]
        assert sorted(items) == expected["items"]
        for _ in range(2):
            for search in expected["searches"]:
                found = store.search(
                    tuple(search["prefix"]),
                    query=search["query"],
                    filter=search["filter"],
                    limit=search["limit"],
                    offset=search["offset"],
                )
                got = [[list(r.namespace), r.key] for r in found]
                if not search["prefix"]:  # the old code found nothing there: now the whole store
                    assert bool(got) == (search["query"] != "nothingmatches"), search
                    continue
                assert got == [r[:2] for r in search["results"]], search
                if search["query"] is not None:
                    scores = [r.score for r in found]
                    assert scores == pytest.approx([r[2] for r in search["results"]], rel=1e-6)


def old_tables_gone(url: str) -> None:
    assert not tables(url) & {"am_store_terms", "am_store_blocks"}
    assert query(url, "SELECT count(*) FROM am_store_items WHERE num IS NULL") == [(0,)]
    assert query(url, "SELECT count(*) FROM am_settings WHERE name = 'store_terms_pending'") == [
        (0,)
    ]


def test_an_upgraded_database_has_the_schema_of_a_new_one(
    request: pytest.FixtureRequest, old_database: str
) -> None:
    """``agent-memory migrate`` on a database of the old term index applies the store's step
    2 (and creates the other components), converts its items and drops the old tables: the
    schema is then exactly a new database's (columns compared by name)."""
    server = server_id(request.node.callspec.params["old_database"])
    assert ledger(old_database) == {2001}
    made, recorded = migrated(old_database), expected(server)
    assert ledger(old_database) == CURRENT | {4001}
    assert made == recorded
    old_tables_gone(old_database)
    if old_database.startswith("sqlite:///"):  # VACUUM gave the old tables' pages back
        assert query(old_database, "PRAGMA freelist_count") == [(0,)]
    check_answers(old_database)


@pytest.mark.parametrize("name", ["plain", "encrypted"])
@pytest.mark.parametrize("backend", backend_params("sqlite", "postgres", "citus"))
def test_a_converted_store_keeps_its_items_and_answers(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, name: str
) -> None:
    """The store's setup converts a database the old store wrote (an encrypted one's
    filterable fields become tags) and every search answers as the old store did."""
    url = make_old(request, backend, tmp_path, name)
    check_answers(url, name)
    old_tables_gone(url)
    if name == "encrypted":  # the keyed hashes of the filterable field, one per item
        tagged = "SELECT count(*) FROM (SELECT DISTINCT prefix, key FROM am_store_tags) AS t"
        assert query(url, tagged) == [(458,)]


def first_batch_only(plan: Plan[Any]) -> Plan[None]:
    """``plan`` until its first write commits: a conversion killed after one batch."""
    batch = next(plan)
    while True:
        results = yield batch
        if batch.write and batch.statements:
            plan.close()
            return
        batch = plan.send(results)


def test_a_conversion_stopped_after_a_batch_resumes_and_ends_the_same(
    request: pytest.FixtureRequest, old_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversion stopped after its first batch leaves its items converted and the others
    as they were; the next setup converts the rest, and every answer is the old store's."""
    monkeypatch.setattr(migrations, "CONVERT_BATCH", 100)
    store = create_store(old_database, auto_setup=False)
    try:
        store.db.run(first_batch_only(migrations.migrate_plan(store.dialect, 0.0)))
    finally:
        store.close()
    assert query(old_database, "SELECT count(*) FROM am_store_items WHERE num IS NULL") == [
        (458 - 100,)
    ]
    assert {"am_store_terms", "am_store_blocks"} <= tables(old_database)
    # the first batch: numbered once each, the keys first in key order
    numbered = query(
        old_database,
        "SELECT shard, prefix, key, num FROM am_store_items WHERE num IS NOT NULL",
    )
    everything = query(old_database, "SELECT shard, prefix, key FROM am_store_items")
    assert sorted(r[:3] for r in numbered) == sorted(everything)[:100]
    assert len({r[3] for r in numbered}) == 100
    check_answers(old_database)
    old_tables_gone(old_database)
    nums = query(old_database, "SELECT count(DISTINCT num), count(*) FROM am_store_items")
    assert nums == [(458, 458)]


#: A process converting with batches of 100 that is killed (SIGKILL) in its second batch,
#: after reading its postings, before writing.
KILLED = """
import os, signal, sys
from langgraph_checkpoint_agent_memory import create_store
from langgraph_checkpoint_agent_memory.db import migrations

migrations.CONVERT_BATCH = 100
def killed(plan):
    batch, writes = next(plan), 0
    while True:
        results = yield batch
        writes += bool(batch.write and batch.statements)
        if writes == 1 and any(s.sql.text.count("am_store_terms") for s in batch.statements):
            os.kill(os.getpid(), signal.SIGKILL)
        batch = plan.send(results)
store = create_store(sys.argv[1], auto_setup=False)
store.db.run(killed(migrations.migrate_plan(store.dialect, 0.0)))
"""


def test_a_conversion_killed_mid_batch_resumes_and_ends_the_same(old_database: str) -> None:
    """A process killed inside a batch's transaction leaves the batches it committed and
    nothing of the one it was in; the next setup converts the rest."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", KILLED, old_database], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert query(old_database, "SELECT count(num) FROM am_store_items") == [(100,)]
    assert {"am_store_terms", "am_store_blocks"} <= tables(old_database)
    check_answers(old_database)
    old_tables_gone(old_database)


def test_converters_at_once_number_each_item_once(
    old_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes setting up at once convert the same items side by side: each item is
    numbered once, its tags written once, and the answers are the old store's."""
    monkeypatch.setattr(migrations, "CONVERT_BATCH", 40)
    stores = [create_store(old_database, auto_setup=False) for _ in range(3)]
    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            done = list(pool.map(lambda store: migrations.migrate(store.db), stores))
    finally:
        for store in stores:
            store.close()
    assert sum(applied["store"] == [2] for applied in done) == 1
    nums = query(old_database, "SELECT count(DISTINCT num), count(num) FROM am_store_items")
    assert nums == [(458, 458)]
    old_tables_gone(old_database)
    check_answers(old_database)


def test_migrate_shows_the_conversion_on_a_terminal(tmp_path: Path) -> None:
    """``agent-memory migrate`` shows the items it converts on a terminal (stderr), not on
    stdout, and says which migrations it applied."""
    url = old_sqlite(tmp_path / "old.db")
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", "migrate", "--url", url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**os.environ, "COLUMNS": "120"},
    )
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the command closed its end
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    assert proc.wait(timeout=120) == 0, shown
    terminal = shown.decode(errors="replace")
    assert "converting store items" in terminal and "458" in terminal, terminal
    assert "converting" not in out
    assert "store 2" in out
    old_tables_gone(url)


def test_the_conversion_reports_the_items_it_converts(tmp_path: Path) -> None:
    """``on_converted`` counts the items converted, to their total; a database with none to
    convert reports nothing."""
    url = old_sqlite(tmp_path / "old.db")
    seen: list[tuple[int, int | None]] = []
    with create_store(url, auto_setup=False) as store:
        migrations.migrate(store.db, on_converted=lambda done, total: seen.append((done, total)))
        assert seen == [(0, 458), (458, 458)]
        seen.clear()
        migrations.migrate(store.db, on_converted=lambda done, total: seen.append((done, total)))
    assert seen == []


HANA_REFUSED = ["ON CONFLICT", "RETURNING", "IF NOT EXISTS", "IF EXISTS", "BYTEA", "%s", "%("]


def test_the_upgrade_and_conversion_compile_for_hana() -> None:
    """HANA's step 2 alters its tables in its own form, and the conversion's statements
    (driven offline over one item with a term and a filterable field's hash) use none of
    what HANA refuses."""
    d = HanaDialect()
    ddl = migrations.upgrade_statements(d, [migrations.STORE])
    assert "ALTER TABLE am_store_items ADD (num BIGINT, terms BLOB)" in ddl
    assert any(s.startswith("CREATE TABLE am_store_unlisted ") for s in ddl)
    assert "ALTER TABLE am_store_items DROP (doc)" in ddl
    assert "CREATE SEQUENCE am_store_item_numbers" in ddl
    assert any(s.startswith("CREATE TABLE am_store_chunks ") for s in ddl)
    answers: list[list[Any]] = [
        [[("1",)]],  # the conversion is pending
        [[(1,)]],  # one item to convert
        [-1, [("s", "p", "k", 2)]],  # the turn taken, one item
        [[("s", "p", "k", "berlin", 2, 2), ("s", "p", "k", "h1", 0, 0)]],
        [1, 1],
        [-1, []],  # none left
        [0, 0, 1],  # the old tables dropped, the setting forgotten
    ]
    plan = migrations.convert_terms_plan(d)
    sent: list[Sql] = []
    batch = next(plan)
    with pytest.raises(StopIteration):
        for answer in answers:
            sent += [s.sql for s in batch.statements]
            batch = plan.send(answer)
    for sql in sent:
        upper = sql.text.upper()
        for bad in HANA_REFUSED:
            assert bad not in upper, sql.text
        assert sql.names is None or sql.text.count("?") == len(sql.names), sql.text
    assert any("am_store_item_numbers.NEXTVAL" in s.text for s in sent)
    assert any("EXEC 'DROP TABLE am_store_terms'" in s.text for s in sent)
