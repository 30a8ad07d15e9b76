"""Retention: keeping the last N checkpoints of each thread namespace, in ``prune`` and in the
TTL sweep's ``keep_latest`` strategy, on SQLite, PostgreSQL and ``TimedInMemorySaver``. Every
checkpoint kept reads back whole: appended lists keep their bases, ``DeltaChannel`` values
their ancestors, whatever process reads them."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, MessagesState, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import ConfigurationError, SQLSaver, TimedInMemorySaver
from tests.helpers import FakeClock, sql_checkpointer, timed_contents


def chat_graph(saver: Any) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def extend(state: list[Any], batches: list[Any]) -> list[Any]:
    return state + [x for batch in batches for x in batch]


class DeltaState(TypedDict):
    items: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=4)]
    other: Annotated[list[Any], DeltaChannel(extend, snapshot_frequency=3)]


def delta_graph(saver: Any) -> Any:
    builder = StateGraph(DeltaState)
    builder.add_node(
        "add", lambda s: {"items": [len(s["items"])], "other": [f"o{len(s['other'])}"]}
    )
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


def states(graph: Any, config: Any) -> dict[str, Any]:
    """Every checkpoint of the thread as the graph reads it back: id -> state values."""
    return {
        s.config["configurable"]["checkpoint_id"]: s.values for s in graph.get_state_history(config)
    }


def talk(graph: Any, config: Any, turns: int) -> None:
    for turn in range(turns):
        graph.invoke({"messages": [HumanMessage(f"question {turn} " * 5)]}, config)


def grow(graph: Any, config: Any, steps: int) -> None:
    for _ in range(steps):
        graph.invoke({"items": [], "other": []}, config)


def assert_kept_whole(before: dict[str, Any], after: dict[str, Any], newest: int) -> None:
    """The ``newest`` latest checkpoints survived, and every survivor reads back as before."""
    ids = sorted(before, reverse=True)
    assert set(ids[:newest]) <= set(after)
    assert set(after) <= set(before)
    for checkpoint_id, values in after.items():
        assert values == before[checkpoint_id], checkpoint_id


# -- SQLite and PostgreSQL -------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 3, 7])
def test_prune_keeps_the_last_n_of_a_conversation_whole(
    make_saver: Callable[..., SQLSaver], keep: int
) -> None:
    saver = make_saver()
    config = {"configurable": {"thread_id": "chat"}}
    talk(chat_graph(saver), config, 12)  # 16 appends and more: full copies and deltas
    before = states(chat_graph(saver), config)
    saver.prune(["chat"], keep_last=keep)
    after = states(chat_graph(make_saver()), config)  # a new process: no list cache
    assert len(after) == keep  # no DeltaChannel: exactly the last N
    assert_kept_whole(before, after, keep)
    assert list(after) == sorted(before, reverse=True)[:keep]
    graph = chat_graph(make_saver())  # and the thread goes on from there
    graph.invoke({"messages": [HumanMessage("one more")]}, config)
    messages = graph.get_state(config).values["messages"]
    assert [m.content for m in messages[-2:]] == ["one more", "answer 25"]
    assert len(messages) == 26


@pytest.mark.parametrize("keep", [1, 2, 5])
def test_prune_keeps_delta_channel_ancestors_of_every_kept_checkpoint(
    make_saver: Callable[..., SQLSaver], keep: int
) -> None:
    saver = make_saver()
    config = {"configurable": {"thread_id": "d"}}
    grow(delta_graph(saver), config, 9)
    before = states(delta_graph(saver), config)
    saver.prune(["d"], keep_last=keep)
    after = states(delta_graph(make_saver()), config)
    assert_kept_whole(before, after, keep)
    assert len(after) < len(before)
    graph = delta_graph(make_saver())
    grow(graph, config, 1)
    assert graph.get_state(config).values["items"] == list(range(10))


def test_the_saver_default_and_the_sweep_keep_the_last_n(
    make_saver: Callable[..., SQLSaver],
) -> None:
    wall = FakeClock(start=1_800_000_000.0)
    saver = make_saver(
        ttl_seconds=100, clock=wall, strategy="keep_latest", keep_last=3, activity_precision=0
    )
    assert saver.keep_last == 3 and "keep_last=3" in repr(saver)
    config = {"configurable": {"thread_id": "idle"}}
    talk(chat_graph(saver), config, 5)
    grow(delta_graph(saver), {"configurable": {"thread_id": "delta"}}, 6)
    before = states(chat_graph(saver), config)
    before_delta = states(delta_graph(saver), {"configurable": {"thread_id": "delta"}})
    wall.advance(101)
    assert sorted(saver.sweep()) == ["delta", "idle"]
    fresh = make_saver(strategy="keep_latest", clock=wall)
    after = states(chat_graph(fresh), config)
    assert len(after) == 3
    assert_kept_whole(before, after, 3)
    after_delta = states(delta_graph(fresh), {"configurable": {"thread_id": "delta"}})
    assert_kept_whole(before_delta, after_delta, 3)
    assert saver.sweep() == []  # pruned threads stay, with no expiry until used again
    saver.prune(["idle"])  # prune keeps the saver's keep_last ...
    assert len(states(chat_graph(fresh), config)) == 3
    saver.prune(["idle"], keep_last=1)  # ... unless told otherwise
    assert len(states(chat_graph(fresh), config)) == 1


async def test_async_prune_keeps_the_last_n(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver(keep_last=2)
    config = {"configurable": {"thread_id": "a"}}
    graph = chat_graph(saver)
    for turn in range(4):
        await graph.ainvoke({"messages": [HumanMessage(f"q{turn}")]}, config)
    before = states(graph, config)
    await saver.aprune(["a"])
    reader = make_saver()
    after = {
        s.config["configurable"]["checkpoint_id"]: s.values
        async for s in chat_graph(reader).aget_state_history(config)
    }
    assert len(after) == 2
    assert_kept_whole(before, after, 2)
    await saver.aclose()  # the async pools belong to this test's event loop
    await reader.aclose()


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_keep_last_is_a_whole_number_of_at_least_one(
    make_saver: Callable[..., SQLSaver], bad: Any
) -> None:
    with pytest.raises(ConfigurationError, match="keep_last"):
        make_saver(keep_last=bad)
    saver = make_saver()
    with pytest.raises(ValueError, match="keep_last"):
        saver.prune(["t"], keep_last=bad)
    with pytest.raises(ValueError, match="keep_last"):
        TimedInMemorySaver(60, keep_last=bad)


# -- TimedInMemorySaver ----------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 4])
def test_timed_saver_keeps_the_last_n(keep: int) -> None:
    saver = TimedInMemorySaver(3600, keep_last=keep)
    chat, delta = {"configurable": {"thread_id": "c"}}, {"configurable": {"thread_id": "d"}}
    talk(chat_graph(saver), chat, 6)
    grow(delta_graph(saver), delta, 9)
    before_chat, before_delta = states(chat_graph(saver), chat), states(delta_graph(saver), delta)
    saver.prune(["c", "d"])
    after_chat = states(chat_graph(saver), chat)
    assert len(after_chat) == keep
    assert_kept_whole(before_chat, after_chat, keep)
    after_delta = states(delta_graph(saver), delta)
    assert_kept_whole(before_delta, after_delta, keep)
    assert len(after_delta) < len(before_delta)
    held = timed_contents(saver)
    referenced = {
        (t, ns, ch, v)
        for (t, ns, _), body in held.checkpoints.items()
        for ch, v in saver.serde.loads_typed(body)["channel_versions"].items()
    }
    assert set(held.blobs) <= referenced  # no blob outlives the checkpoints that use it
    saver.prune(["d"], keep_last=1)
    assert_kept_whole(before_delta, states(delta_graph(saver), delta), 1)
    saver.close()


async def test_timed_saver_async_prune() -> None:
    saver = TimedInMemorySaver(3600)
    config = {"configurable": {"thread_id": "c"}}
    talk(chat_graph(saver), config, 3)
    await saver.aprune(["c"], keep_last=2)
    assert len(states(chat_graph(saver), config)) == 2
    saver.close()


def test_create_checkpointer_passes_keep_last(tmp_path: Any) -> None:
    from langgraph_checkpoint_agent_memory import create_checkpointer
    from langgraph_checkpoint_agent_memory.checkpoint.in_memory import CheckedInMemorySaver

    sql = sql_checkpointer(f"sqlite:///{tmp_path / 'k.db'}", keep_last=4)
    assert sql.keep_last == 4
    sql.close()
    timed = create_checkpointer(60, keep_last=2)
    assert isinstance(timed, TimedInMemorySaver) and timed.keep_last == 2
    timed.close()
    plain = create_checkpointer(keep_last=2)  # no TTL: LangGraph's saver, nothing to prune
    assert type(plain) is CheckedInMemorySaver
    with pytest.raises(ConfigurationError, match="keep_last"):
        create_checkpointer(keep_last=0)  # checked even when it has nothing to do


# -- what is stored, and what a sweep would free ---------------------------------------------


def by_id(infos: Any) -> dict[str, Any]:
    return {i.thread_id: i for i in infos}


def test_threads_lists_counts_bytes_activity_and_expiry(
    make_saver: Callable[..., SQLSaver],
) -> None:
    wall = FakeClock(start=1_800_000_000.0)
    saver = make_saver(ttl_seconds=100, clock=wall, activity_precision=0)
    graph = chat_graph(saver)
    talk(graph, {"configurable": {"thread_id": "small"}}, 1)
    wall.advance(10)
    big = {"configurable": {"thread_id": "big"}}
    noise = base64.b64encode(os.urandom(60_000)).decode()  # 80,000 characters compression keeps
    graph.invoke({"messages": [HumanMessage(noise)]}, big)
    talk(graph, big, 2)
    wall.advance(10)
    forever = {"configurable": {"thread_id": "forever", "ttl_seconds": 0}}
    talk(graph, forever, 4)
    talk(graph, {"configurable": {"thread_id": "gone"}}, 1)
    saver.delete_thread("gone")
    wall.advance(85)  # "small" was last used 105 s ago: expired

    infos = saver.threads()
    assert [i.thread_id for i in infos] == ["big", "forever", "small"]  # most bytes first
    got = by_id(infos)
    reader = make_saver(strategy="keep_latest")  # one that still reads expired threads
    for name in ("small", "big", "forever"):
        config: RunnableConfig = {"configurable": {"thread_id": name}}
        assert got[name].checkpoints == len(list(reader.list(config)))
    assert got["big"].bytes > 50_000 > got["forever"].bytes > got["small"].bytes > 0
    assert (got["small"].status, got["big"].status, got["forever"].status) == (
        "expired",
        "live",
        "live",
    )
    assert got["small"].last_active == 1_800_000_000.0
    assert got["small"].expires_at == 1_800_000_100.0 and got["small"].ttl_seconds == 100
    assert got["forever"].expires_at is None and got["forever"].ttl_seconds is None
    assert [i.thread_id for i in saver.threads(sort="checkpoints")] == ["forever", "big", "small"]
    assert [i.thread_id for i in saver.threads(sort="last_active")] == ["forever", "big", "small"]
    assert [i.thread_id for i in saver.threads(sort="expires_at")] == ["small", "big", "forever"]
    assert [i.thread_id for i in saver.threads(sort="thread_id", limit=2)] == ["big", "forever"]
    assert saver.threads(limit=0) == []
    assert got["big"].as_dict()["thread_id"] == "big"
    with pytest.raises(ValueError, match="order"):
        saver.threads(sort="size")  # type: ignore[arg-type]  # an unknown order, on purpose
    with pytest.raises(ValueError, match="limit"):
        saver.threads(limit=-1)


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_sweep_preview_says_what_the_sweep_then_does(
    make_saver: Callable[..., SQLSaver], strategy: str
) -> None:
    wall = FakeClock(start=1_800_000_000.0)
    saver = make_saver(
        ttl_seconds=100, clock=wall, strategy=strategy, keep_last=2, activity_precision=0
    )
    talk(chat_graph(saver), {"configurable": {"thread_id": "old-chat"}}, 4)
    grow(delta_graph(saver), {"configurable": {"thread_id": "old-delta"}}, 9)
    wall.advance(50)
    talk(chat_graph(saver), {"configurable": {"thread_id": "young"}}, 2)
    wall.advance(51)
    before = by_id(saver.threads())

    preview = saver.sweep_preview()
    assert (preview.strategy, preview.keep_last, preview.now) == (strategy, 2, wall())
    planned = {t.thread_id: t for t in preview.threads}
    assert sorted(planned) == ["old-chat", "old-delta"]
    assert by_id(saver.threads()) == before  # the preview changed nothing
    action = "delete" if strategy == "delete" else "prune"
    assert {t.action for t in preview.threads} == {action}
    if strategy == "keep_latest":  # no DeltaChannel: exactly the last 2 stay
        assert planned["old-chat"].checkpoints_removed == before["old-chat"].checkpoints - 2
    data = preview.as_dict()
    assert data["bytes_freed"] == sum(t["bytes_freed"] for t in data["threads"]) > 0

    assert sorted(saver.sweep()) == sorted(planned)
    after = by_id(saver.threads())
    assert after["young"] == before["young"]
    for name, plan in planned.items():
        remaining = after.get(name)
        kept_checkpoints = remaining.checkpoints if remaining else 0
        kept_bytes = remaining.bytes if remaining else 0
        assert plan.checkpoints == before[name].checkpoints
        assert plan.checkpoints_removed == before[name].checkpoints - kept_checkpoints, name
        assert plan.bytes_freed == before[name].bytes - kept_bytes, name
    assert preview.bytes_freed == sum(
        before[n].bytes - (after[n].bytes if n in after else 0) for n in planned
    )
    assert saver.sweep_preview().threads == []


async def test_threads_and_preview_async(make_saver: Callable[..., SQLSaver]) -> None:
    wall = FakeClock(start=1_800_000_000.0)
    saver = make_saver(ttl_seconds=10, clock=wall, activity_precision=0)
    try:
        graph = chat_graph(saver)
        config = {"configurable": {"thread_id": "t"}}
        await graph.ainvoke({"messages": [HumanMessage("hi")]}, config)
        [info] = await saver.athreads()
        wall.advance(11)
        preview = await saver.asweep_preview()
        assert [(t.thread_id, t.bytes_freed) for t in preview.threads] == [("t", info.bytes)]
    finally:
        await saver.aclose()  # its sweeper task and async pool belong to this test's loop
