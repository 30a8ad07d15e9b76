"""LangGraph's Agent Server (``langgraph dev``) on this package's checkpointer and store.

A real server process loads :mod:`langgraph_checkpoint_agent_memory.server`'s factories from
``langgraph.json``; a ``langgraph-sdk`` client drives threads, runs, state, history and the
store; the rows are read back from the package's own tables, and a thread expires by the
``ttl`` of ``langgraph.json``. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import langgraph_checkpoint_agent_memory as package
from langgraph_checkpoint_agent_memory import SQLSaver, create_checkpointer
from tests.pg import backend_params, libpq_url

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("langgraph_api") is None
    or importlib.util.find_spec("langgraph_sdk") is None,
    reason="the Agent Server is not installed (pip install 'langgraph-cli[inmem]' "
    "langgraph-sdk, both in the dev extra)",
)


@pytest.fixture(params=backend_params("sqlite", "postgres", "pgbouncer", "citus"))
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, each PostgreSQL server, and PgBouncer in transaction mode: the server gets
    ``AGENT_MEMORY_URL=...?prepare_threshold=none`` there."""
    return str(request.param)


#: Seconds to wait for anything the server does; the machine may be busy.
DEADLINE = 120.0

GRAPH = """
import operator
from typing import Annotated, TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    turns: Annotated[list[str], operator.add]


async def reply(state: State) -> dict:
    said = state["turns"][-1]
    # a store write without ttl: the store's default_ttl from langgraph.json applies
    await get_store().aput(("notes",), f"n{len(state['turns'])}", {"text": said})
    return {"turns": [f"echo: {said}"]}


builder = StateGraph(State)
builder.add_node("reply", reply)
builder.add_edge(START, "reply")
builder.add_edge("reply", END)
graph = builder.compile()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``langgraph dev`` in its own process group, and its log."""

    def __init__(self, folder: Path, memory_url: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        root = str(Path(package.__file__).resolve().parent.parent)  # this source tree
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_")}
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")])),
            AGENT_MEMORY_URL=memory_url,
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGSMITH_TRACING="false",
            LANGCHAIN_TRACING_V2="false",
        )
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "langgraph_cli",
                    "dev",
                    "--no-browser",
                    "--no-reload",
                    "--port",
                    str(self.port),
                    "--config",
                    "langgraph.json",
                ],
                cwd=folder,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + DEADLINE
        while True:
            if self.process.poll() is not None:
                pytest.fail(
                    f"langgraph dev exited with {self.process.returncode}:\n{self.output()}"
                )
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev not ready after {DEADLINE} s:\n{self.output()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM to the whole group (the server shuts down and closes the saver and the
        store), SIGKILL if it does not exit in time."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)


class Rows:
    """The package's tables, read with the database driver itself."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.url.startswith("sqlite:///"):
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as raw:
                return [tuple(r) for r in raw.execute(sql, params).fetchall()]
        import psycopg

        conninfo, kwargs = libpq_url(self.url)
        with psycopg.connect(conninfo, **kwargs) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not reached in {DEADLINE} s"
        await asyncio.sleep(0.2)


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[Server]:
    """The server on this test's database. ``langgraph.json`` names the factories as a file
    that re-exports them (SQLite) or by module path (PostgreSQL): both work."""
    (tmp_path / "graph.py").write_text(GRAPH)
    if database_url.startswith("sqlite"):
        (tmp_path / "backends.py").write_text(
            "from langgraph_checkpoint_agent_memory.server import checkpointer, store\n"
        )
        checkpointer_path, store_path = "./backends.py:checkpointer", "./backends.py:store"
    else:
        checkpointer_path = "langgraph_checkpoint_agent_memory.server.checkpointer"
        store_path = "langgraph_checkpoint_agent_memory.server.store"
    config = {
        "dependencies": ["."],
        "graphs": {"echo": "./graph.py:graph"},
        "checkpointer": {
            "path": checkpointer_path,
            # 0.1 minutes: 6 s, short for the test, long enough for the reads before expiry
            # on a busy machine; the sweep interval must be a whole number of minutes
            "ttl": {"strategy": "delete", "default_ttl": 0.1, "sweep_interval_minutes": 1},
        },
        "store": {
            "path": store_path,
            "ttl": {"default_ttl": 0.1, "refresh_on_read": False, "sweep_interval_minutes": 1},
        },
    }
    (tmp_path / "langgraph.json").write_text(json.dumps(config, indent=2))
    started = Server(tmp_path, database_url)
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


async def test_agent_server_runs_on_our_saver_and_store(server: Server, database_url: str) -> None:
    from langgraph_sdk import get_client

    client = get_client(url=server.url)
    rows = Rows(database_url)

    # threads, runs, state and history go through the package's saver
    thread_id = (await client.threads.create())["thread_id"]
    hello: dict[str, Any] = {"turns": ["hello"]}
    output = await client.runs.wait(thread_id, "echo", input=hello)
    assert output == {"turns": ["hello", "echo: hello"]}
    state = await client.threads.get_state(thread_id)
    assert state["values"] == {"turns": ["hello", "echo: hello"]}
    history = await client.threads.get_history(thread_id)
    stored = rows("SELECT checkpoint_id FROM am_checkpoints WHERE thread_id = ?", thread_id)
    assert len(history) >= 2
    assert {h["checkpoint"]["checkpoint_id"] for h in history} == {r[0] for r in stored}
    assert state["checkpoint"]["checkpoint_id"] == max(r[0] for r in stored)
    # the TTL of langgraph.json, in the thread's row: 0.1 minutes -> 6 seconds
    [(ttl_seconds,)] = rows("SELECT ttl_seconds FROM am_threads WHERE thread_id = ?", thread_id)
    assert ttl_seconds == 6

    # the store API goes through the package's store
    await client.store.put_item(["users", "alice"], "food", {"likes": "spicy ramen"})
    found = await client.store.search_items(["users"], query="ramen")
    assert [(i["namespace"], i["key"]) for i in found["items"]] == [(["users", "alice"], "food")]
    listed = await client.store.list_namespaces()
    assert {tuple(ns) for ns in listed["namespaces"]} == {("users", "alice"), ("notes",)}
    items = rows("SELECT prefix, key, ttl_minutes FROM am_store_items ORDER BY prefix")
    # an HTTP put without ttl never expires; the graph's put gets the store's default_ttl
    assert items == [("notes", "n1", 0.1), ("users.alice", "food", None)]

    # the thread expires by the configured TTL: reads do not extend it, state reads empty
    async def thread_expired() -> bool:
        return (await client.threads.get_state(thread_id))["values"] == {}

    async def note_expired() -> bool:
        return (await client.store.search_items(["notes"]))["items"] == []

    await eventually(thread_expired, "the thread's state reads empty")
    await eventually(note_expired, "the graph's store item is gone")
    assert await client.store.get_item(["users", "alice"], "food") is not None

    # a sweep (any process may run one; the server's runs each minute) deletes the rows
    saver = create_checkpointer(url=database_url)
    assert isinstance(saver, SQLSaver)
    try:
        await saver.asweep()
    finally:
        await saver.aclose()
    assert rows("SELECT count(*) FROM am_checkpoints WHERE thread_id = ?", thread_id) == [(0,)]

    # the expired history is not resurrected: a new run on the thread starts afresh
    again: dict[str, Any] = {"turns": ["again"]}
    output = await client.runs.wait(thread_id, "echo", input=again)
    assert output == {"turns": ["again", "echo: again"]}
