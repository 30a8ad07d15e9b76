"""The sealed value format and its crypto hygiene: a subkey per purpose, an unambiguous row
identity, damaged values reported as damaged, a destroyed key reported alike by get and
search."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import operator
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph

from langgraph_checkpoint_agent_memory import (
    AgentMemoryStore,
    DecryptionError,
    Encryption,
    KeyMissingError,
    MasterKeyProvider,
    create_checkpointer,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.crypto import cipher
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, aad, new_key, new_key_id
from tests.helpers import WordEmbeddings, config_for
from tests.pg import backend_params, backend_url


def word_index() -> dict[str, Any]:
    return {"dims": 32, "embed": WordEmbeddings(32), "fields": ["text"]}


# -- the cipher ----------------------------------------------------------------------------

parts = st.lists(st.text(max_size=6) | st.integers(-5, 500) | st.none(), max_size=4)


@settings(max_examples=300)
@given(a=parts, b=parts)
@example(a=["a\x00b", "c"], b=["a", "b\x00c"])
def test_distinct_row_identities_never_share_associated_data(
    a: list[str | int | None], b: list[str | int | None]
) -> None:
    def normal(p: list[str | int | None]) -> list[str]:
        return ["" if x is None else str(x) for x in p]

    assert (aad(*a) == aad(*b)) == (normal(a) == normal(b))


def test_values_are_sealed_under_a_subkey_and_terms_keep_their_own() -> None:
    secret = new_key()
    key = DataKey(new_key_id(), "store:docs", secret)
    sealed = key.seal(b"lives in Lyon", aad("item", "docs", "k"))
    header, nonce, body = sealed[: cipher.HEADER_BYTES], sealed[13:25], sealed[25:]
    associated = header + aad("item", "docs", "k")
    with pytest.raises(InvalidTag):
        AESGCM(secret).decrypt(nonce, body, associated)  # the data key itself does not open it
    # HKDF-SHA256's expand step: one block, HMAC over the label and the counter 1
    value_key = hmac.new(secret, b"agent-memory values v2\x01", hashlib.sha256).digest()
    assert value_key != secret
    assert AESGCM(value_key).decrypt(nonce, body, associated) == b"lives in Lyon"
    # the term subkey is the one existing indexes were built with (see cipher's docstring)
    term_key = hmac.new(secret, b"agent-memory terms v1", hashlib.sha256).digest()
    digest = hmac.new(term_key, b"lyon", hashlib.sha256).digest()[:9]
    assert key.term("lyon") == base64.urlsafe_b64encode(digest).decode("ascii")
    assert value_key != term_key


def test_only_a_failed_authentication_is_a_decryption_error() -> None:
    key = DataKey(new_key_id(), "store:docs", new_key())
    sealed = key.seal(b"x", aad("item", "k"))
    with pytest.raises(TypeError):
        key.open(sealed, "item k")  # type: ignore[arg-type]  # a programming error
    with pytest.raises(DecryptionError):
        key.open(sealed, aad("item", "other"))
    provider = MasterKeyProvider([generate_master_key()])
    wrapped = provider.wrap(bytes(32), "thread:t")
    with pytest.raises(AttributeError):
        provider.unwrap(wrapped, None)  # type: ignore[arg-type]
    with pytest.raises(DecryptionError):
        provider.unwrap(wrapped, "thread:u")


def damage(sealed: bytes, how: tuple[str, int]) -> bytes:
    """``sealed`` cut to ``n`` bytes, or with bit ``n`` flipped."""
    kind, n = how
    if kind == "cut":
        return sealed[: n % len(sealed)]
    flipped = bytearray(sealed)
    flipped[(n // 8) % len(sealed)] ^= 1 << (n % 8)
    return bytes(flipped)


damages = st.tuples(st.sampled_from(["cut", "flip"]), st.integers(0, 8 * 400))


# -- damaged values, in real databases -------------------------------------------------------


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "format.db")


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Stores and savers to close after the test."""
    things: list[Any] = []
    yield things
    for thing in things:
        thing.close()


@pytest.fixture
def kept() -> dict[str, Any]:
    """What a property test's examples share (set up by the first one)."""
    return {}


def raw(db: Any, sql: str, params: Any, write: bool = False) -> Any:
    """``sql`` (with ``:name`` parameters) run on a store's or saver's database; ``params``
    a mapping, or a list of them (a write)."""
    from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    many = isinstance(params, list)
    if db.dialect.name == "postgresql":
        for name in sorted(params[0] if many else params, key=len, reverse=True):
            sql = sql.replace(f":{name}", f"%({name})s")

    def plan() -> Plan[Any]:
        stmt = Stmt(Sql(sql), params, fetch=not write, many=many)
        [rows] = yield Batch([stmt], write=write)
        return rows

    return db.run(plan())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(how=damages)
@example(how=("cut", 5))
@example(how=("flip", 8 * 3))  # in the key id
@example(how=("flip", 2))  # the marker, to a byte that is no marker
def test_a_damaged_store_value_is_a_decryption_error(
    url: str, opened: list[Any], kept: dict[str, Any], how: tuple[str, int]
) -> None:
    if not kept:
        store = create_store(url, encryption=generate_master_key())
        opened.append(store)
        store.put(("users", "alice"), "a", {"text": "alice lives in lyon " * 20})  # compressed
        store.put(("users", "alice"), "b", {"text": "alice likes tea"})
        [[good]] = raw(store.db, "SELECT sealed FROM am_store_items WHERE key = 'a'", {})
        kept.update(store=store, good=bytes(good))
    store, good = kept["store"], kept["good"]
    bad = damage(good, how)
    raw(store.db, "UPDATE am_store_items SET sealed = :v WHERE key = 'a'", {"v": bad}, True)
    with pytest.raises(DecryptionError):
        store.get(("users", "alice"), "a")
    with pytest.raises(DecryptionError):
        store.search(("users", "alice"), query="lyon")
    assert store.get(("users", "alice"), "b").value == {"text": "alice likes tea"}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(how=damages)
@example(how=("cut", 5))
@example(how=("flip", 8 * 3))
@example(how=("flip", 2))
def test_a_damaged_checkpoint_is_a_decryption_error(
    url: str, opened: list[Any], kept: dict[str, Any], how: tuple[str, int]
) -> None:
    if not kept:
        saver: Any = create_checkpointer(url=url, encryption=generate_master_key())
        opened.append(saver)
        app = chain(saver)
        app.invoke({"log": ["hello"]}, config_for("t1"))
        tip = saver.get_tuple(config_for("t1"))
        assert tip is not None
        cid = tip.config["configurable"]["checkpoint_id"]
        sql = "SELECT checkpoint FROM am_checkpoints WHERE checkpoint_id = :c"
        [[good]] = raw(saver.db, sql, {"c": cid})
        kept.update(saver=saver, good=bytes(good), cid=cid)
    saver, good, cid = kept["saver"], kept["good"], kept["cid"]
    bad = damage(good, how) or good[:1]  # an empty body is no sealed value to damage
    sql = "UPDATE am_checkpoints SET checkpoint = :v WHERE checkpoint_id = :c"
    raw(saver.db, sql, {"v": bad, "c": cid}, True)
    with pytest.raises(DecryptionError):
        saver.get_tuple(config_for("t1"))


# -- a destroyed key: get and search alike ---------------------------------------------------


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return backend_url(request, str(request.param), tmp_path / "keys-gone.db")


def encryption_of(master: str, keystore: str, tmp_path: Path) -> Encryption:
    """Encryption under ``master``, its key store in the data's database (``"own"``) or in
    a SQLite file of its own (``"apart"``); ``city`` filterable."""
    url = f"sqlite:///{tmp_path / 'k.db'}" if keystore == "apart" else None
    return Encryption(master_keys=[master], keystore_url=url, filterable_fields=["city"])


def run_async(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return asyncio.run(call(*args, **kwargs))


def searches_of(store: AgentMemoryStore, user: str) -> list[Callable[[], Any]]:
    """Each way to search what ``user`` wrote: its namespace and the prefix over every user,
    with a query, a filter the database narrows (``city`` is filterable) or neither; sync
    and async."""
    calls: list[Callable[[], Any]] = []
    for ns in [("users", user), ("users",)]:
        calls += [
            partial(store.search, ns, query="lyon"),
            partial(store.search, ns, filter={"city": "lyon"}),
            partial(store.search, ns, query="lyon", filter={"city": "lyon"}),
            partial(store.search, ns),
            partial(run_async, store.asearch, ns, query="lyon"),
            partial(run_async, store.asearch, ns, filter={"city": "lyon"}),
        ]
    return calls


@pytest.mark.parametrize("keystore", ["own", "apart"])
def test_with_its_key_gone_search_answers_as_get(
    any_url: str | None, keystore: str, tmp_path: Path, opened: list[Any]
) -> None:
    encryption = encryption_of(generate_master_key(), keystore, tmp_path)
    store = create_store(any_url, encryption=encryption)
    opened.append(store)
    for user in ["alice", "bob", "carol"]:
        store.put(("users", user), "k", {"text": f"{user} lives in lyon", "city": "lyon"})
    assert store.destroy_keys(["users.bob"])
    calls: list[Callable[[], Any]] = [partial(store.get, ("users", "bob"), "k")]
    for call in calls + searches_of(store, "bob"):
        with pytest.raises(KeyMissingError):
            call()
    assert [i.key for i in store.search(("users", "alice"), query="lyon")] == ["k"]
    store.delete(("users", "bob"), "k")  # its items gone too: nothing left to answer for
    found = store.search(("users",), query="lyon", filter={"city": "lyon"})
    assert sorted(i.namespace[1] for i in found) == ["alice", "carol"]


#: Labels of users: "a-b" sorts between "a" and "a.", inside the byte range of shard keys
#: under "a" without lying under it.
labels = st.sampled_from(["a", "a-b", "b", "c%", "é"])


@settings(max_examples=40, deadline=None)
@given(
    users=st.sets(st.sampled_from(["alice", "bob", "carol", "dan"]), min_size=1),
    gone=st.sets(st.sampled_from(["alice", "bob", "carol", "dan", "@other"])),
    emptied=st.sets(st.sampled_from(["alice", "bob", "carol", "dan"])),
    root=labels,
)
def test_a_prefix_search_raises_exactly_when_a_user_under_it_has_items_and_no_key(
    users: set[str], gone: set[str], emptied: set[str], root: str
) -> None:
    """Whichever users under the prefix lost their key, and whichever of them have no items
    left; a user of a sibling namespace (``root + "-x"``) losing theirs changes nothing."""
    store = create_store(None, encryption=encryption_of(generate_master_key(), "own", Path()))
    with store:
        for user in users:
            store.put((root, user), "k", {"text": "lives in lyon", "city": "lyon"})
        store.put((root + "-x", "@other"), "k", {"text": "lives in lyon", "city": "lyon"})
        store.destroy_keys([f"{root + '-x' if u == '@other' else root}.{u}" for u in gone])
        for user in emptied & users:
            store.delete((root, user), "k")
        unreadable = (gone & users) - emptied
        for search in [
            partial(store.search, (root,), query="lyon", limit=10),
            partial(store.search, (root,), filter={"city": "lyon"}, limit=10),
        ]:
            if unreadable:
                with pytest.raises(KeyMissingError):
                    search()
            else:
                assert sorted(i.namespace[1] for i in search()) == sorted(users - emptied)


@pytest.mark.parametrize("keystore", ["own", "apart"])
def test_a_key_destroyed_elsewhere_is_not_read_from_the_cache_by_a_search(
    url: str, keystore: str, tmp_path: Path, opened: list[Any]
) -> None:
    """Another process erased the user while this one holds the key (by id, from a read):
    a search raises as it does there, and this process stops reading with the key."""
    encryption = encryption_of(generate_master_key(), keystore, tmp_path)
    here, there = create_store(url, encryption=encryption), create_store(url, encryption=encryption)
    opened += [here, there]
    for user in ["alice", "bob"]:
        here.put(("users", user), "k", {"text": f"{user} lives in lyon", "city": "lyon"})
    reader = create_store(url, encryption=encryption)
    opened.append(reader)
    assert reader.get(("users", "bob"), "k") is not None  # bob's key, cached by its id
    assert there.destroy_keys(["users.bob"])
    for call in searches_of(reader, "bob"):
        with pytest.raises(KeyMissingError):
            call()
    with pytest.raises(KeyMissingError):
        reader.get(("users", "bob"), "k")


# -- a checkpointed graph -------------------------------------------------------------------


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def chain(saver: Any) -> Any:
    """A graph of two steps, each appending to the log."""

    def step(state: State) -> dict[str, Any]:
        return {"log": [f"step {len(state['log'])}"]}

    builder = StateGraph(State).add_sequence([("a", step), ("b", step)])
    return builder.add_edge(START, "a").add_edge("b", END).compile(checkpointer=saver)
