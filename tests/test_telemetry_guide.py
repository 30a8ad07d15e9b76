"""The user guide's telemetry tables are what the package emits: every span, attribute and
metric (with its unit) one run of every operation records, read from OpenTelemetry's
in-memory exporter and reader, is in the guide's tables, and everything the tables list is
recorded, so the two cannot drift apart."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import GetOp, PutOp
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_checkpoint_agent_memory import AgentMemory, TimedInMemorySaver, create_store
from langgraph_checkpoint_agent_memory.memory import CallableExtractor
from langgraph_checkpoint_agent_memory.telemetry import SCOPE
from tests.helpers import config_for, sql_checkpointer
from tests.otel import provider, reader, rename_table, spans
from tests.pg import backend_params, backend_url

__all__ = ["provider", "reader", "spans"]  # fixtures

T = TypeVar("T")
GUIDE = Path(__file__).resolve().parent.parent / "user-guide.md"
#: Attributes only a database with a server has (the SQLite run cannot emit them).
SERVER = {"server.address", "server.port"}


def table(header: str) -> list[list[list[str]]]:
    """The rows of the guide's table whose header row starts with ``header``, each cell's
    names in backticks (a table of the telemetry section)."""
    section = GUIDE.read_text().split("## Observability", 1)[1].split("\n## ", 1)[0]
    lines = section.split(f"\n| {header} |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [
        [re.findall(r"`([^`]+)`", cell) for cell in line.strip("|").split(" | ")] for line in lines
    ]


def documented_spans() -> dict[str, str]:
    """Each span the guide lists, with its kind."""
    return {name: kind[0] for names, kind, _ in table("span") for name in names}


def documented_attributes() -> set[str]:
    return {name for names, *_ in table("attribute") for name in names}


def documented_metrics() -> dict[str, str]:
    """Each metric the guide lists, with its unit."""
    return {name: unit[0] for (name,), unit, _ in table("metric")}


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "guide.db")


def _failing(prompt: str) -> str:
    raise RuntimeError("model unavailable")


def _favouring(query: str, texts: Sequence[str]) -> list[float]:
    return [float("Oslo" in t) for t in texts]


def _unreachable(query: str, texts: Sequence[str]) -> list[float]:
    raise ConnectionError("rerank service unreachable")


def run_everything(url: str, then: Callable[[], T]) -> T:
    """Every operation that records telemetry, once at least; what ``then()`` returns, called
    while the last database is still open (its pools are reported while it is)."""
    clock = [1_000_000.0]
    with sql_checkpointer(url, ttl_seconds=60, clock=lambda: clock[0]) as saver:
        saved = saver.put(config_for("a"), empty_checkpoint(), {"step": -1}, {})
        saver.put_writes(saved, [("x", 1)], task_id="task")
        saver.get_tuple(config_for("a"))
        list(saver.list(config_for("a")))
        saver.prune(["a"], keep_last=1)
        saver.delete_thread("a")
        saver.put(config_for("b"), empty_checkpoint(), {"step": -1}, {})
        clock[0] += 3600
        saver.sweep()
        rename_table(url, "am_checkpoints", "am_checkpoints_gone")
        with pytest.raises(Exception) as raised:  # the database's error, with its code
            saver.get_tuple(config_for("b"))
        assert raised.value is not None
    with TimedInMemorySaver(ttl_seconds=60, clock=lambda: clock[0]) as timed:
        saved = timed.put(config_for("m"), empty_checkpoint(), {"step": -1}, {})
        timed.put_writes(saved, [("x", 1)], task_id="task")
        timed.get_tuple(config_for("m"))
        list(timed.list(config_for("m")))
        timed.prune(["m"], keep_last=1)
        clock[0] += 3600
        timed.sweep()
        timed.delete_thread("m")
    with create_store(url, ttl={"default_ttl": 1}, clock=lambda: clock[0]) as store:
        store.put(("docs",), "a", {"text": "ramen in tokyo"})
        store.get(("docs",), "a")
        store.search(("docs",), query="ramen")
        store.list_namespaces()
        store.delete(("docs",), "a")
        store.batch([GetOp(("docs",), "a"), GetOp(("docs",), "b")])
        store.batch([GetOp(("docs",), "a"), PutOp(("docs",), "c", {"v": 1})])
        store.put(("docs",), "d", {"text": "soon expired"})
        clock[0] += 3600
        store.sweep()
    with create_store(url) as store:
        memory = AgentMemory(store, max_attempts=1)
        builder = StateGraph(MessagesState)
        builder.add_node("inject", memory.inject_node)
        builder.add_node("record", memory.record_node)
        builder.add_edge(START, "inject")
        builder.add_edge("inject", "record")
        builder.add_edge("record", END)
        config: RunnableConfig = {"configurable": {"thread_id": "t", "user_id": "carol"}}
        builder.compile().invoke({"messages": [HumanMessage("I live in Oslo")]}, config)
        memory.record("user=carol", [{"role": "user", "content": "I walked in Oslo"}])
        memory.consolidate()
        memory.recall("user=carol", "where do I live?", reranker=_favouring)
        memory.recall("user=carol", "where do I live?", reranker=_unreachable)
        memory.build_context("user=carol", "where do I live?")
        search, remember, forget = memory.tools()
        search.invoke({"query": "where do I live"}, config)
        remember.invoke({"attribute": "city", "value": "Rome"}, config)
        forget.invoke({"attribute": "city"}, config)
        memory.extractor = CallableExtractor(_failing)
        memory.record("user=bob", [{"role": "user", "content": "I live in Rome"}])
        memory.consolidate()  # a failed job, parked after its one attempt
        memory.record("user=dan", [{"role": "user", "content": "I live in Lima"}])
        memory.consolidate("user=nobody")  # a round that leaves dan's episode waiting
        memory.decay()
        memory.erase("user=carol")
        return then()


def of_database(attributes: Any, database: str) -> bool:
    """Whether a point is of this run's ``database``: the gauges read every database a live
    object still holds, earlier tests' included."""
    named = [attributes.get(k) for k in ("agent_memory.database", "db.client.connection.pool.name")]
    return all(database in str(n) for n in named if n is not None)


def emitted(
    spans: InMemorySpanExporter, reader: InMemoryMetricReader, database: str
) -> dict[str, Any]:
    ours = [
        s
        for s in spans.get_finished_spans()
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == SCOPE
    ]
    found: dict[str, Any] = {
        "spans": {s.name: s.kind.name.lower() for s in ours},
        "attributes": {key for s in ours for key in (s.attributes or {})},
        "metrics": {},
    }
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            if scope.scope.name != SCOPE:
                continue
            for metric in scope.metrics:
                found["metrics"][metric.name] = metric.unit
                for point in metric.data.data_points:
                    if of_database(point.attributes or {}, database):
                        found["attributes"] |= set(point.attributes or {})
    return found


def test_the_guides_tables_are_what_is_emitted(
    spans: InMemorySpanExporter, reader: InMemoryMetricReader, url: str
) -> None:
    database = url.rsplit("/", 1)[-1].split("?")[0]
    found = run_everything(url, lambda: emitted(spans, reader, database))
    assert found["spans"] == documented_spans()
    assert found["metrics"] == documented_metrics()
    missing = documented_attributes() - found["attributes"]
    assert missing == (SERVER if url.startswith("sqlite") else set())
    assert found["attributes"] <= documented_attributes()
