"""OpenTelemetry metrics: operation durations by operation and backend, checkpoint bytes
written, what sweeps removed, consolidation jobs and backlog, connection pools and the
ranker's caches, on memory, SQLite and PostgreSQL, sync and async; nothing measured
without a meter provider."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    InvalidValueError,
    TimedInMemorySaver,
    create_store,
)
from langgraph_checkpoint_agent_memory.memory import CallableExtractor
from langgraph_checkpoint_agent_memory.telemetry import metrics
from tests.helpers import config_for, sql_checkpointer
from tests.otel import named, points, provider, reader, spans, total
from tests.pg import backend_params, backend_url

__all__ = ["provider", "reader", "spans"]  # fixtures

DURATION = "db.client.operation.duration"


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "m.db")


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "store.db")


def system_of(url: str | None) -> str:
    return "postgresql" if url and url.startswith("postgresql") else "sqlite"


def test_nothing_is_measured_without_a_meter_provider() -> None:
    assert not metrics.metering()
    assert metrics.instruments() is None


def test_saver_operations_are_measured_with_the_bytes_they_write(
    reader: InMemoryMetricReader, spans: InMemorySpanExporter, url: str
) -> None:
    with sql_checkpointer(url) as saver:
        config = config_for("t-1")
        saved = saver.put(config, empty_checkpoint(), {"step": -1}, {})
        saver.put_writes(saved, [("x", "a value of some length")], task_id="task")
        for _ in range(3):
            saver.get_tuple(config)
    system = system_of(url)
    where = {"db.system.name": system, "db.collection.name": "am_checkpoints"}
    assert total(reader, DURATION, **where, **{"db.operation.name": "put"}) == 1
    writes = {**where, "db.collection.name": "am_checkpoint_writes"}
    assert total(reader, DURATION, **writes, **{"db.operation.name": "put_writes"}) == 1
    assert total(reader, DURATION, **where, **{"db.operation.name": "get_tuple"}) == 3
    for point in points(reader, DURATION):
        assert point.sum >= 0 and "langgraph.thread_id" not in point.attributes
    # the bytes counted are the bytes each write's span reports
    said = [
        int(str(s.attributes["agent_memory.bytes_written"]))
        for s in named(spans, "put")
        if s.attributes
    ]
    assert len(said) == 2 and all(n > 0 for n in said)
    written = "agent_memory.checkpoint.bytes_written"
    assert total(reader, written, **{"db.system.name": system}) == sum(said)


async def test_async_operations_and_errors_are_measured(
    reader: InMemoryMetricReader, url: str
) -> None:
    saver = sql_checkpointer(url)
    try:
        await saver.aput(config_for("t-2"), empty_checkpoint(), {"step": -1}, {})
        with pytest.raises(Exception) as raised:
            await saver.aput({"configurable": {}}, empty_checkpoint(), {}, {})
    finally:
        await saver.aclose()
    put = {"db.operation.name": "put", "db.system.name": system_of(url)}
    kind = type(raised.value)
    failed = {**put, "error.type": f"{kind.__module__}.{kind.__qualname__}"}
    assert total(reader, DURATION, **failed) == 1
    assert total(reader, DURATION, **put) == 2  # the failed one included
    # a failed write stores nothing
    assert total(reader, "agent_memory.checkpoint.bytes_written") > 0


def test_sweeps_count_what_they_removed(reader: InMemoryMetricReader, url: str) -> None:
    clock = [1_000_000.0]
    with sql_checkpointer(url, ttl_seconds=60, clock=lambda: clock[0]) as saver:
        for thread in ("a", "b"):
            saver.put(config_for(thread), empty_checkpoint(), {"step": -1}, {})
        clock[0] += 3600
        assert sorted(saver.sweep()) == ["a", "b"]
    swept = "agent_memory.checkpoint.threads_swept"
    assert total(reader, swept, **{"db.system.name": system_of(url)}) == 2


def test_store_operations_sweeps_and_ranker_caches_are_measured(
    reader: InMemoryMetricReader, store_url: str | None
) -> None:
    clock = [1_000_000.0]
    with create_store(store_url, ttl={"default_ttl": 1}, clock=lambda: clock[0]) as store:
        store.put(("docs",), "a", {"text": "ramen in tokyo"})
        store.put(("docs",), "b", {"text": "pasta in rome"})
        for _ in range(3):
            assert store.search(("docs",), query="ramen")
        with pytest.raises(InvalidValueError):
            store.put(("docs",), "bad", {"x": float("nan")})
        clock[0] += 3600
        assert store.sweep() == 2
    system = system_of(store_url)
    store_ops = {"db.system.name": system, "db.collection.name": "am_store_items"}
    assert total(reader, DURATION, **store_ops, **{"db.operation.name": "put"}) == 3
    assert total(reader, DURATION, **store_ops, **{"db.operation.name": "search"}) == 3
    refused = f"{InvalidValueError.__module__}.InvalidValueError"
    assert total(reader, DURATION, **{"error.type": refused}) == 1
    assert total(reader, "agent_memory.store.items_swept", **{"db.system.name": system}) == 2
    cache = "agent_memory.ranker.cache.requests"
    statistics = {"agent_memory.cache.name": "text_statistics"}
    # the first search reads the namespace's statistics, the next two find them cached
    assert total(reader, cache, **statistics, **{"agent_memory.cache.hit": False}) == 1
    assert total(reader, cache, **statistics, **{"agent_memory.cache.hit": True}) == 2


def _failing(prompt: str) -> str:
    raise RuntimeError("model unavailable")


def test_consolidation_jobs_and_memory_operations_are_measured(
    reader: InMemoryMetricReader, store_url: str | None
) -> None:
    with create_store(store_url) as store:
        memory = AgentMemory(store, max_attempts=1)
        memory.record("user=alice", [{"role": "user", "content": "I live in Paris"}])
        assert memory.consolidate().completed == 1
        memory.extractor = CallableExtractor(_failing)
        memory.record("user=bob", [{"role": "user", "content": "I live in Rome"}])
        assert memory.consolidate().failed == 1
        memory.build_context("user=alice", "where?")
        memory.record("user=carol", [{"role": "user", "content": "I live in Oslo"}])
        memory.consolidate("user=nobody")  # a round that leaves carol's episode waiting
        database = store.db.describe()
    backlog = [
        p
        for p in points(reader, "agent_memory.consolidation.backlog")
        if p.attributes["agent_memory.database"] == database
    ]
    assert [p.value for p in backlog] == [1]
    [age] = [
        p
        for p in points(reader, "agent_memory.consolidation.oldest_pending_age")
        if p.attributes["agent_memory.database"] == database
    ]
    assert age.value >= 0
    jobs = "agent_memory.consolidation.jobs"
    assert total(reader, jobs, **{"agent_memory.job.status": "completed"}) == 1
    assert total(reader, jobs, **{"agent_memory.job.status": "parked"}) == 1
    durations = "agent_memory.operation.duration"
    system = {"db.system.name": system_of(store_url)}
    for name, count in (("memory.consolidate", 3), ("memory.consolidate.job", 2)):
        assert total(reader, durations, **system, **{"agent_memory.operation.name": name}) == count
    parked = [
        p
        for p in points(reader, "agent_memory.consolidation.parked")
        if p.attributes["agent_memory.database"] == database
    ]
    assert [p.value for p in parked] == [1]  # bob's episode, after its one attempt
    failed = {"agent_memory.operation.name": "memory.consolidate.job", "error.type": "job_parked"}
    assert total(reader, durations, **failed) == 1
    assert total(reader, durations, **{"agent_memory.operation.name": "memory.recall"}) == 1


@pytest.fixture(params=backend_params("postgres"))
def pg_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "unused")


def test_postgres_pools_report_their_connections(reader: InMemoryMetricReader, pg_url: str) -> None:
    async def use_async(saver: object) -> None:
        await saver.aget_tuple(config_for("t"))  # type: ignore[attr-defined]

    database = pg_url.rsplit("/", 1)[-1].split("?")[0]
    with sql_checkpointer(pg_url, pool_size=3) as saver:
        saver.put(config_for("t"), empty_checkpoint(), {"step": -1}, {})
        asyncio.run(use_async(saver))

        def ours(name: str) -> list[Any]:
            return [
                p
                for p in points(reader, name)
                if database in p.attributes["db.client.connection.pool.name"]
            ]

        counts = ours("db.client.connection.count")
        names = {p.attributes["db.client.connection.pool.name"] for p in counts}
        assert {n.rsplit(" ", 1)[-1] for n in names} == {"(sync)", "(async)"}, names
        idle = [p.value for p in counts if p.attributes["db.client.connection.state"] == "idle"]
        used = [p.value for p in counts if p.attributes["db.client.connection.state"] == "used"]
        assert sum(idle) >= 1 and sum(used) == 0  # every statement ended: connections back
        assert [p.value for p in ours("db.client.connection.max")] == [3, 3]
        assert [p.value for p in ours("db.client.connection.pending_requests")] == [0, 0]
        # each connection lent is a wait measured, on each pool
        waits = ours("db.client.connection.wait_time")
        assert {p.attributes["db.client.connection.pool.name"] for p in waits} == names
        assert all(p.count >= 1 and p.sum >= 0 for p in waits)


def test_a_sqlite_pool_reports_its_connections(
    reader: InMemoryMetricReader, tmp_path: Path
) -> None:
    with create_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.put(("a",), "k", {"v": 1})
        [count] = [
            p
            for p in points(reader, "db.client.connection.count")
            if str(tmp_path) in p.attributes["db.client.connection.pool.name"]
            and p.attributes["db.client.connection.state"] == "idle"
        ]
        assert count.value >= 1
        [waits] = [
            p
            for p in points(reader, "db.client.connection.wait_time")
            if str(tmp_path) in p.attributes["db.client.connection.pool.name"]
        ]
        assert waits.count >= 1 and waits.sum < 5


def _backlog_points(reader: InMemoryMetricReader, name: str, database: str) -> list[Any]:
    return [p for p in points(reader, name) if p.attributes["agent_memory.database"] == database]


def test_the_backlog_is_the_databases_and_its_age_grows(
    reader: InMemoryMetricReader, tmp_path: Path
) -> None:
    two_hours_ago = time.time() - 7200
    with create_store(f"sqlite:///{tmp_path / 'b.db'}") as store:
        database = store.db.describe()
        recorder = AgentMemory(store, clock=lambda: two_hours_ago)
        other = AgentMemory(store)  # a second memory on the same database, never consolidating
        assert _backlog_points(reader, "agent_memory.consolidation.backlog", database) == []
        recorder.record("user=a", [{"role": "user", "content": "I live in Oslo"}])
        recorder.consolidate("user=nobody")  # a round: the backlog is known from now on
        [pending] = _backlog_points(reader, "agent_memory.consolidation.backlog", database)
        assert pending.value == 1
        [age] = _backlog_points(reader, "agent_memory.consolidation.oldest_pending_age", database)
        assert age.value >= 7200  # measured at collection, not frozen at the round
        assert other.context.backlog is recorder.context.backlog


async def test_async_memory_and_the_in_memory_saver_are_measured(
    reader: InMemoryMetricReader,
) -> None:
    async with create_store() as store:
        memory = AgentMemory(store)
        await memory.arecord("user=a", [{"role": "user", "content": "I live in Oslo"}])
        assert (await memory.aconsolidate()).completed == 1
    with TimedInMemorySaver(ttl_seconds=60) as saver:
        await saver.aput(config_for("m"), empty_checkpoint(), {"step": -1}, {})
        await saver.aget_tuple(config_for("m"))
    jobs = "agent_memory.consolidation.jobs"
    assert total(reader, jobs, **{"agent_memory.job.status": "completed"}) == 1
    durations = "agent_memory.operation.duration"
    for name in ("memory.record", "memory.consolidate", "checkpoint.put", "checkpoint.get_tuple"):
        assert total(reader, durations, **{"agent_memory.operation.name": name}) == 1


def test_a_failing_meter_never_fails_an_operation(
    reader: InMemoryMetricReader,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    made = metrics.instruments()
    assert made is not None

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter broke")

    monkeypatch.setattr(made.db_duration, "record", broken)
    with create_store() as store:
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k") is not None
    assert [s.name for s in named(spans, "")] == ["put am_store_items", "get am_store_items"]
    assert "could not record" in caplog.text


def test_instruments_are_made_once_per_provider(tmp_path: Path) -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    mine = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[mine])
    try:
        metrics.use_meter_provider(provider)
        made = metrics.instruments()
        metrics.use_meter_provider(MeterProvider())  # another, then back
        assert metrics.instruments() is not made
        metrics.use_meter_provider(provider)
        assert metrics.instruments() is made
        with create_store(f"sqlite:///{tmp_path / 'once.db'}") as store:
            store.put(("a",), "k", {"v": 1})
            seen = [
                tuple(sorted(p.attributes.items()))
                for p in points(mine, "db.client.connection.count")
            ]
        assert seen and len(seen) == len(set(seen))  # each pool and state observed once
    finally:
        metrics.use_meter_provider(None)
        provider.shutdown()
