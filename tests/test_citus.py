"""The checkpointer on a Citus cluster (a coordinator and two workers): tables distributed by
setup, every hot statement a single-shard router query (shown by EXPLAIN on the
coordinator), work across shards without row locks across shards."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from tests.helpers import FakeClock, Recorder
from tests.pg import CITUS, PgServer, PgServers, citus_params
from tests.routing import not_routed

pytestmark = pytest.mark.parametrize("cluster", citus_params(), indirect=True)

CHECKPOINT_TABLES = {"am_checkpoints", "am_checkpoint_blobs", "am_checkpoint_writes", "am_threads"}


@pytest.fixture
def cluster(request: pytest.FixtureRequest, pg_servers: PgServers) -> PgServer:
    return pg_servers.get(CITUS)


@pytest.fixture
def citus_url(cluster: PgServer) -> Iterator[str]:
    url = cluster.fresh_database()
    yield url
    cluster.drop(url)


@pytest.fixture
def savers() -> Iterator[list[PostgresSaver]]:
    opened: list[PostgresSaver] = []
    yield opened
    for saver in opened:
        saver.stop_sweeper()
        saver.db.close()


def _open(savers: list[PostgresSaver], url: str, **kwargs: Any) -> PostgresSaver:
    saver = PostgresSaver(url, **kwargs)
    savers.append(saver)
    return saver


def _placement(url: str) -> dict[str, tuple[str, str | None, int]]:
    """Each Citus table: its kind (``h`` hash-distributed, ``n`` reference), distribution
    column and co-location group."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT logicalrelid::text, partmethod, "
            "column_to_column_name(logicalrelid, partkey), colocationid FROM pg_dist_partition"
        ).fetchall()
    return {name: (kind, column, group) for name, kind, column, group in rows}


def _graph(saver: PostgresSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda s: {"messages": [("ai", f"reply {len(s['messages'])}")]})
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=saver)


def _thread(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def test_setup_distributes_the_checkpoint_tables_by_thread(
    citus_url: str, savers: list[PostgresSaver]
) -> None:
    _open(savers, citus_url).setup()
    placement = _placement(citus_url)
    distributed = {n: p for n, p in placement.items() if n in CHECKPOINT_TABLES}
    assert {n: p[:2] for n, p in distributed.items()} == {
        n: ("h", "thread_id") for n in CHECKPOINT_TABLES
    }
    assert len({p[2] for p in distributed.values()}) == 1  # co-located
    assert placement["am_migrations"][0] == "n"  # a reference table
    # a second process's setup finds everything in place
    _open(savers, citus_url).setup()
    assert _placement(citus_url) == placement


def test_setup_distributes_a_database_that_already_holds_threads(
    cluster: PgServer, savers: list[PostgresSaver]
) -> None:
    assert cluster.citus is not None
    url = cluster.citus.create_database(citus=False)
    try:
        before = _open(savers, url)
        graph = _graph(before)
        for i in range(6):
            graph.invoke({"messages": [("user", "hi")]}, _thread(f"t{i}"))
        before.db.close()
        cluster.citus.add_citus(url)
        after = _open(savers, url)
        after.setup()
        assert {n for n, p in _placement(url).items() if p[0] == "h"} == CHECKPOINT_TABLES
        graph = _graph(after)
        for i in range(6):
            state = graph.invoke({"messages": [("user", "again")]}, _thread(f"t{i}"))
            assert [m.content for m in state["messages"]] == ["hi", "reply 1", "again", "reply 3"]
        with psycopg.connect(url) as conn:  # the coordinator's local copies were emptied
            local = conn.execute("SELECT pg_relation_size('am_checkpoints')").fetchone()
        assert local == (0,)
    finally:
        cluster.drop(url)


def test_every_hot_checkpoint_statement_is_a_router_query(
    citus_url: str, savers: list[PostgresSaver]
) -> None:
    saver = _open(savers, citus_url, ttl_seconds=3600)
    saver.setup()
    log = Recorder(saver)
    graph = _graph(saver)
    for i in range(3):  # a new thread, then the same thread again
        graph.invoke({"messages": [("user", f"turn {i}")]}, _thread("a"))
    first = next(iter(saver.list(_thread("a"))))
    saver.get_tuple(first.config)
    assert len(list(saver.list(_thread("a"), limit=2))) == 2
    saver.copy_thread("a", "b")
    saver.prune(["b"], strategy="keep_latest")
    saver.delete_thread("a")
    graph.invoke({"messages": [("user", "fresh start")]}, _thread("a"))  # after a delete
    graph.invoke({"messages": [("user", "more")]}, _thread("b"))
    assert log.sent, "nothing was recorded"
    assert not_routed(citus_url, log) == []


def test_many_writes_at_once_take_routed_statements_too(
    citus_url: str, savers: list[PostgresSaver]
) -> None:
    saver = _open(savers, citus_url)
    graph = _graph(saver)
    graph.invoke({"messages": [("user", "hi")]}, _thread("w"))
    config = next(iter(saver.list(_thread("w")))).config
    log = Recorder(saver)
    # more rows than one fast write carries: the generic statements
    saver.put_writes(config, [(f"ch{i}", i) for i in range(80)], "task-1")
    stored = saver.get_tuple(config)
    assert stored is not None
    assert len([w for w in stored.pending_writes or [] if w[0] == "task-1"]) == 80
    assert not_routed(citus_url, log) == []


def test_sweep_claims_each_expired_thread_once_without_locks_across_shards(
    citus_url: str, savers: list[PostgresSaver]
) -> None:
    clock = FakeClock()
    writer = _open(savers, citus_url, ttl_seconds=60, clock=clock, sweep_interval_seconds=None)
    graph = _graph(writer)
    for i in range(12):
        graph.invoke({"messages": [("user", "hi")]}, _thread(f"old{i}"))
    clock.advance(120)
    for i in range(4):
        graph.invoke({"messages": [("user", "hi")]}, _thread(f"live{i}"))
    sweepers = [
        _open(savers, citus_url, ttl_seconds=60, clock=clock, sweep_interval_seconds=None)
        for _ in range(3)
    ]
    swept: list[list[str]] = []
    errors: list[BaseException] = []

    def sweep(s: PostgresSaver) -> None:
        try:
            swept.append(s.sweep())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=sweep, args=(s,)) for s in sweepers]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    everything = sorted(t for batch in swept for t in batch)
    assert everything == sorted(f"old{i}" for i in range(12))  # each once, live ones kept
    for i in range(4):
        assert writer.get_tuple(_thread(f"live{i}")) is not None
    assert writer.get_tuple(_thread("old0")) is None


def test_a_role_that_does_not_own_undistributed_tables_is_told_what_to_do(
    cluster: PgServer, savers: list[PostgresSaver]
) -> None:
    assert cluster.citus is not None
    url = cluster.citus.create_database(citus=False)
    try:
        _open(savers, url).setup()  # the owner creates the tables on plain PostgreSQL
        cluster.citus.add_citus(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE ROLE app_user LOGIN")
            conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO app_user")
        app_url = url.replace("://postgres@", "://app_user@")
        with pytest.raises(ConfigurationError, match="only their owner can distribute"):
            _open(savers, app_url).setup()
    finally:
        cluster.drop(url)
