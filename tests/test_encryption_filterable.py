"""Filterable fields of an encrypted store: ``$eq`` and ``$in`` on them are narrowed in the
database by keyed hashes, with the answers of a plain store, on memory, SQLite, PostgreSQL,
PgBouncer and Citus, sync and async; items written before a field was marked are still
found; the hashes of one value differ between shard keys."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import (
    AgentMemoryStore,
    ConfigurationError,
    Encryption,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.crypto.config import from_langgraph_aes_key, resolve
from tests.pg import backend_params, backend_url

FIELDS = ("owner", "n", "a.b")


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres", "pgbouncer", "citus"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "store.db")


@pytest.fixture
def open_store(url: str | None) -> Iterator[Callable[..., AgentMemoryStore]]:
    """Stores on this test's database, encrypted under one master key; all closed after."""
    key = generate_master_key()
    opened: list[AgentMemoryStore] = []

    def make(fields: tuple[str, ...] = FIELDS) -> AgentMemoryStore:
        setting = Encryption(master_keys=[key], filterable_fields=fields)
        store = create_store(url, encryption=setting)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def pair(open_store: Callable[..., AgentMemoryStore]) -> Iterator[tuple[Any, Any]]:
    """An encrypted store with filterable fields, and a plain store in memory (shared by a
    test's examples: each writes a namespace of its own)."""
    with create_store() as plain:
        yield open_store(), plain


class Opened:
    """Counts the values a store decrypts."""

    def __init__(self, store: AgentMemoryStore) -> None:
        assert store.sealer is not None
        self.count = 0
        sealer, original = store.sealer, store.sealer.open_value

        def counted(*args: Any) -> Any:
            self.count += 1
            return original(*args)

        sealer.open_value = counted  # type: ignore[method-assign, assignment]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, 2.0, -0.0, 0.5]),
    st.sampled_from(["x", "y", "1", ""]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=2), st.just({"b": 1}))
items = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "owner": values,
            "n": values,
            "a": st.fixed_dictionaries({}, optional={"b": values}),
            "m": scalars,
        },
    ),
    min_size=1,
    max_size=12,
)
conditions = st.one_of(
    scalars,
    st.fixed_dictionaries({"$eq": scalars}),
    st.fixed_dictionaries({"$in": st.lists(scalars, max_size=3)}),
    st.fixed_dictionaries({"$ne": scalars}),
)
filters = st.dictionaries(st.sampled_from(["owner", "n", "a.b", "m"]), conditions, max_size=3)

counter = iter(range(10**9))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batch=items, flt=filters)
def test_filtered_searches_agree_with_a_plain_store(
    pair: tuple[AgentMemoryStore, AgentMemoryStore],
    batch: list[dict[str, Any]],
    flt: dict[str, Any],
) -> None:
    store, plain = pair
    ns = ("users", f"u{next(counter)}", "notes")
    for i, value in enumerate(batch):
        store.put(ns, f"k{i}", value)
        plain.put(ns, f"k{i}", value)
    found = sorted(i.key for i in store.search(ns, filter=flt, limit=50))
    assert found == sorted(i.key for i in plain.search(ns, filter=flt, limit=50))
    # over every shard key written so far: each one's hashes, the others' items left out
    wide = sorted((i.namespace[1], i.key) for i in store.search(("users",), filter=flt, limit=500))
    assert wide == sorted(
        (i.namespace[1], i.key) for i in plain.search(("users",), filter=flt, limit=500)
    )


def fill(store: AgentMemoryStore, n: int = 120, ns: tuple[str, ...] = ("bench", "items")) -> None:
    for i in range(n):
        store.put(ns, f"k{i}", {"owner": f"user{i % 20}", "priority": i % 10})


def test_an_equality_on_a_filterable_field_decrypts_only_what_it_returns(
    open_store: Callable[..., AgentMemoryStore],
) -> None:
    store = open_store(("owner",))
    fill(store)
    opened = Opened(store)
    found = store.search(("bench",), filter={"owner": "user3"}, limit=5)
    assert len(found) == 5 and {i.value["owner"] for i in found} == {"user3"}
    assert opened.count == 5
    opened.count = 0
    both = store.search(("bench",), filter={"owner": {"$in": ["user1", "user2"]}}, limit=20)
    assert len(both) == 12 and opened.count == 12
    opened.count = 0  # a field not marked: decided on every value read, newest first
    few = store.search(("bench",), filter={"priority": 3, "owner": {"$ne": "user3"}}, limit=5)
    assert len(few) == 5 and opened.count > 30


async def test_async_searches_narrow_alike(open_store: Callable[..., AgentMemoryStore]) -> None:
    store = open_store(("owner",))
    for i in range(60):
        await store.aput(("bench", "items"), f"k{i}", {"owner": f"user{i % 20}", "priority": i})
    opened = Opened(store)
    found = await store.asearch(("bench",), filter={"owner": "user7", "priority": {"$gt": 10}})
    assert sorted(i.value["priority"] for i in found) == [27, 47]
    assert opened.count == 3  # user7's three items, no other


def test_items_written_before_a_field_was_marked_are_still_found(
    open_store: Callable[..., AgentMemoryStore], url: str | None
) -> None:
    if url is None:
        pytest.skip("a store in memory cannot be opened again")
    before = open_store(())
    fill(before, 40)
    after = open_store(("owner",))
    fill(after, 10, ("bench", "more"))
    found = after.search(("bench",), filter={"owner": "user3"}, limit=50)
    assert sorted((i.namespace[1], i.key) for i in found) == [
        ("items", "k23"),
        ("items", "k3"),
        ("more", "k3"),
    ]
    before.put(("bench", "items"), "k3", {"owner": "user4"})  # rewritten without the hashes
    assert after.search(("bench",), filter={"owner": "user3"}) != found
    assert sorted(i.key for i in after.search(("bench",), filter={"owner": "user4"})) == [
        "k24",
        "k3",
        "k4",
        "k4",
    ]


def test_one_value_hashes_differently_under_each_shard_key(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    setting = Encryption(master_keys=[generate_master_key()], filterable_fields=["owner"])
    with create_store(f"sqlite:///{path}", encryption=setting) as store:
        store.put(("users", "alice"), "k", {"owner": "shared-value"})
        store.put(("users", "bob"), "k", {"owner": "shared-value"})
        assert len(store.search(("users",), filter={"owner": "shared-value"})) == 2
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT shard, tag FROM am_store_tags").fetchall()
    by_shard: dict[str, set[str]] = {}
    for shard, term in rows:
        by_shard.setdefault(shard, set()).add(term)
    assert sorted(by_shard) == ["users.alice", "users.bob"]
    assert all(len(t) == 2 for t in by_shard.values())  # the mark and the value's hash
    assert by_shard["users.alice"].isdisjoint(by_shard["users.bob"])
    assert not any("shared" in t or "owner" in t for t in by_shard["users.alice"])


def test_the_setting_takes_paths_from_the_argument_and_the_environment() -> None:
    key = generate_master_key()
    assert Encryption(master_keys=[key], filterable_fields="owner").filterable_fields == ("owner",)
    assert Encryption(master_keys=[key], filterable_fields=["b", "a.c", "b"]).filterable_fields == (
        "a.c",
        "b",
    )
    assert Encryption(master_keys=[key], filterable_fields=None).filterable_fields == ()  # type: ignore[arg-type]
    for bad in ("", "a..b", ".a", 3, " a", "a. b", "a\x00value\x00sx"):
        with pytest.raises(ConfigurationError, match="dotted paths"):
            Encryption(master_keys=[key], filterable_fields=[bad])  # type: ignore[list-item]
    env = {"AGENT_MEMORY_MASTER_KEY": key, "AGENT_MEMORY_FILTERABLE_FIELDS": " owner , kind "}
    found = resolve(None, environ=env)
    assert found is not None and found.filterable_fields == ("kind", "owner")
    given_key = resolve(key, environ={"AGENT_MEMORY_FILTERABLE_FIELDS": "owner"})
    assert given_key is not None and given_key.filterable_fields == ("owner",)
    server = from_langgraph_aes_key(
        {"LANGGRAPH_AES_KEY": "k" * 32, "AGENT_MEMORY_FILTERABLE_FIELDS": "owner"}
    )
    assert server is not None and server.filterable_fields == ("owner",)
    with pytest.raises(ConfigurationError, match="dotted paths"):
        resolve(None, environ={**env, "AGENT_MEMORY_FILTERABLE_FIELDS": "a..b"})


#: (stored, asked, kept): numbers equal as numbers, never as booleans or strings.
EQUALITIES = [
    (1, 1.0, True),
    (1.0, 1, True),
    (-0.0, 0, True),
    (0.5, 0.5, True),
    (True, 1, False),
    (1, True, False),
    ("1", 1, False),
    (None, None, True),
    ([1], 1, False),
    ({"b": 1}, 1, False),
]


def test_values_equal_as_the_filters_compare_them(
    open_store: Callable[..., AgentMemoryStore],
) -> None:
    store = open_store(("n", "a.b"))
    for case, (stored, asked, kept) in enumerate(EQUALITIES):
        ns = ("users", f"u{case}")
        store.put(ns, "top", {"n": stored})
        store.put(ns, "nested", {"a": {"b": stored}})
        store.put(ns, "other", {"n": "something else", "a": {"b": "else"}})
        for field, key in (("n", "top"), ("a.b", "nested")):
            for flt in ({field: asked}, {field: {"$in": [asked, "zz"]}}):
                found = [i.key for i in store.search(ns, filter=flt)]
                assert found == ([key] if kept else []), (stored, flt)


def test_items_sealed_by_the_migration_get_their_hashes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with create_store(url, encryption=False) as store:
        fill(store, 40)
    key = generate_master_key()
    setting = Encryption(master_keys=[key], allow_plaintext=True, filterable_fields=["owner"])
    with create_store(url, encryption=setting) as store:
        assert store.encrypt_plaintext()["items"] == 40
        opened = Opened(store)
        found = store.search(("bench",), filter={"owner": "user3"}, limit=50)
        assert sorted(i.key for i in found) == ["k23", "k3"] and opened.count == 2


class Fraction(float):
    """A float subclass that prints otherwise (as numpy's floats do)."""

    def __repr__(self) -> str:
        return f"Fraction({float(self)})"


class Label(str):
    def __str__(self) -> str:
        return "something else"


def test_subclasses_and_long_integers_filter_as_the_plain_store_does() -> None:
    setting = Encryption(master_keys=[generate_master_key()], filterable_fields=["n", "s"])
    with create_store(encryption=setting) as store, create_store() as plain:
        for target in (store, plain):
            target.put(("users", "u"), "half", {"n": 0.5, "s": "x"})
            target.put(("users", "u"), "two", {"n": 2, "s": "y"})
        for flt in (
            {"n": Fraction(0.5)},
            {"n": {"$in": [Fraction(2.0), 7]}},
            {"s": Label("x")},
            {"n": 10**5000},
            {"n": {"$in": [10**5000, 2]}},
        ):
            assert [i.key for i in store.search(("users",), filter=flt)] == [
                i.key for i in plain.search(("users",), filter=flt)
            ], flt


def test_a_long_in_list_is_decided_on_decrypted_values(
    open_store: Callable[..., AgentMemoryStore],
) -> None:
    store = open_store(("owner",))
    fill(store, 40)
    sealer = store.sealer
    assert sealer is not None
    base = store.statements.prefix_params(("bench",))

    def prefilter(values: list[str]) -> Any:
        conds: list[tuple[list[str], str, Any]] = [(["owner"], "$in", values)]
        return store.run_plan(sealer.prefilter_plan(store.statements, conds, base))[0]

    assert [shape for _, shape in prefilter(["user1", "user2", "user3"])] == [("hashed", 4, 1)]
    wanted = [f"user{i}" for i in range(600)]  # more hashes than a statement should bind
    assert prefilter(wanted) == ()
    found = store.search(("bench",), filter={"owner": {"$in": wanted}}, limit=100)
    assert len(found) == 40


def test_operators_name_filterable_fields_through_agent_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langgraph_checkpoint_agent_memory import agent_config
    from langgraph_checkpoint_agent_memory.factory import resolve_encryption

    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", generate_master_key())
    found = resolve_encryption()
    assert found is not None and found.filterable_fields == ()

    @agent_config("config.encryption.filterable_fields", "Encryption", "Filterable fields")
    def _declared() -> str:
        return "status, customer.id"

    found = resolve_encryption()
    assert found is not None and found.filterable_fields == ("customer.id", "status")
    monkeypatch.setenv("AGENT_MEMORY_FILTERABLE_FIELDS", "owner")  # the environment first
    found = resolve_encryption()
    assert found is not None and found.filterable_fields == ("owner",)
