"""Encryption at rest of the store: round trips, what reaches the disk, the same answers as
without encryption, rows moved between owners, erasure that reaches copies, plaintext
refused and migrated, on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sqlite3
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import (
    AgentMemoryStore,
    DecryptionError,
    Encryption,
    EncryptionError,
    KeyMissingError,
    PlaintextRowError,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.db.term_index import halves, high_parts, term_id
from langgraph_checkpoint_agent_memory.text import tokens
from tests.helpers import INDEXED_ITEMS, WordEmbeddings
from tests.pg import SERVERS, PgServers, backend_params, backend_url


def secret_words(n: int = 6) -> list[str]:
    """Distinct short words no other test writes (so a grep finds them only here)."""
    return [
        "zq" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(n)
    ]


def workload(store: AgentMemoryStore, words: list[str]) -> None:
    """Items whose values, indexed text and vectors hold the secret words (never in keys
    or namespaces), some updated, one deleted, one with a TTL."""
    for i, word in enumerate(words):
        ns = ("users", f"u{i % 2}", "notes")
        store.put(ns, f"k{i}", {"text": f"note about {word} and lunch", "n": i})
        store.put(ns, f"t{i}", {"text": f"{word}", "tag": word}, ttl=60)
    store.put(("users", "u0", "notes"), "k0", {"text": f"now {words[0]} again", "n": 10})
    store.delete(("users", "u1", "notes"), "k1")


def word_index() -> dict[str, Any]:
    return {"dims": 32, "embed": WordEmbeddings(32), "fields": ["text"]}


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "store.db")


@pytest.fixture
def other_url(url: str | None, request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """A second empty database of the same backend as ``url``."""
    return backend_url(request, str(request.node.callspec.params["url"]), tmp_path / "other.db")


@pytest.fixture
def stores() -> Iterator[Callable[..., AgentMemoryStore]]:
    opened: list[AgentMemoryStore] = []

    def make(url: str | None, **kwargs: Any) -> AgentMemoryStore:
        store = create_store(url, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# -- round trips ---------------------------------------------------------------------------


def test_round_trip_sync(url: str | None, stores: Callable[..., AgentMemoryStore]) -> None:
    store = stores(url, encryption=generate_master_key(), index=word_index())
    assert store.keyring is not None
    store.put(("users", "alice"), "a", {"text": "alice likes spicy ramen", "n": 3})
    store.put(("users", "bob"), "b", {"text": "bob likes ramen too", "n": 5})
    got = store.get(("users", "alice"), "a")
    assert got is not None and got.value == {"text": "alice likes spicy ramen", "n": 3}
    assert [i.key for i in store.search(("users",), query="spicy ramen")] == ["a", "b"]
    assert [i.key for i in store.search(("users",), filter={"n": {"$gt": 4}})] == ["b"]
    assert [i.key for i in store.search(("users", "bob"), query="ramen")] == ["b"]
    assert store.list_namespaces() == [("users", "alice"), ("users", "bob")]
    store.delete(("users", "alice"), "a")
    assert store.get(("users", "alice"), "a") is None


def test_round_trip_async(url: str | None, stores: Callable[..., AgentMemoryStore]) -> None:
    store = stores(url, encryption=generate_master_key(), index=word_index())

    async def run() -> None:
        await store.aput(("users", "alice"), "a", {"text": "alice likes spicy ramen", "n": 3})
        await store.aput(("users", "bob"), "b", {"text": "bob likes ramen too", "n": 5})
        got = await store.aget(("users", "bob"), "b")
        assert got is not None and got.value["n"] == 5
        found = await store.asearch(("users",), query="spicy", filter={"n": 3})
        assert [i.key for i in found] == ["a"]
        assert await store.adestroy_keys(["users.bob"])
        with pytest.raises(KeyMissingError):
            await store.aget(("users", "bob"), "b")

    asyncio.run(run())


def test_a_reopened_store_reads_with_the_same_key(
    url: str | None, stores: Callable[..., AgentMemoryStore]
) -> None:
    if url is None:
        pytest.skip("a store in memory is gone once closed")
    key = generate_master_key()
    stores(url, encryption=key).put(("users", "alice"), "a", {"city": "Lyon"})
    again = stores(url, encryption=key)
    assert again.get(("users", "alice"), "a").value == {"city": "Lyon"}  # type: ignore[union-attr]
    with pytest.raises(EncryptionError, match="encrypted"):
        stores(url, encryption=False).get(("users", "alice"), "a")


# -- what reaches the disk ------------------------------------------------------------------


def found_in(blobs: list[bytes], words: list[str]) -> set[str]:
    """Which of ``words`` (or the stems the lexical index would store) appear."""
    out = set()
    for word in words:
        forms = {word, *tokens(word)}
        if any(f.encode() in blob for f in forms for blob in blobs):
            out.add(word)
    return out


def sqlite_files(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in path.parent.glob(path.name + "*")]


@pytest.mark.parametrize("encrypted", [True, False])
def test_no_secret_word_in_the_sqlite_file_or_its_wal(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore], encrypted: bool
) -> None:
    path = tmp_path / "grep.db"
    words = secret_words()
    store = stores(
        f"sqlite:///{path}",
        encryption=generate_master_key() if encrypted else False,
        index=word_index(),
    )
    workload(store, words)
    found = [i.key for i in store.search(("users",), query=words[2])]
    assert sorted(found[:2]) == ["k2", "t2"]
    with sqlite3.connect(path) as conn:  # the term index holds no word's hash, nor its stem's
        held = stored_halves(conn)
    stems = {halves(term_id(s))[0] for w in words for s in tokens(w)}
    if encrypted:
        assert found_in(sqlite_files(path), words) == set()
        assert not stems & held
    else:  # the control: the same workload without encryption shows every word
        assert found_in(sqlite_files(path), words) == set(words)
        assert stems <= held


def stored_halves(conn: sqlite3.Connection) -> set[int]:
    """The high halves of every term id the term index holds: in its lists and items."""
    held = {hi for (hi,) in conn.execute("SELECT hi FROM am_store_chunks")}
    for terms, merged in conn.execute(f"SELECT terms, merged FROM {INDEXED_ITEMS}"):
        if terms is not None:
            held.update(high_parts(terms, listed=merged == 1).tolist())
    return held


def pg_files(data: Path) -> list[bytes]:
    return [
        p.read_bytes() for top in ("base", "pg_wal") for p in (data / top).rglob("*") if p.is_file()
    ]


@pytest.mark.postgres
def test_no_secret_word_in_postgresql_files(
    pg_servers: PgServers, stores: Callable[..., AgentMemoryStore]
) -> None:
    import psycopg

    from tests.pg import SERVER_IDS

    sid = SERVER_IDS[0]
    server = pg_servers.get(f"postgres-{sid}")
    if server.local is None:
        pytest.skip("needs a throwaway cluster whose files the test can read")
    data = server.local.data
    words, control = secret_words(), secret_words()
    encrypted = stores(
        pg_servers.fresh_database(sid), encryption=generate_master_key(), index=word_index()
    )
    workload(encrypted, words)
    plain = stores(pg_servers.fresh_database(sid), encryption=False, index=word_index())
    workload(plain, control)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    blobs = pg_files(data)
    assert found_in(blobs, words) == set()
    assert found_in(blobs, control) == set(control)  # the grep can find what is there


# -- the same answers ----------------------------------------------------------------------


def test_search_filters_and_bm25_equal_with_and_without_encryption(
    url: str | None, other_url: str | None, stores: Callable[..., AgentMemoryStore]
) -> None:
    plain = stores(other_url, encryption=False, index=word_index())
    sealed = stores(url, encryption=generate_master_key(), index=word_index())
    texts = [
        "the cat sat on the mat",
        "a dog and a cat",
        "dogs chase cats in the park",
        "lunch in the park with friends",
        "the mat is red",
        "friends like dogs",
    ]
    for store in (plain, sealed):
        for i, text in enumerate(texts):
            user = f"u{i % 3}"
            store.put(("users", user, "notes"), f"k{i}", {"text": text, "n": i, "even": i % 2 == 0})

    def view(store: AgentMemoryStore, *args: Any, **kwargs: Any) -> list[Any]:
        return [
            (i.namespace, i.key, i.value, round(i.score or 0.0, 9))
            for i in store.search(*args, **kwargs)
        ]

    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((("users",),), {"query": "cat mat"}),  # spans three shard keys
        ((("users",),), {"query": "dogs park", "limit": 2, "offset": 1}),
        ((("users",),), {"query": "friends", "filter": {"even": False}}),
        ((("users",),), {"filter": {"n": {"$gte": 2}}, "limit": 2, "offset": 1}),
        ((("users", "u0"),), {"query": "cat"}),
        ((("users", "u1", "notes"),), {"query": "dog", "filter": {"n": {"$in": [1, 4]}}}),
        ((("users",),), {"query": "nothing matches this"}),
    ]
    for args, kwargs in cases:
        assert view(sealed, *args, **kwargs) == view(plain, *args, **kwargs), (args, kwargs)


def test_filters_reading_many_pages_equal_with_and_without_encryption(
    url: str | None, other_url: str | None, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Filters that keep few of many items read page after page of decrypted values (newest
    first, items written at the same instant ordered by namespace and key), or walk ranked
    lists far down; a search under a prefix hashes its terms for every shard key under it,
    one emptied included."""
    instant = [1_700_000_000.0]
    plain = stores(other_url, encryption=False, clock=lambda: instant[0], index=word_index())
    sealed = stores(
        url, encryption=generate_master_key(), clock=lambda: instant[0], index=word_index()
    )
    words = ["tea", "coffee", "lunch", "park"]
    for store in (plain, sealed):
        store.put(("users", "gone"), "x", {"text": "tea and coffee", "n": 1})
        store.delete(("users", "gone"), "x")  # its shard key keeps its data key
        for start in range(0, 640, 160):
            instant[0] += 1.0  # four instants, 160 items at each
            for i in range(start, start + 160):
                store.put(
                    ("users", f"u{i % 5}", "notes"),
                    f"k{i:03d}",
                    {"text": f"{words[i % 4]} {words[i % 3]} note {i}", "n": i, "odd": i % 2},
                )
        store.put(("users2", "u0"), "k0", {"text": "tea", "n": 7, "odd": 1})

    def view(store: AgentMemoryStore, *args: Any, **kwargs: Any) -> list[Any]:
        return [
            (i.namespace, i.key, i.value, round(i.score or 0.0, 9))
            for i in store.search(*args, **kwargs)
        ]

    # items newest first, and some on either side of where a page of 64, then one of 256, ends
    order = [i.value["n"] for i in plain.search(("users",), limit=1000)]
    edges = [order[j] for j in (0, 62, 63, 64, 318, 319, 320, 600)]
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((("users",),), {"filter": {"n": {"$in": edges}}, "limit": len(edges)}),
        ((("users",),), {"filter": {"n": {"$in": [3, 170, 333, 500, 639]}}, "limit": 3}),
        ((("users",),), {"filter": {"n": {"$lt": 20}, "odd": 1}, "limit": 4, "offset": 3}),
        ((("users",),), {"filter": {"n": {"$gte": 600}}, "limit": 50, "offset": 5}),
        ((("users",),), {"filter": {"odd": {"$gte": 0}}, "limit": 100, "offset": 40}),
        ((("users", "u2"),), {"filter": {"n": {"$lte": 30}}, "limit": 10}),
        ((("users",),), {"filter": {"n": -1}}),
        ((("users",),), {"query": "tea lunch", "filter": {"odd": 1}, "limit": 7, "offset": 2}),
        ((("users",),), {"query": "park note", "filter": {"n": {"$gte": 630}}, "limit": 5}),
        ((("users",),), {"query": "coffee park", "limit": 10}),
        ((("users", "gone"),), {"query": "tea"}),
    ]
    for args, kwargs in cases:
        found = view(sealed, *args, **kwargs)
        assert found == view(plain, *args, **kwargs), (args, kwargs)
        assert found or kwargs.get("filter") == {"n": -1} or args[0] == ("users", "gone")


# -- rows moved, keys destroyed, plaintext -------------------------------------------------


def test_a_sealed_value_moved_to_another_row_or_shard_does_not_open(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    path = tmp_path / "moved.db"
    store = stores(f"sqlite:///{path}", encryption=generate_master_key())
    store.put(("users", "alice"), "a", {"secret": "one"})
    store.put(("users", "alice"), "b", {"secret": "two"})
    store.put(("users", "bob"), "c", {"secret": "three"})
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE am_store_items SET sealed = (SELECT sealed FROM am_store_items WHERE "
            "key = 'a') WHERE key IN ('b', 'c')"
        )
    with pytest.raises(DecryptionError):
        store.get(("users", "alice"), "b")  # same key, another row
    with pytest.raises(DecryptionError):
        store.get(("users", "bob"), "c")  # another shard's key: authenticated as alice's
    assert store.get(("users", "alice"), "a").value == {"secret": "one"}  # type: ignore[union-attr]


def test_a_copy_taken_before_destroy_keys_loses_that_shard_only(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    keys_db = tmp_path / "keys.db"
    setting = Encryption(master_keys=[generate_master_key()], keystore_url=f"sqlite:///{keys_db}")
    data = tmp_path / "data.db"
    store = stores(f"sqlite:///{data}", encryption=setting, index=word_index())
    store.put(("users", "alice"), "a", {"text": "alice lives in lyon"})
    store.put(("users", "bob"), "b", {"text": "bob lives in lyon"})
    store.close()
    backup = tmp_path / "backup.db"
    shutil.copy(data, backup)  # a backup of the data, the key store kept apart
    store = stores(f"sqlite:///{data}", encryption=setting, index=word_index())
    assert store.destroy_keys(["users.alice"])
    with pytest.raises(KeyMissingError) as missing:
        store.get(("users", "alice"), "a")
    assert missing.value.key_id
    restored = stores(f"sqlite:///{backup}", encryption=setting, index=word_index())
    with pytest.raises(KeyMissingError):
        restored.get(("users", "alice"), "a")
    with pytest.raises(KeyMissingError):
        restored.search(("users",), query="lyon")
    assert restored.get(("users", "bob"), "b").value == {"text": "bob lives in lyon"}  # type: ignore[union-attr]
    assert [i.key for i in restored.search(("users", "bob"), query="lyon")] == ["b"]
    assert store.destroy_keys(["users.alice"]) == []  # nothing left to destroy


def test_destroy_keys_without_encryption_destroys_nothing(
    stores: Callable[..., AgentMemoryStore],
) -> None:
    store = stores(None, encryption=False)
    assert store.keyring is None
    assert store.destroy_keys(["users.alice"]) == []


def test_an_unknown_key_is_named(tmp_path: Path, stores: Callable[..., AgentMemoryStore]) -> None:
    data = tmp_path / "data.db"
    key = generate_master_key()
    first = Encryption(master_keys=[key], keystore_url=f"sqlite:///{tmp_path / 'k1.db'}")
    stores(f"sqlite:///{data}", encryption=first).put(("users", "a"), "x", {"v": 1})
    other = Encryption(master_keys=[key], keystore_url=f"sqlite:///{tmp_path / 'k2.db'}")
    with pytest.raises(KeyMissingError, match=r"data key [0-9a-f]{16}"):
        stores(f"sqlite:///{data}", encryption=other).get(("users", "a"), "x")


def test_plaintext_is_refused_then_migrated(
    url: str | None, stores: Callable[..., AgentMemoryStore]
) -> None:
    if url is None:
        pytest.skip("a store in memory cannot be reopened")
    words = secret_words(3)
    plain = stores(url, encryption=False, index=word_index())
    for i, word in enumerate(words):
        plain.put(("users", f"u{i}"), "k", {"text": f"remember {word}", "n": i}, ttl=60)
    before = [(i.key, i.namespace) for i in plain.search(("users",), query=words[1])]
    key = generate_master_key()
    strict = stores(url, encryption=key, index=word_index())
    with pytest.raises(PlaintextRowError, match="agent-memory encrypt"):
        strict.get(("users", "u0"), "k")
    migrating = stores(
        url, encryption=Encryption(master_keys=[key], allow_plaintext=True), index=word_index()
    )
    assert migrating.get(("users", "u0"), "k").value["n"] == 0  # type: ignore[union-attr]
    counts = migrating.encrypt_plaintext()
    assert counts["items"] == 3 and counts["vectors"] == 3 and counts["terms"] >= 6
    assert migrating.encrypt_plaintext() == {"items": 0, "vectors": 0, "terms": 0}
    assert strict.get(("users", "u2"), "k").value == {"text": f"remember {words[2]}", "n": 2}  # type: ignore[union-attr]
    assert [(i.key, i.namespace) for i in strict.search(("users",), query=words[1])] == before
    assert strict.sweep() == 0  # TTLs kept: nothing expired


def test_encrypting_plaintext_leaves_no_plain_hash_in_the_lists(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Listed plaintext items, once sealed, leave no hash of their words in the term lists
    (their namespace is merged at the end), and still match their words."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    words = secret_words()
    plain = stores(url, encryption=False)
    for i in range(40):
        plain.put(("users", "alice"), f"k{i}", {"text": f"note {i} {words[i % len(words)]}"})
    plain.db.run(plain.ranker.merge_plan("users.alice"))
    with sqlite3.connect(tmp_path / "p.db") as conn:
        assert {halves(term_id(s))[0] for w in words for s in tokens(w)} <= stored_halves(conn)
    key = generate_master_key()
    sealing = stores(url, encryption=Encryption(master_keys=[key], allow_plaintext=True))
    assert sealing.encrypt_plaintext()["items"] == 40
    with sqlite3.connect(tmp_path / "p.db") as conn:
        stems = {halves(term_id(s))[0] for w in words for s in tokens(w)}
        assert not stems & {hi for (hi,) in conn.execute("SELECT hi FROM am_store_chunks")}
        assert conn.execute("SELECT count(*) FROM am_store_retractions").fetchone() == (0,)
    found = {i.key for i in sealing.search(("users", "alice"), query=words[1], limit=40)}
    assert f"k{1}" in found


def test_encrypt_plaintext_async_and_off(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    off = stores(url, encryption=False)
    off.put(("docs",), "a", {"text": "hello"})
    with pytest.raises(Exception, match="encryption on"):
        off.encrypt_plaintext()
    on = stores(
        url, encryption=Encryption(master_keys=[generate_master_key()], allow_plaintext=True)
    )
    assert asyncio.run(on.aencrypt_plaintext())["items"] == 1
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert conn.execute("SELECT value FROM am_store_items").fetchall() == [("{}",)]


def test_ttl_sweep_keeps_working(stores: Callable[..., AgentMemoryStore]) -> None:
    from tests.helpers import FakeClock

    clock = FakeClock(start=1_800_000_000)
    store = stores(None, encryption=generate_master_key(), clock=clock)
    store.put(("users", "a"), "short", {"v": 1}, ttl=1)
    store.put(("users", "a"), "long", {"v": 2})
    clock.advance(120)
    assert store.get(("users", "a"), "short") is None
    assert store.sweep() == 1
    assert [i.key for i in store.search(("users", "a"))] == ["long"]


def test_an_hnsw_setting_is_warned_about(stores: Callable[..., AgentMemoryStore]) -> None:
    index = {**word_index(), "ann_index_config": {"kind": "hnsw"}}
    with pytest.warns(UserWarning, match="no approximate"):
        store = stores(None, encryption=generate_master_key(), index=index)
    assert store.vector_index is None


def test_a_key_store_of_its_own_serves_the_async_api(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    setting = Encryption(
        master_keys=[generate_master_key()], keystore_url=f"sqlite:///{tmp_path / 'keys.db'}"
    )
    url = f"sqlite:///{tmp_path / 'data.db'}"
    writer = stores(url, encryption=setting, index=word_index())

    async def write() -> None:
        for user in ("alice", "bob", "carol"):
            await writer.aput(("users", user), "note", {"text": f"{user} went to lyon"})

    asyncio.run(write())
    reader = stores(url, encryption=setting, index=word_index())  # nothing cached yet

    async def read() -> list[tuple[str, ...]]:
        found = await reader.asearch(("users",), query="lyon", filter={"text": {"$ne": "x"}})
        return sorted(tuple(i.namespace) for i in found)

    assert asyncio.run(read()) == [("users", u) for u in ("alice", "bob", "carol")]
    with sqlite3.connect(tmp_path / "data.db") as conn:  # no key in the data's database
        tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "am_keys" not in tables


PGVECTOR = [sid for sid, b in SERVERS.items() if b is not None and b.pgvector]


@pytest.mark.postgres
@pytest.mark.parametrize("sid", PGVECTOR or [pytest.param("none", marks=pytest.mark.skip)])
def test_pgvector_columns_stay_empty_and_search_is_exact(
    sid: str, pg_servers: PgServers, stores: Callable[..., AgentMemoryStore]
) -> None:
    import psycopg

    url = pg_servers.fresh_database(sid)
    store = stores(url, encryption=generate_master_key(), index=word_index())
    texts = ["red apples", "green apples", "red cars", "blue sky"]
    for i, text in enumerate(texts):
        store.put(("users", f"u{i % 2}"), f"k{i}", {"text": text})
    again = stores(url, encryption=store.keyring.provider, index=word_index())  # type: ignore[union-attr]
    again.setup()  # the vector backfill leaves sealed vectors alone (and ends)
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT count(*), count(embedding) FROM am_store_vectors").fetchone()
    assert rows == (4, 0)
    plain = stores(pg_servers.fresh_database(sid), encryption=False, index=word_index())
    for i, text in enumerate(texts):
        plain.put(("users", f"u{i % 2}"), f"k{i}", {"text": text})
    for query in ("red apples", "sky", "green"):
        assert [(i.key, round(i.score or 0, 9)) for i in again.search(("users",), query=query)] == [
            (i.key, round(i.score or 0, 9)) for i in plain.search(("users",), query=query)
        ]


def test_encrypt_plaintext_counts_everything_with_a_key_store_of_its_own(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    url = f"sqlite:///{tmp_path / 'data.db'}"
    plain = stores(url, encryption=False)
    for n in range(12):  # twelve shard keys: twelve data keys created on the way
        plain.put(("users", f"u{n}"), "k", {"text": f"hello {n}"})
    setting = Encryption(
        master_keys=[generate_master_key()],
        keystore_url=f"sqlite:///{tmp_path / 'keys.db'}",
        allow_plaintext=True,
    )
    store = stores(url, encryption=setting)
    assert store.encrypt_plaintext()["items"] == 12
    assert store.encrypt_plaintext()["items"] == 0
    assert len(store.search(("users",), query="hello", limit=20)) == 12
