"""Encryption fails closed: calls on an encrypted database without its key, or with a wrong
one, on SQLite and each PostgreSQL server.

One encrypted database per test holds a user's memory (facts, episodes), store items and a
conversation thread. Hypothesis then draws runs of calls, each by a component opened afresh
(the saver, sync, async and under a graph; the store's get, search, put and batch; agent
memory's facts, recall, context, consolidation, episodes and record) either without the key
(``encryption=False``, or the environment without ``AGENT_MEMORY_MASTER_KEY``) or with a
wrong master key. Every call must be refused with the package's error (``EncryptionError``
without the key, ``DecryptionError`` with a wrong one), and every table must be as it was:
nothing decoded as if it were plaintext, no plaintext written, no data key wrapped by the
wrong master key.

Beside it: the CLI says so in one line; a process without setup marks the database with its
first write; a wrong master key wraps nothing in a key store of its own either.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langgraph.store.base import GetOp, PutOp

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    DecryptionError,
    Encryption,
    EncryptionError,
    SQLSaver,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.cli import main
from tests.helpers import config_for, make_checkpoint, sql_checkpointer
from tests.pg import backend_params, backend_url
from tests.test_encryption_checkpoints import graph
from tests.test_migrations import query, tables

ALICE = {"user_id": "alice"}
#: The environment's variable is unset in every test (tests/conftest.py): ``None`` follows it.
NO_KEY = (False, None)


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    found = backend_url(request, str(request.param), tmp_path / "sealed.db")
    assert found is not None
    return found


def fill(url: str, setting: Any) -> None:
    """Alice's memory (consolidated facts, episodes), a store item and a conversation."""
    store = create_store(url, encryption=setting)
    saver = sql_checkpointer(url, encryption=setting)
    try:
        memory = AgentMemory(store, checkpointer=saver)
        memory.record(ALICE, [{"role": "user", "content": "I live in Lyon"}], thread_id="t1")
        memory.consolidate()
        store.put(("docs", "alice"), "d1", {"text": "my passport number"})
        graph(saver).invoke({"messages": [HumanMessage("hello")]}, config_for("t1"))
    finally:
        saver.close()
        store.close()


@pytest.fixture
def sealed(url: str) -> tuple[str, str]:
    """An encrypted database (the key store a table of it) and its master key."""
    master = generate_master_key()
    fill(url, master)
    return url, master


def snapshot(url: str) -> dict[str, list[str]]:
    """Every row of every table of the package, as text, sorted."""
    return {
        t: sorted(
            repr(tuple(bytes(v) if isinstance(v, memoryview) else v for v in row))
            for row in query(url, f"SELECT * FROM {t}")
        )
        for t in sorted(tables(url))
    }


# -- the calls ------------------------------------------------------------------------------


#: Opened without the key and without setup (``auto_setup=False``), as the CLI's reads are.
NO_SETUP = {"encryption": False, "auto_setup": False}


def opened(thing: Any, call: Callable[[Any], Any]) -> None:
    """``call(thing)``, then ``thing`` closed; a coroutine ``call`` returns is awaited and
    ``thing`` closed in one event loop (an async pool belongs to the loop it opened in)."""
    try:
        result = call(thing)
    except BaseException:
        thing.close()
        raise
    if not inspect.isawaitable(result):
        thing.close()
        return

    async def finish() -> None:
        try:
            await result
        finally:
            await thing.aclose()

    asyncio.run(finish())


def options(setting: Any) -> dict[str, Any]:
    return setting if isinstance(setting, dict) else {"encryption": setting}


def with_saver(url: str, setting: Any, call: Callable[[SQLSaver], Any]) -> None:
    opened(sql_checkpointer(url, **options(setting)), call)


def with_store(url: str, setting: Any, call: Callable[[Any], Any]) -> None:
    opened(create_store(url, **options(setting)), call)


def with_memory(url: str, setting: Any, call: Callable[[AgentMemory[Any]], Any]) -> None:
    with_store(url, setting, lambda store: call(AgentMemory(store)))


TURN = {"messages": [HumanMessage("hi")]}


def invoke(saver: SQLSaver, thread: str) -> Any:
    return graph(saver).invoke(TURN, config_for(thread))


SAID = [{"role": "user", "content": "I like tea"}]

CALLS: dict[str, Callable[[str, Any], None]] = {
    "saver.get_tuple": lambda u, s: with_saver(u, s, lambda v: v.get_tuple(config_for("t1"))),
    "saver.list": lambda u, s: with_saver(u, s, lambda v: list(v.list(config_for("t1")))),
    "saver.aget_tuple": lambda u, s: with_saver(u, s, lambda v: v.aget_tuple(config_for("t1"))),
    "saver.put on a new thread": lambda u, s: with_saver(
        u, s, lambda v: v.put(config_for("new"), make_checkpoint({"x": "y"}), {}, {"x": 1})
    ),
    "graph.invoke": lambda u, s: with_saver(u, s, lambda v: invoke(v, "t1")),
    "graph.invoke on a new thread": lambda u, s: with_saver(u, s, lambda v: invoke(v, "new")),
    "graph.ainvoke on a new thread": lambda u, s: with_saver(
        u, s, lambda v: graph(v).ainvoke(TURN, config_for("new"))
    ),
    "store.get": lambda u, s: with_store(u, s, lambda t: t.get(("docs", "alice"), "d1")),
    "store.search": lambda u, s: with_store(u, s, lambda t: t.search(("docs",), query="passport")),
    "store.search with a filter": lambda u, s: with_store(
        u, s, lambda t: t.search(("docs",), filter={"text": "my passport number"})
    ),
    "store.put for a new user": lambda u, s: with_store(
        u, s, lambda t: t.put(("docs", "bob"), "d2", {"text": "hello"})
    ),
    "store.batch": lambda u, s: with_store(
        u,
        s,
        lambda t: t.batch([GetOp(("docs", "alice"), "d1"), PutOp(("docs", "bob"), "d", {})]),
    ),
    "store.asearch": lambda u, s: with_store(
        u, s, lambda t: t.asearch(("docs",), query="passport")
    ),
    "store.aput": lambda u, s: with_store(
        u, s, lambda t: t.aput(("docs", "bob"), "d2", {"text": "hello"})
    ),
    "memory.facts": lambda u, s: with_memory(u, s, lambda m: m.facts(ALICE)),
    "memory.afacts": lambda u, s: with_memory(u, s, lambda m: m.afacts(ALICE)),
    "memory.recall": lambda u, s: with_memory(u, s, lambda m: m.recall(ALICE, "where")),
    "memory.build_context": lambda u, s: with_memory(
        u, s, lambda m: m.build_context(ALICE, "where do I live")
    ),
    "memory.consolidate": lambda u, s: with_memory(u, s, lambda m: m.consolidate()),
    "memory.episodes": lambda u, s: with_memory(u, s, lambda m: m.episodes(ALICE)),
    "memory.aepisodes": lambda u, s: with_memory(u, s, lambda m: m.aepisodes(ALICE)),
    "memory.record": lambda u, s: with_memory(u, s, lambda m: m.record(ALICE, SAID)),
    "memory.record for a new user": lambda u, s: with_memory(
        u, s, lambda m: m.record({"user_id": "bob"}, SAID)
    ),
    "memory.arecord": lambda u, s: with_memory(u, s, lambda m: m.arecord(ALICE, SAID)),
}

KEYS = st.sampled_from(["no key", "the environment without it", "a wrong master key"])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=st.lists(st.tuples(st.sampled_from(sorted(CALLS)), KEYS), min_size=1, max_size=4))
def test_every_call_without_the_key_or_with_a_wrong_one_is_refused_and_writes_nothing(
    sealed: tuple[str, str], runs: list[tuple[str, str]]
) -> None:
    url, _ = sealed
    before = snapshot(url)
    for name, key in runs:
        setting: Any = False if key == "no key" else None
        expected: type[Exception] = EncryptionError
        if key == "a wrong master key":
            setting, expected = generate_master_key(), DecryptionError
        with pytest.raises(expected) as refused:
            CALLS[name](url, setting)
        if expected is EncryptionError:
            assert "without its master key" in str(refused.value), (name, refused.value)
        assert snapshot(url) == before, (name, key)


def test_the_right_key_still_reads_and_writes(sealed: tuple[str, str]) -> None:
    url, master = sealed
    for name in ("memory.facts", "store.get", "graph.invoke", "memory.record for a new user"):
        CALLS[name](url, master)
    store = create_store(url, encryption=master)
    try:
        assert [f.value for f in AgentMemory(store).facts(ALICE)] == ["Lyon"]
    finally:
        store.close()


@pytest.mark.parametrize(
    "command",
    [
        ["facts", "user=alice"],
        ["episodes", "user=alice"],
        ["scopes"],
        ["context", "user=alice", "where"],
        ["stats"],
        ["migrate"],
    ],
)
def test_the_cli_without_the_key_says_so_in_one_line(
    sealed: tuple[str, str], command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = sealed
    before = snapshot(url)
    code = main([*command, "--url", url])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "without its master key" in err, err
    assert snapshot(url) == before


def run(url: str, sql: str) -> None:
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql)
        return
    import psycopg

    with psycopg.connect(url) as pg:
        pg.execute(sql)


@pytest.mark.parametrize("way", ["sync", "async"])
@pytest.mark.parametrize("component", ["saver", "store"])
def test_a_process_without_setup_marks_the_database_with_its_first_write(
    url: str, component: str, way: str
) -> None:
    master = generate_master_key()
    assert main(["migrate", "--url", url]) == 0  # the schema set up without the key
    doc = ("docs", "alice"), "d1"
    thing: Any
    if component == "saver":
        thing = saver = sql_checkpointer(url, encryption=master, auto_setup=False)
        calls: Any = (
            (lambda: saver.get_tuple(config_for("t1")), lambda: invoke(saver, "t1"))
            if way == "sync"
            else (
                lambda: saver.aget_tuple(config_for("t1")),
                lambda: graph(saver).ainvoke(TURN, config_for("t1")),
            )
        )
        again = CALLS["saver.get_tuple"]
    else:
        thing = store = create_store(url, encryption=master, auto_setup=False)
        value = {"text": "secret"}
        calls = (
            (lambda: store.get(*doc), lambda: store.put(*doc, value))
            if way == "sync"
            else (lambda: store.aget(*doc), lambda: store.aput(*doc, value))
        )
        again = CALLS["store.get"]
    marked = "SELECT COUNT(*) FROM am_settings WHERE name = 'encrypted_at_rest'"

    async def steps(_: Any) -> None:
        read, write = calls
        for call, marks in ((read, 0), (write, 1), (write, 1)):  # a read writes nothing
            done = call()
            if way == "async":
                await done
            assert query(url, marked) == [(marks,)]

    opened(thing, steps)
    with pytest.raises(EncryptionError, match="without its master key"):
        again(url, False)


@pytest.mark.parametrize("keystore", ["the data's database", "a database of its own"])
def test_a_wrong_master_key_wraps_nothing(url: str, tmp_path: Path, keystore: str) -> None:
    def setting(master: str) -> Any:
        if keystore == "the data's database":
            return master
        return Encryption(master_keys=[master], keystore_url=f"sqlite:///{tmp_path / 'k.db'}")

    right, wrong = generate_master_key(), generate_master_key()
    fill(url, setting(right))
    keys = f"sqlite:///{tmp_path / 'k.db'}" if keystore != "the data's database" else url
    held = query(keys, "SELECT key_id, owner, wrapped FROM am_keys")
    before = snapshot(url)
    for name in ("store.put for a new user", "graph.invoke on a new thread", "store.aput"):
        with pytest.raises(DecryptionError, match="cannot unwrap"):
            CALLS[name](url, setting(wrong))
    assert query(keys, "SELECT key_id, owner, wrapped FROM am_keys") == held
    assert snapshot(url) == before
    # a rotation's pair (the new key first) wraps new keys: the old one unwraps the held ones
    pair = setting(right)
    if isinstance(pair, Encryption):
        pair = Encryption(master_keys=[wrong, right], keystore_url=pair.keystore_url)
    else:
        pair = Encryption(master_keys=[wrong, right])
    CALLS["store.put for a new user"](url, pair)


def test_a_mark_that_cannot_be_read_refuses_rather_than_passes(pg_url: str) -> None:
    """Only a missing settings table means a database never set up: a read of the mark that
    fails otherwise (here a role refused the table, as a lock, a timeout or a lost
    connection would fail it) is raised, and the keyless component writes nothing."""
    import psycopg

    with create_store(pg_url, encryption=generate_master_key()) as sealed:
        sealed.put(("u",), "secret", {"v": "sealed"})
    role = f"r_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"REVOKE SELECT ON am_settings FROM {role}")
    as_role = pg_url.replace("://postgres@", f"://{role}@", 1)
    assert as_role != pg_url
    try:
        with create_store(as_role, encryption=False, auto_setup=False) as keyless:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                keyless.put(("x",), "plain", {"v": "plaintext"})
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                keyless.get(("u",), "secret")
        with psycopg.connect(pg_url) as conn:
            keys = conn.execute("SELECT key FROM am_store_items ORDER BY key").fetchall()
        assert keys == [("secret",)]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
