"""Moving in from LangGraph's own savers and stores (``import_from_langgraph``,
``agent-memory import``), against the real ``langgraph-checkpoint-sqlite`` and
``-postgres`` writing the source.

After an import, for every thread our saver's ``get_tuple`` and ``list`` and a compiled
graph's ``get_state_history`` equal LangGraph's on the source; the graph continues each
thread there, and a pending interrupt resumes with ``Command``; every store item reads back
equal and is found by search. A second run, and a run after a SIGKILL part-way, leave exactly
one copy of each; the source is never written.

One difference is inherent in how checkpoints are stored, and the tests spell it out
(:func:`by_version`): ``SqliteSaver`` stores every checkpoint whole, while ``PostgresSaver``
and this package store a channel's value once per version. LangGraph changes a join
barrier's value without a new version when it consumes it, so from a SQLite source such a
value reads as it was at the first checkpoint of its version, as it would have from
``PostgresSaver``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import Command

from langgraph_checkpoint_agent_memory import (
    create_checkpointer,
    create_store,
    generate_master_key,
    import_from_langgraph,
)
from langgraph_checkpoint_agent_memory.cli import main
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from tests.fixtures.langgraph import graph as G
from tests.pg import backend_params, pg_database

FIXTURES = Path(__file__).parent / "fixtures" / "langgraph"
ROOT = Path(__file__).parent.parent


# -- sources written by LangGraph's savers ----------------------------------------------------


class Source:
    """A database LangGraph's saver and store wrote, with what it holds."""

    def __init__(self, url: str, kind: str, threads: list[str], items: int) -> None:
        self.url, self.kind, self.threads, self.items = url, kind, threads, items

    def saver(self) -> Any:
        """LangGraph's saver on the source, read-only."""
        if self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            path = self.url.removeprefix("sqlite:///")
            return SqliteSaver(sqlite3.connect(f"file:{path}?mode=ro", uri=True))
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        conn = psycopg.connect(self.url, autocommit=True, row_factory=dict_row)
        return PostgresSaver(conn)

    def store(self) -> Any:
        if self.kind == "sqlite":
            from langgraph.store.sqlite import SqliteStore

            path = self.url.removeprefix("sqlite:///")
            return SqliteStore(sqlite3.connect(path, isolation_level=None))
        import psycopg
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row

        return PostgresStore(psycopg.connect(self.url, autocommit=True, row_factory=dict_row))

    def close(self, thing: Any) -> None:
        thing.conn.close()


def write_sqlite_source(path: Path, prefix: str = "", turns: int = 3) -> Source:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(path, check_same_thread=False)
    graph = G.builder().compile(checkpointer=SqliteSaver(conn))
    G.FAILING["on"] = True
    threads = G.write_threads(graph, prefix, turns)
    conn.commit()
    conn.close()
    store = SqliteStore(sqlite3.connect(path, isolation_level=None))
    store.setup()
    items = G.write_items(store, prefix)
    store.conn.close()
    return Source(f"sqlite:///{path}", "sqlite", threads, items)


def write_postgres_source(url: str, prefix: str = "", turns: int = 3) -> Source:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        G.FAILING["on"] = True
        threads = G.write_threads(G.builder().compile(checkpointer=saver), prefix, turns)
    with PostgresStore.from_conn_string(url) as store:
        store.setup()
        items = G.write_items(store, prefix)
    return Source(url, "postgresql", threads, items)


KINDS = backend_params("sqlite", "postgres")


@pytest.fixture(params=KINDS)
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    kind = str(request.param)
    if kind == "sqlite":
        return write_sqlite_source(tmp_path / "langgraph.db")
    return write_postgres_source(pg_database(request, kind))


@pytest.fixture(params=KINDS)
def destination(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = str(request.param)
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'memory.db'}"
    return pg_database(request, kind)


# -- what equal means -------------------------------------------------------------------------


def by_version(tuples: list[CheckpointTuple]) -> list[CheckpointTuple]:
    """The tuples as a store of one value per channel version reads them: a channel whose
    version a checkpoint shares with an earlier one (of its namespace) has the earlier's
    value. The identity for ``PostgresSaver``'s tuples, which are stored that way."""
    first: dict[tuple[str, str, Any], Any] = {}
    out = []
    for t in sorted(tuples, key=lambda t: t.config["configurable"]["checkpoint_id"]):
        ns = t.config["configurable"]["checkpoint_ns"]
        values = dict(t.checkpoint["channel_values"])
        for channel, version in t.checkpoint["channel_versions"].items():
            key = (ns, channel, version)
            if key in first and channel in values:
                values[channel] = first[key]
            elif channel in values:
                first[key] = values[channel]
        out.append(t._replace(checkpoint={**t.checkpoint, "channel_values": values}))
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in out}
    return [by_id[t.config["configurable"]["checkpoint_id"]] for t in tuples]


def assert_same_threads(src: Source, url: str, **options: Any) -> None:
    """Every thread reads the same through our saver at ``url`` as through LangGraph's on
    the source: ``list`` (configs, metadata, parents, values, pending writes), ``get_tuple``
    of each checkpoint and of the latest, and the graph's state history."""
    theirs = src.saver()
    ours = create_checkpointer(url=url, **options)
    try:
        for thread_id in src.threads:
            config = G.config(thread_id)
            expected = by_version(list(theirs.list(config)))
            found = list(ours.list(config))
            assert [t.config for t in found] == [t.config for t in expected]
            assert [t.metadata for t in found] == [t.metadata for t in expected]
            assert [t.parent_config for t in found] == [t.parent_config for t in expected]
            assert found == expected
            for t in expected:
                assert ours.get_tuple(t.config) == t
            assert ours.get_tuple(config) == expected[0]
            if src.kind != "sqlite":  # see by_version: the history is computed from values
                history = list(G.builder().compile(checkpointer=theirs).get_state_history(config))
                assert (
                    list(G.builder().compile(checkpointer=ours).get_state_history(config))
                    == history
                )
    finally:
        src.close(theirs)
        ours.close()  # type: ignore[attr-defined]


def assert_same_items(src: Source, url: str, **options: Any) -> None:
    """Every item reads back equal (value, namespace, times as instants) and is found by a
    search for its text."""
    theirs = src.store()
    ours = create_store(url, **options)
    try:
        found = [
            item
            for ns in theirs.list_namespaces(limit=1000)
            for item in theirs.search(ns, limit=1000)
        ]
        assert len({(i.namespace, i.key) for i in found}) == src.items
        for item in found:
            copy = ours.get(item.namespace, item.key)
            assert copy is not None, item
            assert (copy.namespace, copy.key, copy.value) == (item.namespace, item.key, item.value)
            for name in ("created_at", "updated_at"):
                want = getattr(item, name)
                if want.tzinfo is None:  # SqliteStore's CURRENT_TIMESTAMP: UTC
                    want = want.replace(tzinfo=timezone.utc)
                assert abs(getattr(copy, name).timestamp() - want.timestamp()) < 1e-5, name
            hits = ours.search(item.namespace, query=item.value["text"], limit=20)
            assert item.key in [h.key for h in hits]
    finally:
        src.close(theirs)
        ours.close()


def counts(url: str) -> dict[str, int]:
    """Rows of our checkpoint and store tables (one copy of each, or not)."""
    store = create_store(url)
    try:
        from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
        from langgraph_checkpoint_agent_memory.db.dialect import Sql

        def plan() -> Any:
            tables = (
                "am_checkpoints",
                "am_checkpoint_blobs",
                "am_checkpoint_writes",
                "am_store_items",
            )
            stmts = [Stmt(Sql(f"SELECT count(*) FROM {t}"), fetch=True) for t in tables]
            rows = yield Batch(stmts)
            return {t: r[0][0] for t, r in zip(tables, rows, strict=True)}

        return store.run_plan(plan())
    finally:
        store.close()


def source_counts(src: Source) -> dict[str, int]:
    writes = "writes" if src.kind == "sqlite" else "checkpoint_writes"
    sql = [f"SELECT count(*) FROM {t}" for t in ("checkpoints", writes, "store")]
    if src.kind == "sqlite":
        with closing(sqlite3.connect(src.url.removeprefix("sqlite:///"))) as lite:
            found = [lite.execute(s).fetchone()[0] for s in sql]
    else:
        import psycopg

        with psycopg.connect(src.url) as conn:
            found = [row[0] for s in sql if (row := conn.execute(s).fetchone()) is not None]
    return dict(zip(("checkpoints", "writes", "items"), found, strict=True))


def fingerprint(src: Source) -> str:
    """What the source holds, to show that the import wrote nothing there."""
    if src.kind == "sqlite":
        path = Path(src.url.removeprefix("sqlite:///"))
        return hashlib.sha256(path.read_bytes()).hexdigest()
    import psycopg

    with psycopg.connect(src.url) as conn:
        rows = [
            conn.execute(
                f"SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM {t} t"
            ).fetchone()
            for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "store")
        ]
    return repr(rows)


# -- the tests --------------------------------------------------------------------------------


def test_every_thread_and_item_reads_back_equal(source: Source, destination: str) -> None:
    before = fingerprint(source)
    report = import_from_langgraph(source.url, destination)
    assert report.threads == len(source.threads) == report.threads_copied
    assert report.items == source.items
    assert fingerprint(source) == before  # the source was only read
    assert_same_threads(source, destination)
    assert_same_items(source, destination)
    assert counts(destination)["am_checkpoints"] == source_counts(source)["checkpoints"]
    assert counts(destination)["am_checkpoint_writes"] == source_counts(source)["writes"]


def test_a_second_run_copies_nothing_again(source: Source, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    import_from_langgraph(source.url, url)
    first = counts(url)
    again = import_from_langgraph(source.url, url)
    assert (again.threads_copied, again.checkpoints, again.writes) == (0, 0, 0)
    assert again.threads_unchanged == len(source.threads)
    assert counts(url) == first
    assert_same_threads(source, url)


@pytest.mark.parametrize("kind", backend_params("sqlite", "postgres"))
def test_encrypted_destination(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    src = write_sqlite_source(tmp_path / "langgraph.db")
    url = f"sqlite:///{tmp_path / 'sealed.db'}" if kind == "sqlite" else pg_database(request, kind)
    key = generate_master_key()
    import_from_langgraph(src.url, url, encryption=key)
    assert_same_threads(src, url, encryption=key)
    assert_same_items(src, url, encryption=key)
    if kind == "sqlite":  # sealed: no message text in the file
        data = Path(url.removeprefix("sqlite:///")).read_bytes()
        assert b"echo hello" not in data and b"likes tea" not in data


def test_graphs_continue_every_thread(source: Source, destination: str) -> None:
    import_from_langgraph(source.url, destination)
    ours = create_checkpointer(url=destination)
    theirs = source.saver()
    try:
        G.FAILING["on"] = False
        for graph_saver in (ours,):
            graph = G.builder().compile(checkpointer=graph_saver)
            plain, asking, failing, forked, answered = source.threads
            before = graph.get_state(G.config(plain)).values
            G.say(graph, plain, "one more")
            after = graph.get_state(G.config(plain)).values
            assert after["count"] == before["count"] + 1
            assert [m.content for m in after["messages"][-2:]] == ["one more", "echo one more"]
            # the pending interrupt resumes
            pending = graph.get_state(G.config(asking))
            assert pending.next == ("ask",)
            assert pending.interrupts[0].value == {"question": "approve echo please ask?"}
            graph.invoke(Command(resume="ok"), G.config(asking))
            assert (
                graph.get_state(G.config(asking)).values["messages"][-1].content == "approved: ok"
            )
            # the failed task runs again, and now succeeds
            assert graph.get_state(G.config(failing)).tasks[0].error is not None
            graph.invoke(None, G.config(failing))
            assert (
                graph.get_state(G.config(failing)).values["messages"][-1].content
                == "done after all"
            )
            for thread_id in (forked, answered):
                G.say(graph, thread_id, "and on")
                assert (
                    graph.get_state(G.config(thread_id)).values["messages"][-1].content
                    == "echo and on"
                )
    finally:
        G.FAILING["on"] = True
        ours.close()  # type: ignore[attr-defined]
        source.close(theirs)


@pytest.mark.parametrize("turns", [3, 12])
def test_catch_up_after_the_switch(turns: int, tmp_path: Path) -> None:
    """Import, keep writing to the source (the application not yet switched), import
    again: the second run copies exactly what was added (for a long thread, reading from
    the source only the checkpoints it lacks)."""
    src = write_sqlite_source(tmp_path / "langgraph.db", turns=turns)
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    import_from_langgraph(src.url, url)
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    graph = G.builder().compile(checkpointer=SqliteSaver(conn))
    G.say(graph, src.threads[0], "while switching")
    graph.invoke(Command(resume="later"), G.config(src.threads[1]))
    G.say(graph, "new-thread", "hi")
    conn.commit()
    conn.close()
    src.threads.append("new-thread")
    report = import_from_langgraph(src.url, url)
    assert report.threads_copied == 3 and report.threads_unchanged == len(src.threads) - 3
    assert_same_threads(src, url)
    assert counts(url)["am_checkpoints"] == source_counts(src)["checkpoints"]


KILLER = """
import os, signal, sys
from langgraph_checkpoint_agent_memory import import_from_langgraph
from langgraph_checkpoint_agent_memory.db import langgraph_tables

langgraph_tables.PAGE = 10  # items are put a page at a time: several pages

def stop(progress):
    if progress.{what} >= {at}:
        os.kill(os.getpid(), signal.SIGKILL)

import_from_langgraph(sys.argv[1], sys.argv[2], on_progress=stop)
"""


@pytest.mark.parametrize(("what", "at"), [("checkpoints", 40), ("items_done", 1)])
def test_a_run_killed_part_way_is_finished_by_the_next(what: str, at: int, tmp_path: Path) -> None:
    src = write_sqlite_source(tmp_path / "langgraph.db")
    for i in range(3):  # several pages of items, threads of many checkpoints
        more = write_sqlite_source(tmp_path / "langgraph.db", prefix=f"more{i}-")
        src.threads += more.threads
        src.items += more.items
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    script = KILLER.format(what=what, at=at)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, src.url, url], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    partial = counts(url)
    total = source_counts(src)
    if what == "checkpoints":
        assert 0 < partial["am_checkpoints"] < total["checkpoints"]
    report = import_from_langgraph(src.url, url)
    if what == "checkpoints":
        assert report.threads_copied > 0
    else:  # killed between two pages of items
        assert 0 < partial["am_store_items"] < total["items"]
    assert counts(url)["am_checkpoints"] == total["checkpoints"]
    assert counts(url)["am_checkpoint_writes"] == total["writes"]
    assert counts(url)["am_store_items"] == total["items"]
    assert_same_threads(src, url)
    assert_same_items(src, url)


# -- sources written by the oldest saver that runs with this LangGraph ------------------------

#: An item's TTL in a fixture ran out an hour after the fixture was written: its expiry is
#: set from the time the test runs, as a read refreshing it would, so the item is live.
LIVE_AGAIN = {
    "sqlite": "CASE WHEN ttl_minutes IS NOT NULL THEN "
    "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now', '+' || ttl_minutes || ' minutes') END",
    "postgresql": "now() + ttl_minutes * interval '1 minute'",
}


def test_sqlite_source_of_the_oldest_saver(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    path.write_bytes(gzip.decompress((FIXTURES / "sqlite-3.0.2.db.gz").read_bytes()))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"UPDATE store SET expires_at = {LIVE_AGAIN['sqlite']}")
    made = json.loads((FIXTURES / "sources.json").read_text())
    src = Source(f"sqlite:///{path}", "sqlite", made["threads"], made["items"])
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    report = import_from_langgraph(src.url, url)
    assert report.threads == len(src.threads) and report.items == src.items
    assert_same_threads(src, url)
    assert_same_items(src, url)


@pytest.mark.parametrize("kind", backend_params("postgres"))
def test_postgres_source_of_the_oldest_saver(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import psycopg

    url = pg_database(request, kind)
    with psycopg.connect(url, autocommit=True) as conn:
        dump = gzip.decompress((FIXTURES / "postgres-3.0.3.sql.gz").read_bytes()).decode()
        conn.execute(dump)
        conn.execute(f"UPDATE store SET expires_at = {LIVE_AGAIN['postgresql']}")
    made = json.loads((FIXTURES / "sources.json").read_text())
    src = Source(url, "postgresql", made["threads"], made["items"])
    dest = f"sqlite:///{tmp_path / 'memory.db'}"
    report = import_from_langgraph(src.url, dest)
    assert report.threads == len(src.threads) and report.items == src.items
    assert_same_threads(src, dest)
    assert_same_items(src, dest)


# -- the command ------------------------------------------------------------------------------


def test_command_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_sqlite_source(tmp_path / "langgraph.db")
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert main(["import", "--from", src.url, "--url", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["threads"] == len(src.threads) and out["items"] == src.items
    assert out["threads_refused"] == []
    assert main(["import", "--from", src.url, "--url", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["threads_unchanged"] == len(src.threads) and out["checkpoints"] == 0


def test_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert main(["import", "--from", str(tmp_path / "missing.db"), "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-memory import: error: --from: cannot open") and "missing.db" in err
    assert err.count("\n") == 1 and "migrate" not in err
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.commit()
    assert main(["import", "--from", str(empty), "--url", url]) == 2
    assert "none of LangGraph's tables" in capsys.readouterr().err
    assert not (tmp_path / "memory.db").exists()


def test_a_thread_deleted_here_is_not_brought_back(tmp_path: Path) -> None:
    src = write_sqlite_source(tmp_path / "langgraph.db")
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    import_from_langgraph(src.url, url)
    ours = create_checkpointer(url=url)
    ours.delete_thread(src.threads[0])
    ours.close()  # type: ignore[attr-defined]
    report = import_from_langgraph(src.url, url)
    assert report.threads_refused == [src.threads[0]]
    ours = create_checkpointer(url=url)
    assert ours.get_tuple(G.config(src.threads[0])) is None
    ours.close()  # type: ignore[attr-defined]


def test_a_sqlite_source_not_in_wal_mode(tmp_path: Path) -> None:
    """LangGraph's SqliteSaver switches its file to WAL on first use, which a read-only
    connection refuses: a file switched back is read as it is."""
    src = write_sqlite_source(tmp_path / "langgraph.db")
    conn = sqlite3.connect(tmp_path / "langgraph.db")
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    conn.close()
    before = fingerprint(src)
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert import_from_langgraph(src.url, url).threads == len(src.threads)
    assert fingerprint(src) == before
    conn = sqlite3.connect(tmp_path / "langgraph.db")  # for LangGraph's saver in the check
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    assert_same_threads(src, url)


def our_side_statements(d: Any) -> list[Any]:
    """The statements the import runs on our tables, for dialect ``d``, with no server."""
    from langgraph_checkpoint_agent_memory.db.database import drive
    from langgraph_checkpoint_agent_memory.db.langgraph_tables import (
        read_mark_plan,
        record_mark_plan,
        stamp_items_plan,
        thread_shape_plan,
    )

    seen: list[Any] = []

    def execute(batch: Any) -> list[Any]:
        seen.extend(batch.statements)
        return [[] if s.fetch else 1 for s in batch.statements]

    drive(thread_shape_plan(d, "t"), execute)
    item = {"shard": "s", "prefix": "p", "key": "k", "created_at": 1.0, "updated_at": 2.0}
    drive(stamp_items_plan(d, [{**item, "expires_at": 3.0}, {**item, "expires_at": None}]), execute)
    drive(read_mark_plan(d, "import_items:x"), execute)
    drive(record_mark_plan(d, "import_items:x", 2.5), execute)
    assert len(seen) == 6
    return seen


def test_our_side_sql_on_every_database(tmp_path: Path) -> None:
    """The statements compile for SQLite (prepared on a real file), PostgreSQL (its own
    parser) and SAP HANA (its rules, offline)."""
    import re

    import pglast

    from langgraph_checkpoint_agent_memory.db.hana import HanaDialect
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect
    from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDialect
    from tests.test_dialect_sql import HANA_FORBIDDEN

    create_checkpointer(url=f"sqlite:///{tmp_path / 'x.db'}").setup()  # type: ignore[attr-defined]
    create_store(f"sqlite:///{tmp_path / 'x.db'}").setup()
    with closing(sqlite3.connect(tmp_path / "x.db")) as conn:
        for stmt in our_side_statements(SQLiteDialect()):
            names = re.findall(r":(\w+)", stmt.sql.text)
            conn.execute(f"EXPLAIN {stmt.sql.text}", dict.fromkeys(names))
    for stmt in our_side_statements(PostgresDialect()):
        pglast.parse_sql(re.sub(r"%\((\w+)\)[sb]", r"$1", stmt.sql.text))
    for stmt in our_side_statements(HanaDialect()):
        text = stmt.sql.text
        assert not [bad for bad in HANA_FORBIDDEN if bad in text.upper()], text
        assert stmt.sql.names is not None and text.count("?") == len(stmt.sql.names)


def test_items_keep_their_ttl_and_take_the_default(tmp_path: Path) -> None:
    """An item with a TTL keeps it and its expiry; one without takes the destination's
    default TTL; one already expired in the source is not copied."""
    from langgraph_checkpoint_agent_memory.db.langgraph_tables import seconds

    src = write_sqlite_source(tmp_path / "langgraph.db")
    with closing(sqlite3.connect(tmp_path / "langgraph.db")) as conn:
        conn.execute(
            "UPDATE store SET expires_at = '2001-01-01 00:00:00+00:00', ttl_minutes = 5 "
            "WHERE key = 'f2' AND prefix = 'users.bob.facts'"
        )
        conn.commit()
        [(expires, ttl)] = conn.execute(
            "SELECT expires_at, ttl_minutes FROM store WHERE key = 'readme'"
        ).fetchall()
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    report = import_from_langgraph(src.url, url, store_ttl={"default_ttl": 10})
    assert report.items == src.items - 1
    with closing(sqlite3.connect(tmp_path / "memory.db")) as conn:
        rows = {
            (prefix, key): (at, minutes)
            for prefix, key, at, minutes in conn.execute(
                "SELECT prefix, key, expires_at, ttl_minutes FROM am_store_items"
            )
        }
    assert len(rows) == src.items - 1 and ("users.bob.facts", "f2") not in rows
    assert rows[("docs", "readme")] == (pytest.approx(seconds(expires)), ttl)
    assert rows[("users.alice.facts", "f1")][1] == 10
    bob = create_store(url)
    assert bob.get(("users", "bob", "facts"), "f2") is None
    bob.close()


@pytest.mark.parametrize("kind", backend_params("postgres"))
def test_postgres_source_in_a_schema_of_its_own(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The source URL's own options (a search_path) are kept beside the read-only one."""
    import psycopg

    url = pg_database(request, kind)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA lg")
    in_schema = f"{url}?options=-csearch_path%3Dlg"
    src = write_postgres_source(in_schema)
    before = fingerprint(src)
    dest = f"sqlite:///{tmp_path / 'memory.db'}"
    report = import_from_langgraph(in_schema, dest)
    assert (report.threads, report.items) == (len(src.threads), src.items)
    assert fingerprint(src) == before
    assert_same_threads(src, dest)


def test_the_source_is_opened_read_only(source: Source) -> None:
    """Whatever runs on the source's connection (LangGraph's saver included) cannot write."""
    from langgraph_checkpoint_agent_memory.db.langgraph_tables import open_source

    opened = open_source(source.url)
    try:
        with pytest.raises(Exception, match=r"read-only|readonly"):
            opened.connection.execute("DELETE FROM checkpoints")
    finally:
        opened.close()
    assert source_counts(source)["checkpoints"] > 0


def test_command_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    """On a terminal: bars of threads, checkpoints (which move within a long thread) and
    items with their rates; piped: the summary only."""
    import pty
    import select

    src = write_sqlite_source(tmp_path / "langgraph.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    command = [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", "import"]
    command += ["--from", src.url, "--url", f"sqlite:///{tmp_path / 'tty.db'}"]
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, env=env, stdout=follower, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        try:
            chunk = os.read(leader, 4096) if ready else b""
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        seen += chunk
    assert process.wait(timeout=60) == 0
    os.close(leader)
    shown = seen.decode(errors="replace")
    assert "threads" in shown and "items" in shown and "/s" in shown
    assert "checkpoints" in shown
    assert f"{len(src.threads)}/{len(src.threads)}" in shown
    piped = subprocess.run(
        [*command[:-1], f"sqlite:///{tmp_path / 'piped.db'}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout.startswith(f"threads: {len(src.threads)} ")
    assert "/s" not in piped.stdout


def test_a_rerun_keeps_what_changed_here_and_takes_what_changed_there(tmp_path: Path) -> None:
    """After the switch, an item changed here keeps its new value, an item deleted here
    stays deleted, an item the source changed since (or added) is copied, and the others
    are left alone (counted unchanged, not put again)."""
    src = write_sqlite_source(tmp_path / "langgraph.db")
    with closing(sqlite3.connect(tmp_path / "langgraph.db")) as conn:  # written an hour ago
        conn.execute(
            "UPDATE store SET created_at = datetime(created_at, '-1 hour'), "
            "updated_at = datetime(updated_at, '-1 hour')"
        )
        conn.commit()
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert import_from_langgraph(src.url, url).items == src.items
    ours = create_store(url)
    ours.put(("users", "alice", "facts"), "f1", {"text": "alice likes sushi now"})
    ours.delete(("users", "bob", "facts"), "f2")
    ours.close()
    theirs = src.store()
    theirs.put(("users", "bob", "facts"), "f1", {"text": "bob likes water now"})
    theirs.put(("users", "carol", "facts"), "f0", {"text": "carol is new"})
    src.close(theirs)
    report = import_from_langgraph(src.url, url)
    assert (report.items, report.items_unchanged, report.items_refused) == (2, src.items - 2, 1)
    ours = create_store(url)
    try:
        assert ours.get(("users", "alice", "facts"), "f1").value["text"] == (  # type: ignore[union-attr]
            "alice likes sushi now"
        )
        assert ours.get(("users", "bob", "facts"), "f2") is None
        assert ours.get(("users", "bob", "facts"), "f1").value["text"] == "bob likes water now"  # type: ignore[union-attr]
        assert ours.get(("users", "carol", "facts"), "f0") is not None
    finally:
        ours.close()
    again = import_from_langgraph(src.url, url)
    assert (again.items, again.items_unchanged) == (0, src.items)


def test_catch_up_takes_special_writes_replaced_in_place(tmp_path: Path) -> None:
    """LangGraph replaces a task's error (or interrupt, resume value) at its fixed index
    when the task runs again from the same checkpoint: the catch-up takes the new one,
    though the checkpoint has as many writes as before."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    src = write_sqlite_source(tmp_path / "langgraph.db")
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    import_from_langgraph(src.url, url)
    failing = next(t for t in src.threads if t.endswith("failing"))
    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    theirs = SqliteSaver(conn)
    latest = theirs.get_tuple(G.config(failing))
    assert latest is not None and latest.pending_writes
    [task_id] = {t for t, channel, _ in latest.pending_writes if channel == "__error__"}
    theirs.put_writes(latest.config, [("__error__", ValueError("failed again"))], task_id)
    conn.commit()
    conn.close()
    report = import_from_langgraph(src.url, url)
    assert (report.threads_copied, report.checkpoints, report.writes) == (1, 0, 1)
    ours = create_checkpointer(url=url)
    try:
        found = ours.get_tuple(G.config(failing))
        assert found is not None
        [error] = [v for _, channel, v in found.pending_writes or () if channel == "__error__"]
        assert "failed again" in str(error)
    finally:
        ours.close()  # type: ignore[attr-defined]
    again = import_from_langgraph(src.url, url)
    assert (again.threads_copied, again.writes) == (0, 0)


def test_what_the_destination_cannot_hold_is_named_and_the_rest_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thread id over 255 characters and an item key over 1024: each is listed with its
    reason, every other thread and item is copied, and the command ends with status 1 and
    one line naming them."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    src = write_sqlite_source(tmp_path / "langgraph.db")
    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    G.FAILING["on"] = False
    G.say(G.builder().compile(checkpointer=SqliteSaver(conn)), "t" * 300, "hi")
    G.FAILING["on"] = True
    conn.commit()
    conn.close()
    theirs = src.store()
    theirs.put(("docs",), "k" * 1100, {"text": "a long key"})
    src.close(theirs)
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    report = import_from_langgraph(src.url, url)
    assert [f["thread_id"] for f in report.threads_failed] == ["t" * 300]
    assert "255" in report.threads_failed[0]["reason"]
    assert [(f["namespace"], f["key"]) for f in report.items_failed] == [(["docs"], "k" * 1100)]
    assert "1024" in report.items_failed[0]["reason"]
    assert report.threads_copied == len(src.threads) and report.items == src.items
    assert main(["import", "--from", src.url, "--url", url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("agent-memory import: error: 1 thread(s)")
    assert "1 store item(s)" in err and "ttttt" in err
    theirs = src.store()
    theirs.delete(("docs",), "k" * 1100)  # for the comparison of the others
    src.close(theirs)
    assert_same_threads(src, url)
    assert_same_items(src, url)


AES_KEY = "0123456789abcdef0123456789abcdef"


def test_a_source_of_langgraphs_encrypted_serializer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values LangGraph's ``EncryptedSerializer`` wrote: without it, one line saying which
    serializer to pass; with ``serde=`` (or ``--serde aes``), every thread reads back."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    from langgraph.checkpoint.sqlite import SqliteSaver

    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    serde = EncryptedSerializer.from_pycryptodome_aes()
    path = tmp_path / "langgraph.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = G.builder().compile(checkpointer=SqliteSaver(conn, serde=serde))
    G.FAILING["on"] = True
    threads = G.write_threads(graph)
    conn.commit()
    conn.close()
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with pytest.raises(ConfigurationError, match=r"msgpack\+aes.*EncryptedSerializer.*serde="):
        import_from_langgraph(f"sqlite:///{path}", url)
    assert main(["import", "--from", str(path), "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--serde aes" in err
    assert main(["import", "--from", str(path), "--url", url, "--serde", "aes"]) == 0
    capsys.readouterr()
    src = Source(f"sqlite:///{path}", "sqlite", threads, 0)
    theirs = SqliteSaver(sqlite3.connect(f"file:{path}?mode=ro", uri=True), serde=serde)
    monkeypatch.setattr(src, "saver", lambda: theirs)
    assert_same_threads(src, url)
    monkeypatch.delenv("LANGGRAPH_AES_KEY")
    assert main(["import", "--from", str(path), "--url", url, "--serde", "aes"]) == 2
    assert "LANGGRAPH_AES_KEY" in capsys.readouterr().err


def test_a_table_named_as_langgraphs_but_not_theirs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE checkpoints (id INTEGER, data TEXT)")
        conn.commit()
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert main(["import", "--from", str(other), "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoints table is not LangGraph's" in err
    assert "checkpoint_id" in err


def test_an_unreachable_source_server(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Named as --from, with the status of an unreachable --url (1)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = f"postgresql://app:secret@127.0.0.1:{port}/lg?connect_timeout=2"
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert main(["import", "--from", source, "--url", url]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("agent-memory import: error: --from: cannot connect") and "secret" not in err
    )
    assert err.count("\n") == 1


def test_a_long_thread_is_not_held_whole(tmp_path: Path) -> None:
    """SqliteSaver stores every checkpoint whole: a thread of 10 turns of 10 kB messages
    (80 checkpoints) decodes to about 7 MB in all, and its peak grows with the square of
    its turns when held whole; the import holds a few checkpoints at a time."""
    import tracemalloc

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "langgraph.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = G.builder().compile(checkpointer=SqliteSaver(conn))
    for i in range(10):
        G.say(graph, "long", f"{i} " + "x" * 10_000)
    conn.commit()
    conn.close()
    src = Source(f"sqlite:///{path}", "sqlite", ["long"], 0)
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    tracemalloc.start()
    try:
        report = import_from_langgraph(src.url, url, items=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with closing(sqlite3.connect(path)) as conn:
        assert report.checkpoints == conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    assert peak < 8_000_000, peak  # 14.8 MB when the thread was held whole
    assert_same_threads(src, url)


@pytest.mark.parametrize("kind", backend_params("pgbouncer"))
def test_a_source_behind_pgbouncer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """PgBouncer refuses startup options: the source is read in read-only transactions."""
    bounced = pg_database(request, kind)
    server = request.getfixturevalue("pg_servers").get(kind)
    name = bounced.split("?", 1)[0].rsplit("/", 1)[1]
    src = write_postgres_source(server.behind.url.rsplit("/", 1)[0] + f"/{name}")
    before = fingerprint(src)
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    report = import_from_langgraph(bounced, url)
    assert (report.threads, report.items) == (len(src.threads), src.items)
    assert fingerprint(src) == before
    assert_same_threads(src, url)
    assert_same_items(src, url)
