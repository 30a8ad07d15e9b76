"""A SQLite writer that keeps the GIL: the checkpointer's hot writes inside a graph.

LangGraph runs every saver call in a worker thread while its own thread runs the next step.
The ``sqlite3`` module releases the GIL around each statement, so a write that releases it
mid-way waits for the graph's thread to let go again before it can finish: on a 3-node graph
that wait, not SQLite, was most of what a checkpoint cost. This writer calls the same SQLite
library through ``ctypes.PyDLL``, which keeps the GIL, so one write (a single statement of
about 60 µs, its commit included) runs from start to end like pure Python code would.

It is used only where that is safe:

- Only on the shared ``libsqlite3`` the ``sqlite3`` module itself uses (the one library of
  that name in ``/proc/self/maps``, and the one ``_sqlite3`` resolves SQLite's functions
  to), so both connections share one library and its file locks. Two copies of SQLite in
  one process would break each other's POSIX locks; a statically linked ``sqlite3`` module,
  or a platform without ``/proc``, turns the writer off.
- Only for single statements that write a few rows and at most :data:`MAX_BYTES` of blobs:
  nothing long runs with the GIL held.
- Never waiting with the GIL held: its busy timeout is 0, and a locked database is retried
  after a ``time.sleep`` (which releases it) until the database's busy timeout runs out.
- Never checkpointing the write-ahead log itself (``wal_autocheckpoint = 0``), since a
  checkpoint copies pages and syncs the file: the database runs a passive checkpoint through
  the ``sqlite3`` module (GIL released) when about :data:`CHECKPOINT_FRAMES` pages were logged.
"""

from __future__ import annotations

import ctypes
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from langgraph_checkpoint_agent_memory.db import fork

#: Pages the write-ahead log may grow by between two passive checkpoints: SQLite's own
#: automatic checkpoint threshold, which the native writer turns off.
CHECKPOINT_FRAMES = 1000
#: Blob bytes above which a write goes through the ``sqlite3`` module (GIL released): about
#: 64 pages, a few hundred microseconds of writing.
MAX_BYTES = 256 * 1024

_OK, _BUSY, _LOCKED, _CONSTRAINT, _DONE = 0, 5, 6, 19, 101
_OPEN_READWRITE, _OPEN_CREATE = 0x2, 0x4
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TRANSIENT = ctypes.c_void_p(-1)  # SQLite copies bound text and blobs at once

_library: Any = None
_library_lock = threading.Lock()
_probed = False


@fork.after_fork
def _fresh_library_lock() -> None:
    global _library_lock
    _library_lock = threading.Lock()


def _mapped_sqlite() -> str | None:
    """The one shared SQLite library this process has loaded, if there is exactly one."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            fields = (line.split(maxsplit=5) for line in maps if "libsqlite3" in line)
            paths = {f[5].strip() for f in fields if len(f) == 6}
    except OSError:
        return None
    return paths.pop() if len(paths) == 1 else None


def library() -> Any:
    """The ``sqlite3`` module's own SQLite library, through ``PyDLL``; ``None`` when it
    cannot be shared safely (see the module's notes)."""
    global _library, _probed
    with _library_lock:
        if _probed:
            return _library
        _probed = True
        path = _mapped_sqlite()
        if path is None:
            return None
        try:
            lib = ctypes.PyDLL(path)
            lib.sqlite3_libversion_number.restype = ctypes.c_int
            if lib.sqlite3_libversion_number() != _version_number(sqlite3.sqlite_version_info):
                return None
            if not _same_library(lib) or lib.sqlite3_threadsafe() == 0:
                return None
            _declare(lib)
        except (OSError, AttributeError):
            return None
        _library = lib
        return lib


def _same_library(lib: Any) -> bool:
    """Whether the ``_sqlite3`` extension resolves SQLite's functions to ``lib``'s: a
    statically linked module has its own copy, even when a shared one is loaded too."""
    import _sqlite3

    module = ctypes.CDLL(_sqlite3.__file__)  # already loaded: the same handle
    ours = ctypes.cast(lib.sqlite3_libversion, ctypes.c_void_p).value
    theirs = ctypes.cast(module.sqlite3_libversion, ctypes.c_void_p).value
    return ours is not None and ours == theirs


def _int64(value: int) -> ctypes.c_int64:
    if not _INT64_MIN <= value <= _INT64_MAX:  # c_int64 would wrap it silently
        raise OverflowError("Python int too large to convert to SQLite INTEGER")
    return ctypes.c_int64(value)


def _version_number(info: Sequence[int]) -> int:
    return info[0] * 1_000_000 + info[1] * 1_000 + info[2]


def _declare(lib: Any) -> None:
    vp, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    signatures: dict[str, tuple[list[Any], Any]] = {
        "sqlite3_open_v2": ([cp, ctypes.POINTER(vp), i, cp], i),
        "sqlite3_close_v2": ([vp], i),
        "sqlite3_exec": ([vp, cp, vp, vp, vp], i),
        "sqlite3_prepare_v2": ([vp, cp, i, ctypes.POINTER(vp), vp], i),
        "sqlite3_bind_parameter_count": ([vp], i),
        "sqlite3_step": ([vp], i),
        "sqlite3_reset": ([vp], i),
        "sqlite3_clear_bindings": ([vp], i),
        "sqlite3_finalize": ([vp], i),
        "sqlite3_errmsg": ([vp], cp),
        "sqlite3_changes": ([vp], i),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result


class NativeWriter:
    """One connection that runs single write statements with the GIL held.

    Not thread-safe by itself: the database calls it under its write lock.
    """

    def __init__(self, lib: Any, path: str, *, synchronous: str, busy_timeout_ms: int) -> None:
        self._lib = lib
        self.busy_timeout = busy_timeout_ms / 1000
        self._db = ctypes.c_void_p()
        rc = lib.sqlite3_open_v2(
            path.encode(), ctypes.byref(self._db), _OPEN_READWRITE | _OPEN_CREATE, None
        )
        if rc != _OK:
            message = self._message()
            lib.sqlite3_close_v2(self._db)
            raise sqlite3.OperationalError(f"cannot open {path}: {message}")
        self._statements: dict[str, ctypes.c_void_p] = {}
        untyped = ctypes.PyDLL(lib._name)  # the same library, already loaded
        self._binders = (
            untyped.sqlite3_bind_text,
            untyped.sqlite3_bind_blob,
            untyped.sqlite3_bind_int64,
            untyped.sqlite3_bind_double,
        )
        pragmas = ("busy_timeout = 0", f"synchronous = {synchronous}", "wal_autocheckpoint = 0")
        for pragma in pragmas:
            if lib.sqlite3_exec(self._db, f"PRAGMA {pragma}".encode(), None, None, None) != _OK:
                error = sqlite3.OperationalError(self._message())
                self.close()
                raise error

    def _message(self) -> str:
        raw = self._lib.sqlite3_errmsg(self._db)
        return raw.decode("utf-8", "replace") if raw else "unknown SQLite error"

    def _prepare(self, sql: str) -> ctypes.c_void_p:
        stmt = self._statements.get(sql)
        if stmt is None:
            stmt = ctypes.c_void_p()
            if self._lib.sqlite3_prepare_v2(self._db, sql.encode(), -1, ctypes.byref(stmt), None):
                raise sqlite3.OperationalError(self._message())
            self._statements[sql] = stmt
        return stmt

    def _bind(self, stmt: ctypes.c_void_p, params: Sequence[Any]) -> None:
        # A write binds a few dozen values, so binding costs as much as SQLite's own work
        # on the statement: the bind functions come from a handle without declared
        # argument types, which ctypes converts from int and bytes at about half the cost.
        expected = self._lib.sqlite3_bind_parameter_count(stmt)
        if expected != len(params):
            raise sqlite3.ProgrammingError(
                f"the statement takes {expected} parameters, {len(params)} were given"
            )
        text, blob, int64, double = self._binders
        i = 0
        for value in params:
            i += 1
            if value is None:
                continue  # every parameter is NULL after clear_bindings
            kind = type(value)
            if kind is str:
                data = value.encode()
                rc = text(stmt, i, data, len(data), _TRANSIENT)
            elif kind is bytes:
                rc = blob(stmt, i, value, len(value), _TRANSIENT)
            elif kind is float:
                rc = double(stmt, i, ctypes.c_double(value))
            elif kind is int or kind is bool:
                rc = int64(stmt, i, _int64(value))
            else:
                rc = self._bind_other(stmt, i, value)
            if rc != _OK:
                raise sqlite3.OperationalError(self._message())

    def _bind_other(self, stmt: ctypes.c_void_p, i: int, value: Any) -> int:
        """Byte buffers, and subclasses of the plain types (a ``str`` enum, an ``IntEnum``),
        bound by their underlying value as the ``sqlite3`` module binds them."""
        text, blob, int64, double = self._binders
        if isinstance(value, bytearray | memoryview | bytes):
            data = bytes(value)
            return int(blob(stmt, i, data, len(data), _TRANSIENT))
        if isinstance(value, str):
            data = str.encode(value)
            return int(text(stmt, i, data, len(data), _TRANSIENT))
        if isinstance(value, int):
            return int(int64(stmt, i, _int64(int.__index__(value))))
        if isinstance(value, float):
            return int(double(stmt, i, ctypes.c_double(float.__float__(value))))
        raise sqlite3.ProgrammingError(f"parameter {i} has unsupported type {type(value).__name__}")

    def execute(self, sql: str, params: Sequence[Any]) -> int:
        """Run one statement in its own implicit transaction; return the rows it changed.

        Raises ``sqlite3.IntegrityError`` for constraint failures (and ``RAISE(ABORT)`` in
        a trigger) and ``sqlite3.OperationalError`` otherwise, as the ``sqlite3`` module
        would; a failed statement leaves nothing behind.
        """
        lib = self._lib
        stmt = self._prepare(sql)
        try:
            self._bind(stmt, params)
            deadline = None
            pause = 0.0005
            while True:
                rc = lib.sqlite3_step(stmt) & 0xFF
                if rc == _DONE:
                    return int(lib.sqlite3_changes(self._db))
                if rc in (_BUSY, _LOCKED):
                    lib.sqlite3_reset(stmt)
                    now = time.monotonic()
                    deadline = deadline if deadline is not None else now + self.busy_timeout
                    if now >= deadline:
                        raise sqlite3.OperationalError("database is locked")
                    time.sleep(min(pause, deadline - now))  # the wait releases the GIL
                    pause = min(pause * 2, 0.02)
                    continue
                message = self._message()
                if rc == _CONSTRAINT:
                    raise sqlite3.IntegrityError(message)
                raise sqlite3.OperationalError(message)
        finally:
            lib.sqlite3_reset(stmt)
            lib.sqlite3_clear_bindings(stmt)

    def close(self) -> None:
        for stmt in self._statements.values():
            self._lib.sqlite3_finalize(stmt)
        self._statements.clear()
        if self._db:
            self._lib.sqlite3_close_v2(self._db)
            self._db = ctypes.c_void_p()
