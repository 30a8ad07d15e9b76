"""A thread that was deleted, expired or swept starts afresh on its next run, on every backend:
LangGraph sends a fresh run's ``put_writes`` while its first ``put`` is still on its way, so
either may arrive first, and both must be accepted with nothing lost. A late write that names
a checkpoint of the ended history is still refused: nothing resurrects it."""

from __future__ import annotations

import asyncio
import operator
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import ThreadDeletedError, TimedInMemorySaver
from tests.helpers import FakeClock, config_for, make_checkpoint
from tests.pg import backend_params, is_postgres, pg_database

ROOT = Path(__file__).resolve().parent.parent


class SaverFactory:
    """Opens savers of one backend on one database (``url``; ``None`` for the in-memory
    saver) and remembers them, to close them at the end."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self.opened: list[Any] = []

    def __call__(self, **kwargs: Any) -> Any:
        if self.url is None:
            saver: Any = TimedInMemorySaver(**{"ttl_seconds": 3600, **kwargs})
        else:
            from langgraph_checkpoint_agent_memory.checkpoint.backends import (
                PostgresSaver,
                SqliteSaver,
            )

            cls = SqliteSaver if self.url.startswith("sqlite") else PostgresSaver
            saver = cls(self.url, **kwargs)
        self.opened.append(saver)
        return saver


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def saver_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SaverFactory]:
    """Savers of one backend on one database, all closed at the end."""
    url = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
    elif is_postgres(request.param):
        url = pg_database(request, request.param)
    make = SaverFactory(url)
    yield make
    for saver in make.opened:
        saver.close()


def _end(saver: Any, how: str, clock: FakeClock, thread: str) -> None:
    if how == "delete":
        saver.delete_thread(thread)
    else:  # idle past the TTL; "sweep" also removes it
        clock.advance(120)
        if how == "sweep":
            saver.sweep()


@pytest.mark.parametrize("how", ["delete", "expire", "sweep"])
@pytest.mark.parametrize("writes_first", [True, False])
def test_a_fresh_start_is_accepted_in_either_order(
    saver_factory: SaverFactory, how: str, writes_first: bool
) -> None:
    clock = FakeClock(start=1_000_000.0)
    saver = saver_factory(ttl_seconds=60, clock=clock)
    old = saver.put(config_for("t"), make_checkpoint({"x": ["old"]}, step=1), {}, {"x": 1})
    saver.put_writes(old, [("x", "old write")], "task-old")
    _end(saver, how, clock, "t")

    fresh = make_checkpoint({"x": ["new"]}, step=1)  # a newer id, as a new run makes
    fresh_config = config_for("t", fresh["id"])

    def writes() -> None:
        saver.put_writes(fresh_config, [("x", "new write")], "task-new")

    def put() -> Any:
        return saver.put(config_for("t"), fresh, {}, {"x": 1})

    if writes_first:
        writes()
        stored = put()
    else:
        stored = put()
        writes()
    got = saver.get_tuple(config_for("t"))
    assert got is not None and got.config == stored
    assert got.checkpoint["channel_values"] == {"x": ["new"]}
    assert got.pending_writes == [("task-new", "x", "new write")]
    assert [t.checkpoint["id"] for t in saver.list(config_for("t"))] == [fresh["id"]]

    # the ended history stays ended: late writes that name it are refused
    with pytest.raises(ThreadDeletedError):
        saver.put_writes(old, [("x", "late")], "task-late")
    with pytest.raises(ThreadDeletedError):
        saver.put(old, make_checkpoint({"x": ["late"]}, step=2, version=2), {}, {"x": 2})
    assert saver.get_tuple(old) is None
    assert saver.get_tuple(config_for("t")).pending_writes == [("task-new", "x", "new write")]


async def test_a_fresh_start_through_the_async_api(saver_factory: SaverFactory) -> None:
    saver = saver_factory()
    old = await saver.aput(config_for("t"), make_checkpoint({"x": ["old"]}, step=1), {}, {"x": 1})
    await saver.adelete_thread("t")
    fresh = make_checkpoint({"x": ["new"]}, step=1)
    await saver.aput_writes(config_for("t", fresh["id"]), [("x", "w")], "task")
    await saver.aput(config_for("t"), fresh, {}, {"x": 1})
    got = await saver.aget_tuple(config_for("t"))
    assert got.checkpoint["channel_values"] == {"x": ["new"]}
    assert got.pending_writes == [("task", "x", "w")]
    with pytest.raises(ThreadDeletedError):
        await saver.aput_writes(old, [("x", "late")], "late")


class State(TypedDict):
    turns: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("think", lambda s: {"turns": ["think"]})
    builder.add_node("reply", lambda s: {"turns": ["reply"]})
    builder.add_edge(START, "think")
    builder.add_edge("think", "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


SWEEPER = """
import sys, time
from pathlib import Path
from langgraph_checkpoint_agent_memory import create_checkpointer
clock_file = Path(sys.argv[2])
saver = create_checkpointer(
    url=sys.argv[1], ttl_seconds=20, clock=lambda: float(clock_file.read_text())
)
print("ready", flush=True)
for _ in range(100_000):  # bounded; the test ends it sooner
    saver.sweep()
    time.sleep(0.002)
"""


class SharedClock:
    """A fake clock the test advances between rounds, readable from another process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.now = 1_000_000.0
        self.advance(0)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        fresh = self.path.with_suffix(".new")
        fresh.write_text(repr(self.now))
        fresh.replace(self.path)  # atomic: the other process never reads half a number


ROUNDS = 30
WORKERS = 6


@pytest.mark.parametrize("api", ["sync", "async"])
def test_many_fresh_starts_with_sweepers_in_this_and_another_process(
    saver_factory: SaverFactory, tmp_path: Path, api: str
) -> None:
    """Workers run conversations on threads of their own, round after round, and end them
    at random: by deleting them, or (between rounds, when the clock jumps past the 20 s
    TTL) by expiry, while a sweeper in this process and one in another remove expired
    threads. Every invoke succeeds, under every durability mode, and each sees exactly the
    turns it should: a fresh start after a delete or an expiry, the whole thread
    otherwise."""
    url = saver_factory.url
    clock = SharedClock(tmp_path / "clock")
    saver = saver_factory(ttl_seconds=20, clock=clock)
    graph = _graph(saver)
    sweeper = None
    if url is not None:
        saver.setup()
        sweeper = subprocess.Popen(
            [sys.executable, "-c", SWEEPER, url, str(clock.path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert sweeper.stdout is not None and sweeper.stdout.readline().strip() == "ready"
    stop = threading.Event()

    def sweep_here() -> None:
        while not stop.is_set():
            saver.sweep()
            stop.wait(0.002)

    local_sweeper = threading.Thread(target=sweep_here)
    local_sweeper.start()
    rng = random.Random(7)
    expected: dict[str, list[str]] = {}  # what each thread holds, by the test's own account
    outcomes: dict[str, list[str] | BaseException] = {}
    fresh_starts = {"delete": 0, "expiry": 0}
    ended_by: dict[str, str] = {}

    def run_sync(plan: list[tuple[str, str]]) -> None:
        def one(thread: str, durability: str) -> None:
            config = {"configurable": {"thread_id": thread}}
            try:
                outcomes[thread] = graph.invoke({"turns": ["hi"]}, config, durability=durability)[
                    "turns"
                ]
            except BaseException as exc:
                outcomes[thread] = exc

        workers = [threading.Thread(target=one, args=step) for step in plan]
        for t in workers:
            t.start()
        for t in workers:
            t.join()

    async def run_async(plan: list[tuple[str, str]]) -> None:
        async def one(thread: str, durability: str) -> None:
            config = {"configurable": {"thread_id": thread}}
            try:
                state = await graph.ainvoke({"turns": ["hi"]}, config, durability=durability)
                outcomes[thread] = state["turns"]
            except BaseException as exc:
                outcomes[thread] = exc

        await asyncio.gather(*(one(*step) for step in plan))

    async def rounds() -> None:
        for _ in range(ROUNDS):
            plan = [
                (f"w{w}-t{rng.randrange(3)}", rng.choice(["sync", "async", "exit"]))
                for w in range(WORKERS)
            ]
            outcomes.clear()
            if api == "sync":
                await asyncio.to_thread(run_sync, plan)
            else:
                await run_async(plan)
            for thread, _ in plan:
                got = outcomes[thread]
                assert not isinstance(got, BaseException), repr(got)
                fresh = thread not in expected
                if fresh and thread in ended_by:
                    fresh_starts[ended_by.pop(thread)] += 1
                expected[thread] = [*expected.get(thread, []), "hi", "think", "reply"]
                assert got == expected[thread], (thread, got)
                if rng.random() < 0.3:
                    if api == "sync":
                        saver.delete_thread(thread)
                    else:
                        await saver.adelete_thread(thread)
                    del expected[thread]
                    ended_by[thread] = "delete"
            if rng.random() < 0.3:  # every thread has been idle past the TTL
                clock.advance(25)
                for thread in expected:
                    ended_by[thread] = "expiry"
                expected.clear()

    try:
        asyncio.run(rounds())
    finally:
        stop.set()
        local_sweeper.join()
        if sweeper is not None:
            sweeper.kill()
            _, err = sweeper.communicate(timeout=30)
            assert "Traceback" not in err, err
    assert fresh_starts["delete"] > 10 and fresh_starts["expiry"] > 10, fresh_starts


def test_a_copy_into_a_deleted_thread_takes_writes_to_its_copied_history(
    saver_factory: SaverFactory,
) -> None:
    saver = saver_factory()
    # the source's checkpoint is older than the target's ended history
    source = saver.put(config_for("src"), make_checkpoint({"x": ["kept"]}, step=1), {}, {"x": 1})
    saver.put(config_for("dst"), make_checkpoint({"x": ["gone"]}, step=1), {}, {"x": 1})
    saver.delete_thread("dst")
    saver.copy_thread("src", "dst")
    copied = config_for("dst", source["configurable"]["checkpoint_id"])
    saver.put_writes(copied, [("x", "w")], "task")  # names a copied checkpoint: accepted
    assert saver.get_tuple(copied).pending_writes == [("task", "x", "w")]


def test_a_late_write_too_large_for_one_statement_is_refused_too(
    saver_factory: SaverFactory,
) -> None:
    """More rows than the one-statement write takes go through the generic statements; a
    late write there is refused as it is on the fast path, never dropped in silence."""
    saver = saver_factory()
    old = saver.put(config_for("t"), make_checkpoint({"x": ["old"]}, step=1), {}, {"x": 1})
    saver.delete_thread("t")
    saver.put(config_for("t"), make_checkpoint({"x": ["new"]}, step=1), {}, {"x": 1})
    with pytest.raises(ThreadDeletedError):
        saver.put_writes(old, [("x", i) for i in range(100)], "late")
