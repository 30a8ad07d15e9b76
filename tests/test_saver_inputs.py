"""One outcome for one input on every checkpointer backend: hostile thread ids, namespaces
and checkpoint ids are stored and read back the same in memory, on SQLite and on
PostgreSQL, or refused everywhere with the package's own error, before anything is written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_checkpoint_agent_memory import (
    AgentMemoryError,
    InvalidValueError,
    TimedInMemorySaver,
)
from tests.helpers import make_checkpoint, outcome
from tests.pg import SERVER_IDS, PgServers


@pytest.fixture(scope="module")
def savers(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    from langgraph_checkpoint_agent_memory import PostgresSaver, SqliteSaver

    path: Path = tmp_path_factory.mktemp("inputs")
    opened: dict[str, Any] = {
        "memory": TimedInMemorySaver(ttl_seconds=3600),
        "sqlite": SqliteSaver(path / "inputs.db"),
    }
    servers: PgServers = request.getfixturevalue("pg_servers")
    for sid in SERVER_IDS:  # every PostgreSQL server of the session
        opened[f"postgres-{sid}"] = PostgresSaver(servers.fresh_database(sid))
    yield opened
    for saver in opened.values():
        saver.close()


text = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["a" * 255, "a" * 256, "x\x00y", "é", "a.b", "a:b", "a\ud800", "\udfff"]),
)
thread_ids = st.one_of(
    text,
    st.integers(-(2**40), 2**40),
    st.builds(uuid.uuid4),
    st.sampled_from([["x"], b"x", 1.5, True, None, ("t",)]),
)
namespaces = st.one_of(st.none(), text, st.sampled_from([7, b"ns", ["a"]]))
counter = iter(range(10**9))


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(thread_id=thread_ids, ns=namespaces)
def test_thread_ids_and_namespaces_get_one_outcome_everywhere(
    savers: dict[str, Any], thread_id: Any, ns: Any
) -> None:
    step = next(counter)
    results = {}
    for name, saver in savers.items():
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        if ns is not None:
            config["configurable"]["checkpoint_ns"] = ns
        checkpoint = make_checkpoint({"x": [step]}, step=1)
        put = outcome(lambda s=saver, c=config, cp=checkpoint: s.put(c, cp, {}, {"x": 1}))
        got = outcome(lambda s=saver, c=config: getattr(s.get_tuple(c), "checkpoint", None))
        value = got[1]["channel_values"] if got[0] == "ok" and got[1] else None
        results[name] = (
            put[0] if put[0] != "ok" else "ok",
            put[1] if put[0] != "ok" else None,
            got[0],
            value,
        )
        if put[0] == "ok":
            stored = put[1]["configurable"]
            assert isinstance(stored["thread_id"], str) and stored["thread_id"] == str(thread_id)
    first = results["memory"]
    assert all(r == first for r in results.values()), (thread_id, ns, results)
    assert first[0] != "error", results
    if first[0] == "ok":
        assert first[3] == {"x": [step]}


@pytest.mark.parametrize(
    "bad",
    [["x"], b"x", 1.5, True, "t" * 256, "a\x00b", "a\ud800b", "\udc80"],
)
def test_bad_thread_ids_are_refused_by_every_method(savers: dict[str, Any], bad: Any) -> None:
    for saver in savers.values():
        config = {"configurable": {"thread_id": bad}}
        with pytest.raises(InvalidValueError):
            saver.put(config, make_checkpoint({"x": [1]}), {}, {"x": 1})
        with pytest.raises(InvalidValueError):
            saver.get_tuple(config)
        with pytest.raises(InvalidValueError):
            saver.delete_thread(bad)
        with pytest.raises(AgentMemoryError):  # the package's own error, catchable as one
            list(saver.list(config))
        with pytest.raises(InvalidValueError):
            asyncio.run(saver.aget_tuple(config))
        with pytest.raises(InvalidValueError):
            asyncio.run(saver.adelete_thread(bad))


@pytest.mark.parametrize("bad", ["a\ud800b", "t" * 256, "a\x00b"])
def test_a_graph_refuses_a_bad_thread_id_on_every_saver(savers: dict[str, Any], bad: str) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("echo", lambda s: {"messages": [("ai", "ok")]})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    for saver in savers.values():
        graph: Any = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": bad}}
        with pytest.raises(InvalidValueError):
            graph.invoke({"messages": [("user", "hi")]}, config)
        with pytest.raises(InvalidValueError):
            asyncio.run(graph.ainvoke({"messages": [("user", "hi")]}, config))


def test_int_and_uuid_thread_ids_are_their_text(savers: dict[str, Any]) -> None:
    ident = uuid.uuid4()
    for saver in savers.values():
        for thread_id in (42, ident):
            stored = saver.put(
                {"configurable": {"thread_id": thread_id}}, make_checkpoint({"x": [1]}), {}, {}
            )
            assert stored["configurable"]["thread_id"] == str(thread_id)
            assert saver.get_tuple({"configurable": {"thread_id": str(thread_id)}}) is not None


@pytest.mark.parametrize("bad", ["a\x00b", "c" * 65, 7])
def test_bad_checkpoint_ids_are_refused_everywhere(savers: dict[str, Any], bad: Any) -> None:
    for saver in savers.values():
        checkpoint = make_checkpoint({"x": [1]})
        checkpoint["id"] = bad
        with pytest.raises(InvalidValueError):
            saver.put({"configurable": {"thread_id": "ids"}}, checkpoint, {}, {"x": 1})
        with pytest.raises(InvalidValueError):
            saver.get_tuple({"configurable": {"thread_id": "ids", "checkpoint_id": bad}})
