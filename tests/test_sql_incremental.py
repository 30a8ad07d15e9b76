"""Lists that only grow are stored as their appended items; everything reads back whole."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_checkpoint_agent_memory import SqliteSaver, SQLSaver
from langgraph_checkpoint_agent_memory.checkpoint.codec import MAX_CHAIN
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql


def graph(saver: Any) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def blob_rows(saver: SQLSaver) -> list[tuple[str, str | None, int]]:
    def plan() -> Plan[list[tuple[str, str | None, int]]]:
        [rows] = yield Batch(
            [
                Stmt(
                    Sql(
                        "SELECT channel, base_version, blob FROM am_checkpoint_blobs "
                        "WHERE channel = 'messages'"
                    ),
                    fetch=True,
                )
            ]
        )
        return [(r[0], r[1], len(bytes(r[2]))) for r in rows]

    return saver.db.run(plan())


def test_a_conversation_is_stored_incrementally(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    g = graph(saver)
    config = {"configurable": {"thread_id": "c"}}
    for turn in range(40):
        g.invoke({"messages": [HumanMessage(f"question {turn} " * 10)]}, config)
    rows = blob_rows(saver)
    deltas = [r for r in rows if r[1] is not None]
    assert len(deltas) > len(rows) * 0.8  # most versions hold only what was appended
    full = [size for _, base, size in rows if base is None]
    assert len(full) <= 80 // MAX_CHAIN + 2  # a full copy every MAX_CHAIN appends
    expected = [m.content for m in g.get_state(config).values["messages"]]
    assert len(expected) == 80
    fresh = graph(make_saver())  # another process: no cache, reads the chains
    assert [m.content for m in fresh.get_state(config).values["messages"]] == expected
    for snapshot in fresh.get_state_history(config):  # every historical version is whole
        n = len(snapshot.values.get("messages", []))
        assert [m.content for m in snapshot.values.get("messages", [])] == expected[:n]


async def test_async_conversation_reads_back(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    g = graph(saver)
    config = {"configurable": {"thread_id": "a"}}
    for turn in range(10):
        await g.ainvoke({"messages": [HumanMessage(f"q{turn}")]}, config)
    assert any(base is not None for _, base, _ in blob_rows(saver))
    state = await graph(make_saver()).aget_state(config)
    assert [m.content for m in state.values["messages"]][-2:] == ["q9", "answer 19"]


def test_changed_items_are_written_in_full(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    g = graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "e"}}
    for turn in range(3):
        g.invoke({"messages": [HumanMessage(f"q{turn}")]}, config)
    first = g.get_state(config).values["messages"][0]
    g.update_state(config, {"messages": [HumanMessage("edited", id=first.id)]})
    g.update_state(
        config, {"messages": [RemoveMessage(id=g.get_state(config).values["messages"][1].id)]}
    )
    contents = [m.content for m in g.get_state(config).values["messages"]]
    assert contents == ["edited", "q1", "answer 3", "q2", "answer 5"]
    assert [m.content for m in graph(make_saver()).get_state(config).values["messages"]] == contents


def test_prune_and_delete_for_runs_keep_the_bases(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    g = graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "p"}}
    runs = [uuid.uuid4() for _ in range(6)]
    for turn, run_id in enumerate(runs):
        g.invoke(
            {"messages": [HumanMessage(f"q{turn}")]},
            {**config, "metadata": {"run_id": str(run_id)}},
        )
    expected = [m.content for m in g.get_state(config).values["messages"]]
    assert list(saver.list(config))[-1].metadata["run_id"] == str(runs[0])
    saver.delete_for_runs([str(runs[0])])  # its full copy is the base of later versions
    assert [m.content for m in graph(make_saver()).get_state(config).values["messages"]] == expected
    saver.prune(["p"], strategy="keep_latest")
    assert len(list(saver.list(config))) == 1
    assert [m.content for m in graph(make_saver()).get_state(config).values["messages"]] == expected
    g.invoke({"messages": [HumanMessage("after prune")]}, config)
    assert [m.content for m in graph(make_saver()).get_state(config).values["messages"]][-2:] == [
        "after prune",
        "answer 13",
    ]


def test_incremental_lists_can_be_turned_off(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver(incremental_lists=False)
    g = graph(saver)
    config = {"configurable": {"thread_id": "off"}}
    for turn in range(4):
        g.invoke({"messages": [HumanMessage(f"q{turn}")]}, config)
    assert all(base is None for _, base, _ in blob_rows(saver))
    assert len(g.get_state(config).values["messages"]) == 8


def test_the_list_cache_forgets_the_oldest_thread_whole(
    make_saver: Callable[..., SQLSaver], monkeypatch: Any
) -> None:
    import langgraph_checkpoint_agent_memory.checkpoint.codec as codec_module

    monkeypatch.setattr(codec_module, "CACHE_THREADS", 3)
    saver = make_saver()
    g = graph(saver)
    for name in ("a", "b", "c", "d"):
        for turn in range(2):
            config = {"configurable": {"thread_id": name}}
            g.invoke({"messages": [HumanMessage(f"{name} {turn}")]}, config)
    assert [k[0] for k in saver._lists.heads] == ["b", "c", "d"]  # "a" left, lists and all
    assert all(head.lists for head in saver._lists.heads.values())
    g.invoke({"messages": [HumanMessage("a again")]}, {"configurable": {"thread_id": "a"}})
    assert [k[0] for k in saver._lists.heads] == ["c", "d", "a"]
    config = {"configurable": {"thread_id": "a"}}
    contents = [m.content for m in graph(make_saver()).get_state(config).values["messages"]]
    assert contents == ["a 0", "answer 1", "a 1", "answer 3", "a again", "answer 5"]


def test_a_warm_read_without_recursive_queries_fetches_no_chain(tmp_path: Path) -> None:
    """Where a database has no recursive query (HANA; here SQLite told so), a read walks a
    list's chain of bases one level per round trip, except what this process's list cache
    holds: a warm read of the latest checkpoint sends the checkpoint's statement, then its
    blobs' and writes', and decodes as a cold read does."""
    conn = sqlite3.connect(tmp_path / "c.db", check_same_thread=False, isolation_level=None)
    saver = SqliteSaver(conn)
    saver.dialect.recursive_cte = False
    saver.setup()
    app = graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for turn in range(12):
        app.invoke({"messages": [HumanMessage(f"question {turn}")]}, config)
    sent: list[str] = []
    conn.set_trace_callback(sent.append)
    warm = saver.get_tuple(config)
    conn.set_trace_callback(None)
    assert [s.split()[0] for s in sent] == ["SELECT", "BEGIN", "SELECT", "SELECT", "COMMIT"]
    cold = SqliteSaver(conn)
    cold.dialect.recursive_cte = False
    sent.clear()
    conn.set_trace_callback(sent.append)
    found = cold.get_tuple(config)
    conn.set_trace_callback(None)
    assert len(sent) > 5  # the chain, one level per round trip
    assert warm is not None and found is not None
    assert warm.checkpoint == found.checkpoint
    assert len(found.checkpoint["channel_values"]["messages"]) == 24
    conn.close()
