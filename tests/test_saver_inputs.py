"""One outcome for one input on every checkpointer backend: hostile thread ids, namespaces
and checkpoint ids are stored and read back the same in memory, on SQLite and on
PostgreSQL, or refused everywhere with the package's own error, before anything is written."""

from __future__ import annotations

import asyncio
import math
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
    ConfigurationError,
    InvalidValueError,
    TimedInMemorySaver,
    create_checkpointer,
)
from tests.helpers import config_for, make_checkpoint, outcome
from tests.pg import SERVER_IDS, PgServers


@pytest.fixture(scope="module")
def savers(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    from langgraph_checkpoint_agent_memory import PostgresSaver, SqliteSaver

    path: Path = tmp_path_factory.mktemp("inputs")
    opened: dict[str, Any] = {
        "memory": TimedInMemorySaver(ttl_seconds=3600),
        "memory-no-ttl": create_checkpointer(),  # LangGraph's InMemorySaver, checking
        "sqlite": SqliteSaver(path / "inputs.db"),
    }
    servers: PgServers = request.getfixturevalue("pg_servers")
    for sid in SERVER_IDS:  # every PostgreSQL server of the session
        opened[f"postgres-{sid}"] = PostgresSaver(servers.fresh_database(sid))
    yield opened
    for saver in opened.values():
        getattr(saver, "close", lambda: None)()


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


def test_ids_of_ten_kilobytes_and_bad_thread_ttls_are_refused_in_memory_too(
    savers: dict[str, Any],
) -> None:
    for name, saver in savers.items():
        for bad in ("x" * 10_000, "a\x00"):
            with pytest.raises(InvalidValueError):
                saver.put(
                    {"configurable": {"thread_id": bad, "checkpoint_ns": ""}},
                    make_checkpoint({"x": [1]}),
                    {},
                    {"x": 1},
                )
        for ttl in (-1, 1.5, "60", 2**31):
            config = {"configurable": {"thread_id": f"ttl-{name}", "ttl_seconds": ttl}}
            with pytest.raises(ConfigurationError, match="ttl_seconds"):
                saver.put(config, make_checkpoint({"x": [1]}), {}, {"x": 1})
            with pytest.raises(ConfigurationError, match="ttl_seconds"):
                asyncio.run(saver.aput(config, make_checkpoint({"x": [1]}), {}, {"x": 1}))
        assert saver.get_tuple({"configurable": {"thread_id": f"ttl-{name}"}}) is None


# -- list(filter=...) ------------------------------------------------------------------------

#: The metadata of the checkpoints the filter tests list (on every saver, the same ids).
LISTED = [
    {"source": "loop", "step": 1, "n": 2**62, "f": 1.5, "tags": ["a"], "none": None},
    {"source": "input", "step": -1, "n": -(2**62), "f": 0.0, "tags": [], "é": "ü"},
]


@pytest.fixture(scope="module")
def listed(savers: dict[str, Any]) -> dict[str, Any]:
    """Each saver with the checkpoints of :data:`LISTED` in thread ``filtered``."""
    checkpoints = [make_checkpoint({"x": [i]}, step=i) for i in range(len(LISTED))]
    for saver in savers.values():
        for checkpoint, metadata in zip(checkpoints, LISTED, strict=True):
            saver.put(config_for("filtered"), checkpoint, metadata, {"x": 1})
    return savers


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**62, -(2**62), 2**63, 2**70, -(2**63) - 1, 0, 1, -1]),
    st.floats(),  # NaN and the infinities too
    st.text(max_size=3),
    st.sampled_from(["loop", "input", "a\x00", "a\ud800", "\udfff", "ü"]),
)
filter_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=2),
    st.dictionaries(st.text(max_size=2), scalars, max_size=2),
)
filter_keys = st.one_of(
    st.sampled_from([k for metadata in LISTED for k in metadata]),
    st.text(max_size=3),
    st.sampled_from(["k\x00", "k\ud800", "a.b", "a b"]),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(filter=st.dictionaries(filter_keys, filter_values, max_size=2))
def test_a_list_filter_gets_one_outcome_everywhere(
    listed: dict[str, Any], filter: dict[str, Any]
) -> None:
    results = {
        name: outcome(
            lambda s=saver: [
                (t.metadata["step"], t.metadata["source"])
                for t in s.list(config_for("filtered"), filter=filter)
            ]
        )
        for name, saver in listed.items()
    }
    first = results["memory"]
    assert all(r == first for r in results.values()), (filter, results)
    assert first[0] != "error", results
    if first[0] == "ok":
        expected = [
            (m["step"], m["source"])
            for m in LISTED
            if all(k in m and m[k] == v for k, v in filter.items())
        ]
        assert sorted(first[1]) == sorted(expected), (filter, first)


@pytest.mark.parametrize(
    "filter",
    [
        {"source": "a\x00"},
        {"k\x00": 1},
        {"source": math.nan},
        {"step": math.inf},
        {"step": -math.inf},
        {"source": "a\ud800"},
        {"k\ud800": "loop"},
        {"step": 2**70},
        {"tags": ["a", math.nan]},
    ],
    ids=repr,
)
def test_a_filter_no_backend_can_compare_is_refused_sync_and_async(
    listed: dict[str, Any], filter: dict[str, Any]
) -> None:
    async def alisted(saver: Any) -> list[Any]:
        return [t async for t in saver.alist(config_for("filtered"), filter=filter)]

    for saver in listed.values():
        with pytest.raises(InvalidValueError, match="filter"):
            list(saver.list(config_for("filtered"), filter=filter))
        with pytest.raises(InvalidValueError, match="filter"):
            list(saver.list(None, filter=filter))
        with pytest.raises(InvalidValueError, match="filter"):
            asyncio.run(alisted(saver))


def test_a_filter_counts_the_limit_after_it_and_a_missing_key_never_matches(
    listed: dict[str, Any],
) -> None:
    for name, saver in listed.items():
        config = config_for("filtered")
        assert [t.metadata["step"] for t in saver.list(config, filter={"none": None})] == [1]
        assert list(saver.list(config, filter={"absent": None})) == [], name
        # Python's == (LangGraph's rule) holds True == 1, which jsonb does not
        assert [t.metadata["step"] for t in saver.list(config, filter={"step": True})] == [1]
        assert [t.metadata["step"] for t in saver.list(config, filter={"f": False})] == [-1]
        assert [t.metadata["step"] for t in saver.list(config, filter={"f": 0}, limit=1)] == [-1]
        assert list(saver.list(config, limit=0)) == [], name


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limit=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, len(LISTED) + 2),
        st.floats(-3, len(LISTED) + 2),  # 2.0 is 2; 2.5 is refused
        st.sampled_from([math.nan, math.inf, "2"]),
    )
)
def test_a_list_limit_gets_one_outcome_everywhere(listed: dict[str, Any], limit: Any) -> None:
    async def alisted(saver: Any) -> int:
        return len([t async for t in saver.alist(config_for("filtered"), limit=limit)])

    results = {
        (name, api): outcome(
            (lambda s=saver: len(list(s.list(config_for("filtered"), limit=limit))))
            if api == "sync"
            else (lambda s=saver: asyncio.run(alisted(s)))
        )
        for name, saver in listed.items()
        for api in ("sync", "async")
    }
    whole = limit is None or (
        not isinstance(limit, bool | str) and math.isfinite(limit) and limit == int(limit)
    )
    expected = (
        ("ok", len(LISTED) if limit is None else min(max(int(limit), 0), len(LISTED)))
        if whole
        else ("refused", "InvalidValueError")
    )
    assert all(r == expected for r in results.values()), (limit, results)


@pytest.mark.parametrize(
    "metadata",
    [
        {"score": math.nan},
        {"score": -math.inf},
        {"note": "a\ud800"},  # a NUL in a top-level string LangGraph itself removes
        {"k\x00": 1},
        {"nested": {"deep": ["a\x00b", 1]}},
        {"nested": {"deep": [1, math.inf]}},
    ],
    ids=repr,
)
def test_metadata_no_backend_stores_alike_is_refused_everywhere(
    savers: dict[str, Any], metadata: dict[str, Any]
) -> None:
    """PostgreSQL stored NaN as text its jsonb cast then refused, so every filtered list of
    the database failed; the in-memory savers kept what the databases refused."""
    for name, saver in savers.items():
        config = config_for(f"metadata-{name}")
        with pytest.raises(InvalidValueError, match="metadata"):
            saver.put(config, make_checkpoint({"x": [1]}), metadata, {"x": 1})
        with pytest.raises(InvalidValueError, match="metadata"):
            asyncio.run(saver.aput(config, make_checkpoint({"x": [1]}), metadata, {"x": 1}))
        assert saver.get_tuple(config) is None  # nothing was written
        saver.put(config, make_checkpoint({"x": [1]}), {"note": "é", "score": 1.5}, {"x": 1})
        found = list(saver.list(None, filter={"note": "é", "score": 1.5}))
        assert [t.config["configurable"]["thread_id"] for t in found] == [f"metadata-{name}"]
        saver.delete_thread(f"metadata-{name}")


def _without_id() -> Any:
    checkpoint = dict(make_checkpoint({"x": [1]}))
    del checkpoint["id"]
    return checkpoint


#: Calls every saver answers alike: (a call on a saver, the error and the words it says).
ODD_CALLS: dict[str, tuple[Any, type[Exception], str]] = {
    "put_writes without checkpoint_id": (
        lambda s: s.put_writes(config_for("odd"), [("x", 1)], "task"),
        ConfigurationError,
        "put_writes needs config['configurable']['checkpoint_id']",
    ),
    "aput_writes without checkpoint_id": (
        lambda s: asyncio.run(s.aput_writes(config_for("odd"), [("x", 1)], "task")),
        ConfigurationError,
        "put_writes needs config['configurable']['checkpoint_id']",
    ),
    "list before an int id": (
        lambda s: list(s.list(config_for("odd"), before={"configurable": {"checkpoint_id": 5}})),
        InvalidValueError,
        "list() before['configurable']['checkpoint_id'] must be a string, got int",
    ),
    "list before a string": (
        lambda s: list(s.list(config_for("odd"), before="c1")),
        InvalidValueError,
        "list() before must be a dict",
    ),
    "put a checkpoint without id": (
        lambda s: s.put(config_for("odd"), _without_id(), {}, {}),
        InvalidValueError,
        "put() needs a checkpoint with an 'id'",
    ),
    "get_tuple of a string": (
        lambda s: s.get_tuple("t1"),
        InvalidValueError,
        "config must be a dict such as {'configurable': {'thread_id'",
    ),
    "aget_tuple of a string": (
        lambda s: asyncio.run(s.aget_tuple("t1")),
        InvalidValueError,
        "config must be a dict",
    ),
    "list of a string": (
        lambda s: list(s.list("t1")),
        InvalidValueError,
        "list() config must be a dict",
    ),
    "put to a string": (
        lambda s: s.put("t1", make_checkpoint({"x": [1]}), {}, {}),
        InvalidValueError,
        "config must be a dict",
    ),
}


@pytest.mark.parametrize("case", list(ODD_CALLS), ids=str)
def test_odd_calls_get_one_outcome_on_every_saver(savers: dict[str, Any], case: str) -> None:
    call, error, words = ODD_CALLS[case]
    for name, saver in savers.items():
        with pytest.raises(error) as caught:
            call(saver)
        assert words in str(caught.value), (name, str(caught.value))


def test_a_limit_beyond_any_list_takes_it_all_on_every_saver(savers: dict[str, Any]) -> None:
    for name, saver in savers.items():
        saver.put(config_for("huge-limit"), make_checkpoint({"x": [1]}), {}, {})
        assert len(list(saver.list(config_for("huge-limit"), limit=2**70))) == 1, name
        assert list(saver.list(config_for("huge-limit"), limit=-(2**70))) == [], name
