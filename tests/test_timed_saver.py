"""TimedInMemorySaver: expiry, activity, the sweeper's lifecycle, thread management."""

from __future__ import annotations

import ast
import gc
import inspect
import operator
import random
import threading
import time
import weakref
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import (
    ConfigurationError,
    ThreadDeletedError,
    TimedInMemorySaver,
)
from langgraph_checkpoint_agent_memory.checkpoint import lifetime, timed
from tests.helpers import FakeClock, config_for, make_checkpoint, present, timed_contents

_versions = iter(range(1, 10**9))


def put(
    saver: BaseCheckpointSaver[str],
    thread_id: str,
    values: dict[str, Any] | None = None,
    parent: RunnableConfig | None = None,
    *,
    run_id: str | None = None,
) -> RunnableConfig:
    """Store a checkpoint whose channels all get a new version, as a real step would."""
    config = config_for(thread_id, parent["configurable"]["checkpoint_id"] if parent else None)
    checkpoint = make_checkpoint(values, version=next(_versions))
    metadata = CheckpointMetadata(source="loop", step=0)
    if run_id is not None:
        metadata["run_id"] = run_id
    return saver.put(config, checkpoint, metadata, checkpoint["channel_versions"])


def sweeper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("TimedInMemorySaver-sweeper")]


# -- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, "60", True])
def test_rejects_a_ttl_that_is_not_a_positive_whole_number(bad: Any) -> None:
    # the package's own error (a ValueError too), whatever is wrong with the value
    with pytest.raises(ConfigurationError, match="ttl_seconds"):
        TimedInMemorySaver(bad)


def test_is_a_checkpoint_saver_with_documented_default_interval() -> None:
    assert isinstance(TimedInMemorySaver(3600), BaseCheckpointSaver)
    assert TimedInMemorySaver(3600).sweep_interval_seconds == 60
    assert TimedInMemorySaver(30).sweep_interval_seconds == 3
    assert TimedInMemorySaver(2).sweep_interval_seconds == 0.5
    assert TimedInMemorySaver(30, sweep_interval_seconds=7).sweep_interval_seconds == 7


# -- expiry and activity --------------------------------------------------------------------


def test_idle_thread_is_invisible_at_once_before_any_sweep(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    stored = put(saver, "t1", {"a": 1})
    clock.advance(10)
    assert saver.get_tuple(config_for("t1")) is not None  # exactly ttl: still alive
    clock.advance(10.001)
    assert saver.get_tuple(config_for("t1")) is None
    assert saver.get_tuple(stored) is None
    assert list(saver.list(config_for("t1"))) == []
    assert list(saver.list(None)) == []
    saver.close()


def test_reads_and_writes_count_as_activity(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    stored = put(saver, "t1", {"a": 1})
    for read in (
        lambda: saver.get_tuple(config_for("t1")),
        lambda: list(saver.list(config_for("t1"))),
        lambda: saver.put_writes(stored, [("a", 2)], "task"),
    ):
        clock.advance(8)
        read()
    clock.advance(8)  # 32 s after the put, 8 s after the last activity
    assert saver.get_tuple(config_for("t1")) is not None
    saver.close()


async def test_async_reads_count_as_activity(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    stored = await saver.aput(config_for("t1"), make_checkpoint({"a": 1}), {}, {"a": 1})
    for _ in range(3):
        clock.advance(8)
        assert await saver.aget_tuple(config_for("t1")) is not None
    clock.advance(8)
    assert [t async for t in saver.alist(config_for("t1"))]
    await saver.aput_writes(stored, [("a", 5)], "task")
    clock.advance(11)
    assert await saver.aget_tuple(config_for("t1")) is None
    saver.close()


def test_reads_of_unknown_threads_create_nothing(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    assert saver.get_tuple(config_for("ghost")) is None
    assert saver.get_tuple(config_for("ghost", "some-id")) is None
    assert list(saver.list(config_for("ghost"))) == []
    assert saver.get_delta_channel_history(config=config_for("ghost"), channels=["x"]) == {
        "x": {"writes": []}
    }
    assert saver._life.last_used == {} and saver._threads == {}
    assert not saver.sweeper_running  # reads never start the sweeper


def test_sweep_frees_memory_of_expired_threads_only(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    old = put(saver, "old", {"a": "x" * 100})
    saver.put_writes(old, [("a", 1)], "task")
    clock.advance(6)
    young = put(saver, "young", {"a": "y"})
    saver.put_writes(young, [("a", 2)], "task")
    clock.advance(6)
    assert {k[0] for k in timed_contents(saver).blobs} == {"old", "young"}
    assert saver.sweep() == 1
    held = timed_contents(saver)
    assert held.threads == {"young"} and "old" not in saver._threads
    assert {k[0] for k in held.blobs} == {k[0] for k in held.writes} == {"young"}
    assert present(saver.get_tuple(config_for("young"))).pending_writes == [("task", "a", 2)]
    saver.close()


def test_late_write_into_expired_thread_is_refused_but_fresh_start_allowed(
    clock: FakeClock,
) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    first = put(saver, "t1", {"a": 1})
    clock.advance(11)
    with pytest.raises(ThreadDeletedError, match="t1"):
        put(saver, "t1", {"a": 2}, parent=first)
    with pytest.raises(ThreadDeletedError):
        saver.put_writes(first, [("a", 3)], "task")
    assert saver.get_tuple(config_for("t1")) is None  # nothing was resurrected
    fresh = put(saver, "t1", {"a": 4})
    assert present(saver.get_tuple(config_for("t1"))).checkpoint["channel_values"] == {"a": 4}
    put(saver, "t1", {"a": 5}, parent=fresh)
    saver.close()


def test_late_write_after_delete_thread_is_refused(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    first = put(saver, "t1", {"a": 1})
    saver.delete_thread("t1")
    with pytest.raises(ThreadDeletedError):
        put(saver, "t1", {"a": 2}, parent=first)
    assert list(saver.list(None)) == []
    saver.close()


# -- sweeper lifecycle ----------------------------------------------------------------------


def test_sweeper_starts_lazily_and_close_stops_it() -> None:
    saver = TimedInMemorySaver(60, sweep_interval_seconds=0.05)
    assert not saver.sweeper_running
    put(saver, "t1")
    assert saver.sweeper_running
    thread = present(saver._sweeping.sweeper)._thread
    saver.close()
    assert not thread.is_alive()
    assert not saver.sweeper_running


def test_context_managers_stop_the_sweeper() -> None:
    with TimedInMemorySaver(60, sweep_interval_seconds=0.05) as saver:
        put(saver, "t1")
        thread = present(saver._sweeping.sweeper)._thread
    assert not thread.is_alive()


async def test_async_context_manager_stops_the_sweeper() -> None:
    async with TimedInMemorySaver(60, sweep_interval_seconds=0.05) as saver:
        await saver.aput(config_for("t1"), make_checkpoint(), {}, {})
        thread = present(saver._sweeping.sweeper)._thread
    thread.join(2)
    assert not thread.is_alive()


def test_garbage_collection_stops_the_sweeper() -> None:
    saver = TimedInMemorySaver(60, sweep_interval_seconds=30)
    put(saver, "t1")
    thread = present(saver._sweeping.sweeper)._thread
    ref = weakref.ref(saver)
    del saver
    gc.collect()
    assert ref() is None
    thread.join(2)
    assert not thread.is_alive()


def test_real_sweeper_evicts_in_the_background() -> None:
    saver = TimedInMemorySaver(1, sweep_interval_seconds=0.05)
    put(saver, "t1", {"a": 1})
    deadline = time.monotonic() + 5
    while "t1" in timed_contents(saver).threads and time.monotonic() < deadline:
        time.sleep(0.05)
    held = timed_contents(saver)
    assert not held.threads and not held.checkpoints and not held.blobs and not saver._threads
    saver.close()


def test_many_savers_leave_no_threads_behind() -> None:
    before = len(sweeper_threads())
    for _ in range(20):
        with TimedInMemorySaver(60, sweep_interval_seconds=10) as saver:
            put(saver, "t")
    assert len(sweeper_threads()) == before


# -- concurrency ----------------------------------------------------------------------------


def test_concurrent_writers_and_sweeper_never_half_evict() -> None:
    """Writers on many threads while an aggressive sweeper runs: a thread is either whole or
    gone, and threads kept active lose nothing."""
    clock = FakeClock()
    saver = TimedInMemorySaver(5, sweep_interval_seconds=0.001, clock=clock)
    errors: list[BaseException] = []
    active = [f"active-{i}" for i in range(8)]
    idle = [f"idle-{i}" for i in range(40)]

    def writer(thread_id: str, rounds: int) -> None:
        try:
            parent = None
            for i in range(rounds):
                try:
                    parent = put(saver, thread_id, {"n": i}, parent=parent)
                    saver.put_writes(parent, [("n", -i)], f"task-{i}")
                except ThreadDeletedError:
                    parent = None  # expired while idle: start afresh, as a graph would
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    for thread_id in idle:
        writer(thread_id, 3)
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            clock.advance(0.5)
            time.sleep(0.0005)

    workers = [threading.Thread(target=writer, args=(t, 200)) for t in active]
    tick = threading.Thread(target=ticker)
    tick.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    tick.join()
    clock.advance(1)
    assert not errors
    saver.sweep()
    held = timed_contents(saver)
    with saver._lock:
        for thread_id in active + idle:
            present = thread_id in held.threads
            owns_keys = any(k[0] == thread_id for k in held.blobs) or any(
                k[0] == thread_id for k in held.writes
            )
            assert present == (thread_id in saver._threads) == (thread_id in saver._life.last_used)
            if not present:
                assert not owns_keys, f"{thread_id} was half evicted"
    for thread_id in active:
        tup = saver.get_tuple(config_for(thread_id))
        if tup is not None:  # whole: its last checkpoint and its writes are readable
            n = tup.checkpoint["channel_values"]["n"]
            assert tup.pending_writes == [(f"task-{n}", "n", -n)]
    saver.close()


# -- thread management ----------------------------------------------------------------------


def test_delete_thread_touches_only_that_thread(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    for t in ("a", "b"):
        stored = put(saver, t, {"x": t})
        saver.put_writes(stored, [("x", 1)], "task")
    saver.delete_thread("a")
    assert saver.get_tuple(config_for("a")) is None
    assert present(saver.get_tuple(config_for("b"))).checkpoint["channel_values"] == {"x": "b"}
    held = timed_contents(saver)
    assert {k[0] for k in held.blobs} == {"b"} and {k[0] for k in held.writes} == {"b"}
    assert set(saver._life.last_used) == {"b"}
    saver.close()


def test_copy_thread_copies_everything_and_refreshes_activity(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    c1 = put(saver, "src", {"x": 1}, run_id="r1")
    c2 = put(saver, "src", {"x": 2}, parent=c1, run_id="r1")
    saver.put_writes(c2, [("x", 3)], "task")
    clock.advance(9)
    saver.copy_thread("src", "dst")
    clock.advance(9)  # src was touched by the copy too
    copied = list(saver.list(config_for("dst")))
    assert [t.checkpoint["channel_values"] for t in copied] == [{"x": 2}, {"x": 1}]
    assert copied[0].pending_writes == [("task", "x", 3)]
    saver.delete_for_runs(["r1"])  # the run index follows the copy
    assert list(saver.list(config_for("dst"))) == []
    assert list(saver.list(config_for("src"))) == []
    assert not timed_contents(saver).blobs
    saver.close()


def test_delete_for_runs_removes_checkpoints_writes_and_orphan_blobs(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(10, clock=clock)
    c1 = put(saver, "t", {"x": "kept"}, run_id="keep")
    saver.put_writes(c1, [("x", 1)], "task")
    c1_version = present(saver.get_tuple(c1)).checkpoint["channel_versions"]["x"]
    c2 = put(saver, "t", {"x": "gone"}, parent=c1, run_id="drop")
    saver.put_writes(c2, [("x", 2)], "task")
    saver.delete_for_runs(["drop", "unknown"])
    remaining = list(saver.list(config_for("t")))
    assert [t.metadata["run_id"] for t in remaining] == ["keep"]
    held = timed_contents(saver)
    assert set(held.blobs) == {("t", "", "x", c1_version)}
    assert held.writes == {("t", "", c1["configurable"]["checkpoint_id"])}
    saver.close()


def test_prune_rejects_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="strategy"):
        TimedInMemorySaver(10).prune(["t"], strategy="everything")


def extend(state: list[int], batches: list[list[int]]) -> list[int]:
    return state + [x for batch in batches for x in batch]


class DeltaState(TypedDict):
    items: Annotated[list[int], DeltaChannel(extend, snapshot_frequency=4)]


def delta_graph(saver: Any) -> Any:
    builder = StateGraph(DeltaState)
    builder.add_node("add", lambda s: {"items": [len(s["items"])]})
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


def test_prune_keep_latest_keeps_delta_channel_ancestors() -> None:
    saver = TimedInMemorySaver(3600)
    graph = delta_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "d"}}
    for _ in range(5):
        graph.invoke({"items": []}, config)
    latest = present(saver.get_tuple(config))
    assert latest.metadata["counters_since_delta_snapshot"]  # the latest is not a snapshot
    before = graph.get_state(config).values["items"]
    assert before == [0, 1, 2, 3, 4]
    total = len(list(saver.list(config)))
    saver.prune(["d"], strategy="keep_latest")
    kept = list(saver.list(config))
    assert 1 < len(kept) < total  # back to the snapshot ancestor, not all history
    assert "items" in kept[-1].checkpoint["channel_values"]
    assert graph.get_state(config).values["items"] == before
    graph.invoke({"items": []}, config)
    assert graph.get_state(config).values["items"] == [*before, 5]
    saver.prune(["d"], strategy="delete")
    assert graph.get_state(config).values == {}
    saver.close()


def test_prune_keep_latest_without_delta_channels_keeps_one_per_namespace() -> None:
    saver = TimedInMemorySaver(3600)
    first = put(saver, "t", {"x": 1})
    second = put(saver, "t", {"x": 2}, parent=first)
    saver.put_writes(second, [("x", 9)], "task")
    put(saver, "other", {"x": 1})
    saver.prune(["t"], strategy="keep_latest")
    assert [t.config for t in saver.list(config_for("t"))] == [second]
    assert present(saver.get_tuple(second)).pending_writes == [("task", "x", 9)]
    assert len(list(saver.list(config_for("other")))) == 1
    saver.close()


# -- a real compiled graph ------------------------------------------------------------------


class Counter(TypedDict):
    count: Annotated[int, operator.add]


def counter_graph(saver: Any) -> Any:
    builder = StateGraph(Counter)
    builder.add_node("inc", lambda s: {"count": 1})
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    return builder.compile(checkpointer=saver)


def test_graph_state_expires_after_ttl_and_survives_while_read(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(30, clock=clock)
    graph = counter_graph(saver)
    kept = {"configurable": {"thread_id": "kept"}}
    idle = {"configurable": {"thread_id": "idle"}}
    graph.invoke({"count": 0}, kept)
    graph.invoke({"count": 0}, idle)
    for _ in range(4):  # 100 s in all, but "kept" is read every 25 s
        clock.advance(25)
        assert graph.get_state(kept).values == {"count": 1}
    assert graph.get_state(idle).values == {}
    assert graph.invoke({"count": 0}, idle) == {"count": 1}  # a fresh start
    assert graph.invoke({"count": 0}, kept) == {"count": 2}
    saver.close()


async def test_async_graph_on_timed_saver(clock: FakeClock) -> None:
    saver = TimedInMemorySaver(30, clock=clock)
    graph = counter_graph(saver)
    config = {"configurable": {"thread_id": "a"}}
    assert await graph.ainvoke({"count": 0}, config) == {"count": 1}
    assert await graph.ainvoke({"count": 0}, config) == {"count": 2}
    clock.advance(31)
    assert (await graph.aget_state(config)).values == {}
    saver.close()


def test_randomized_graph_threads_expire_independently() -> None:
    clock = FakeClock()
    saver = TimedInMemorySaver(10, clock=clock)
    graph = counter_graph(saver)
    last_seen: dict[str, float] = {}
    counts: dict[str, int] = {}
    rng = random.Random(7)
    for _ in range(200):
        thread_id = f"t{rng.randrange(6)}"
        clock.advance(rng.uniform(0, 4))
        now = clock()
        expected_alive = thread_id in last_seen and now - last_seen[thread_id] <= 10
        config = {"configurable": {"thread_id": thread_id}}
        counts[thread_id] = counts.get(thread_id, 0) + 1 if expected_alive else 1
        assert graph.invoke({"count": 0}, config) == {"count": counts[thread_id]}
        last_seen[thread_id] = clock()
    saver.close()


# -- public LangGraph APIs only ---------------------------------------------------------------


def foreign_private_names(source: str) -> set[str]:
    """``_name`` attributes a module reads or writes without defining them itself.

    Defined: methods and nested functions, names assigned as ``<anything>._name = ...``,
    and class-level fields. Dunder names (``__enter__``) are Python's protocol, not private.
    """
    tree = ast.parse(source)
    defined: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.Attribute):
            if isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            used.add(node.attr)
    return {
        name
        for name in used - defined
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
    }


def test_the_checker_finds_a_reach_into_a_private_attribute() -> None:
    reach = (
        "class S(InMemorySaver):\n"
        "    def get(self, t, ns, cid):\n"
        "        self._mine = 1\n"
        "        return self._ordered_writes(t, ns, cid), self._mine, self.__class__\n"
    )
    assert foreign_private_names(reach) == {"_ordered_writes"}


@pytest.mark.parametrize("module", [timed, lifetime])
def test_no_private_attribute_of_another_class_is_touched(module: Any) -> None:
    assert foreign_private_names(inspect.getsource(module)) == set()


def langgraph_private_names() -> set[str]:
    """Private attributes of LangGraph's saver classes (and of ``InMemorySaver``'s layout)."""
    names = {"storage", "writes", "blobs", "stack"}
    for cls in (BaseCheckpointSaver, InMemorySaver):
        names |= {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    return names


class Guarded(TimedInMemorySaver):
    """Raises on any use of a LangGraph private attribute, through ``self`` or its type."""

    def __getattribute__(self, name: str) -> Any:
        if name in langgraph_private_names():
            raise AssertionError(f"TimedInMemorySaver used LangGraph's private {name!r}")
        return super().__getattribute__(name)


async def test_every_method_runs_on_public_langgraph_apis_alone(clock: FakeClock) -> None:
    assert "_ordered_writes" in langgraph_private_names()  # the guard knows what to refuse
    assert InMemorySaver not in TimedInMemorySaver.__mro__
    saver = Guarded(10, clock=clock)
    graph = delta_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "d", "checkpoint_ns": ""}}
    for _ in range(5):
        graph.invoke({"items": []}, config)
    await graph.ainvoke({"items": []}, config)
    assert graph.get_state(config).values["items"] == [0, 1, 2, 3, 4, 5]
    stored = put(saver, "t", {"x": 1}, run_id="r")
    saver.put_writes(stored, [("x", 2)], "task")
    await saver.aput_writes(stored, [("x", 3)], "other")
    assert present(saver.get_tuple(stored)).pending_writes == [("other", "x", 3), ("task", "x", 2)]
    assert len(list(saver.list(None, filter={"run_id": "r"}))) == 1
    assert len([t async for t in saver.alist(config, limit=2)]) == 2
    saver.copy_thread("d", "d2")
    await saver.acopy_thread("t", "t2")
    saver.prune(["d"], keep_last=2)
    await saver.aprune(["d2"], strategy="delete")
    assert graph.get_state(config).values["items"] == [0, 1, 2, 3, 4, 5]
    saver.delete_for_runs(["r"])
    await saver.adelete_for_runs(["r"])
    assert saver.get_tuple(stored) is None
    saver.delete_thread("d")
    await saver.adelete_thread("t2")
    clock.advance(11)
    assert saver.sweep() >= 1
    clone = saver.with_allowlist([("x",)])
    assert isinstance(clone, TimedInMemorySaver)  # LangGraph types the clone as the base class
    with clone:
        assert clone.get_tuple(config) is None
    saver.close()


def test_the_master_key_variable_is_the_crypto_package_s() -> None:
    """The timed saver reads it itself, so that no crypto module loads while it is unset."""
    from langgraph_checkpoint_agent_memory.crypto import config

    assert timed.MASTER_KEY_ENV == config.MASTER_KEY_ENV
