"""The DB-API pool of SQLite files and SAP HANA (SQLAlchemy's ``QueuePool``), and their
failures as the package's errors: a connection kept after an application's error, a closed
one dropped, each checked on checkout; an unreachable HANA, a read-only SQLite file and a
full one as :class:`DatabaseUnavailableError` (:class:`ReadOnlyDatabaseError`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import PutOp

from langgraph_checkpoint_agent_memory import (
    DatabaseUnavailableError,
    ReadOnlyDatabaseError,
    SqliteSaver,
    ThreadDeletedError,
    create_store,
)
from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
from tests.helpers import config_for, make_checkpoint, present


def _conn_of(db: SQLiteDatabase) -> Any:
    """The connection a plan runs on (each plan checks one out)."""

    def plan() -> Any:
        yield Batch([Stmt(Sql("SELECT 1"), fetch=True)])

    seen: list[Any] = []
    with db.connection() as conn:
        seen.append(conn)
    db.run(plan())
    return seen[0]


def test_an_application_error_in_a_plan_keeps_the_connection(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "a.db", pool_size=1)
    first = _conn_of(db)

    def refused() -> Any:
        yield Batch([Stmt(Sql("SELECT 1"), fetch=True)])
        raise ThreadDeletedError("the thread was deleted")

    with pytest.raises(ThreadDeletedError):
        db.run(refused())
    with db.connection() as conn:
        assert conn is first  # kept, not closed
        assert conn.execute("SELECT 2").fetchone() == (2,)
    db.close()


def test_a_closed_connection_is_dropped_and_replaced(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "a.db", pool_size=1)
    first = _conn_of(db)
    first.close()  # closed behind the pool's back
    with db.connection() as conn:  # the check on checkout finds it closed
        assert conn is not first
        assert conn.execute("SELECT 3").fetchone() == (3,)
    db.close()


def test_every_checkout_is_checked(tmp_path: Path) -> None:
    """A connection that was used before is checked as it goes out again: by the local
    check given (SQLite's), else by the dialect's ping, a statement (HANA's)."""
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    from langgraph_checkpoint_agent_memory.db.dbapi import DbApiPool

    def pool(check: Any = None) -> DbApiPool:
        return DbApiPool(
            lambda: sqlite3.connect(tmp_path / "a.db", check_same_thread=False),
            dialect=SQLiteDialect_pysqlite(dbapi=sqlite3),
            size=1,
            timeout=1,
            describe=lambda: "a.db",
            check=check,
        )

    checked: list[Any] = []
    local = pool(checked.append)
    with local.connection() as first:
        assert checked == []  # a new connection needs no check
    with local.connection():
        assert checked == [first]
    local.close()
    traced: list[str] = []
    pinged = pool()
    with pinged.connection() as conn:
        conn.set_trace_callback(traced.append)
    with pinged.connection():
        assert traced == ["SELECT 1"]
    pinged.close()


def test_a_closed_database_closes_a_busy_connection_when_its_plan_ends(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "a.db", pool_size=2)
    with db.connection() as conn:
        db.close()
        assert conn.execute("SELECT 1").fetchone() == (1,)  # still usable mid-plan
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")


def test_an_unreachable_hana_is_database_unavailable() -> None:
    pytest.importorskip("hdbcli")
    pytest.importorskip("sqlalchemy_hana")
    from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

    db = HanaDatabase(
        {"address": "127.0.0.1", "port": 9, "user": "agent", "password": "s3cret-pw"},
        url="hana://agent:s3cret-pw@127.0.0.1:9",
    )

    def plan() -> Any:
        yield Batch([Stmt(Sql("SELECT 1 FROM DUMMY"), fetch=True)])

    with pytest.raises(DatabaseUnavailableError, match="cannot reach SAP HANA") as raised:
        db.run(plan())
    message = str(raised.value)
    assert "127.0.0.1" in message and "s3cret-pw" not in message and "\n" not in message
    assert "-10709" in message  # hdbcli's code: connection failed
    db.close()


def test_the_cli_says_one_line_for_an_unreachable_hana(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hdbcli")
    pytest.importorskip("sqlalchemy_hana")
    from langgraph_checkpoint_agent_memory.cli import main

    code = main(["threads", "--url", "hana://agent:s3cret-pw@127.0.0.1:9"])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert len(err.splitlines()) == 1 and "SAP HANA" in err and "Traceback" not in err


def test_a_lost_hana_connection_is_classified_by_hdbcli() -> None:
    """hdbcli's own error classes and codes, offline: a failed connect (-10709) is a lost
    connection for the pool; a SQL error on a live connection is not."""
    dbapi = pytest.importorskip("hdbcli.dbapi")
    pytest.importorskip("sqlalchemy_hana")
    from sqlalchemy_hana.dialect import HANAHDBCLIDialect

    from langgraph_checkpoint_agent_memory.db.dbapi import DbApiPool

    pool = DbApiPool(
        lambda: None,
        dialect=HANAHDBCLIDialect(dbapi=dbapi, paramstyle="qmark"),
        size=1,
        timeout=1,
        describe=lambda: "hana",
    )
    assert pool.lost(dbapi.Error(-10709, "Connection failed"), None)
    assert not pool.lost(ThreadDeletedError("gone"), None)


def _seed(path: Path) -> None:
    """A SQLite file at ``path`` with a checkpoint of thread ``t`` and a store item, closed."""
    saver = SqliteSaver(path)
    saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    saver.close()
    store = create_store(f"sqlite:///{path}")
    store.put(("docs",), "a", {"text": "hello"})
    store.close()


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A SQLite file with a checkpoint and a store item, then made read-only for everyone
    (``chmod a-w``; as root also ``chattr +i``, since root ignores permissions)."""
    path = tmp_path / "ro.db"
    _seed(path)
    path.chmod(0o444)
    root = os.geteuid() == 0
    if root and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i does not work on this filesystem")
    yield path
    if root:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_file_reads_and_refuses_writes_with_the_packages_error(
    read_only: Path,
) -> None:
    saver = SqliteSaver(read_only)
    assert present(saver.get_tuple(config_for("t"))).checkpoint["channel_values"] == {"x": [1]}
    with pytest.raises(ReadOnlyDatabaseError, match="read-only") as raised:
        saver.put(config_for("t"), empty_checkpoint(), {}, {})
    assert isinstance(raised.value, DatabaseUnavailableError)
    store = create_store(f"sqlite:///{read_only}")
    assert store.get(("docs",), "a") is not None
    with pytest.raises(ReadOnlyDatabaseError):
        store.put(("docs",), "b", {"text": "more"})
    saver.close()
    store.close()


def test_a_file_on_a_read_only_mount_is_read_and_left_as_it_was(tmp_path: Path) -> None:
    """A file whose permissions let its owner write it, on a file system mounted read-only
    (a read-only bind mount), is one no one may write: reads work, sync and async, writes
    raise :class:`ReadOnlyDatabaseError`, and nothing is left beside it."""
    source, mounted = tmp_path / "source", tmp_path / "mounted"
    source.mkdir()
    mounted.mkdir()
    _seed(source / "ro.db")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root and mount")
    if subprocess.run(["mount", "--bind", str(source), str(mounted)]).returncode != 0:
        pytest.skip("bind mounts are not allowed here")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(mounted)]
        subprocess.run(remount, check=True)
        path = mounted / "ro.db"
        saver = SqliteSaver(path)
        assert present(saver.get_tuple(config_for("t"))).checkpoint["channel_values"] == {"x": [1]}
        found = asyncio.run(saver.aget_tuple(config_for("t")))
        assert present(found).checkpoint["channel_values"] == {"x": [1]}
        with pytest.raises(ReadOnlyDatabaseError):
            saver.put(config_for("t"), empty_checkpoint(), {}, {})
        saver.close()
        assert sorted(os.listdir(mounted)) == ["ro.db"]
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


def test_a_frozen_file_changed_during_a_read_raises_rather_than_mixing_pages(
    read_only: Path,
) -> None:
    """A read of a file no one may write takes no lock: a change made anyway while it runs
    (``chattr -i``, a write, ``chattr +i``) fails that read with the package's error, and
    the next read sees the change."""
    if os.geteuid() != 0:
        pytest.skip("changing a file made immutable needs root")
    db = SQLiteDatabase(read_only)
    changed = pytest.raises(DatabaseUnavailableError, match="changed while it was read")
    with changed, db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        subprocess.run(["chattr", "-i", str(read_only)], check=True)
        _write_more(read_only, 2, items=10)
        subprocess.run(["chattr", "+i", str(read_only)], check=True)
    db.close()
    saver = SqliteSaver(read_only)
    assert present(saver.get_tuple(config_for("t"))).checkpoint["channel_values"] == {"x": [2]}
    saver.close()


#: Reads and writes of the file ``sys.argv[1]`` opened with ``mode=sys.argv[2]`` (``-``: the
#: default), sync and async, each line of stdin one step; prints what each did (an error's
#: class, and its message too at a step ``why``).
READER = """
import asyncio, json, sys
from langgraph.checkpoint.base import empty_checkpoint
from langgraph_checkpoint_agent_memory import SqliteSaver, create_store

path, mode = sys.argv[1], sys.argv[2]
options = {} if mode == "-" else {"mode": mode}
saver = SqliteSaver(path, **options)
store = create_store("sqlite:///" + path, **options)
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

def outcome(call):
    try:
        return repr(call())
    except Exception as error:
        return type(error).__name__ + (f": {error}" if line.strip() == "why" else "")

for line in sys.stdin:
    found = {
        "get_tuple": outcome(lambda: saver.get_tuple(config).checkpoint["channel_values"]),
        "aget_tuple": outcome(
            lambda: asyncio.run(saver.aget_tuple(config)).checkpoint["channel_values"]
        ),
        "store.get": outcome(lambda: store.get(("docs",), "a").value),
    }
    if line.strip() == "count":
        found["items"] = outcome(lambda: len(store.search(("docs",), limit=1000)))
    if line.strip() == "write":
        found["put"] = outcome(lambda: saver.put(config, empty_checkpoint(), {}, {}))
        found["store.put"] = outcome(lambda: store.put(("docs",), "b", {"text": "more"}))
    print(json.dumps(found), flush=True)
saver.close()
store.close()
"""


def _reader(path: Path, mode: str) -> subprocess.Popen[str]:
    """:data:`READER` in a process that file permissions bind (as root: without the
    capabilities that let root ignore them)."""
    command = [sys.executable, "-c", READER, str(path), mode]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is not installed: root would ignore the permissions")
        drop = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", *command]
    root = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
    )


def _step(reader: subprocess.Popen[str], line: str) -> dict[str, str]:
    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.write(line + "\n")
    reader.stdin.flush()
    return dict(json.loads(reader.stdout.readline()))


def _finish(reader: subprocess.Popen[str]) -> None:
    assert reader.stdin is not None
    reader.stdin.close()
    assert reader.wait(timeout=60) == 0


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder any process may enter (pytest's own folders are the user's alone), with a
    SQLite file (a checkpoint, a store item) in WAL mode, closed: no ``-wal`` or ``-shm``
    beside it."""
    folder = Path(tempfile.mkdtemp(prefix="agent-memory-ro-"))
    folder.chmod(0o755)
    path = folder / "ro.db"
    _seed(path)
    assert sorted(os.listdir(folder)) == ["ro.db"]
    yield folder
    folder.chmod(0o755)
    shutil.rmtree(folder)


@pytest.mark.parametrize("mode", ["-", "rw", "ro"])
@pytest.mark.parametrize("folder_mode", [0o555, 0o755], ids=["folder-read-only", "folder-writable"])
def test_a_read_only_file_is_read_and_left_as_it_was(
    shared_folder: Path, mode: str, folder_mode: int
) -> None:
    """Reads work and leave no ``-wal``/``-shm`` behind, writes are refused, wherever the
    file lies; a writer that opens the file later is seen by the next read. A reader that
    read beside that writer shares its ``-wal`` and ``-shm``, and closing last cannot
    remove them (that takes a checkpoint, a write): the next writer does."""
    path = shared_folder / "ro.db"
    path.chmod(0o444)
    shared_folder.chmod(folder_mode)
    reader = _reader(path, mode)
    try:
        assert _step(reader, "write") == {
            "get_tuple": "{'x': [1]}",
            "aget_tuple": "{'x': [1]}",
            "store.get": "{'text': 'hello'}",
            "put": "ReadOnlyDatabaseError",
            "store.put": "ReadOnlyDatabaseError",
        }
        assert sorted(os.listdir(shared_folder)) == ["ro.db"]
        # a process that may write it (this one) changes it while the reader is open
        shared_folder.chmod(0o755)
        writer = SqliteSaver(path)
        writer.put(config_for("t"), make_checkpoint({"x": [2]}, step=2, version=2), {}, {"x": 2})
        seen = _step(reader, "read")
        writer.close()
        assert seen["get_tuple"] == seen["aget_tuple"] == "{'x': [2]}"
        shared_folder.chmod(folder_mode)
        assert _step(reader, "read")["get_tuple"] == "{'x': [2]}"
    finally:
        _finish(reader)
    shared_folder.chmod(0o755)
    cleaner = SqliteSaver(path)
    cleaner.get_tuple(config_for("t"))
    cleaner.close()
    assert sorted(os.listdir(shared_folder)) == ["ro.db"]


def _write_more(path: Path, value: int, items: int) -> None:
    """As a process that may write ``path`` (this one, whose root may write a file read-only
    for everyone): a checkpoint of thread ``t`` holding ``value``, and ``items`` more store
    items; closed, so no ``-wal`` stays beside the file."""
    writer = SqliteSaver(path)
    checkpoint = make_checkpoint({"x": [value]}, step=value, version=value)
    writer.put(config_for("t"), checkpoint, {}, {"x": value})
    writer.close()
    store = create_store(f"sqlite:///{path}")
    store.batch([PutOp(("docs",), f"more-{value}-{n}", {"n": n}) for n in range(items)])
    store.close()


@pytest.mark.parametrize("folder_mode", [0o555, 0o755], ids=["folder-read-only", "folder-writable"])
def test_a_frozen_file_changed_between_reads_is_read_afresh(
    shared_folder: Path, folder_mode: int
) -> None:
    """A file read-only for everyone is read as immutable; one changed anyway between two
    reads (root ignores the permissions), by a writer that has closed it since, is read
    afresh: never the old checkpoint, never the old pages mixed with new ones."""
    path = shared_folder / "ro.db"
    path.chmod(0o444)
    shared_folder.chmod(folder_mode)
    reader = _reader(path, "-")
    try:
        assert _step(reader, "count")["items"] == "1"
        for value in (2, 3):
            _write_more(path, value, items=300)
            assert not Path(f"{path}-wal").exists()
            seen = _step(reader, "count")
            assert seen["get_tuple"] == seen["aget_tuple"] == f"{{'x': [{value}]}}"
            assert seen["items"] == str(1 + 300 * (value - 1))
    finally:
        _finish(reader)
    shared_folder.chmod(0o755)
    cleaner = SqliteSaver(path)
    cleaner.get_tuple(config_for("t"))
    cleaner.close()
    assert sorted(os.listdir(shared_folder)) == ["ro.db"]


@pytest.mark.parametrize("folder_mode", [0o555, 0o755], ids=["folder-read-only", "folder-writable"])
def test_a_live_file_this_process_cannot_write_is_read_only_beside_its_writer(
    shared_folder: Path, folder_mode: int
) -> None:
    """A file its owner may write, which this process may not, is never read as immutable:
    with no writer there to share SQLite's ``-wal`` and ``-shm`` files, reads raise
    :class:`DatabaseUnavailableError` naming the fix, and leave nothing behind; beside a
    writer they read what it commits."""
    path = shared_folder / "ro.db"
    if os.geteuid() != 0:
        pytest.skip("giving the file to another user needs root")
    os.chown(path, 65534, 65534)  # nobody's, 0644: this reader may not write it
    shared_folder.chmod(folder_mode)
    reader = _reader(path, "-")
    try:
        refused = _step(reader, "why")
        assert refused["get_tuple"].startswith("DatabaseUnavailableError: ")
        assert "chmod a-w" in refused["get_tuple"] and "while a writer" in refused["get_tuple"]
        assert refused["aget_tuple"] == refused["store.get"] == refused["get_tuple"]
        assert sorted(os.listdir(shared_folder)) == ["ro.db"]
        writer = SqliteSaver(path)
        writer.put(config_for("t"), make_checkpoint({"x": [2]}, step=2, version=2), {}, {"x": 2})
        seen = _step(reader, "read")
        assert seen["get_tuple"] == seen["aget_tuple"] == "{'x': [2]}"
        writer.put(config_for("t"), make_checkpoint({"x": [3]}, step=3, version=3), {}, {"x": 3})
        assert _step(reader, "read")["get_tuple"] == "{'x': [3]}"
        writer.close()
    finally:
        _finish(reader)


def test_a_full_database_is_database_unavailable_and_loses_nothing(tmp_path: Path) -> None:
    """``PRAGMA max_page_count`` makes SQLite report SQLITE_FULL, the error of a full disk."""
    conn = sqlite3.connect(tmp_path / "full.db", isolation_level=None, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    stored = []
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages + 4}")
    big = "x" * 3000
    with pytest.raises(DatabaseUnavailableError, match="is full") as raised:
        for n in range(100):
            stored.append(
                saver.put(config_for(f"t{n}"), make_checkpoint({"x": [big]}), {}, {"x": 1})
            )
    assert not isinstance(raised.value, sqlite3.Error)
    assert stored  # some fitted
    for config in stored:  # every acknowledged write is there
        assert present(saver.get_tuple(config)).checkpoint["channel_values"] == {"x": [big]}
    conn.execute("PRAGMA max_page_count = 1073741823")
    saver.put(config_for("after"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    conn.close()


class FakeHanaConnection:
    """Stands in for ``hdbcli.dbapi.Connection`` (no HANA server can run here): what the
    pool and the dialect call, with hdbcli's real error class when it is closed."""

    def __init__(self) -> None:
        self.open = True

    def setautocommit(self, _on: bool) -> None:
        pass

    def isconnected(self) -> bool:
        return self.open

    def cursor(self) -> Any:
        from hdbcli import dbapi

        if not self.open:
            raise dbapi.Error(-10807, "Connection down: socket closed")
        return FakeHanaCursor()

    def rollback(self) -> None:
        pass

    def commit(self) -> None:
        pass

    def close(self) -> None:
        self.open = False


class FakeHanaCursor:
    def execute(self, _sql: str, *_args: Any) -> None:
        pass

    def fetchall(self) -> list[Any]:
        return [(1,)]

    def close(self) -> None:
        pass


@pytest.fixture
def hana(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[FakeHanaConnection]]]:
    dbapi = pytest.importorskip("hdbcli.dbapi")
    pytest.importorskip("sqlalchemy_hana")
    from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

    made: list[FakeHanaConnection] = []

    def connect(**_args: Any) -> FakeHanaConnection:
        made.append(FakeHanaConnection())
        return made[-1]

    monkeypatch.setattr(dbapi, "connect", connect)
    db = HanaDatabase({"address": "h", "port": 1, "user": "u", "password": "p"}, pool_size=1)
    yield db, made
    db.close()


def test_the_hana_pool_keeps_a_connection_after_an_application_error(
    hana: tuple[Any, list[FakeHanaConnection]],
) -> None:
    db, made = hana
    with pytest.raises(ThreadDeletedError), db.connection():
        raise ThreadDeletedError("the thread was deleted")
    with db.connection() as conn:
        assert conn is made[0] and conn.open
    assert len(made) == 1


def test_the_hana_pool_checks_on_checkout_and_drops_a_closed_connection(
    hana: tuple[Any, list[FakeHanaConnection]],
) -> None:
    db, made = hana
    with db.connection() as conn:
        pass
    conn.open = False  # the server dropped the session while it sat idle
    with db.connection() as fresh:
        assert fresh is not conn and fresh.open
    assert len(made) == 2
