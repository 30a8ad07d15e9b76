"""OpenTelemetry spans of agent memory: record, consolidate (a span per job, the extractor
call its child), recall, build_context, the graph nodes, decay, erase and the tools, on
memory, SQLite and PostgreSQL, sync and async; scopes left out when the store encrypts;
a failed job an error span."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from langgraph_checkpoint_agent_memory import AgentMemory, create_store, generate_master_key
from langgraph_checkpoint_agent_memory.memory import CallableExtractor
from langgraph_checkpoint_agent_memory.memory.extract import ExtractionError
from tests.otel import named, provider, spans
from tests.pg import backend_params, backend_url

__all__ = ["provider", "spans"]  # fixtures

SAID = [{"role": "user", "content": "I live in Paris"}]


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "memory.db")


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in named(exporter, "memory."):
        found.setdefault(span.name, []).append(span)
    return found


def parent_of(span: ReadableSpan, among: list[ReadableSpan]) -> ReadableSpan | None:
    assert span.parent is not None
    return next((s for s in among if s.context.span_id == span.parent.span_id), None)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_each_memory_operation_is_a_span(
    spans: InMemorySpanExporter, store_url: str | None
) -> None:
    with create_store(store_url) as store:
        memory = AgentMemory(store)
        memory.record("user=alice", SAID, thread_id="t1")
        report = memory.consolidate()
        assert report.completed == 1
        assert "Paris" in memory.build_context("user=alice", "where do I live?")
        memory.decay()
        memory.erase("user=alice")
    found = by_name(spans)
    assert set(found) >= {
        "memory.record",
        "memory.consolidate",
        "memory.consolidate.job",
        "memory.extract",
        "memory.build_context",
        "memory.recall",
        "memory.decay",
        "memory.erase",
    }
    system = "postgresql" if store_url and store_url.startswith("postgresql") else "sqlite"
    everything = named(spans, "memory.")
    for span in everything:
        assert attrs(span)["db.system.name"] == system
        assert attrs(span)["agent_memory.operation.name"] == span.name
    assert attrs(found["memory.record"][0])["agent_memory.scope"] == "user=alice"
    [job], [extract], [consolidate] = (
        found["memory.consolidate.job"],
        found["memory.extract"],
        found["memory.consolidate"],
    )
    assert parent_of(extract, everything) is job  # the extractor call is the job's child
    assert parent_of(job, everything) is consolidate
    assert attrs(job)["agent_memory.job.status"] == "completed"
    assert attrs(job)["agent_memory.added_count"] == 1
    assert attrs(job)["agent_memory.scope"] == "user=alice"
    assert attrs(consolidate)["agent_memory.completed_count"] == 1
    [recall] = found["memory.recall"]
    assert parent_of(recall, everything) is found["memory.build_context"][0]
    assert attrs(recall)["agent_memory.fact_count"] == 1
    assert attrs(found["memory.erase"][0])["agent_memory.scope_count"] == 1


async def test_async_operations_are_the_same_spans(
    spans: InMemorySpanExporter, store_url: str | None
) -> None:
    async with create_store(store_url) as store:
        memory = AgentMemory(store)
        await memory.arecord("user=bob", SAID)
        await memory.aconsolidate()
        await memory.abuild_context("user=bob", "where?")
        await memory.adecay()
        await memory.aerase("user=bob")
    everything = named(spans, "memory.")
    names = [s.name for s in everything]
    for name in ("record", "consolidate", "consolidate.job", "extract", "recall", "erase"):
        assert f"memory.{name}" in names
    [job] = [s for s in everything if s.name == "memory.consolidate.job"]
    [extract] = [s for s in everything if s.name == "memory.extract"]
    assert parent_of(extract, everything) is job


def _failing(prompt: str) -> str:
    raise RuntimeError("model unavailable")


def test_a_failed_job_is_an_error_span_with_the_extractors_exception(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    with create_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        memory = AgentMemory(store, extractor=CallableExtractor(_failing))
        memory.record("user=alice", SAID)
        assert memory.consolidate().failed == 1
    found = by_name(spans)
    [job], [extract] = found["memory.consolidate.job"], found["memory.extract"]
    assert job.status.status_code is StatusCode.ERROR
    assert attrs(job)["error.type"] == "job_failed"
    assert "model unavailable" in (job.status.description or "")
    assert extract.status.status_code is StatusCode.ERROR
    # the model's error, wrapped; OpenTelemetry's error.type is the class's qualified name
    assert attrs(extract)["error.type"] == f"{ExtractionError.__module__}.ExtractionError"
    assert any(e.name == "exception" for e in extract.events)


def test_scopes_are_left_out_when_the_store_encrypts(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with create_store(url, encryption=generate_master_key()) as store:
        memory = AgentMemory(store)
        memory.record("user=alice-private", SAID)
        memory.consolidate()
        memory.build_context("user=alice-private", "where?")
    everything = named(spans, "memory.")
    assert len(everything) >= 5
    for span in everything:
        assert "agent_memory.scope" not in attrs(span)
        assert "alice-private" not in str(attrs(span))


def test_graph_nodes_and_tools_are_spans_under_the_applications_span(
    spans: InMemorySpanExporter, provider: TracerProvider, tmp_path: Path
) -> None:
    with create_store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        memory = AgentMemory(store)
        builder = StateGraph(MessagesState)
        builder.add_node("inject", memory.inject_node)
        builder.add_node("record", memory.record_node)
        builder.add_edge(START, "inject")
        builder.add_edge("inject", "record")
        builder.add_edge("record", END)
        graph = builder.compile(checkpointer=InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": "t", "user_id": "carol"}}
        with provider.get_tracer("app").start_as_current_span("request") as root:
            graph.invoke({"messages": [HumanMessage("I live in Oslo")]}, config)
            memory.consolidate()
            search, remember, forget = memory.tools()
            assert "Oslo" in search.invoke({"query": "where do I live"}, config)
            remember.invoke({"attribute": "city", "value": "Rome"}, config)
            forget.invoke({"attribute": "city"}, config)
    found = by_name(spans)
    assert set(found) >= {
        "memory.inject",
        "memory.record",
        "memory.tool.search_memory",
        "memory.tool.remember_fact",
        "memory.tool.forget_fact",
    }
    trace_id = root.get_span_context().trace_id
    for span in named(spans, "memory."):
        assert span.context.trace_id == trace_id
    [inject] = found["memory.inject"]
    assert inject.parent is not None
    assert inject.parent.span_id == root.get_span_context().span_id
    [recall] = [s for s in found["memory.recall"] if parent_of(s, [inject]) is inject]
    assert attrs(recall)["agent_memory.scope"] == "user=carol"
    assert attrs(inject)["agent_memory.scope"] == "user=carol"
    assert attrs(found["memory.tool.remember_fact"][0])["agent_memory.scope"] == "user=carol"


def _telling(prompt: str) -> str:
    raise RuntimeError("Alice Secretname lives at 12 Rue Privee")  # a model quoting a user


def test_an_encrypted_memory_keeps_error_messages_out_of_its_spans(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'sealed-errors.db'}"
    with create_store(url, encryption=generate_master_key()) as store:
        memory = AgentMemory(store, extractor=CallableExtractor(_telling))
        memory.record("user=alice", SAID)
        assert memory.consolidate().failed == 1
    found = by_name(spans)
    [job], [extract] = found["memory.consolidate.job"], found["memory.extract"]
    for span in (job, extract):
        assert span.status.status_code is StatusCode.ERROR  # still an error, by its type
        assert "error.type" in attrs(span)
        assert "Secretname" not in (span.status.description or "")
        assert not span.events  # no exception event: its message may quote the user
    assert "Secretname" not in str([attrs(s) for s in named(spans, "")])
