"""A standing chaos test: many writers and readers on one database at once.

Threads of this process and a second process share one database (a SQLite file, each
PostgreSQL server): graph invokes on threads of their own and on threads shared with a
deleter and a sweeper (with a one-second TTL), store puts and searches, ``record`` on a scope
that is kept and on one that is erased over and over (by two recorders at once, with the same
keys), ``consolidate`` twice at once, ``erase``, and the memory tools. Each worker makes a
fixed number of calls (no deadline: a slow machine takes longer, it does not change what is
asserted). Then:

* every exception a call raised is one the user guide documents for that call (a graph
  invoke on a thread that is deleted, erased or swept may raise ``ThreadDeletedError``;
  nothing else may raise anything);
* no acknowledged write is lost: each thread of its own holds every turn its invokes
  returned, each acknowledged store put and each acknowledged episode of the kept scope is
  there, in this process and in the other;
* nothing of the erased scope remains once the last ``erase`` returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import MessagesState

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    RuleBasedExtractor,
    ThreadDeletedError,
    create_checkpointer,
    create_store,
)
from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
from langgraph_checkpoint_agent_memory.demo import memory_graph
from tests.pg import backend_params, is_postgres, pg_database

ROOT = Path(__file__).resolve().parent.parent
#: Calls per worker.
ROUNDS = 40
KEEP, GONE = "user=keep", "user=gone"

#: The other process: store puts and records on the kept scope, acknowledged on stdout.
OTHER = """
import json, sys
from langgraph_checkpoint_agent_memory import AgentMemory, RuleBasedExtractor, create_store

url, rounds = sys.argv[1], int(sys.argv[2])
store = create_store(url)
memory = AgentMemory(store, extractor=RuleBasedExtractor())
for n in range(rounds):
    store.put(("docs", "other"), f"o{n}", {"text": f"note {n} from the other process"})
    print(json.dumps({"put": f"o{n}"}), flush=True)
    memory.record("user=keep", [{"role": "user", "content": f"I like tea number {n}"}],
                  key=f"other-{n}")
    print(json.dumps({"record": f"other-{n}"}), flush=True)
store.close()
"""


class Outcomes:
    """What each call did, from every worker thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.raised: Counter[tuple[str, str]] = Counter()
        self.unexpected: list[str] = []
        self.acknowledged: dict[str, list[str]] = {}

    def call(
        self,
        kind: str,
        fn: Callable[..., Any],
        *args: Any,
        allowed: tuple[type[BaseException], ...] = (),
    ) -> bool:
        """Call ``fn(*args)``; whether it returned. An exception of ``allowed`` is counted,
        any other is recorded as unexpected."""
        try:
            fn(*args)
        except allowed as exc:
            with self.lock:
                self.raised[kind, type(exc).__name__] += 1
            return False
        except Exception as exc:
            with self.lock:
                self.unexpected.append(f"{kind}: {type(exc).__name__}: {exc}")
            return False
        return True

    def ack(self, kind: str, what: str) -> None:
        with self.lock:
            self.acknowledged.setdefault(kind, []).append(what)


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend = str(request.param)
    if is_postgres(backend):
        return pg_database(request, backend)
    return f"sqlite:///{tmp_path / 'chaos.db'}"


@pytest.fixture
def parts(url: str) -> Iterator[tuple[SQLSaver, AgentMemory[Any]]]:
    saver = create_checkpointer(3600, url=url)
    assert isinstance(saver, SQLSaver)
    saver.setup()
    store = create_store(url)
    memory = AgentMemory(store, extractor=RuleBasedExtractor(), checkpointer=saver)
    memory.setup()
    yield saver, memory
    saver.close()
    store.close()


def config(thread: str, user: str, ttl: int | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread, "user_id": user}
    if ttl is not None:
        configurable["ttl_seconds"] = ttl
    return {"configurable": configurable}


def turn(n: int) -> MessagesState:
    return MessagesState(messages=[HumanMessage(content=f"I live in City{n % 5}")])


def workers(saver: SQLSaver, memory: AgentMemory[Any], out: Outcomes) -> list[Callable[[], None]]:
    model = FakeListChatModel(responses=["Noted."] * 10_000)
    graph, _ = memory_graph(memory, model, checkpointer=saver)
    store = memory.store
    shared = [f"shared-{i}" for i in range(3)]

    def own_thread(i: int) -> Callable[[], None]:
        def run() -> None:
            for n in range(ROUNDS):
                if out.call("invoke own", graph.invoke, turn(n), config(f"own-{i}", "keep")):
                    out.ack(f"own-{i}", str(n))

        return run

    def shared_invokes() -> None:
        for n in range(ROUNDS):
            cfg = config(shared[n % 3], "gone", ttl=1)
            out.call("invoke shared", graph.invoke, turn(n), cfg, allowed=(ThreadDeletedError,))

    def deleter() -> None:
        for n in range(ROUNDS):
            out.call("delete_thread", saver.delete_thread, shared[n % 3])

    def sweeper() -> None:
        for _ in range(ROUNDS):
            out.call("sweep", saver.sweep)

    def store_worker() -> None:
        for n in range(ROUNDS):
            value = {"text": f"note {n} about tea"}
            if out.call("store put", store.put, ("docs", "here"), f"s{n}", value):
                out.ack("put", f"s{n}")
            out.call("store search", search, ("docs",), "tea")

    def search(prefix: tuple[str, ...], query: str) -> None:
        store.search(prefix, query=query)

    def recorder() -> None:
        for n in range(ROUNDS):
            said = [{"role": "user", "content": f"I moved to Town{n % 4}"}]
            if out.call("record keep", record, KEEP, said, f"here-{n}"):
                out.ack("record", f"here-{n}")
            out.call("record gone", record, GONE, said, f"gone-{n}")

    def record(scope: str, said: list[dict[str, str]], key: str) -> None:
        memory.record(scope, said, key=key)

    def consolidator() -> None:
        for _ in range(ROUNDS):
            out.call("consolidate", memory.consolidate)

    def eraser() -> None:
        for _ in range(ROUNDS):
            out.call("erase", memory.erase, GONE)

    def tools() -> None:
        search, remember, forget = memory.tools()
        cfg = config("tools", "keep")
        for n in range(ROUNDS):
            out.call(
                "remember", remember.invoke, {"attribute": "drink", "value": f"tea {n % 3}"}, cfg
            )
            out.call("search tool", search.invoke, {"query": "drink"}, cfg)
            if n % 5 == 4:
                out.call("forget", forget.invoke, {"attribute": "drink"}, cfg)

    return [
        own_thread(0),
        own_thread(1),
        shared_invokes,
        shared_invokes,
        deleter,
        sweeper,
        store_worker,
        recorder,
        recorder,  # the same keys at once: each episode stored once, both calls return
        consolidator,
        consolidator,
        eraser,
        tools,
    ]


def test_many_writers_lose_nothing_and_raise_only_what_is_documented(
    url: str, parts: tuple[SQLSaver, AgentMemory[Any]]
) -> None:
    saver, memory = parts
    out = Outcomes()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER, url, str(ROUNDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    threads = [threading.Thread(target=w, daemon=True) for w in workers(saver, memory, out)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
        assert not t.is_alive(), "a worker did not finish"
    stdout, stderr = other.communicate(timeout=600)
    assert other.returncode == 0, f"the other process failed:\n{stderr}"

    assert out.unexpected == []
    assert set(kind for kind, _ in out.raised) <= {"invoke shared"}

    # every turn an own-thread invoke returned is in its thread, in order
    for i in range(2):
        acked = out.acknowledged.get(f"own-{i}", [])
        assert len(acked) == ROUNDS
        state = saver.get_tuple(config(f"own-{i}", "keep"))
        assert state is not None
        said = [
            m.content for m in state.checkpoint["channel_values"]["messages"] if m.type == "human"
        ]
        assert said == [f"I live in City{int(n) % 5}" for n in acked]

    # every acknowledged store put, of both processes
    other_acks = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    puts = [("here", k) for k in out.acknowledged.get("put", [])]
    puts += [("other", a["put"]) for a in other_acks if "put" in a]
    assert len(puts) == 2 * ROUNDS
    for where, key in puts:
        assert memory.store.get(("docs", where), key) is not None, (where, key)

    # every acknowledged episode of the kept scope, of both processes
    recorded = set(out.acknowledged.get("record", []))
    assert len(out.acknowledged.get("record", [])) == 2 * ROUNDS  # both recorders, every key
    recorded |= {a["record"] for a in other_acks if "record" in a}
    assert len(recorded) == 2 * ROUNDS
    kept = {e.key for e in memory.episodes(KEEP)}
    assert recorded <= kept

    # the erased scope: nothing remains once the last erase returns
    memory.erase(GONE)
    assert memory.facts(GONE) == []
    assert memory.episodes(GONE) == []
    assert GONE not in memory.known_scopes()
