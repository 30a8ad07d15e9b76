"""The floor suite's own parts: the floor saver is a saver a graph runs on as on LangGraph's
``InMemorySaver``, and the statement counts read from a driver's trace are what our SQLite
saver sends (a put is one statement and one commit; a read commits nothing)."""

from __future__ import annotations

import asyncio
import importlib
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

floor: Any = importlib.import_module("benchmarks.suites.floor")


def _messages(saver: Any, turns: int, *, aio: bool) -> list[str]:
    invoke = floor._case(saver, "t", "async" if aio else "sync")
    for _ in range(turns):
        if aio:
            asyncio.run(invoke())
        else:
            invoke()
    found = saver.get_tuple({"configurable": {"thread_id": "t-long"}})
    return [m.content for m in found.checkpoint["channel_values"]["messages"]]


def test_a_graph_on_the_floor_saver_keeps_its_thread_as_on_in_memory_saver() -> None:
    for aio in (False, True):
        kept = _messages(floor.FloorSaver(), 4, aio=aio)
        # the input message keeps its id from turn to turn: each turn adds the reply
        assert len(kept) == 5
        assert kept == _messages(InMemorySaver(), 4, aio=aio)


def test_the_floor_saver_hands_back_the_objects_it_was_given() -> None:
    saver = floor.FloorSaver()
    _messages(saver, 2, aio=False)
    first = saver.get_tuple({"configurable": {"thread_id": "t-long"}})
    again = saver.get_tuple({"configurable": {"thread_id": "t-long"}})
    assert first.checkpoint is again.checkpoint
    named = {"configurable": {"thread_id": "t-long", "checkpoint_id": "not-the-latest"}}
    assert saver.get_tuple(named) is None
    assert [t.config for t in saver.list(None)] == [first.config]


def _per_call(backend: str, folder: Path, pg_url: str | None = None) -> dict[str, Any]:
    """Statements per call kind of three warm invokes of a long thread on ``backend``."""
    loop = asyncio.new_event_loop()
    try:
        with ExitStack() as stack:
            counts = floor.StatementCounts()
            saver = floor._counted_saver(
                stack, backend, "sync", folder, lambda: pg_url, counts, None, loop
            )
            invoke = floor._case(floor.Observed(saver, counts.hook), "t", "sync")
            invoke()
            counts.calls.clear()
            counts.counts.clear()
            for _ in range(3):
                invoke()
            per_call: dict[str, Any] = counts.per_call()
            return per_call
    finally:
        loop.close()


def test_a_warm_get_tuple_is_one_statement_on_postgres(tmp_path: Path, pg_url: str) -> None:
    per_call = _per_call("postgres", tmp_path, pg_url)
    assert per_call["get_tuple"]["statements"] == 1
    assert per_call["get_tuple"].get("commits", 0) == 0


def test_counted_statements_of_the_sqlite_saver(tmp_path: Path) -> None:
    per_call = _per_call("sqlite", tmp_path)
    assert set(per_call) == {"get_tuple", "put", "put_writes"}
    assert per_call["put"]["statements"] == per_call["put"]["commits"] == 1
    assert per_call["put_writes"]["commits"] == 1
    assert per_call["get_tuple"].get("commits", 0) == 0
    # one statement, so one snapshot with no BEGIN or COMMIT
    assert per_call["get_tuple"]["statements"] == 1
