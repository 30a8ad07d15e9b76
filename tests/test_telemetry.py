"""OpenTelemetry spans of the savers: names, database conventions, thread attributes (left
out with encryption on), errors, and parent links through a LangGraph graph, on memory,
SQLite and PostgreSQL, sync and async."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import (
    InvalidValueError,
    TimedInMemorySaver,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.telemetry.tracing import (
    IDLE,
    Target,
    operation,
    tracing,
)
from tests.helpers import config_for, sql_checkpointer
from tests.otel import (
    CHECKPOINT_TABLES,
    STORE_TABLES,
    named,
    on,
    provider,
    rename_table,
    spans,
)
from tests.pg import backend_params, backend_url

ROOT = Path(__file__).resolve().parent.parent
__all__ = ["provider", "spans"]  # fixtures


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "chk.db")


def test_nothing_is_recorded_without_a_provider() -> None:
    assert not tracing()
    assert operation("memory.record", Target("sqlite")) is IDLE


def test_each_saver_operation_is_a_span_with_the_database_conventions(
    spans: InMemorySpanExporter, url: str
) -> None:
    with sql_checkpointer(url) as saver:
        config = config_for("t-1")
        saved = saver.put(config, empty_checkpoint(), {"step": -1}, {})
        saver.put_writes(saved, [("x", 1)], task_id="task")
        assert saver.get_tuple(config) is not None
        assert saver.get_tuple(config_for("nobody")) is None
    got = [(s.name, s.kind, s.attributes) for s in on(spans, CHECKPOINT_TABLES)]
    assert [n for n, _, _ in got] == [  # {db.operation.name} {db.collection.name}
        "put am_checkpoints",
        "put_writes am_checkpoint_writes",
        "get_tuple am_checkpoints",
        "get_tuple am_checkpoints",
    ]
    system = "sqlite" if url.startswith("sqlite") else "postgresql"
    for name, kind, attrs in got:
        assert attrs is not None and kind is SpanKind.CLIENT
        assert attrs["db.system.name"] == system
        assert f"{attrs['db.operation.name']!s} {attrs['db.collection.name']!s}" == name
        assert attrs["db.namespace"]
    if system == "sqlite":
        assert got[0][2] is not None and got[0][2]["db.namespace"] == url.split("///", 1)[1]
    else:  # {database}, the conninfo's (no schema option)
        assert got[0][2] is not None and str(got[0][2]["db.namespace"]) in url
    assert got[0][2] is not None and got[0][2]["langgraph.thread_id"] == "t-1"
    assert [a["db.response.returned_rows"] for _, _, a in got[2:] if a] == [1, 0]


async def test_async_operations_are_spans_too(spans: InMemorySpanExporter, url: str) -> None:
    saver = sql_checkpointer(url)
    try:
        config = config_for("t-2")
        saved = await saver.aput(config, empty_checkpoint(), {"step": -1}, {})
        await saver.aput_writes(saved, [("x", 1)], task_id="task")
        assert await saver.aget_tuple(config) is not None
    finally:
        await saver.aclose()
    names = [s.name for s in on(spans, CHECKPOINT_TABLES)]
    assert names == [
        "put am_checkpoints",
        "put_writes am_checkpoint_writes",
        "get_tuple am_checkpoints",
    ]


def test_thread_ids_are_left_out_with_encryption_on(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with sql_checkpointer(url, encryption=generate_master_key()) as saver:
        config = config_for("alice-private")
        saver.put(config, empty_checkpoint(), {"step": -1}, {})
        saver.get_tuple(config)
    for span in on(spans, CHECKPOINT_TABLES):
        assert span.attributes is not None
        assert "langgraph.thread_id" not in span.attributes
        assert "alice-private" not in str(dict(span.attributes))


def test_a_failed_operation_is_an_error_span(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with sql_checkpointer(url) as saver, pytest.raises(Exception) as raised:
        saver.put({"configurable": {}}, empty_checkpoint(), {}, {})  # no thread_id
    [span] = named(spans, "put am_checkpoints")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    kind = type(raised.value)
    assert span.attributes["error.type"] == f"{kind.__module__}.{kind.__qualname__}"
    assert any(e.name == "exception" for e in span.events)


class State(TypedDict):
    n: int


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def test_spans_are_children_of_the_applications_span(
    spans: InMemorySpanExporter, provider: TracerProvider, tmp_path: Path
) -> None:
    app = provider.get_tracer("app")
    with sql_checkpointer(f"sqlite:///{tmp_path / 'g.db'}") as saver:
        graph = _graph(saver)
        with app.start_as_current_span("handle-request") as root:
            graph.invoke({"n": 1}, {"configurable": {"thread_id": "g"}})
    ours = on(spans, CHECKPOINT_TABLES)
    assert {s.name for s in ours} >= {"get_tuple am_checkpoints", "put am_checkpoints"}
    root_id = root.get_span_context().span_id
    # LangGraph opens no OpenTelemetry span of its own here: ours are the request's children
    assert all(s.parent is not None and s.parent.span_id == root_id for s in ours)
    trace_id = root.get_span_context().trace_id
    assert all(s.context is not None and s.context.trace_id == trace_id for s in ours)


def test_listing_deleting_pruning_and_sweeping_are_spans(
    spans: InMemorySpanExporter, url: str
) -> None:
    with sql_checkpointer(url, ttl_seconds=3600) as saver:
        saved = saver.put(config_for("a"), empty_checkpoint(), {"step": -1}, {})
        saver.put(saved, empty_checkpoint(), {"step": 0}, {})
        assert len(list(saver.list(config_for("a")))) == 2
        saver.prune(["a"], keep_last=1)
        saver.delete_thread("a")
        saver.sweep()
    by_name = {s.name: s.attributes for s in on(spans, CHECKPOINT_TABLES)}
    assert {"list am_checkpoints", "prune am_checkpoints", "delete_thread am_checkpoints"} <= set(
        by_name
    )
    assert "sweep am_threads" in by_name
    listed = by_name["list am_checkpoints"]
    assert listed is not None and listed["db.response.returned_rows"] == 2
    deleted = by_name["delete_thread am_checkpoints"]
    assert deleted is not None and deleted["langgraph.thread_id"] == "a"
    swept = by_name["sweep am_threads"]
    assert swept is not None and swept["agent_memory.thread_count"] == 0


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "store.db")


def test_store_operations_are_spans(spans: InMemorySpanExporter, store_url: str | None) -> None:
    with create_store(store_url) as store:
        store.put(("users", "alice"), "prefs", {"food": "ramen"})
        assert store.get(("users", "alice"), "prefs") is not None
        assert len(store.search(("users",), query="ramen")) == 1
        store.list_namespaces(prefix=("users",))
        store.delete(("users", "alice"), "prefs")
        with pytest.raises(InvalidValueError):
            store.put(("users", "alice"), "k", {"x": float("nan")})
    got = [(s.name, s.attributes, s.status.status_code) for s in on(spans, STORE_TABLES)]
    assert [n.split()[0] for n, _, _ in got] == [
        "put",
        "get",
        "search",
        "list_namespaces",
        "delete",
        "put",
    ]
    system = "postgresql" if store_url and store_url.startswith("postgresql") else "sqlite"
    for name, attrs, _ in got:
        assert attrs is not None and attrs["db.system.name"] == system
        assert name == f"{attrs['db.operation.name']!s} am_store_items"
    assert got[0][1] is not None and got[0][1]["agent_memory.namespace"] == "users.alice"
    assert got[-1][2] is StatusCode.ERROR


async def test_async_store_operations_are_spans_without_namespaces_when_encrypted(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    async with create_store(url, encryption=generate_master_key()) as store:
        await store.aput(("users", "alice"), "prefs", {"food": "ramen"})
        await store.asearch(("users", "alice"))
    got = on(spans, STORE_TABLES)
    assert [s.name for s in got] == ["put am_store_items", "search am_store_items"]
    assert all(
        s.attributes is not None and "agent_memory.namespace" not in s.attributes for s in got
    )


def run_script(code: str, *args: str) -> str:
    """Run ``code`` in a Python process of its own; what it printed (it must succeed)."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


GLOBAL_PROVIDER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from langgraph.checkpoint.base import empty_checkpoint
from langgraph_checkpoint_agent_memory import create_checkpointer

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # as an application configures OpenTelemetry
saver = create_checkpointer(url=sys.argv[1])
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
saver.put(config, empty_checkpoint(), {}, {})
print(",".join(s.name for s in exporter.get_finished_spans()))
"""


def test_the_global_tracer_provider_is_used_once_the_application_sets_it(
    tmp_path: Path,
) -> None:
    # in a process of its own: OpenTelemetry's global provider can be set once per process
    printed = run_script(GLOBAL_PROVIDER, f"sqlite:///{tmp_path / 'g.db'}")
    assert printed.strip().splitlines()[-1] == "put am_checkpoints"


async def test_the_in_memory_saver_has_the_same_spans(spans: InMemorySpanExporter) -> None:
    clock = [1_000_000.0]
    with TimedInMemorySaver(ttl_seconds=60, clock=lambda: clock[0]) as saver:
        config = config_for("mem-1")
        saved = saver.put(config, empty_checkpoint(), {"step": -1}, {})
        await saver.aput_writes(saved, [("x", 1)], task_id="task")
        assert await saver.aget_tuple(config) is not None
        assert len(list(saver.list(config))) == 1
        saver.prune(["mem-1"], keep_last=1)
        clock[0] += 3600
        assert saver.sweep() == 1
        saver.delete_thread("mem-1")
    got = {s.name: dict(s.attributes or {}) for s in named(spans, "checkpoint.")}
    assert set(got) == {
        "checkpoint.put",
        "checkpoint.put_writes",
        "checkpoint.get_tuple",
        "checkpoint.list",
        "checkpoint.prune",
        "checkpoint.sweep",
        "checkpoint.delete_thread",
    }
    assert all("db.system.name" not in a for a in got.values())  # no database: internal
    assert all(
        str(a["agent_memory.operation.name"]).startswith("checkpoint.") for a in got.values()
    )
    assert got["checkpoint.put"]["langgraph.thread_id"] == "mem-1"
    assert got["checkpoint.get_tuple"]["db.response.returned_rows"] == 1
    assert got["checkpoint.list"]["db.response.returned_rows"] == 1
    assert got["checkpoint.sweep"]["agent_memory.thread_count"] == 1


WITHOUT_OPENTELEMETRY = """
import sys
sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed
from langgraph.checkpoint.base import empty_checkpoint
from langgraph_checkpoint_agent_memory import AgentMemory, create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.telemetry import metrics, tracing

saver = create_checkpointer(url=sys.argv[1])
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
saver.put(config, empty_checkpoint(), {}, {})
assert saver.get_tuple(config) is not None
memory = AgentMemory(create_store())
memory.record("user=a", [{"role": "user", "content": "I live in Paris"}])
assert memory.consolidate().completed == 1
print(tracing.tracing(), tracing.live(), metrics.instruments())
"""


def test_everything_works_without_opentelemetry_installed(tmp_path: Path) -> None:
    printed = run_script(WITHOUT_OPENTELEMETRY, f"sqlite:///{tmp_path / 'n.db'}")
    assert printed.split() == ["False", "False", "None"]


async def test_async_graph_spans_are_children_of_the_applications_span(
    spans: InMemorySpanExporter, provider: TracerProvider, tmp_path: Path
) -> None:
    app = provider.get_tracer("app")
    saver = sql_checkpointer(f"sqlite:///{tmp_path / 'ag.db'}")
    try:
        graph = _graph(saver)
        with app.start_as_current_span("handle-request") as root:
            await graph.ainvoke({"n": 1}, {"configurable": {"thread_id": "ag"}})
    finally:
        await saver.aclose()
    ours = on(spans, CHECKPOINT_TABLES)
    assert {s.name for s in ours} >= {"get_tuple am_checkpoints", "put am_checkpoints"}
    root_id = root.get_span_context().span_id
    assert all(s.parent is not None and s.parent.span_id == root_id for s in ours)


def test_a_database_error_carries_its_status_code(spans: InMemorySpanExporter, url: str) -> None:
    with sql_checkpointer(url) as saver:
        config = config_for("t-e")
        saver.put(config, empty_checkpoint(), {"step": -1}, {})
        rename_table(url, "am_checkpoints", "am_checkpoints_gone")
        with pytest.raises(Exception) as raised:
            saver.get_tuple(config)
    [failed] = [s for s in on(spans, CHECKPOINT_TABLES) if s.status.status_code is StatusCode.ERROR]
    assert failed.attributes is not None
    # SQLite's result code (SQLITE_ERROR: no such table), PostgreSQL's SQLSTATE (undefined_table)
    code = "1" if url.startswith("sqlite") else "42P01"
    assert failed.attributes["db.response.status_code"] == code
    kind = type(raised.value)  # the exception raised to the caller, fully qualified
    assert failed.attributes["error.type"] == f"{kind.__module__}.{kind.__qualname__}"


NOT_IMPORTED = """
import sys
from langgraph.checkpoint.base import empty_checkpoint
from langgraph_checkpoint_agent_memory import TimedInMemorySaver, create_checkpointer

config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
for saver in (create_checkpointer(), TimedInMemorySaver(ttl_seconds=60)):
    saver.put(config, empty_checkpoint(), {}, {})
    assert saver.get_tuple(config) is not None
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_opentelemetry_is_not_imported_while_the_application_sets_up_none() -> None:
    # a global provider can only be set by a process that imported the API: until then
    # the package has no reason to import it (its import costs every process that never traces)
    assert run_script(NOT_IMPORTED).strip().splitlines()[-1] == "[]"
