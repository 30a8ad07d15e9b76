"""langgraph-checkpoint-conformance on the in-memory savers, through the async and sync APIs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from langgraph_checkpoint_agent_memory import TimedInMemorySaver
from tests.helpers import sync_through_async


def timed() -> BaseCheckpointSaver[str]:
    return TimedInMemorySaver(3600)


def timed_sync() -> BaseCheckpointSaver[str]:
    return sync_through_async(TimedInMemorySaver(3600))


@pytest.mark.parametrize("make", [timed, timed_sync], ids=["async-api", "sync-api"])
async def test_every_capability_passes(make: Callable[[], BaseCheckpointSaver[str]]) -> None:
    @checkpointer_test(name=f"TimedInMemorySaver-{make.__name__}")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        saver = make()
        yield saver
        getattr(saver, "close", lambda: None)()

    report = await validate(factory)
    detected = {name for name, result in report.results.items() if result.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}
    failures = {n: r.failures for n, r in report.results.items() if r.failures}
    assert report.passed_all(), failures
    assert sum(r.tests_passed for r in report.results.values()) == 81
