"""A saver or store used before ``os.fork`` (a gunicorn ``--preload`` or Celery prefork
worker) works in the child on connections of its own, restarts its sweeper there, and leaves
the parent's connections to the parent."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import sqlite3
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_agent_memory import (
    AgentMemoryStore,
    SQLSaver,
    TimedInMemorySaver,
    create_store,
)
from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
from tests.helpers import config_for, present
from tests.pg import backend_params

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")


def _in_child(body: Callable[[], None]) -> None:
    """Run ``body`` in a forked child; fail with the child's traceback if it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which reports through the pipe
        os.close(read)
        code = 0
        try:
            body()
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report


def _checkpoint(step: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"step": step}
    checkpoint["channel_versions"] = {"step": step}
    return checkpoint


def _session(db: Any) -> Any:
    """What identifies the database session a plan runs on: the backend's process id on
    PostgreSQL, the connection object on SQLite."""
    if db.dialect.name == "postgresql":

        def plan() -> Any:
            [rows] = yield Batch([Stmt(Sql("SELECT pg_backend_pid()"), fetch=True)])
            return rows[0][0]

        return db.run(plan())
    return {id(c) for c in db.open_connections()}


def _assert_other_session(parent: Any, child: Any) -> None:
    if isinstance(parent, set):
        assert not parent & child, "the child wrote on a connection of its parent"
    else:
        assert child != parent, "the child used its parent's PostgreSQL session"


def test_a_saver_used_before_fork_works_in_the_child(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver(ttl_seconds=3600)
    head = saver.put(config_for("parent"), _checkpoint(1), {}, {"step": 1})
    saver.put_writes(head, [("step", 2)], "parent-task")
    assert saver.sweeper_running
    parent_session = _session(saver.db)

    def child() -> None:
        assert not saver.sweeper_running  # the thread stayed in the parent
        assert present(saver.get_tuple(config_for("parent"))).pending_writes == [
            ("parent-task", "step", 2)
        ]
        mine = saver.put(config_for("child"), _checkpoint(7), {}, {"step": 7})
        saver.put_writes(mine, [("step", 8)], "child-task")
        assert saver.sweeper_running  # its own, started by the write
        _assert_other_session(parent_session, _session(saver.db))

    _in_child(child)
    assert _session(saver.db) == parent_session  # the parent kept its connections
    seen = present(saver.get_tuple(config_for("child")))
    assert seen.checkpoint["channel_values"] == {"step": 7}
    assert seen.pending_writes == [("child-task", "step", 8)]
    saver.put(head, _checkpoint(2), {}, {"step": 2})  # and still writes on them
    assert present(saver.get_tuple(config_for("parent"))).checkpoint["channel_values"] == {
        "step": 2
    }
    if saver.db.dialect.name == "sqlite":
        assert isinstance(saver.db, SQLiteDatabase)
        check = sqlite3.connect(saver.db.path)
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        check.close()


def test_the_async_api_works_in_the_child(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()

    async def write(thread: str, step: int) -> Any:
        await saver.aput(config_for(thread), _checkpoint(step), {}, {"step": step})
        if saver.db.dialect.name != "postgresql":
            return None

        def plan() -> Any:
            [rows] = yield Batch([Stmt(Sql("SELECT pg_backend_pid()"), fetch=True)])
            return rows[0][0]

        return await saver.db.arun(plan())

    loop = asyncio.new_event_loop()  # the parent's loop, and its pool, live on
    try:
        parent_session = loop.run_until_complete(write("parent", 1))

        def child() -> None:
            child_session = asyncio.run(write("child", 2))  # the child's own loop
            if parent_session is not None:
                _assert_other_session(parent_session, child_session)

        _in_child(child)
        # the parent's pool was left alone: same session, still working
        assert loop.run_until_complete(write("parent", 3)) == parent_session
        seen = present(loop.run_until_complete(saver.aget_tuple(config_for("child"))))
        assert seen.checkpoint["channel_values"] == {"step": 2}
    finally:
        loop.run_until_complete(saver.aclose())
        loop.close()


@pytest.mark.parametrize("store_backend", backend_params("sqlite", "postgres"), indirect=True)
def test_a_store_used_before_fork_works_in_the_child(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(ttl={"default_ttl": 60, "sweep_interval_minutes": 60})
    store.put(("users", "1"), "parent", {"text": "written before the fork"})
    parent_session = _session(store.db)

    def child() -> None:
        assert present(store.get(("users", "1"), "parent")).value == {
            "text": "written before the fork"
        }
        store.put(("users", "1"), "child", {"text": "written by the child"})
        assert [i.key for i in store.search(("users", "1"), query="child")][:1] == ["child"]
        _assert_other_session(parent_session, _session(store.db))

    _in_child(child)
    assert _session(store.db) == parent_session
    assert present(store.get(("users", "1"), "child")).value == {"text": "written by the child"}


def test_timed_in_memory_saver_restarts_its_sweeper_in_the_child() -> None:
    saver = TimedInMemorySaver(ttl_seconds=3600)
    try:
        head = saver.put(config_for("parent"), _checkpoint(1), {}, {"step": 1})
        assert saver.sweeper_running

        def child() -> None:
            assert not saver.sweeper_running
            found = present(saver.get_tuple(head))
            assert found.checkpoint["channel_values"] == {"step": 1}  # a copy
            saver.put(config_for("child"), _checkpoint(3), {}, {"step": 3})
            assert saver.sweeper_running

        _in_child(child)
        assert saver.get_tuple(config_for("child")) is None  # the child's memory is its own
    finally:
        saver.close()


def test_a_store_without_a_database_file_is_copied_into_the_child() -> None:
    store = create_store()
    store.put(("users", "1"), "parent", {"n": 1})

    def child() -> None:
        store.put(("users", "1"), "child", {"n": 2})
        assert {i.key for i in store.search(("users", "1"))} == {"parent", "child"}

    _in_child(child)
    assert store.get(("users", "1"), "child") is None


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("langgraph_checkpoint_agent_memory.db.first_use", "_SETUP_LOCK"),
        ("langgraph_checkpoint_agent_memory.settings", "_lock"),
        ("langgraph_checkpoint_agent_memory.telemetry", "_lock"),
        ("langgraph_checkpoint_agent_memory.rerank", "_lock"),
    ],
)
def test_module_locks_held_by_another_thread_are_free_in_the_child(module: str, name: str) -> None:
    lock = getattr(importlib.import_module(module), name)
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(5)
    try:

        def body() -> None:
            fresh = getattr(importlib.import_module(module), name)
            assert fresh.acquire(timeout=2), f"{module}.{name} is still held in the child"
            fresh.release()

        _in_child(body)
    finally:
        done.set()
        holder.join()
