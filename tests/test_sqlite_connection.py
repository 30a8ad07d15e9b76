"""``SqliteSaver`` over a ``sqlite3.Connection`` the caller owns, as LangGraph's own
``SqliteSaver(conn)`` is used: in memory or on a file, in either of sqlite3's transaction
modes, through a real graph, and left open when the saver closes."""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import ConfigurationError, SqliteSaver
from tests.helpers import config_for, make_checkpoint, present


class State(TypedDict):
    turns: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("echo", lambda s: {"turns": [f"echo {len(s['turns'])}"]})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("isolation_level", [None, "", "DEFERRED"])
def test_a_graph_runs_on_a_connection_passed_in(
    isolation_level: Literal["", "DEFERRED"] | None,
) -> None:
    # typeshed's connect() omits "", which sqlite3 documents as an alias of "DEFERRED"
    conn = sqlite3.connect(
        ":memory:",
        check_same_thread=False,
        isolation_level=isolation_level,  # type: ignore[arg-type]
    )
    saver = SqliteSaver(conn)
    graph = _graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"turns": ["hi"]}, config)
    assert graph.invoke({"turns": ["again"]}, config)["turns"] == [
        "hi",
        "echo 1",
        "again",
        "echo 3",
    ]
    assert not conn.in_transaction  # every write was committed, none left open
    assert len(list(saver.list(config))) == 6  # input, loop and end, per invoke
    saver.close()
    assert conn.execute("SELECT count(*) FROM am_checkpoints").fetchone()[0] == 6  # still open
    conn.close()


async def test_the_async_api_on_a_connection_passed_in() -> None:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    saver = SqliteSaver(conn)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    await _graph(saver).ainvoke({"turns": ["hi"]}, config)
    await asyncio.gather(*(saver.aget_tuple(config) for _ in range(8)))
    assert present(await saver.aget_tuple(config)).checkpoint["channel_values"]["turns"] == [
        "hi",
        "echo 1",
    ]
    await saver.aclose()
    conn.close()


def test_a_file_connection_is_seen_by_a_saver_on_the_path(tmp_path: Path) -> None:
    path = tmp_path / "cp.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    other = SqliteSaver(path)
    assert present(other.get_tuple(stored)).checkpoint["channel_values"] == {"x": [1]}
    other.close()
    saver.close()
    conn.close()


def test_a_failed_write_leaves_no_transaction_open() -> None:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    saver = SqliteSaver(conn, ttl_seconds=60)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    saver.delete_thread("t")
    with pytest.raises(LookupError):  # a late write to the deleted generation
        saver.put_writes(stored, [("x", 2)], "task")
    assert not conn.in_transaction
    saver.close()
    conn.close()


@pytest.mark.parametrize("bad", [3, b"x.db", ["x.db"]])
def test_anything_else_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"sqlite3\.Connection"):
        SqliteSaver(bad)


def test_a_transaction_of_the_caller_is_left_alone() -> None:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("CREATE TABLE mine (x INTEGER)")
    conn.execute("INSERT INTO mine VALUES (1)")  # sqlite3 opens a transaction for it
    assert conn.in_transaction
    with pytest.raises(ConfigurationError, match="commit or roll it back"):
        saver.get_tuple(config_for("t"))
    conn.commit()  # the caller's row survived: the saver ended nothing it did not begin
    assert conn.execute("SELECT x FROM mine").fetchall() == [(1,)]
    assert saver.get_tuple(config_for("t")) is None
    conn.close()
