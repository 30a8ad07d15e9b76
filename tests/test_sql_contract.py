"""What the conformance suite does not check, on SQLite and PostgreSQL alike: limit after
filter, first-write-wins, special writes, writes order, metadata merge, DeltaChannel history,
storage once per version, serializers, errors, concurrency, real graphs."""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import ConfigurationError, SQLSaver
from tests.helpers import config_for, make_checkpoint, present


def put(
    saver: Any,
    thread: str,
    values: dict[str, Any],
    *,
    parent: Any = None,
    version: int = 1,
    metadata: dict[str, Any] | None = None,
    ns: str = "",
    config_extra: RunnableConfig | None = None,
) -> Any:
    config = config_for(thread, parent["configurable"]["checkpoint_id"] if parent else None, ns)
    config.update(config_extra or {})
    checkpoint = make_checkpoint(values, step=version, version=version)
    return saver.put(
        config,
        checkpoint,
        metadata or {"source": "loop", "step": version},
        dict(checkpoint["channel_versions"]),
    )


def test_limit_applies_after_the_metadata_filter(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    parent = None
    for i in range(40):  # more than a page; only every fourth matches
        parent = put(
            saver,
            "t",
            {"x": i},
            parent=parent,
            version=i + 1,
            metadata={"source": "loop", "step": i, "kind": "keep" if i % 4 == 0 else "skip"},
        )
    found = list(saver.list(config_for("t"), filter={"kind": "keep"}, limit=7))
    assert [t.metadata["step"] for t in found] == [36, 32, 28, 24, 20, 16, 12]
    assert len(list(saver.list(None, filter={"kind": "keep"}))) == 10
    assert list(saver.list(config_for("t"), filter={"kind": "keep", "step": 8})) != []
    assert list(saver.list(config_for("t"), filter={"missing": None})) == []


def test_filter_keys_that_look_like_sql_or_json_paths_are_data(
    make_saver: Callable[..., SQLSaver],
) -> None:
    saver = make_saver()
    weird = {"a.b": 1, "x') OR 1=1 --": "y", "$.step": 2, 'q"uote': True}
    put(saver, "t", {"x": 1}, metadata={"step": 0, **weird})
    put(saver, "t2", {"x": 1}, metadata={"step": 0})
    for key, value in weird.items():
        assert [
            t.config["configurable"]["thread_id"] for t in saver.list(None, filter={key: value})
        ] == ["t"]
    assert list(saver.list(None, filter={"x') OR 1=1 --": "nope"})) == []


def test_first_write_wins_and_special_channels_are_replaced(
    make_saver: Callable[..., SQLSaver],
) -> None:
    saver = make_saver()
    stored = put(saver, "t", {"x": 1})
    saver.put_writes(stored, [("a", "first"), ("b", 1)], "task")
    saver.put_writes(stored, [("a", "second"), ("b", 2)], "task")  # same idx: ignored
    saver.put_writes(stored, [(ERROR, "boom-1"), (INTERRUPT, "i-1")], "task")
    saver.put_writes(stored, [(ERROR, "boom-2"), (INTERRUPT, "i-2")], "task")  # replaced
    writes = present(present(saver.get_tuple(stored)).pending_writes)
    assert ("task", "a", "first") in writes and ("task", "b", 1) in writes
    assert ("task", ERROR, "boom-2") in writes and ("task", INTERRUPT, "i-2") in writes
    assert len(writes) == 4


def test_pending_writes_come_back_in_writes_sort_key_order(
    make_saver: Callable[..., SQLSaver],
) -> None:
    saver = make_saver()
    stored = put(saver, "t", {"x": 1})
    saver.put_writes(stored, [("c", 3), ("d", 4)], "task-b", task_path="~1")
    saver.put_writes(stored, [("a", 1)], "task-z", task_path="")
    saver.put_writes(stored, [("b", 2), (SCHEDULED, 0), (RESUME, "r")], "task-a", task_path="~1")
    expected = [
        ("task-z", "a", 1),
        ("task-a", RESUME, "r"),
        ("task-a", SCHEDULED, 0),
        ("task-a", "b", 2),
        ("task-b", "c", 3),
        ("task-b", "d", 4),
    ]
    assert present(saver.get_tuple(stored)).pending_writes == expected
    assert next(iter(saver.list(config_for("t")))).pending_writes == expected


def test_metadata_merges_config_metadata_and_scalar_configurables(
    make_saver: Callable[..., SQLSaver],
) -> None:
    saver = make_saver()
    stored = put(
        saver,
        "t",
        {"x": 1},
        metadata={"source": "input", "step": -1},
        config_extra={"metadata": {"user": "alice", "nested": {"no": 1}}},
    )
    config: RunnableConfig = {
        "configurable": {
            "thread_id": "t2",
            "checkpoint_ns": "",
            "tenant": "acme",
            "retries": 3,
            "flag": True,
            "obj": {"skip": 1},
            "__private": 1,
        }
    }
    checkpoint = make_checkpoint({"x": 1})
    saver.put(config, checkpoint, {"step": 0}, {"x": 1})
    assert present(saver.get_tuple(stored)).metadata == {
        "source": "input",
        "step": -1,
        "user": "alice",
    }
    merged = present(saver.get_tuple(config_for("t2"))).metadata
    assert merged == {"step": 0, "tenant": "acme", "retries": 3, "flag": True}


def test_missing_thread_id_is_a_precise_error(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    with pytest.raises(ConfigurationError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(ConfigurationError, match="thread_id"):
        saver.put({"configurable": {"checkpoint_ns": ""}}, make_checkpoint(), {}, {})
    with pytest.raises(ConfigurationError, match="checkpoint_id"):
        saver.put_writes(config_for("t"), [("a", 1)], "task")


def test_unserializable_value_leaves_the_database_consistent(
    make_saver: Callable[..., SQLSaver],
) -> None:
    saver = make_saver()
    stored = put(saver, "t", {"x": 1})
    with pytest.raises(TypeError):
        put(saver, "t", {"x": 2, "bad": object()}, parent=stored, version=2)
    with pytest.raises(TypeError, match="metadata"):
        put(saver, "t", {"x": 3}, parent=stored, version=3, metadata={"step": 1, "bad": object()})
    latest = present(saver.get_tuple(config_for("t")))
    assert latest.config == stored and latest.checkpoint["channel_values"] == {"x": 1}
    assert len(list(saver.list(config_for("t")))) == 1


def test_channel_values_are_stored_once_per_version(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    big = [f"message {i} " * 20 for i in range(5)]
    first = put(saver, "t", {"messages": big, "counter": 1, "route": None})
    config = config_for("t", first["configurable"]["checkpoint_id"])
    checkpoint = make_checkpoint({"messages": big, "counter": 2, "route": None}, step=2)
    checkpoint["channel_versions"] = {"messages": 1, "counter": 2, "route": 1}
    saver.put(config, checkpoint, {"step": 2}, {"counter": 2})  # messages unchanged
    rows = _count(saver, "am_checkpoint_blobs")
    assert rows == 1  # one blob for the message list; primitives are inline
    latest = present(saver.get_tuple(config_for("t")))
    assert latest.checkpoint["channel_values"] == {"messages": big, "counter": 2, "route": None}


def _count(saver: SQLSaver, table: str) -> int:
    from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    def plan() -> Plan[int]:
        [rows] = yield Batch([Stmt(Sql(f"SELECT COUNT(*) FROM {table}"), fetch=True)])
        count: int = rows[0][0]
        return count

    return saver.db.run(plan())


def test_encrypted_serializer_passes_through(make_saver: Callable[..., SQLSaver]) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    saver = make_saver(serde=serde)
    stored = put(saver, "t", {"secret": ["the launch code is 1234"] * 3})
    saver.put_writes(stored, [("secret", "written secret")], "task")
    tup = present(saver.get_tuple(stored))
    assert tup.checkpoint["channel_values"]["secret"] == ["the launch code is 1234"] * 3
    assert tup.pending_writes == [("task", "secret", "written secret")]
    raw = _raw_blobs(saver)
    assert raw and all(b"launch code" not in blob and kind.endswith("+aes") for kind, blob in raw)


def _raw_blobs(saver: SQLSaver) -> list[tuple[str, bytes]]:
    from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    def plan() -> Plan[list[tuple[str, bytes]]]:
        [rows] = yield Batch([Stmt(Sql("SELECT type, blob FROM am_checkpoint_blobs"), fetch=True)])
        return [(r[0], bytes(r[1])) for r in rows]

    return saver.db.run(plan())


# -- DeltaChannel ---------------------------------------------------------------------------


def extend(state: list[Any], batches: list[list[Any]]) -> list[Any]:
    return state + [x for batch in batches for x in batch]


class DeltaState(TypedDict):
    items: Annotated[list[int], DeltaChannel(extend, snapshot_frequency=4)]
    other: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=3)]


def delta_graph(saver: Any) -> Any:
    builder = StateGraph(DeltaState)
    builder.add_node(
        "add", lambda s: {"items": [len(s["items"])], "other": [f"o{len(s['other'])}"]}
    )
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


def _without_task_ids(history: Any) -> Any:
    """Task ids differ between two runs of one graph; compare everything else."""
    return {ch: {**e, "writes": [w[1:] for w in e["writes"]]} for ch, e in history.items()}


def test_delta_channel_history_matches_in_memory_saver(make_saver: Callable[..., SQLSaver]) -> None:
    ours, reference = make_saver(), InMemorySaver()
    graphs = [delta_graph(ours), delta_graph(reference)]
    config: RunnableConfig = {"configurable": {"thread_id": "d"}}
    for _ in range(7):
        for g in graphs:
            g.invoke({"items": [], "other": []}, config)
    assert graphs[0].get_state(config).values == graphs[1].get_state(config).values
    ours_list, reference_list = list(ours.list(config)), list(reference.list(config))
    assert len(ours_list) == len(reference_list) > 10
    channels = ["items", "other", "none"]
    with_seed = 0
    for mine, theirs in zip(ours_list, reference_list, strict=True):
        got = ours.get_delta_channel_history(config=mine.config, channels=channels)
        want = reference.get_delta_channel_history(config=theirs.config, channels=channels)
        assert _without_task_ids(got) == _without_task_ids(want), mine.metadata["step"]
        with_seed += "seed" in got["items"] and bool(got["items"]["writes"])
    assert with_seed > 3  # the comparison covered real seeds and replayed writes
    latest = present(ours.get_tuple(config)).config
    ours.prune(["d"], strategy="keep_latest")
    assert graphs[0].get_state(config).values == graphs[1].get_state(config).values
    assert len(list(ours.list(config))) < len(list(reference.list(config)))
    assert present(ours.get_tuple(config)).config == latest


async def test_async_delta_channel_history(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    graph = delta_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "d"}}
    for _ in range(5):
        await graph.ainvoke({"items": [], "other": []}, config)
    assert (await graph.aget_state(config)).values["items"] == [0, 1, 2, 3, 4]
    assert await saver.aget_delta_channel_history(config=config, channels=[]) == {}


# -- graphs and concurrency -----------------------------------------------------------------


class Chat(MessagesState):
    turns: Annotated[int, operator.add]


def chat_graph(saver: Any) -> Any:
    def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply to {state['messages'][-1].content}")], "turns": 1}

    def review(state: Chat) -> dict[str, Any]:
        answer = interrupt({"question": "approve?"})
        return {"messages": [AIMessage(f"reviewed: {answer}")]}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("review", review)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


def test_graph_with_interrupt_resumes_from_a_new_saver(
    make_saver: Callable[..., SQLSaver],
) -> None:
    graph = chat_graph(make_saver())
    config = {"configurable": {"thread_id": "c"}}
    graph.invoke({"messages": [HumanMessage("hello")], "turns": 0}, config)
    assert graph.get_state(config).next == ("review",)
    again = chat_graph(make_saver())  # another process would see the same
    result = again.invoke(Command(resume="yes"), config)
    assert [m.content for m in result["messages"]] == ["hello", "reply to hello", "reviewed: yes"]
    history = list(again.get_state_history(config))
    assert len(history) >= 4 and history[0].values["turns"] == 1


async def test_many_async_tasks_share_one_saver(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    graph = chat_graph(saver)

    async def conversation(i: int) -> None:
        config = {"configurable": {"thread_id": f"t{i}"}}
        await graph.ainvoke({"messages": [HumanMessage(f"m{i}")], "turns": 0}, config)
        await graph.ainvoke(Command(resume=f"ok{i}"), config)

    await asyncio.gather(*(conversation(i) for i in range(12)))
    for i in range(12):
        state = await graph.aget_state({"configurable": {"thread_id": f"t{i}"}})
        assert state.values["messages"][-1].content == f"reviewed: ok{i}"


def test_many_os_threads_share_one_saver(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    graph = chat_graph(saver)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            config = {"configurable": {"thread_id": f"t{i}"}}
            for turn in range(3):
                graph.invoke({"messages": [HumanMessage(f"m{i}-{turn}")], "turns": 0}, config)
                graph.invoke(Command(resume="y"), config)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(8):
        assert graph.get_state({"configurable": {"thread_id": f"t{i}"}}).values["turns"] == 3


def test_list_streams_pages_lazily(
    make_saver: Callable[..., SQLSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = make_saver()
    parent = None
    for i in range(100):
        parent = put(saver, "t", {"x": i}, parent=parent, version=i + 1)
    calls = 0
    real_run = saver.db.run

    def counting_run(plan: Any) -> Any:
        nonlocal calls
        calls += 1
        return real_run(plan)

    monkeypatch.setattr(saver.db, "run", counting_run)
    iterator = saver.list(config_for("t"))
    first = next(iterator)
    assert first.checkpoint["channel_values"] == {"x": 99}
    assert calls == 1  # one page fetched, not the whole thread
    assert len(list(iterator)) == 99
    assert calls == 4


def test_metadata_is_stored_as_json(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    put(saver, "t", {"x": 1}, metadata={"step": 3, "source": "loop", "note": "ünïcode ✓"})

    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    def plan() -> Any:
        [rows] = yield Batch([Stmt(Sql("SELECT metadata FROM am_checkpoints"), fetch=True)])
        return rows[0][0]

    assert json.loads(saver.db.run(plan())) == {"step": 3, "source": "loop", "note": "ünïcode ✓"}


@pytest.mark.parametrize("api", ["sync", "async"])
async def test_a_batch_can_end_its_transaction_by_rolling_back(
    make_saver: Callable[..., SQLSaver], api: str
) -> None:
    """``Batch(rollback=True)`` undoes what the held transaction wrote; ``write=True`` alone
    keeps it (the distributed write path relies on both)."""
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    saver = make_saver()
    saver.setup()

    def plan(thread: str, rollback: bool) -> Any:
        thread_param = saver.dialect.param("t")
        insert = Sql(f"INSERT INTO am_threads (thread_id, last_active) VALUES ({thread_param}, 1)")
        yield Batch([Stmt(insert, {"t": thread})], hold=True)
        yield Batch([], write=True, rollback=rollback)

    for thread, rollback in (("kept", False), ("undone", True)):
        if api == "sync":
            saver.db.run(plan(thread, rollback))
        else:
            await saver.db.arun(plan(thread, rollback))
    assert _count(saver, "am_threads") == 1
