"""Behind PgBouncer in transaction mode (tests/pg.py starts it; skipped without the program).

- The defaults fail at once, on every call, with a ConfigurationError naming the fix; never a
  fraction of calls.
- With ``?prepare_threshold=none``: several processes, threads and users (graph turns, store
  puts and searches, record, consolidate, sweep, erase) with no error and no lost write, and
  no statement in the server's log run with another statement's parameters.
- ``synchronous_commit=False`` does not reach another client of the same server connection.
- Nothing follows the end of a transaction (psycopg's Flush after a pipeline's Sync), so a
  one-connection pool with a short ``query_wait_timeout`` serves every client.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import (
    ConfigurationError,
    PostgresSaver,
    create_store,
)
from tests.helpers import Recorder, config_for, make_checkpoint, present, sql_checkpointer
from tests.pg import BouncedServer, PgServers, bouncer_params, libpq_url
from tests.pooler_app import run_users_and_check
from tests.servers import LocalPgBouncer

ROOT = Path(__file__).resolve().parent.parent

#: What the server logs when a client's statement meets another client's prepared one.
CROSS_BOUND = (
    "prepared statement",
    "bind message supplies",
    "invalid input syntax",
)


@pytest.fixture(params=bouncer_params())
def bouncer(request: pytest.FixtureRequest, pg_servers: PgServers) -> BouncedServer:
    server = pg_servers.get(str(request.param))
    assert isinstance(server, BouncedServer)
    return server


@pytest.fixture
def bouncer_url(bouncer: BouncedServer) -> Any:
    """A fresh database, through PgBouncer, with ``?prepare_threshold=none``."""
    url = bouncer.fresh_database()
    yield url
    bouncer.drop(url)


def without_option(url: str) -> str:
    return url.split("?", 1)[0]


def test_the_defaults_fail_at_once_naming_the_fix(bouncer_url: str) -> None:
    url = without_option(bouncer_url)
    saver = PostgresSaver(url)
    for _ in range(3):  # every call, not a fraction of them
        with pytest.raises(ConfigurationError, match=r"pooler.*\?prepare_threshold=none"):
            saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})

    async def async_calls() -> None:
        for _ in range(3):
            with pytest.raises(ConfigurationError, match=r"prepare_threshold=none"):
                await saver.aget_tuple(config_for("t"))

    asyncio.run(async_calls())
    saver.close()
    store = create_store(url)
    with pytest.raises(ConfigurationError, match=r"prepare_threshold=none"):
        store.put(("users", "u1"), "k", {"v": 1})
    store.close()


def test_a_pool_or_connection_passed_in_that_prepares_is_refused_at_once(bouncer_url: str) -> None:
    """psycopg's own default prepares too: a pool or connection passed in is checked at its
    first use; created with ``prepare_threshold=None`` it works; a threshold given to the
    saver says the caller chose it."""
    import psycopg
    import psycopg_pool

    url = without_option(bouncer_url)
    pool = psycopg_pool.ConnectionPool(url, kwargs={"autocommit": True}, open=True)
    saver = PostgresSaver(pool)
    for _ in range(2):
        with pytest.raises(ConfigurationError, match=r"prepare_threshold=None"):
            saver.setup()
    trusted = PostgresSaver(pool, prepare_threshold=5)
    assert trusted.get_tuple(config_for("t")) is None  # one run: nothing prepared yet
    pool.close()

    plain = psycopg_pool.ConnectionPool(
        url, kwargs={"autocommit": True, "prepare_threshold": None}, open=True
    )
    saver = PostgresSaver(plain)
    saver.setup()
    for i in range(8):
        saver.put(config_for("t"), make_checkpoint({"x": [i]}, version=i + 1), {}, {"x": i + 1})
    assert len(list(saver.list(config_for("t")))) == 8
    plain.close()

    async def one_connection() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        with pytest.raises(ConfigurationError, match=r"prepare_threshold=None"):
            await PostgresSaver(conn).aget_tuple(config_for("t"))
        await conn.close()

    asyncio.run(one_connection())


@pytest.mark.parametrize("given", ["url", "argument", "agent_config"])
def test_each_way_of_turning_preparing_off_works(
    bouncer_url: str, given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_agent_memory import agent_config

    url, options = bouncer_url, {}
    if given == "argument":
        url, options = without_option(bouncer_url), {"prepare_threshold": None}
    elif given == "agent_config":
        url = without_option(bouncer_url)

        @agent_config("config.postgres.prepare_threshold", "Prepare threshold", "PgBouncer")
        def prepare_threshold() -> int | None:
            return 5

        monkeypatch.setenv("CONFIG__POSTGRES__PREPARE_THRESHOLD", "none")
    saver = sql_checkpointer(url, **options)
    store = create_store(url, **options)
    for i in range(12):  # past psycopg's threshold of 5
        saver.put(
            config_for(f"t{i % 3}"), make_checkpoint({"x": [i]}, version=i + 1), {}, {"x": i + 1}
        )
        store.put(("users", "u1"), f"k{i}", {"v": i})
    assert present(saver.get_tuple(config_for("t2"))).checkpoint["channel_values"] == {"x": [11]}
    assert len(store.search(("users", "u1"), limit=20)) == 12
    saver.close()
    store.close()


def test_a_relaxed_commit_does_not_reach_other_clients(bouncer: BouncedServer) -> None:
    """One server connection shared by every client: a session ``SET`` by one is seen by
    the next (checked first, so the test can fail); the saver's per-transaction setting is
    not."""
    import psycopg

    database = bouncer.behind.fresh_database()
    with LocalPgBouncer(bouncer.behind.url, pool_size=1) as single:
        url = single.url_for(database)

        def shown() -> list[str]:
            with psycopg.connect(url, autocommit=True, prepare_threshold=None) as other:
                return [
                    present(other.execute("SHOW synchronous_commit").fetchone())[0]
                    for _ in range(5)
                ]

        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as leaky:
            leaky.execute("SET synchronous_commit TO off")
            assert shown() == ["off"] * 5  # what a session setting does behind the pooler
            leaky.execute("RESET synchronous_commit")

        saver = PostgresSaver(url + "?prepare_threshold=none", synchronous_commit=False)
        for i in range(20):
            saver.put(
                config_for(f"t{i % 4}"),
                make_checkpoint({"x": [i]}, version=i + 1),
                {},
                {"x": i + 1},
            )
            saver.put_writes(
                present(saver.get_tuple(config_for(f"t{i % 4}"))).config, [("x", i)], f"task{i}"
            )
        assert shown() == ["on"] * 5
        saver.close()
    bouncer.behind.drop(database)


def server_log(bouncer: BouncedServer) -> Path | None:
    local = bouncer.behind.local
    return None if local is None else local.root / "server.log"


def test_processes_threads_and_users_lose_nothing(bouncer: BouncedServer, bouncer_url: str) -> None:
    """3 processes x (2 threads + 2 async tasks) x 4 turns, and an erased user each."""
    log = server_log(bouncer)
    logged_before = log.stat().st_size if log is not None else 0
    run_users_and_check(bouncer_url, processes=3, turns=4)

    if log is not None:
        with log.open("rb") as f:
            f.seek(logged_before)
            lines = f.read().decode(errors="replace").splitlines()
        crossed = [x for x in lines if "ERROR" in x and any(p in x for p in CROSS_BOUND)]
        assert crossed == []


def test_a_one_connection_pooler_serves_every_client(bouncer: BouncedServer) -> None:
    """PgBouncer with one server connection and a short ``query_wait_timeout``: threads and
    async tasks invoking a graph, recording and deleting threads all get their turn (a
    client holding the server connection while idle would make the others wait past the
    timeout, and PgBouncer drop them); the loop is bounded by count."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from langgraph_checkpoint_agent_memory import AgentMemory
    from langgraph_checkpoint_agent_memory.demo import memory_graph

    database = bouncer.behind.fresh_database()
    settings = {"query_wait_timeout": "5"}
    with LocalPgBouncer(bouncer.behind.url, pool_size=1, settings=settings) as single:
        url = single.url_for(database) + "?prepare_threshold=none"
        saver = sql_checkpointer(url, ttl_seconds=3600)
        store = create_store(url)
        memory = AgentMemory(store, checkpointer=saver)
        app, _ = memory_graph(memory, FakeListChatModel(responses=["Noted."]), checkpointer=saver)
        errors: list[str] = []

        def config(user: str, turn: int) -> Any:
            return {"configurable": {"thread_id": f"{user}-{turn}", "user_id": user}}

        def sync_user(user: str) -> None:
            for turn in range(12):
                try:
                    app.invoke({"messages": [("user", f"I like {turn}")]}, config(user, turn))
                    memory.record(f"user={user}", [("user", f"note {turn}")], key=f"n{turn}")
                    saver.delete_thread(f"{user}-{turn}")
                except Exception as exc:
                    errors.append(f"{user}: {type(exc).__name__}: {exc}")

        async def async_user(user: str) -> None:
            for turn in range(12):
                try:
                    message = {"messages": [("user", f"I like {turn}")]}
                    await app.ainvoke(message, config(user, turn))
                    await memory.arecord(f"user={user}", [("user", f"note {turn}")], key=f"n{turn}")
                    await saver.adelete_thread(f"{user}-{turn}")
                except Exception as exc:
                    errors.append(f"{user}: {type(exc).__name__}: {exc}")

        async def async_users() -> None:
            await asyncio.gather(async_user("a0"), async_user("a1"))

        threads = [threading.Thread(target=sync_user, args=(f"s{i}",)) for i in range(3)]
        threads.append(threading.Thread(target=lambda: asyncio.run(async_users())))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for user in ("s0", "s1", "s2", "a0", "a1"):
            assert len(memory.episodes(f"user={user}")) == 24  # the graph records too
            assert saver.get_tuple(config(user, 11)) is None
        store.close()
        saver.close()
        assert "query_wait_timeout" not in single.log.read_text()
    bouncer.behind.drop(database)


def test_the_cli_takes_the_option_in_its_url(bouncer_url: str) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )

    refused = cli("migrate", "--url", without_option(bouncer_url))
    assert refused.returncode != 0 and "prepare_threshold=none" in refused.stderr
    for args in (("migrate",), ("sweep",), ("scopes", "--json")):
        done = cli(*args, "--url", bouncer_url)
        assert done.returncode == 0, done.stderr


def test_libpq_never_sees_the_option(bouncer_url: str) -> None:
    """The URL a user writes for this package is not one libpq takes: the package takes the
    option out (a direct psycopg connection with it fails, so the test can fail)."""
    import psycopg

    with pytest.raises(psycopg.ProgrammingError, match="prepare_threshold"):
        psycopg.connect(bouncer_url).close()
    conninfo, kwargs = libpq_url(bouncer_url)
    assert kwargs == {"prepare_threshold": None}
    with psycopg.connect(conninfo, autocommit=True, **kwargs) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_without_the_program_the_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import servers

    monkeypatch.setenv(servers.PGBOUNCER_ENV, "/nonexistent/pgbouncer")
    assert servers.find_pgbouncer() is None
    with pytest.raises(RuntimeError, match="apt-get install pgbouncer"):
        LocalPgBouncer("postgresql://postgres@127.0.0.1:5432/postgres")


def test_merges_of_the_term_index_work_through_the_pooler(
    bouncer_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge (a transaction of several statements under an advisory lock held to its end)
    and the queries that read the lists run through PgBouncer in transaction mode."""
    from langgraph_checkpoint_agent_memory import create_store
    from tests.test_term_index import (
        MERGE_AT,
        Model,
        assert_lists_hold_the_listed,
        bm25,
        brute,
        put,
        same_answer,
        small_index,
        text,
    )

    small_index(monkeypatch)
    store = create_store(bouncer_url)
    store.ranker.stats_seconds = 0.0
    try:
        rng = random.Random(6)
        model: Model = {}
        for i in range(3 * MERGE_AT):
            put(store, model, ("docs", "a"), f"k{i}", text(rng))
        log = Recorder(store)
        put(store, model, ("docs", "a"), "k1", "refund refund printer")  # a retraction
        store.db.run(store.ranker.merge_plan("docs.a"))
        assert log.took("pg_advisory_xact_lock") and log.took("INSERT INTO am_store_chunks")
        assert_lists_hold_the_listed(store, model, "docs.a")
        got = bm25(store, ("docs",), "printer refund", 5)
        same_answer(got, brute(model, ("docs",), "printer refund", 5))
    finally:
        store.close()


def flushes_after_commit(trace: str) -> tuple[int, list[str]]:
    """The Flush messages a libpq trace shows the client sending, and for each whose next
    ReadyForQuery says the server is idle, the line: a Flush the server reads after the
    transaction ended. A transaction pooler then hands the client a server connection for
    the Flush alone and keeps it linked until the client speaks again: seconds, or for
    ever for a connection left idle in its pool."""
    flushes, late, waiting = 0, [], False
    for line in trace.splitlines():
        fields = line.split("\t")
        if fields[:1] == ["F"] and fields[2:3] == ["Flush"]:
            flushes, waiting = flushes + 1, True
        elif fields[:1] == ["B"] and fields[2:3] == ["ReadyForQuery"] and waiting:
            waiting = False
            if fields[3].strip() == "I":
                late.append(line)
    return flushes, late


def test_no_flush_follows_the_end_of_a_transaction(pg_url: str, tmp_path: Path) -> None:
    """Every batch of several statements (a relaxed write, delete_thread, record, a store
    put, sync and async) ends its transaction with nothing sent after the commit: psycopg
    ends a pipeline with a Sync and then a Flush, so the commit goes after the pipeline."""
    import psycopg

    from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

    trace = tmp_path / "trace.txt"

    def traced(conn: Any) -> Any:
        conn.pgconn.trace(os.open(trace, os.O_WRONLY | os.O_CREAT | os.O_APPEND))
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return conn

    def work(conn: Any) -> tuple[Any, AgentMemory[AgentMemoryStore], AgentMemoryStore]:
        relaxed = PostgresSaver(conn, synchronous_commit=False)
        store = AgentMemoryStore(PostgresDatabase(conn))
        return relaxed, AgentMemory(store, checkpointer=relaxed), store

    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=None) as setup:
        saver, _, store = work(setup)
        saver.setup()
        store.setup()
    with traced(psycopg.connect(pg_url, autocommit=True, prepare_threshold=None)) as conn:
        saver, memory, store = work(conn)
        for i in range(3):
            saver.put(config_for(f"t{i}"), make_checkpoint({"x": [i]}), {}, {"x": 1})
            memory.record("user=u1", [("user", f"I like tea {i}")], thread_id=f"t{i}")
            store.put(("docs", "u1"), f"k{i}", {"text": f"note {i}"})
            saver.delete_thread(f"t{i}")
        conn.pgconn.untrace()

    async def async_calls() -> None:
        conn = traced(
            await psycopg.AsyncConnection.connect(pg_url, autocommit=True, prepare_threshold=None)
        )
        saver, memory, store = work(conn)
        await saver.aput(config_for("a"), make_checkpoint({"x": [1]}), {}, {"x": 1})
        await memory.arecord("user=u2", [("user", "I like coffee")], thread_id="a")
        await store.aput(("docs", "u2"), "k", {"text": "note"})
        await saver.adelete_thread("a")
        conn.pgconn.untrace()
        await conn.close()

    asyncio.run(async_calls())
    flushes, late = flushes_after_commit(trace.read_text())
    assert flushes > 0  # the batches did go through pipelines
    assert late == []
