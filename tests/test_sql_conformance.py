"""langgraph-checkpoint-conformance on the SQL saver: every capability, SQLite and PostgreSQL,
through the async API and through the sync API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from langgraph_checkpoint_agent_memory import SQLSaver, generate_master_key
from tests.helpers import sync_through_async
from tests.pg import backend_params


@pytest.fixture(params=backend_params("sqlite", "postgres", "pgbouncer", "citus"))
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, each PostgreSQL server, PgBouncer in transaction mode and the Citus cluster
    (tests/pg.py)."""
    return str(request.param)


@pytest.mark.parametrize("api", ["async", "sync"])
async def test_every_capability_passes(
    make_saver: Callable[..., SQLSaver], backend: str, api: str
) -> None:
    @checkpointer_test(name=f"{backend}-{api}")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        saver = make_saver(ttl_seconds=3600)
        yield sync_through_async(saver) if api == "sync" else saver

    report = await validate(factory)
    detected = {name for name, result in report.results.items() if result.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}
    failures = {n: r.failures for n, r in report.results.items() if r.failures}
    assert report.passed_all(), failures
    assert sum(r.tests_passed for r in report.results.values()) == 81


def _encrypted_cases() -> list[Any]:
    """``(backend, api)`` of the encrypted run: both APIs on SQLite and the first PostgreSQL
    server, the async one through PgBouncer and on Citus (where a new key takes its own
    transaction); not the second server again (encryption uses nothing that tells the
    servers apart), to keep the suite's time."""
    cases = []
    servers = list(backend_params("postgres"))
    for param in backend_params("sqlite", "postgres", "pgbouncer", "citus"):
        value = str(param.values[0] if hasattr(param, "values") else param)
        marks = getattr(param, "marks", ())
        second_server = param in servers[1:]
        apis = [] if second_server else ["async", "sync"]
        if value.endswith(("pgbouncer", "citus")):
            apis = ["async"]
        cases += [pytest.param(value, api, marks=marks, id=f"{value}-{api}") for api in apis]
    return cases


@pytest.mark.parametrize(("backend", "api"), _encrypted_cases(), indirect=["backend"])
async def test_every_capability_passes_encrypted(
    make_saver: Callable[..., SQLSaver], backend: str, api: str
) -> None:
    """The same suite with encryption on (every value, write and metadata sealed), on
    SQLite, PostgreSQL, PgBouncer and Citus."""
    master = generate_master_key()

    @checkpointer_test(name=f"{backend}-{api}-encrypted")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        saver = make_saver(ttl_seconds=3600, encryption=master)
        assert saver.keyring is not None
        yield sync_through_async(saver) if api == "sync" else saver

    report = await validate(factory)
    failures = {n: r.failures for n, r in report.results.items() if r.failures}
    assert report.passed_all(), failures
    assert sum(r.tests_passed for r in report.results.values()) == 81
