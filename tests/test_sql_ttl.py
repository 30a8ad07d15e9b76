"""Durable TTL on SQLite and PostgreSQL: expiry, refresh on read, strategies, per-thread TTL,
late writes, restarts, the sweeper (thread and asyncio) and two sweeping processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import SQLSaver, ThreadDeletedError
from tests.helpers import FakeClock, Recorder, config_for, make_checkpoint, present

ROOT = Path(__file__).resolve().parent.parent


def put(saver: Any, thread: str, value: int, parent: Any = None, **configurable: Any) -> Any:
    config = config_for(thread, parent["configurable"]["checkpoint_id"] if parent else None)
    config["configurable"].update(configurable)
    checkpoint = make_checkpoint({"x": [value]}, step=value, version=value)
    return saver.put(config, checkpoint, {"step": value}, {"x": value})


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock(start=1_800_000_000.0)


def test_expired_thread_is_invisible_before_any_sweep(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    saver = make_saver(ttl_seconds=100, clock=wall, refresh_on_read=False, activity_precision=0)
    stored = put(saver, "t", 1)
    saver.put_writes(stored, [("x", 9)], "task")
    wall.advance(100)
    assert saver.get_tuple(config_for("t")) is not None
    wall.advance(1)
    assert saver.get_tuple(config_for("t")) is None
    assert saver.get_tuple(stored) is None
    assert list(saver.list(config_for("t"))) == []
    assert list(saver.list(None)) == []
    assert saver.get_delta_channel_history(config=stored, channels=["x"]) == {"x": {"writes": []}}
    assert saver.sweep() == ["t"]
    assert saver.sweep() == []


def test_reads_refresh_expiry_coalesced(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    saver = make_saver(ttl_seconds=100, clock=wall)
    put(saver, "t", 1)
    for _ in range(6):  # 6 x 60 s = 360 s, far past the TTL, but read every 60 s
        wall.advance(60)
        assert saver.get_tuple(config_for("t")) is not None
    updates = _count_thread_updates(saver)
    for _ in range(5):  # reads within a tenth of the TTL of the last refresh write nothing
        wall.advance(1)
        saver.get_tuple(config_for("t"))
    assert updates() == 0
    wall.advance(10)
    saver.get_tuple(config_for("t"))
    assert updates() == 1
    wall.advance(111)
    assert saver.get_tuple(config_for("t")) is None  # a read cannot revive an expired thread


def _count_thread_updates(saver: Any) -> Callable[[], int]:
    """Count statements that write the thread's activity row from now on."""
    sent = Recorder(saver)
    return lambda: sent.count("UPDATE am_threads", "INTO am_threads")


def test_coalesced_activity_expires_between_ttl_and_its_slack(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    """With activity_precision=0.1 a TTL of 100 s expires an idle thread after 100 to 110 s
    of true idleness, while writing the thread's row at most every 10 s."""
    saver = make_saver(ttl_seconds=100, clock=wall, refresh_on_read=False)
    first = put(saver, "t", 1)  # activity written: expires at +110
    wall.advance(5)
    put(saver, "t", 2, first)  # within 10 s of the last write: not written again
    wall.advance(100)  # 100 s after the last activity: must still be alive
    assert saver.get_tuple(config_for("t")) is not None
    wall.advance(5.001)  # 105 s idle, 110 s after the written activity
    assert saver.get_tuple(config_for("t")) is None
    with pytest.raises(ValueError, match="activity_precision"):
        make_saver(activity_precision=2)


def test_refresh_on_read_can_be_turned_off(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    saver = make_saver(ttl_seconds=100, clock=wall, refresh_on_read=False, activity_precision=0)
    put(saver, "t", 1)
    wall.advance(60)
    assert [t.config for t in saver.list(config_for("t"))]
    wall.advance(60)
    assert saver.get_tuple(config_for("t")) is None


def test_keep_latest_strategy_prunes_history_and_keeps_the_thread(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    saver = make_saver(ttl_seconds=100, clock=wall, strategy="keep_latest", activity_precision=0)
    parent = None
    for i in range(1, 5):
        parent = put(saver, "t", i, parent)
    saver.put_writes(present(parent), [("x", 42)], "task")
    wall.advance(500)
    assert present(saver.get_tuple(config_for("t"))).config == parent  # still readable
    assert saver.sweep() == ["t"]
    remaining = list(saver.list(config_for("t")))
    assert [t.config for t in remaining] == [parent]
    assert remaining[0].pending_writes == [("task", "x", 42)]
    assert remaining[0].checkpoint["channel_values"] == {"x": [4]}
    assert saver.sweep() == []  # no expiry until the next activity
    put(saver, "t", 5, parent)  # a write continues the thread
    wall.advance(101)
    assert saver.sweep() == ["t"]


def test_per_thread_ttl_overrides_the_saver(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    saver = make_saver(ttl_seconds=1000, clock=wall, activity_precision=0)
    put(saver, "short", 1, ttl_seconds=10)
    put(saver, "default", 1)
    put(saver, "forever", 1, ttl_seconds=0)
    wall.advance(11)
    assert saver.get_tuple(config_for("short")) is None
    assert saver.get_tuple(config_for("default")) is not None
    wall.advance(10_000)
    assert saver.get_tuple(config_for("forever")) is not None
    assert sorted(saver.sweep()) == ["default", "short"]
    with pytest.raises(ValueError, match="ttl_seconds"):
        put(saver, "bad", 1, ttl_seconds=-3)


def test_late_writes_never_resurrect(make_saver: Callable[..., SQLSaver], wall: FakeClock) -> None:
    saver = make_saver(ttl_seconds=100, clock=wall, activity_precision=0)
    first = put(saver, "t", 1)
    wall.advance(101)
    with pytest.raises(ThreadDeletedError, match="'t'"):
        put(saver, "t", 2, first)
    with pytest.raises(ThreadDeletedError):
        saver.put_writes(first, [("x", 3)], "task")
    assert saver.get_tuple(config_for("t")) is None
    fresh = put(saver, "t", 4)  # a fresh start is allowed, and drops the expired history
    assert [t.config for t in saver.list(config_for("t"))] == [fresh]

    saver.delete_thread("t")
    with pytest.raises(ThreadDeletedError):
        put(saver, "t", 5, fresh)
    assert list(saver.list(None)) == []


async def test_async_late_write_and_fresh_start(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    saver = make_saver(ttl_seconds=100, clock=wall, activity_precision=0)
    checkpoint = make_checkpoint({"x": [1]})
    first = await saver.aput(config_for("t"), checkpoint, {"step": 1}, {"x": 1})
    await saver.adelete_thread("t")
    with pytest.raises(ThreadDeletedError):
        await saver.aput_writes(first, [("x", 2)], "task")
    again = await saver.aput(config_for("t"), make_checkpoint({"x": [3]}, step=3), {}, {"x": 3})
    assert present(await saver.aget_tuple(config_for("t"))).config == again


def test_ttl_survives_a_restart(make_saver: Callable[..., SQLSaver], wall: FakeClock) -> None:
    first = make_saver(ttl_seconds=100, clock=wall, activity_precision=0)
    put(first, "old", 1)
    put(first, "young", 1, ttl_seconds=1000)
    first.close()
    wall.advance(150)
    second = make_saver(
        ttl_seconds=100, clock=wall, activity_precision=0
    )  # a new process on the same database
    assert second.get_tuple(config_for("old")) is None
    assert second.get_tuple(config_for("young")) is not None
    assert second.sweep() == ["old"]


def test_background_sweeper_thread(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver(ttl_seconds=1, sweep_interval_seconds=0.05, refresh_on_read=False)
    put(saver, "t", 1)
    assert saver.sweeper_running
    deadline = time.monotonic() + 10
    while _thread_rows(saver) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _thread_rows(saver) == 0
    thread = present(saver._sweeping.sweeper)._thread
    saver.close()
    assert not thread.is_alive() and not saver.sweeper_running


async def test_background_sweeper_task(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver(ttl_seconds=1, sweep_interval_seconds=0.05, refresh_on_read=False)
    await saver.aput(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    task = saver._sweeping.task
    assert task is not None and not task.done()
    deadline = time.monotonic() + 10
    while await asyncio.to_thread(_thread_rows, saver) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await asyncio.to_thread(_thread_rows, saver) == 0
    await saver.aclose()
    assert task.done() and not saver.sweeper_running


async def test_stopping_ends_the_sweep_task_even_when_a_cancellation_is_swallowed() -> None:
    # psycopg_pool before 3.3 can swallow a cancellation that arrives while it hands a
    # connection over: the sweep then returns normally, and the task must still end.
    from langgraph_checkpoint_agent_memory.checkpoint.lifetime import SweeperHookup

    hookup = SweeperHookup("sweeper-under-test", 0)
    sweeps = 0

    async def sweep() -> None:
        nonlocal sweeps
        sweeps += 1
        hookup.stop()  # what aclose() does while this sweep is in flight
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass  # swallowed, as such a pool does

    task = hookup.start_task(sweep)
    await asyncio.wait({task}, timeout=60)
    assert task.done() and not task.cancelled()
    assert sweeps == 1 and not hookup.running


def _thread_rows(saver: Any) -> int:
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    def plan() -> Any:
        [rows] = yield Batch([Stmt(Sql("SELECT COUNT(*) FROM am_checkpoints"), fetch=True)])
        return rows[0][0]

    return int(saver.db.run(plan()))


SWEEP_SCRIPT = """
import json, sys
from langgraph_checkpoint_agent_memory import create_checkpointer
saver = create_checkpointer(60, url=sys.argv[1], sweep_batch=7)
print(json.dumps(saver.sweep()))
saver.close()
"""


def test_two_processes_sweep_each_thread_exactly_once(
    make_saver: Callable[..., SQLSaver], database_url: str
) -> None:
    past = FakeClock(start=time.time() - 10_000)
    # this process's own sweeper must not get there first (6 s, on a loaded machine)
    saver = make_saver(ttl_seconds=60, clock=past, sweep_interval_seconds=3600)
    expected = {f"t{i}" for i in range(120)}
    for thread in expected:
        put(saver, thread, 1)
    put(make_saver(ttl_seconds=60), "alive", 1)  # written now: not expired
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEP_SCRIPT, database_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(2)
    ]
    swept = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        swept.append(json.loads(out.strip().splitlines()[-1]))
    assert set(swept[0]).isdisjoint(swept[1])
    assert set(swept[0]) | set(swept[1]) == expected
    assert len(swept[0]) + len(swept[1]) == len(expected)


def test_purging_tombstones_removes_rows_left_under_them(
    make_saver: Callable[..., SQLSaver], wall: FakeClock
) -> None:
    """A write that raced a sweep can leave rows under a tombstone: invisible while it
    stands, and gone with it when it is purged, never resurrected."""
    from langgraph_checkpoint_agent_memory.checkpoint.threads import TOMBSTONE_SECONDS
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    saver = make_saver(ttl_seconds=100, clock=wall, activity_precision=0)
    put(saver, "t", 1)
    saver.delete_thread("t")

    def plan(sql: str) -> Any:
        [rows] = yield Batch([Stmt(Sql(sql), fetch=True)])
        return rows

    # the racing write's leftovers: a checkpoint row the deletion did not see
    other = make_saver(clock=wall, activity_precision=0)
    put(other, "u", 1)

    def move() -> Any:
        yield Batch(
            [Stmt(Sql("UPDATE am_checkpoints SET thread_id = 't' WHERE thread_id = 'u'"))],
            write=True,
        )

    saver.db.run(move())
    assert saver.get_tuple(config_for("t")) is None  # invisible under the tombstone
    wall.advance(TOMBSTONE_SECONDS + 1)
    saver.sweep()
    assert (
        saver.db.run(plan("SELECT COUNT(*) FROM am_checkpoints WHERE thread_id = 't'"))[0][0] == 0
    )
    assert saver.get_tuple(config_for("t")) is None


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_thread_started_by_a_graph_expires(
    make_saver: Callable[..., SQLSaver], wall: FakeClock, mode: str
) -> None:
    """A graph reads a new thread before its first write; that read must not count as the
    thread's recorded activity, or a short conversation would never expire."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import START, MessagesState, StateGraph

    saver = make_saver(ttl_seconds=100, clock=wall)
    graph = StateGraph(MessagesState)
    graph.add_node("reply", lambda s: {"messages": [AIMessage("ok")]})
    graph.add_edge(START, "reply")
    app = graph.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "short"}}
    if mode == "sync":
        app.invoke({"messages": [HumanMessage("hi")]}, config)
        assert saver.get_tuple(config) is not None
        wall.advance(200)
        assert saver.get_tuple(config) is None
        assert saver.sweep() == ["short"]
        return
    try:
        await app.ainvoke({"messages": [HumanMessage("hi")]}, config)
        assert await saver.aget_tuple(config) is not None
        wall.advance(200)
        assert await saver.aget_tuple(config) is None
        assert await saver.asweep() == ["short"]
    finally:
        await saver.aclose()  # the async pool belongs to this test's event loop


def test_the_longest_ttl_is_the_schema_s() -> None:
    """The lifetime module keeps its own copy, so that checking a TTL loads no SQL."""
    from langgraph_checkpoint_agent_memory.checkpoint import lifetime
    from langgraph_checkpoint_agent_memory.db import schema

    assert lifetime.MAX_TTL_SECONDS == schema.MAX_TTL_SECONDS
