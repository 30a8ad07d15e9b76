"""The checkpointer on a Citus cluster (a coordinator and two workers): tables distributed by
setup, every hot statement a single-shard router query (shown by EXPLAIN on the
coordinator), work across shards without row locks across shards."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import PutOp

from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from tests.helpers import INDEXED_ITEMS, FakeClock, Recorder
from tests.pg import CITUS, PgServer, PgServers, citus_params
from tests.routing import not_routed
from tests.test_shard import SHARDED_TABLES

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


STORE_AND_MEMORY_TABLES = {*SHARDED_TABLES, "am_memory_erasures"}


@pytest.fixture
def memory(citus_url: str) -> Iterator[Any]:
    """An AgentMemory on a store with a vector index, on the cluster, set up."""
    from langgraph_checkpoint_agent_memory import AgentMemory, create_store
    from langgraph_checkpoint_agent_memory.memory.extract import RuleBasedExtractor
    from tests.helpers import WordEmbeddings

    store = create_store(citus_url, index={"dims": 64, "embed": WordEmbeddings()})
    agent_memory = AgentMemory(store, extractor=RuleBasedExtractor())
    store.setup()
    yield agent_memory
    store.close()


def test_setup_distributes_the_store_and_memory_tables_by_their_shard_key(
    citus_url: str, memory: Any
) -> None:
    placement = _placement(citus_url)
    assert {n: placement[n][:2] for n in STORE_AND_MEMORY_TABLES} == {
        n: ("h", "shard") for n in STORE_AND_MEMORY_TABLES
    }
    assert len({placement[n][2] for n in STORE_AND_MEMORY_TABLES}) == 1  # co-located
    assert placement["am_settings"][0] == "n"


def test_every_hot_store_and_memory_statement_is_a_router_query(
    citus_url: str, memory: Any
) -> None:
    store = memory.store
    alice, ns = "user=alice", ("docs", "alice")
    log = Recorder(store)
    store.put(ns, "k1", {"text": "ramen in Berlin", "n": 1})
    store.put(ns, "k2", {"text": "jazz on Sunday", "n": 2})
    assert store.get(ns, "k1") is not None
    assert [i.key for i in store.search(ns, query="ramen")][:1] == ["k1"]
    assert [i.key for i in store.search(ns, filter={"n": 2})] == ["k2"]
    assert store.search(ns, query="Sunday jazz", filter={"n": {"$gte": 1}})
    assert store.list_namespaces(prefix=ns) == [ns]
    store.delete(ns, "k2")
    memory.record(alice, [{"role": "user", "content": "I live in Berlin and I like jazz"}])
    report = memory.consolidate(alice)
    assert report.completed == 1
    assert "Berlin" in memory.build_context(alice, "where do I live")
    tools = {t.name: t for t in memory.tools()}
    config = {"configurable": {"thread_id": "t", "user_id": "alice"}}
    tools["remember_fact"].invoke({"attribute": "city", "value": "Lyon"}, config)
    assert "Lyon" in tools["search_memory"].invoke({"query": "city"}, config)
    tools["forget_fact"].invoke({"attribute": "likes"}, config)
    counts = memory.erase(alice)
    assert counts["am_store_items"] > 0
    assert memory.facts(alice) == []
    texts = {text for text, _ in log.sent}
    assert any("am_memory_pending" in t for t in texts)  # memory's statements were seen too
    assert any("am_store_vectors" in t for t in texts)
    assert not_routed(citus_url, log) == []


def _counting_store(url: str, **options: Any) -> tuple[Any, Any, list[str]]:
    """A store on a pool whose cursors note each statement they send to the server (one per
    ``execute``, one per parameter set of ``executemany``), through psycopg's public
    ``cursor_factory``; the pool (the store leaves it open) and the list of texts sent."""
    import psycopg_pool

    from langgraph_checkpoint_agent_memory import AgentMemoryStore
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

    sent: list[str] = []

    class Counting(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            sent.append(str(query))
            return super().execute(query, params, **kw)

        def executemany(self, query: Any, params_seq: Any, **kw: Any) -> None:
            each = list(params_seq)
            sent.extend(str(query) for _ in each)
            super().executemany(query, each, **kw)

    pool = psycopg_pool.ConnectionPool(
        url,
        min_size=1,
        max_size=2,
        open=True,
        kwargs={"autocommit": True, "cursor_factory": Counting},
    )
    store = AgentMemoryStore(PostgresDatabase(pool), **options)
    store.setup()
    return store, pool, sent


def _index_writes(sent: list[str]) -> int:
    """Statements of the term lists sent (a put writes none: its terms ride in its row)."""
    return sum("am_store_chunks" in t for t in sent)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=st.lists(st.integers(0, 10_000), min_size=1, max_size=120, unique=True))
@example(words=[7])
@example(words=list(range(30)))
def test_a_put_and_a_record_send_as_many_statements_whatever_their_words(
    citus_url: str, words: list[int]
) -> None:
    """However many distinct words an item holds, a put and a record send as many
    statements as for one word, each routed to the item's shard (its terms ride in its
    row, ``db.term_index``), and none of the term lists (a merge writes those)."""
    from langgraph_checkpoint_agent_memory import AgentMemory
    from langgraph_checkpoint_agent_memory.db.term_index import UNLISTED_BYTES

    store, pool, sent = _counting_store(citus_url)
    memory = AgentMemory(store)
    try:
        text = " ".join(f"w{n}x" for n in words)
        user = f"u{uuid.uuid4().hex[:8]}"  # an example's own namespace and scope
        ns, key = ("docs", user), "k"

        def put(value: str, at: tuple[str, ...] = ns) -> list[str]:
            sent.clear()
            store.put(at, key, {"text": value})
            return list(sent)

        def record(value: str, turn: str) -> list[str]:
            sent.clear()
            memory.record(f"user={user}", [{"role": "user", "content": value}], key=turn)
            return list(sent)

        store.put(ns, "first", {"text": "tea"})  # first use: tables and settings checked
        record("tea", "first")
        # a new item: its row inserted, then its terms to list, whatever its words
        assert put("ramen", ("docs", f"{user}-a"))[1:3] == put(text, ("docs", f"{user}-b"))[1:3]
        new = put(text, ("docs", f"{user}-c"))
        assert [t.split()[0] for t in new] == ["BEGIN", "INSERT", "INSERT", "COMMIT"], new
        assert "am_store_items" in new[1] and "am_store_unlisted" in new[2]
        put("tea")
        one, many = put("ramen"), put(text)  # rewrites
        assert len(many) == len(one)
        assert _index_writes(many) == 0
        assert [i.key for i in store.search(ns, query=f"w{words[-1]}x")] == [key]
        short, long = record("ramen", f"{key}-a"), record(text, f"{key}-b")
        assert len(long) == len(short)
        assert _index_writes(long) == 0
        # a batch of items of other sizes: the same statements; every item's terms stored
        texts = {"b0": text, "b1": "tea", "b2": f"{text} {text.replace('x', 'y')}"}
        sent.clear()
        store.batch([PutOp(ns, k, {"text": t}) for k, t in texts.items()])
        assert _index_writes(sent) == 0
        with psycopg.connect(citus_url) as conn:
            stored: dict[str, int] = dict(
                conn.execute(
                    f"SELECT key, length(terms) FROM {INDEXED_ITEMS} WHERE prefix = %s",
                    (f"docs.{user}",),
                ).fetchall()
            )
        assert stored == {
            "first": UNLISTED_BYTES,
            key: UNLISTED_BYTES * len(words),
            "b0": UNLISTED_BYTES * len(words),
            "b1": UNLISTED_BYTES,
            "b2": 2 * UNLISTED_BYTES * len(words),
        }
        assert {i.key for i in store.search(ns, query=f"w{words[0]}y")} == {"b2"}
    finally:
        store.close()
        pool.close()


def test_a_put_sends_its_items_statements_to_one_shard(citus_url: str) -> None:
    """A put of a new item and a rewrite of a listed one (a retraction), each statement a
    router query to the item's shard."""
    from langgraph_checkpoint_agent_memory import create_store

    store = create_store(citus_url)
    try:
        store.put(("docs", "carol"), "k", {"text": "printer refund"})
        store.db.run(store.ranker.merge_plan("docs.carol"))
        log = Recorder(store)
        store.put(("docs", "carol"), "k", {"text": "coffee in munich"})
        store.put(("docs", "carol"), "new", {"text": "berlin"})
        store.delete(("docs", "carol"), "new")
        assert log.took("INSERT INTO am_store_retractions")
        assert not_routed(citus_url, log) == []
        assert store.search(("docs", "carol"), query="printer") == []
        assert [i.key for i in store.search(("docs", "carol"), query="munich")] == ["k"]
    finally:
        store.close()


def test_the_vectors_of_an_item_s_fields_go_in_one_statement(citus_url: str) -> None:
    """An index of two fields: a put writes its two vectors in one statement, routed to the
    item's shard, and a search by vector finds the item through either."""
    from tests.helpers import WordEmbeddings

    index = {"dims": 64, "embed": WordEmbeddings(), "fields": ["text", "title"]}
    store, pool, sent = _counting_store(citus_url, index=index)
    log = Recorder(store)
    try:
        ns = ("docs", "alice")
        store.put(ns, "first", {"text": "tea", "title": "drinks"})
        sent.clear()
        store.put(ns, "k", {"text": "ramen in Berlin", "title": "jazz on Sunday"})
        vector_inserts = [t for t in sent if t.lstrip().startswith("INSERT INTO am_store_vectors")]
        assert len(vector_inserts) == 1
        with psycopg.connect(citus_url) as conn:
            fields = conn.execute(
                "SELECT field FROM am_store_vectors WHERE key = 'k' ORDER BY field"
            ).fetchall()
        assert fields == [("text#0",), ("title#0",)]
        assert store.search(ns, query="jazz Sunday", limit=1)[0].key == "k"
        assert not_routed(citus_url, log) == []
    finally:
        store.close()
        pool.close()


def test_a_search_above_the_shard_key_still_finds_every_user(citus_url: str, memory: Any) -> None:
    store = memory.store
    for user in ("alice", "bob", "carol"):
        store.put(("docs", user), "note", {"text": f"{user} likes ramen"})
    found = store.search(("docs",), query="ramen")
    assert sorted(i.namespace[1] for i in found) == ["alice", "bob", "carol"]
    assert sorted(store.list_namespaces(prefix=("docs",))) == [
        ("docs", "alice"),
        ("docs", "bob"),
        ("docs", "carol"),
    ]


def test_tables_of_a_component_set_up_later_join_the_same_co_location_group(
    citus_url: str,
) -> None:
    from langgraph_checkpoint_agent_memory import AgentMemory, create_store

    store = create_store(citus_url)
    store.setup()  # the store's tables alone
    assert "am_memory_scopes" not in _placement(citus_url)
    later = create_store(citus_url)
    AgentMemory(later).record("user=alice", [{"role": "user", "content": "hi"}])
    placement = _placement(citus_url)
    assert len({placement[n][2] for n in STORE_AND_MEMORY_TABLES}) == 1
    store.close()
    later.close()


def test_processes_threads_and_users_lose_nothing(citus_url: str) -> None:
    """3 processes x (2 threads + 2 async tasks) x 4 turns (graph turns with memory, store
    puts and searches, consolidate, sweep), and an erased user each: no error, nothing lost."""
    from tests.pooler_app import run_users_and_check

    run_users_and_check(citus_url, processes=3, turns=4)


def test_merges_and_queries_of_the_term_index_run_on_the_shards(
    citus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A namespace's merge and the queries of one user's namespace are router queries to its
    shard; a query above the shard key (lists of several shards, in one statement) answers
    as brute force BM25 does too."""
    from langgraph_checkpoint_agent_memory import create_store
    from tests.test_term_index import (
        MERGE_AT,
        Model,
        bm25,
        brute,
        put,
        same_answer,
        small_index,
        text,
    )

    small_index(monkeypatch)
    store = create_store(citus_url)
    store.ranker.stats_seconds = 0.0
    try:
        rng = random.Random(4)
        model: Model = {}
        for user in ("alice", "bob"):
            for i in range(2 * MERGE_AT + 3):
                put(store, model, ("docs", user), f"k{i}", text(rng))
        put(store, model, ("docs", "alice"), "k0", "printer printer refund")  # retracted
        log = Recorder(store)
        store.db.run(store.ranker.merge_plan("docs.alice"))
        got = bm25(store, ("docs", "alice"), "printer refund", 5)
        assert log.took("FROM am_store_chunks") and log.took("INSERT INTO am_store_chunks")
        assert not_routed(citus_url, log) == []
        same_answer(got, brute(model, ("docs", "alice"), "printer refund", 5))
        above = bm25(store, ("docs",), "printer refund coffee", 7)
        same_answer(above, brute(model, ("docs",), "printer refund coffee", 7))
    finally:
        store.close()


def test_a_coordinator_killed_under_load_raises_the_package_s_errors_only(
    cluster: PgServer,
) -> None:
    """``kill -9`` of the coordinator's postmaster (a cluster of the test's own) while four
    users record, put items and checkpoints and consolidate: every call that fails raises
    :class:`DatabaseUnavailableError`, never psycopg's error (Citus reports the death to a
    backend waiting on a worker as ``InternalError_: postmaster was shut down, exiting``).
    The kill comes once every user made three calls; each stops after two failed calls."""
    import os
    import signal

    from langgraph_checkpoint_agent_memory import AgentMemory, create_store
    from langgraph_checkpoint_agent_memory.errors import DatabaseUnavailableError
    from tests.helpers import config_for, make_checkpoint, sql_checkpointer
    from tests.servers import LocalCitus

    with LocalCitus(fsync=False) as own:
        url = own.create_database()
        store = create_store(url, connect_timeout=2)
        saver = sql_checkpointer(url, connect_timeout=2)
        memory = AgentMemory(store, checkpointer=saver)
        store.setup()
        saver.setup()
        ready = threading.Barrier(5)
        errors: list[BaseException] = []

        def user(i: int) -> None:
            failed = 0
            for n in range(400):
                if n == 3:
                    ready.wait()
                try:
                    memory.record(f"user=u{i}", [("user", f"I like tea {n}")], key=f"k{n}")
                    store.put(("docs", f"u{i}"), f"k{n}", {"text": f"note {n}"})
                    saver.put(config_for(f"t{i}"), make_checkpoint({"x": [n]}), {}, {"x": 1})
                    if n % 3 == 2:
                        memory.consolidate(f"user=u{i}")
                except Exception as exc:
                    errors.append(exc)
                    failed += 1
                    if failed == 2 and n >= 3:  # past the barrier: the kill came
                        return

        threads = [threading.Thread(target=user, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        ready.wait()
        postmaster = int((own.coordinator.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        for t in threads:
            t.join()
        store.close()
        saver.close()
    assert len(errors) == 8
    assert [e for e in errors if not isinstance(e, DatabaseUnavailableError)] == []


def test_a_read_of_items_by_key_goes_to_their_shard(citus_url: str) -> None:
    """Items read by their keys (a search's candidates, relevance feedback's terms): the keys
    of one shard key in a router query to its shard; keys of several shard keys read too."""
    from langgraph_checkpoint_agent_memory import create_store
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt

    store = create_store(citus_url)
    try:
        for user in ("alice", "bob"):
            for k in range(3):
                store.put(("docs", user), f"k{k}", {"text": f"{user} note {k}"})

        def read(keys: list[tuple[str, str]]) -> Any:
            st = store.statements
            params = {**st.key_params(keys), "now": 0.0}
            [items, terms] = yield Batch(
                [
                    Stmt(st.by_keys(len(keys)), params, fetch=True),
                    Stmt(st.item_terms(len(keys)), params, fetch=True),
                ]
            )
            return sorted((r[0], r[1]) for r in items), sorted((r[0], r[1]) for r in terms)

        alice = [("docs.alice", "k0"), ("docs.alice", "k2"), ("docs.alice", "gone")]
        log = Recorder(store)
        found = store.run_plan(read(alice))
        assert found == (alice[:2], alice[:2])
        assert log.took("am_store_items") and not_routed(citus_url, log) == []
        both = [("docs.bob", "k1"), *alice]
        assert store.run_plan(read(both)) == (sorted(both[:3]), sorted(both[:3]))
    finally:
        store.close()
