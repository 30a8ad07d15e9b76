"""OpenTelemetry SDK fixtures for the telemetry tests: a tracer provider with an in-memory
exporter and a meter provider with an in-memory reader, each of the test's own, given to
the package (global providers can be set once per process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_checkpoint_agent_memory.telemetry.metrics import use_meter_provider
from langgraph_checkpoint_agent_memory.telemetry.tracing import use_tracer_provider


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """A tracer provider of this test's own, given to the package."""
    provider = TracerProvider()
    use_tracer_provider(provider)
    yield provider
    use_tracer_provider(None)
    provider.shutdown()


@pytest.fixture
def spans(provider: TracerProvider) -> InMemorySpanExporter:
    """The spans of this test."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """The metrics of this test: a meter provider of its own, read on demand."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    use_meter_provider(meters)
    yield reader
    use_meter_provider(None)
    meters.shutdown()


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    """The finished spans whose names start with ``prefix``, in the order they ended."""
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


#: The tables of the checkpointer's and the store's operations (``db.collection.name``).
CHECKPOINT_TABLES = ("am_checkpoints", "am_checkpoint_writes", "am_threads")
STORE_TABLES = ("am_store_items",)


def on(exporter: InMemorySpanExporter, tables: tuple[str, ...]) -> list[ReadableSpan]:
    """The finished database spans about one of ``tables``, in the order they ended."""
    return [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("db.collection.name") in tables
    ]


def rename_table(url: str, table: str, to: str) -> None:
    """Rename ``table`` of the database at ``url`` behind the package's back (its next
    statement on it fails in the database, with the database's error code)."""
    import sqlite3

    import psycopg

    rename = f"ALTER TABLE {table} RENAME TO {to}"
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            conn.execute(rename)
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(rename)


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    """The data points of the metric ``name`` read now (none when nothing was recorded)."""
    data = reader.get_metrics_data()
    found: list[Any] = []
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += list(metric.data.data_points)
    return found


def total(reader: InMemoryMetricReader, name: str, **where: Any) -> float:
    """The sum of the points of counter ``name`` (or the count of histogram ``name``) whose
    attributes include ``where``."""
    selected = [
        p for p in points(reader, name) if all(p.attributes.get(k) == v for k, v in where.items())
    ]
    return float(sum(_amount(p) for p in selected))


def _amount(point: Any) -> float:
    """A histogram point's count, or a counter point's value."""
    count = getattr(point, "count", None)
    return float(count if count is not None else point.value)
