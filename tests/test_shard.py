"""The shard key of the store and agent memory: one rule (the first ``shard_depth`` labels of
a namespace), recorded per database, carried in the primary key of every store and memory
row and named by every statement of one item, namespace or scope."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    AgentMemoryStore,
    ConfigurationError,
    create_store,
)
from langgraph_checkpoint_agent_memory.db import migrations as M
from langgraph_checkpoint_agent_memory.db import schema
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.db.shard import (
    DEFAULT_SHARD_DEPTH,
    checked_depth,
    covers,
    prefix_shard,
    shard_key,
)
from langgraph_checkpoint_agent_memory.db.term_index import LISTED_BYTES, UNLISTED_BYTES
from langgraph_checkpoint_agent_memory.memory import CallableExtractor, Scope
from langgraph_checkpoint_agent_memory.memory.model import KINDS, namespace
from tests.helpers import FakeClock, WordEmbeddings, present
from tests.test_memory import extraction
from tests.test_store_properties import _view as view
from tests.test_store_properties import ops_strategy

#: The recorded rule (``am_settings`` records other things too).
DEPTH = "SELECT name, value FROM am_settings WHERE name = 'shard_depth'"
SHARDED_TABLES = (
    "am_store_items",
    "am_store_vectors",
    "am_store_tags",
    "am_store_unlisted",
    "am_store_chunks",
    "am_store_retractions",
    "am_memory_scopes",
    "am_memory_pending",
    "am_memory_jobs",
    "am_memory_decay",
    "am_memory_threads",
)

# -- the rule ------------------------------------------------------------------------------

# labels as LangGraph accepts them (no "." inside a label)
label = st.text(st.characters(exclude_characters=".", exclude_categories=["Cs"]), min_size=1)
scope_values = st.text(
    st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_@ %."),
    min_size=1,
    max_size=12,
)


@given(
    root=st.sampled_from(["memory", "mem", "agent_memory"]),
    user=scope_values,
    agent=st.none() | scope_values,
    workflow=st.none() | scope_values,
)
def test_one_users_memory_shares_one_key(
    root: str, user: str, agent: str | None, workflow: str | None
) -> None:
    """Under the default rule, every kind of memory of a user, for any agent or workflow,
    has the key of the user's namespace, and the scope's ledger rows too."""
    scope = Scope(user_id=user, agent_id=agent, workflow_id=workflow)
    keys = {prefix_shard(".".join(namespace(root, scope, kind))) for kind in KINDS}
    user_key = shard_key((root, *Scope(user_id=user).labels))
    assert keys == {user_key}
    assert shard_key((root, *scope.labels)) == user_key


@given(labels=st.lists(label, min_size=1, max_size=6), depth=st.integers(1, 8))
def test_the_key_is_the_first_labels_or_the_whole_namespace(labels: list[str], depth: int) -> None:
    key = shard_key(labels, depth)
    if len(labels) <= depth:
        assert key == ".".join(labels)  # a namespace shorter than N is its own key
    else:
        assert key == ".".join(labels[:depth])
    assert prefix_shard(".".join(labels), depth) == key
    # every namespace below a covering prefix has the prefix's key; below a shorter one,
    # keys that lie under it
    for below in ([*labels, "x"], [*labels, "x", "y"]):
        if covers(labels, depth):
            assert shard_key(below, depth) == key
        else:
            assert (shard_key(below, depth) + ".").startswith(key + ".")


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2"])
def test_a_shard_depth_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="shard_depth must be an integer >= 1"):
        checked_depth(bad)
    with pytest.raises(ConfigurationError, match="shard_depth"):
        create_store(shard_depth=bad)
    with pytest.raises(ConfigurationError, match="shard_depth"):
        M.migrate(create_store(auto_setup=False).db, shard_depth=bad)


def test_every_store_and_memory_table_is_keyed_by_shard_first() -> None:
    for name in SHARDED_TABLES:
        table = schema.metadata.tables[name]
        assert table.info == {"shard_key": "shard"}
        key = [c.name for c in table.primary_key.columns]
        assert "shard" in key and not table.c.shard.nullable
        assert key[0] == "shard"
    assert schema.settings.info == {"reference": True}


# -- the recorded rule ---------------------------------------------------------------------


def test_the_rule_is_recorded_and_another_is_refused(database_url: str) -> None:
    with create_store(database_url, shard_depth=3) as store:
        store.put(("users", "alice", "notes"), "n", {"text": "hello"})
    with create_store(database_url, shard_depth=2) as other:
        with pytest.raises(ConfigurationError) as refused:
            other.put(("users", "alice", "notes"), "m", {"text": "written?"})
        message = str(refused.value)
        assert "shard_depth=3" in message and "shard_depth=2" in message
        assert "fixed once data is written" in message
    # without a shard_depth, a store takes the one its database records
    with create_store(database_url) as again:
        assert again.get(("users", "alice", "notes"), "m") is None  # nothing was written
        assert again.get(("users", "alice", "notes"), "n") is not None
        again.put(("users", "bob", "notes"), "b", {"text": "hi"})
        assert again.statements.shard_depth == 3
    assert sorted(rows(database_url, "SELECT shard FROM am_store_items")) == [
        ("users.alice.notes",),
        ("users.bob.notes",),
    ]
    assert rows(database_url, DEPTH) == [("shard_depth", "3")]
    with create_store(database_url, auto_setup=False) as plain:
        applied = M.migrate(plain.db)  # no shard_depth: the recorded one
    assert applied == {
        "checkpoint": [1],
        "store": [],
        "memory": [1],
        "keys": [1],
    }


def test_a_new_database_records_the_default_rule(database_url: str) -> None:
    with create_store(database_url) as store:
        store.put(("users", "alice", "notes"), "n", {"text": "hello"})
        assert store.statements.shard_depth == DEFAULT_SHARD_DEPTH == 2
    assert rows(database_url, DEPTH) == [("shard_depth", "2")]
    assert rows(database_url, "SELECT shard FROM am_store_items") == [("users.alice",)]


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as pg:
        return pg.execute(sql).fetchall()


# -- every statement of one namespace or scope names its key ---------------------------------


class Watch:
    """The statements a store sends from now on, with their parameters."""

    def __init__(self, store: Any) -> None:
        self.sent: list[tuple[str, Any]] = []
        run, arun = store.db.run, store.db.arun

        def watched(plan: Plan[Any]) -> Plan[Any]:
            try:
                batch = next(plan)
                while True:
                    self.sent += [(s.sql.text, s.params) for s in batch.statements]
                    batch = plan.send((yield batch))
            except StopIteration as stop:
                return stop.value

        store.db.run = lambda plan: run(watched(plan))
        store.db.arun = lambda plan: arun(watched(plan))

    def take(self) -> list[tuple[str, Any]]:
        out, self.sent = self.sent, []
        return out


def names_key(text: str, params: Any, key: str) -> bool:
    """Whether a statement names the shard key ``key``: a write of rows that carry it, or
    a statement that filters on it and binds it (every parameter set, for many)."""
    each = params if isinstance(params, list) else [params]
    if not each:
        return False
    if re.match(r"\s*(INSERT|UPSERT)\b", text):
        if "shard" in each[0] and not isinstance(each[0]["shard"], list):
            return all(p["shard"] == key for p in each)
        return "shard" in each[0] and set(each[0]["shard"]) == {key}  # column arrays
    if all(isinstance(p.get("s"), list) and set(p["s"]) == {key} for p in each):
        return True  # rows named by column arrays (routed on Citus, see test_citus)
    if not re.search(r"\bshard = ", text):
        return False
    return all(
        key in {v for k, v in p.items() if k == "shard" or re.fullmatch(r"s\d+", k)} for p in each
    )


def touches(text: str, params: Any) -> bool:
    """Whether a statement reads or writes store or memory rows (one that executes for
    no parameter set, ``many`` with none, runs nothing)."""
    return bool(re.search(r"\bam_(store|memory)_", text)) and params != []


@pytest.fixture
def watched_store(database_url: str) -> Iterator[tuple[Any, Watch]]:
    store = create_store(database_url, index={"dims": 16, "embed": WordEmbeddings(16)})
    store.setup()
    yield store, Watch(store)
    store.close()


def test_store_calls_of_one_namespace_name_its_shard_key(watched_store: Any) -> None:
    store, watch = watched_store
    ns = ("users", "alice", "notes")
    key = "users.alice"
    store.put(ns, "n1", {"text": "window seats please", "rank": 3})
    store.put(ns, "n2", {"text": "aisle seats never", "rank": 1}, ttl=5)
    store.get(ns, "n2")
    store.search(("users", "alice"), query="window seats")  # lexical and vector
    store.search(ns, query="seats", filter={"rank": {"$gte": 2}})
    store.search(ns, filter={"rank": 3})
    store.list_namespaces(prefix=("users", "alice"))
    store.delete(ns, "n1")
    store.delete_namespace(("users", "alice"))
    sent = [(t, p) for t, p in watch.take() if touches(t, p)]
    assert len(sent) > 15
    unrouted = [t for t, p in sent if not names_key(t, p, key)]
    assert unrouted == []


def test_a_prefix_shorter_than_the_key_still_matches_and_reads_every_shard(
    watched_store: Any,
) -> None:
    store, watch = watched_store
    store.put(("users", "alice"), "a", {"text": "green tea"})
    store.put(("users", "bob"), "b", {"text": "green tea too"})
    watch.take()
    found = store.search(("users",), query="green tea")
    assert sorted(i.key for i in found) == ["a", "b"]
    assert store.list_namespaces(prefix=("users",)) == [("users", "alice"), ("users", "bob")]
    sent = [(t, p) for t, p in watch.take() if "FROM am_store" in t]
    # the candidates come from every shard (no key bound), their rows read with them: no
    # item is read again by its key
    by_prefix = [p for t, p in sent if re.search(r":ns\b|%\(ns\)s", t)]
    assert by_prefix and not any("shard" in p for p in by_prefix)
    assert not [p for t, p in sent if re.search(r":s0\b|%\(s0\)s", t)]


def test_memory_calls_of_one_scope_name_its_shard_key(database_url: str) -> None:
    answers = iter([extraction(("city", "Munich", "alice lives in Munich"))])
    store = create_store(database_url)
    memory = AgentMemory(store, extractor=CallableExtractor(lambda p: next(answers)))
    scope = "user=alice,agent=support"
    store.setup()
    watch = Watch(store)
    memory.record(scope, [HumanMessage("I moved to Munich")], thread_id="t1", key="e1")
    assert memory.consolidate(scope).completed == 1
    memory.record(scope, [HumanMessage("again")], thread_id="t1", key="e2")
    memory.facts(scope)
    memory.recall(scope, "where does alice live", budget_tokens=100, reinforce=True)
    memory.decay(scope)
    memory.pin(scope, "city")
    memory.retry(scope)
    memory.erase(scope)
    key = "memory.user=alice"
    sent = [(t, p) for t, p in watch.take() if touches(t, p)]
    assert len(sent) > 20
    # what reads every scope: the listing that finds the scopes erase covers
    unrouted = [
        t for t, p in sent if not names_key(t, p, key) and not {"root", "root_dot"} & set(p)
    ]
    assert unrouted == []
    store.close()


@pytest.mark.parametrize("words", [3, 40])
def test_on_a_distributed_database_rows_go_in_by_values(database_url: str, words: int) -> None:
    """Where the tables are distributed, every insert of a put and of a record is an
    ``INSERT ... VALUES`` (routed to the row's shard), or an ``INSERT ... SELECT`` of the
    item's own row named by its shard key (routed too), never one of other rows (which a
    distributed database first pulls to its coordinator); an item's terms, however many,
    ride in the item's rows (no row per term); the data is the same."""
    store = create_store(database_url)
    memory = AgentMemory(store)
    store.setup()
    store.dialect.distributed = True
    watch = Watch(store)
    more = " ".join(f"word{i}x" for i in range(words - 3))
    store.put(("users", "alice"), "a", {"text": f"green tea in the morning {more}"})
    memory.record("user=alice", [HumanMessage("I drink green tea")], thread_id="t", key="e")
    store.put(("users", "alice"), "a", {"text": f"green tea at noon {more}"})  # a rewrite
    sent = [(t, p) for t, p in watch.take() if re.match(r"\s*INSERT", t) and p != []]
    inserts = [t for t, _ in sent]
    assert len(inserts) >= 3
    # a retraction's insert, and that of the terms to list (the item's number and length),
    # may read the item's own row, named by its shard key (routed); SQLite's new item number
    # is a subquery among the VALUES, which no distributed database runs
    selects = [t for t in inserts if re.match(r"\s*INSERT INTO \S+ \([^)]*\)\s*\(?\s*SELECT", t)]
    for select in selects:
        assert select.startswith(
            ("INSERT INTO am_store_retractions", "INSERT INTO am_store_unlisted")
        ), select
        assert "am_store_items.shard = " in select
    assert not [t for t in inserts if "am_store_terms" in t or "am_store_chunks" in t]
    [put] = [p for t, p in sent if t.startswith("INSERT INTO am_store_items")][:1]
    rows = put if isinstance(put, list) else [put]
    assert len(bytes(rows[0]["terms"])) == LISTED_BYTES * words  # what a retraction needs
    [listing] = [p for t, p in sent if t.startswith("INSERT INTO am_store_unlisted")][:1]
    rows = listing if isinstance(listing, list) else [listing]
    assert len(bytes(rows[0]["terms"])) == UNLISTED_BYTES * words
    [hit] = store.search(("users", "alice"), query="green tea noon")
    assert hit.key == "a" and "noon" in hit.value["text"]
    assert [e.key for e in memory.episodes("user=alice")] == ["e"]
    store.close()


@pytest.mark.parametrize("depth", [1, 4])
def test_any_depth_gives_the_default_depths_results(depth: int, tmp_path: Path) -> None:
    """The rule decides where rows live, never what calls return: with keys of one label
    (every prefix covers them) or of four (most prefixes fan out), the same calls give the
    results of the default rule."""

    def session(store: AgentMemoryStore) -> list[Any]:
        out: list[Any] = []
        for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d", "e"), ("z", "y")]:
            for k in ("k1", "k2"):
                store.put(ns, k, {"text": f"green tea {'.'.join(ns)} {k}", "n": len(ns)})
        for prefix in [("a",), ("a", "b"), ("a", "b", "c", "d"), ("z",), ("q",)]:
            out.append([(i.namespace, i.key) for i in store.search(prefix, query="green tea")])
            out.append(
                [(i.namespace, i.key) for i in store.search(prefix, filter={"n": {"$gte": 3}})]
            )
            out.append(store.list_namespaces(prefix=prefix))
        out.append(present(store.get(("a", "b", "c"), "k2")).value)
        store.delete(("a", "b", "c"), "k2")
        out.append(store.delete_namespace(("a", "b")))
        out.append(store.list_namespaces())
        return out

    with create_store(f"sqlite:///{tmp_path / 'default.db'}") as default:
        expected = session(default)
    with create_store(f"sqlite:///{tmp_path / 'other.db'}", shard_depth=depth) as other:
        assert session(other) == expected


def test_scopes_of_fewer_labels_than_the_key_still_consolidate_decay_and_erase(
    database_url: str,
) -> None:
    """With ``shard_depth=4`` a ``user=alice`` scope's items are spread over several keys
    (``memory.user=alice.facts``, ``...episodes``); its calls fan out and stay correct."""
    answers = iter([extraction(("city", "Munich", "alice lives in Munich"))])
    store = create_store(database_url, shard_depth=4)
    memory = AgentMemory(
        store, extractor=CallableExtractor(lambda p: next(answers)), decay_threshold=0.9
    )
    alice = "user=alice"
    memory.record(alice, [HumanMessage("I moved to Munich")], thread_id="t1", key="e1")
    assert memory.consolidate(alice).completed == 1
    assert [f.value for f in memory.facts(alice)] == ["Munich"]
    shards = {s for (s,) in rows(database_url, "SELECT DISTINCT shard FROM am_store_items")}
    assert shards == {"memory.user=alice.facts", "memory.user=alice.episodes"}
    assert rows(database_url, "SELECT DISTINCT shard FROM am_memory_scopes") == [
        ("memory.user=alice",)
    ]
    assert memory.recall(alice, "where does alice live", budget_tokens=100).facts
    assert memory.decay(alice) >= 1  # importance 0.5, under the 0.9 threshold
    assert memory.facts(alice) == []
    memory.record(alice, [HumanMessage("still in Munich")], thread_id="t1", key="e2")
    erased = memory.erase(alice)
    assert erased["scopes"] == 1 and erased["am_store_items"] >= 1
    for name in SHARDED_TABLES:
        assert rows(database_url, f"SELECT COUNT(*) FROM {name}") == [(0,)], name
    store.close()


# -- work across shards, without row locks ---------------------------------------------------


def test_concurrent_claims_lease_each_scope_to_exactly_one_worker(database_url: str) -> None:
    """Claims find candidates without locks and take each lease by a conditional write:
    eight workers racing over five scopes lease every scope once, to one of them."""
    from concurrent.futures import ThreadPoolExecutor

    from langgraph_checkpoint_agent_memory.db import memory_jobs as J

    store = create_store(database_url)
    memory = AgentMemory(store)
    scopes = [f"user=u{i}" for i in range(5)]
    for i, scope in enumerate(scopes):
        memory.record(scope, [HumanMessage(f"turn {i}")], key=f"e{i}")
    sql = memory.context.sql

    def worker(n: int) -> list[Any]:
        claims: list[J.Claim] = []
        while True:
            claim = store.run_plan(
                J.claim_plan(sql, owner=f"w{n}", now=1e12, lease_seconds=1e9, limit=10)
            )
            if claim is None:
                return claims
            claims.append(claim)

    with ThreadPoolExecutor(8) as pool:
        found = [c for claims in pool.map(worker, range(8)) for c in claims]
    assert sorted(c.scope for c in found) == scopes  # each once
    assert all(c.episode_keys == [f"e{scopes.index(c.scope)}"] for c in found)
    owners = dict(rows(database_url, "SELECT scope, lease_owner FROM am_memory_scopes"))
    assert owners == {c.scope: c.owner for c in found}
    store.close()


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(1, 3), operations=ops_strategy)
def test_random_operations_answer_alike_under_any_depth(
    depth: int, operations: list[tuple[Any, ...]]
) -> None:
    """Hypothesis: any sequence of puts, deletes, gets, searches (filter, query), listings
    and namespace deletes gives the same answers whatever the shard depth (namespaces of one
    and two labels: covering the key or not)."""
    clock = FakeClock(start=1_800_000_000)
    keyed = create_store(clock=clock, shard_depth=depth)
    default = create_store(clock=clock)
    try:
        for op in operations:
            clock.advance(1)
            answers = [apply(s, op) for s in (keyed, default)]
            assert answers[0] == answers[1], op
    finally:
        keyed.close()
        default.close()


def apply(store: Any, op: tuple[Any, ...]) -> Any:
    """One operation of :data:`tests.test_store_properties.ops_strategy`, its answer viewed
    as plain values."""
    kind = op[0]
    if kind == "put":
        return view(store.put(op[1], op[2], op[3]))
    if kind == "delete":
        return view(store.delete(op[1], op[2]))
    if kind == "get":
        return view(store.get(op[1], op[2]))
    if kind == "search":
        return view(store.search(op[1], filter=op[2], limit=op[3], offset=op[4]))
    if kind == "query":
        found = store.search(op[1], query=op[3], filter=op[2], limit=op[4])
        return [(*view(i), round(i.score or 0.0, 9)) for i in found]
    if kind == "namespaces":
        return store.list_namespaces(prefix=op[1], max_depth=op[2])
    return store.delete_namespace(op[1])


def test_a_store_without_setup_uses_the_rule_its_database_records(database_url: str) -> None:
    """``auto_setup=False`` (migrations run by ``agent-memory migrate`` at deploy time):
    the first use reads the recorded rule, so its keys are the ones setup wrote."""
    with create_store(database_url, shard_depth=3) as store:
        store.put(("users", "alice", "notes"), "n", {"text": "hello"})
    with create_store(database_url, auto_setup=False) as plain:
        assert plain.get(("users", "alice", "notes"), "n") is not None
        plain.put(("users", "alice", "notes"), "m", {"text": "again"})
        assert plain.statements.shard_depth == 3
    wrong = create_store(database_url, auto_setup=False, shard_depth=2)
    with wrong, pytest.raises(ConfigurationError, match="shard_depth=3"):
        wrong.get(("users", "alice", "notes"), "n")
    assert sorted(rows(database_url, "SELECT shard FROM am_store_items")) == [
        ("users.alice.notes",),
        ("users.alice.notes",),
    ]


def test_the_rule_comes_from_agent_config_and_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_agent_memory import agent_config
    from langgraph_checkpoint_agent_memory.cli import main

    @agent_config("config.store.shard_depth", "Shard depth", "Scaling out")
    def shard_depth() -> int:
        return 2

    monkeypatch.setenv("CONFIG__STORE__SHARD_DEPTH", "3")
    configured = f"sqlite:///{tmp_path / 'configured.db'}"
    with create_store(configured) as store:
        store.put(("users", "alice", "notes"), "n", {"text": "hello"})
    assert rows(configured, DEPTH) == [("shard_depth", "3")]

    by_cli = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["migrate", "--url", by_cli, "--shard-depth", "1"]) == 0
    assert rows(by_cli, DEPTH) == [("shard_depth", "1")]
    monkeypatch.delenv("CONFIG__STORE__SHARD_DEPTH")
    store = create_store(by_cli, shard_depth=None)  # config says 2: refused
    with store, pytest.raises(ConfigurationError, match="shard_depth=1"):
        store.put(("users", "alice"), "n", {"text": "hi"})
    assert main(["migrate", "--url", by_cli, "--shard-depth", "2"]) != 0
