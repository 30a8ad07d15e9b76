"""The GIL-keeping SQLite writer: what it binds, how it waits, and that the saver uses it
only where it is safe."""

from __future__ import annotations

import ctypes
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_agent_memory.checkpoint.backends import SqliteSaver
from langgraph_checkpoint_agent_memory.db import native
from langgraph_checkpoint_agent_memory.db.native import NativeWriter
from langgraph_checkpoint_agent_memory.errors import ClosedError, ThreadDeletedError

LIB = native.library()
needs_native = pytest.mark.skipif(
    LIB is None,
    reason="the sqlite3 module does not load a shared libsqlite3 here (static build or no "
    "/proc/self/maps): the native writer is off, and the generic writes are tested elsewhere",
)


def _table(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v)")
    return conn


def _writer(path: Path, busy_timeout_ms: int = 5_000) -> NativeWriter:
    return NativeWriter(LIB, str(path), synchronous="NORMAL", busy_timeout_ms=busy_timeout_ms)


@needs_native
def test_values_of_every_type_round_trip(tmp_path: Path) -> None:
    conn = _table(tmp_path / "t.db")
    writer = _writer(tmp_path / "t.db")
    values: list[Any] = [
        None,
        0,
        -(2**63),
        2**63 - 1,
        True,
        1.5,
        -0.0,
        "",
        "naïve ☃ text",
        b"",
        b"\x00\xffbytes",
        bytearray(b"ba"),
        memoryview(b"mv"),
    ]
    for k, value in enumerate(values):
        assert writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (k, value)) == 1
    got = [row[0] for row in conn.execute("SELECT v FROM t ORDER BY k")]
    expected = [
        bytes(v) if isinstance(v, bytearray | memoryview) else (int(v) if v is True else v)
        for v in values
    ]
    assert got == expected
    # a statement reused after NULLs and values: no value leaks from one run to the next
    writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (100, None))
    assert conn.execute("SELECT v FROM t WHERE k = 100").fetchone() == (None,)
    writer.close()


class _Label(str):
    """A str subclass (as a ``str`` enum is): bound by its characters."""

    def __str__(self) -> str:
        return "not what is stored"


class _Count(int):
    """An int subclass (as an ``IntEnum`` is)."""


class _Ratio(float):
    """A float subclass."""


_INTS = st.integers(min_value=-(2**70), max_value=2**70)  # beyond int64 too: both must refuse
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    _INTS.map(_Count),
    st.floats(allow_nan=False),
    st.floats(allow_nan=False).map(_Ratio),
    st.text(),
    st.text().map(_Label),
    st.binary(),
    st.binary().map(bytearray),
)


@needs_native
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(_VALUES, min_size=1, max_size=12))
def test_any_values_bind_as_the_sqlite3_module_binds_them(
    tmp_path_factory: pytest.TempPathFactory, values: list[Any]
) -> None:
    """The writer binds through untyped ctypes calls: each value must land exactly as the
    ``sqlite3`` module stores it, and a value it refuses must be refused here too."""
    path = tmp_path_factory.mktemp("bind") / "t.db"
    conn = _table(path)
    conn.execute("CREATE TABLE u (k INTEGER PRIMARY KEY, v)")
    writer = _writer(path)
    try:
        rows = ", ".join("(?, ?)" for _ in values)
        params = tuple(x for k, v in enumerate(values) for x in (k, v))
        try:
            conn.execute(f"INSERT INTO u (k, v) VALUES {rows}", params)
        except OverflowError:
            with pytest.raises(OverflowError):
                writer.execute(f"INSERT INTO t (k, v) VALUES {rows}", params)
            assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
            return
        assert writer.execute(f"INSERT INTO t (k, v) VALUES {rows}", params) == len(values)
        native_rows = conn.execute("SELECT k, v, typeof(v) FROM t ORDER BY k").fetchall()
        module_rows = conn.execute("SELECT k, v, typeof(v) FROM u ORDER BY k").fetchall()
        assert native_rows == module_rows
    finally:
        writer.close()
        conn.close()


@needs_native
def test_errors_are_the_sqlite3_modules_and_leave_nothing(tmp_path: Path) -> None:
    conn = _table(tmp_path / "t.db")
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON t WHEN NEW.v = 'no' "
        "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
    )
    writer = _writer(tmp_path / "t.db")
    writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (1, "a"))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        writer.execute("INSERT INTO t (k, v) VALUES (?, ?), (?, ?)", (2, "b", 1, "dup"))
    with pytest.raises(sqlite3.IntegrityError, match="refused by trigger"):
        writer.execute("INSERT INTO t (k, v) VALUES (?, ?), (?, ?)", (3, "c", 4, "no"))
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        writer.execute("INSERT INTO missing VALUES (?)", (1,))
    with pytest.raises(sqlite3.ProgrammingError, match="takes 2 parameters, 1"):
        writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (5,))
    with pytest.raises(sqlite3.ProgrammingError, match="unsupported type dict"):
        writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (6, {}))
    assert conn.execute("SELECT k, v FROM t").fetchall() == [(1, "a")]  # all or nothing
    writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (7, "after"))  # still usable
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
    writer.close()


@needs_native
def test_a_locked_database_is_waited_for_without_holding_the_gil(tmp_path: Path) -> None:
    conn = _table(tmp_path / "t.db")
    writer = _writer(tmp_path / "t.db")
    conn.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    threading.Timer(0.3, conn.execute, ("COMMIT",)).start()
    started = time.monotonic()
    assert writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (1, "waited")) == 1
    waited = time.monotonic() - started
    stop.set()
    counter.join()
    assert waited >= 0.25
    assert ticks > 50  # the other thread ran while the writer waited
    assert conn.execute("SELECT v FROM t").fetchall() == [("waited",)]
    writer.close()


@needs_native
def test_a_lock_held_past_the_busy_timeout_is_an_error(tmp_path: Path) -> None:
    conn = _table(tmp_path / "t.db")
    writer = _writer(tmp_path / "t.db", busy_timeout_ms=100)
    conn.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (1, "x"))
    assert 0.09 <= time.monotonic() - started < 2
    conn.execute("ROLLBACK")
    assert writer.execute("INSERT INTO t (k, v) VALUES (?, ?)", (1, "x")) == 1
    writer.close()


def _put(saver: SqliteSaver, thread: str, value: Any) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": value}
    cp["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, cp, {"step": 0}, cp["channel_versions"])


@needs_native
def test_the_saver_writes_natively_by_default_and_keeps_the_log_short(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "s.db")
    for i in range(600):
        config = _put(saver, f"t{i}", [f"message {i}"] * 3)
    assert saver.db._native is not None
    got = saver.get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"]["messages"][0] == "message 599"
    # the native writer leaves checkpointing to the database, which keeps the log near
    # SQLite's own 1,000-page threshold instead of letting it grow with every put
    wal = (tmp_path / "s.db-wal").stat().st_size
    assert wal < 2 * native.CHECKPOINT_FRAMES * 4096 * 1.1
    saver.close()
    assert saver.db._native is None


def test_the_native_writer_is_off_when_asked_or_unsafe(tmp_path: Path) -> None:
    off = SqliteSaver(tmp_path / "off.db", native_writes=False)
    full = SqliteSaver(tmp_path / "full.db", durability="full")  # an fsync must not hold the GIL
    for saver in (off, full):
        config = _put(saver, "t", ["a"])
        assert saver.get_tuple(config) is not None
        assert saver.db._native is None
        saver.close()


def test_only_the_library_the_sqlite3_module_loaded_is_used(monkeypatch: Any) -> None:
    monkeypatch.setattr(native, "_probed", False)
    monkeypatch.setattr(native, "_library", None)
    monkeypatch.setattr(native, "_mapped_sqlite", lambda: None)  # e.g. a static build
    assert native.library() is None
    monkeypatch.setattr(native, "_probed", False)
    monkeypatch.setattr(native.sqlite3, "sqlite_version_info", (1, 0, 0))
    monkeypatch.setattr(native, "_mapped_sqlite", lambda: native_path)
    assert native.library() is None  # a different version: another copy of SQLite


native_path = native._mapped_sqlite()


def test_threads_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "c.db")
    configs: dict[str, Any] = {}

    def work(worker: int) -> None:
        for i in range(40):
            name = f"w{worker}-{i}"
            configs[name] = _put(saver, name, [name])
            assert saver.get_tuple(configs[name]) is not None  # readers meet the writers

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(configs) == 240
    for name, config in configs.items():
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"]["messages"] == [name]
    saver.close()
    with pytest.raises(ClosedError, match="closed"):
        _put(saver, "late", ["x"])


@needs_native
def test_a_second_copy_of_sqlite_is_never_used(monkeypatch: Any) -> None:
    assert native._same_library(LIB)

    class OtherCopy:  # what a statically linked sqlite3 module meets: other functions
        sqlite3_libversion = ctypes.CDLL(None).strlen

    assert not native._same_library(OtherCopy())
    monkeypatch.setattr(native, "_probed", False)
    monkeypatch.setattr(native, "_library", None)
    monkeypatch.setattr(native, "_same_library", lambda lib: False)
    assert native.library() is None


@needs_native
def test_a_large_state_is_written_with_the_gil_released(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "big.db")
    _put(saver, "small", ["x"])
    assert saver.db._native is not None
    before = saver.db._native_commits
    big = ["y" * 1000] * (native.MAX_BYTES // 1000 + 10)
    config = _put(saver, "big", big)
    assert saver.db._native_commits == before  # not through the native writer
    got = saver.get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == big
    saver.close()


@pytest.mark.parametrize("native_writes", [True, False])
def test_a_late_write_into_a_deleted_thread_is_refused_either_way(
    tmp_path: Path, native_writes: bool
) -> None:
    saver = SqliteSaver(tmp_path / "gone.db", native_writes=native_writes)
    config = _put(saver, "gone", ["a"])
    saver.delete_thread("gone")
    late = {"configurable": {**config["configurable"]}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": ["late"]}
    cp["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    with pytest.raises(ThreadDeletedError):
        saver.put(late, cp, {"step": 1}, cp["channel_versions"])  # names a deleted parent
    with pytest.raises(ThreadDeletedError):
        saver.put_writes(config, [("messages", ["late"])], "task")
    assert list(saver.list({"configurable": {"thread_id": "gone"}})) == []
    assert (saver.db._native is not None) == (native_writes and LIB is not None)
    saver.close()
