"""Agent memory on an encrypted store: the same answers as on a plain one, nothing of what
users said on disk, consolidation errors sealed, and an erase that reaches backups (with
the key store in a database of its own), on memory, SQLite and PostgreSQL, sync and async."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from langgraph_checkpoint_agent_memory import (
    AgentMemoryStore,
    Encryption,
    KeyMissingError,
    PlaintextRowError,
    create_checkpointer,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.memory import AgentMemory
from langgraph_checkpoint_agent_memory.memory.extract import Extractor
from langgraph_checkpoint_agent_memory.memory.model import Extraction
from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools
from tests.helpers import FakeClock, WordEmbeddings, config_for, make_checkpoint
from tests.pg import PgServers, backend_params, backend_url, is_postgres
from tests.test_encryption_store import found_in, pg_files, secret_words, sqlite_files

START = 1_700_000_000.0


def word_index() -> dict[str, Any]:
    return {"dims": 32, "embed": WordEmbeddings(32), "fields": ["text"]}


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


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


def turns(words: list[str]) -> list[tuple[str, str, str]]:
    """``(scope, thread, what the user says)``: secret words in what users say only."""
    return [
        ("user=alice", "alice-1", f"I live in {words[0]} and I love {words[1]}"),
        ("user=bob", "bob-1", f"I live in {words[2]} and I love {words[3]}"),
        ("user=alice", "alice-2", f"I live in {words[4]}"),
    ]


def workload(memory: AgentMemory[Any], clock: FakeClock, words: list[str]) -> None:
    """Record, consolidate (the rule-based extractor), remember and forget with the tools,
    pin: every kind of write memory makes of store rows."""
    for scope, thread, said in turns(words):
        memory.record(scope, [HumanMessage(said), AIMessage("noted")], thread_id=thread)
        clock.advance(60)
        memory.consolidate()
        clock.advance(60)
    tools = MemoryTools(memory)
    alice: RunnableConfig = {"configurable": {"user_id": "alice"}}
    tools.remember("employer", words[5], f"Alice works at {words[5]}", config=alice)
    clock.advance(60)
    tools.remember("pet", "cat", "Alice has a cat", config=alice)
    clock.advance(60)
    tools.forget("pet", config=alice)
    memory.pin("user=alice", "employer")


async def aworkload(memory: AgentMemory[Any], clock: FakeClock, words: list[str]) -> None:
    for scope, thread, said in turns(words):
        await memory.arecord(scope, [HumanMessage(said), AIMessage("noted")], thread_id=thread)
        clock.advance(60)
        await memory.aconsolidate()
        clock.advance(60)
    tools = MemoryTools(memory)
    alice: RunnableConfig = {"configurable": {"user_id": "alice"}}
    await tools.aremember("employer", words[5], f"Alice works at {words[5]}", config=alice)
    clock.advance(60)
    await tools.aremember("pet", "cat", "Alice has a cat", config=alice)
    clock.advance(60)
    await tools.aforget("pet", config=alice)
    await memory.apin("user=alice", "employer")


def answers(memory: AgentMemory[Any], words: list[str]) -> dict[str, Any]:
    """What memory answers, in a form that compares across databases."""
    tools = MemoryTools(memory)
    out: dict[str, Any] = {}
    for who in ("alice", "bob"):
        scope = f"user={who}"
        out[who] = {
            "facts": [(f.key, f.value, f.statement, f.pinned) for f in memory.facts(scope)],
            "history": [(f.key, f.value, f.valid_to is None) for f in memory.history(scope)],
            "episodes": [(e.key, e.status, e.summary) for e in memory.episodes(scope)],
            "context": memory.build_context(scope, f"where do I live {words[4]}"),
            "recall": [f.key for f in memory.recall(scope, "live").facts],
            "search": tools.search("what do I love", {"configurable": {"user_id": who}}),
        }
    out["scopes"] = memory.scopes()
    return out


async def aanswers(memory: AgentMemory[Any], words: list[str]) -> dict[str, Any]:
    tools = MemoryTools(memory)
    out: dict[str, Any] = {}
    for who in ("alice", "bob"):
        scope = f"user={who}"
        out[who] = {
            "facts": [(f.key, f.value, f.statement, f.pinned) for f in await memory.afacts(scope)],
            "history": [(f.key, f.value, f.valid_to is None) for f in await memory.ahistory(scope)],
            "episodes": [(e.key, e.status, e.summary) for e in await memory.aepisodes(scope)],
            "context": await memory.abuild_context(scope, f"where do I live {words[4]}"),
            "recall": [f.key for f in (await memory.arecall(scope, "live")).facts],
            "search": await tools.asearch("what do I love", {"configurable": {"user_id": who}}),
        }
    out["scopes"] = await memory.ascopes()
    return out


# -- the same answers ----------------------------------------------------------------------


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_same_answers_on_an_encrypted_store(
    request: pytest.FixtureRequest,
    backend: str,
    tmp_path: Path,
    stores: Callable[..., AgentMemoryStore],
    api: str,
) -> None:
    words = secret_words()
    seen = []
    for encryption in (False, generate_master_key()):
        clock = FakeClock(START)
        url = backend_url(request, backend, tmp_path / f"m{bool(encryption)}.db")
        store = stores(url, encryption=encryption, index=word_index())
        memory = AgentMemory(store, clock=clock)
        if api == "sync":
            workload(memory, clock, words)
            seen.append(answers(memory, words))
        else:
            asyncio.run(aworkload(memory, clock, words))
            seen.append(asyncio.run(aanswers(memory, words)))
        assert (store.sealer is not None) == bool(encryption)
    plain, sealed = seen
    assert sealed == plain
    alice = {v for _, v, _, _ in plain["alice"]["facts"]}
    assert {words[4], words[1], words[5]} <= alice and words[0] not in alice  # moved
    assert words[0] in {v for _, v, _ in plain["alice"]["history"]}
    assert words[4] in plain["alice"]["context"]


# -- nothing on disk -----------------------------------------------------------------------


@pytest.mark.parametrize("encrypted", [True, False])
def test_no_secret_word_of_a_memory_workload_in_the_sqlite_file_or_its_wal(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore], encrypted: bool
) -> None:
    path = tmp_path / "grep.db"
    words = secret_words()
    store = stores(
        f"sqlite:///{path}",
        encryption=generate_master_key() if encrypted else False,
        index=word_index(),
    )
    clock = FakeClock(START)
    memory = AgentMemory(store, clock=clock)
    workload(memory, clock, words)
    assert words[4] in memory.build_context("user=alice", "where do I live")
    if encrypted:
        assert found_in(sqlite_files(path), words) == set()
    else:  # the control: the same workload without encryption shows every word
        assert found_in(sqlite_files(path), words) == set(words)


@pytest.mark.postgres
def test_no_secret_word_of_a_memory_workload_in_postgresql_files(
    pg_servers: PgServers, stores: Callable[..., AgentMemoryStore]
) -> None:
    import psycopg

    from tests.pg import SERVER_IDS

    sid = SERVER_IDS[0]
    server = pg_servers.get(f"postgres-{sid}")
    if server.local is None:
        pytest.skip("needs a throwaway cluster whose files the test can read")
    words, control = secret_words(), secret_words()
    for chosen, encryption in ((words, generate_master_key()), (control, False)):
        store = stores(pg_servers.fresh_database(sid), encryption=encryption, index=word_index())
        clock = FakeClock(START)
        workload(AgentMemory(store, clock=clock), clock, chosen)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    blobs = pg_files(server.local.data)
    assert found_in(blobs, words) == set()
    assert found_in(blobs, control) == set(control)  # the grep can find what is there


# -- consolidation errors ------------------------------------------------------------------


class Failing(Extractor):
    """An extractor that fails quoting what it was given (as a model's error may)."""

    version = "failing-1"

    def extract(self, request: Any) -> Extraction:
        said = " ".join(m["content"] for e in request.episodes for m in e.messages)
        raise ValueError(f"cannot parse an answer about: {said}")

    async def aextract(self, request: Any) -> Extraction:
        return self.extract(request)


def test_a_failed_jobs_error_is_sealed_under_the_scopes_key_and_encrypt_plaintext_seals_old_ones(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    path = tmp_path / "errors.db"
    words = secret_words(2)
    master = generate_master_key()
    # before encryption: a plaintext error
    plain = stores(f"sqlite:///{path}", encryption=False)
    memory = AgentMemory(plain, extractor=Failing())
    memory.record("user=carol", [HumanMessage(f"I love {words[0]}")], thread_id="c1")
    assert memory.consolidate().jobs[0].status == "failed"
    plain.close()
    # migration mode: the plaintext error reads, then encrypt_plaintext seals it
    migrating = stores(
        f"sqlite:///{path}", encryption=Encryption(master_keys=[master], allow_plaintext=True)
    )
    memory = AgentMemory(migrating, extractor=Failing())
    assert words[0] in str(memory.jobs(["failed"])[0]["error"])
    migrating.encrypt_plaintext()
    assert memory.encrypt_plaintext() == {"job_errors": 1, "scope_errors": 1}
    assert memory.encrypt_plaintext() == {"job_errors": 0, "scope_errors": 0}
    migrating.close()
    # encryption on: a new failure is sealed; both read back through jobs()
    store = stores(f"sqlite:///{path}", encryption=master)
    memory = AgentMemory(store, extractor=Failing())
    memory.record("user=dave", [HumanMessage(f"I love {words[1]}")], thread_id="d1")
    asyncio.run(memory.aconsolidate(scope="user=dave"))
    errors = {j["scope"]: j["error"] for j in memory.jobs(["failed"])}
    assert words[0] in errors["user=carol"] and words[1] in errors["user=dave"]
    assert {j["error"] for j in asyncio.run(memory.ajobs(["failed"]))} == set(errors.values())
    with sqlite3.connect(path) as conn:
        stored = conn.execute("SELECT error FROM am_memory_jobs").fetchall()
        stored += conn.execute(
            "SELECT last_error FROM am_memory_scopes WHERE last_error IS NOT NULL"
        ).fetchall()
    assert len(stored) == 4 and all(e.startswith("!") for (e,) in stored)
    assert found_in(sqlite_files(path), words) == set()


def test_with_encryption_on_a_plaintext_memory_row_is_refused(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore]
) -> None:
    path = tmp_path / "refused.db"
    plain = stores(f"sqlite:///{path}", encryption=False)
    AgentMemory(plain).record("user=erin", [HumanMessage("I live in Oslo")], thread_id="e1")
    plain.close()
    memory = AgentMemory(stores(f"sqlite:///{path}", encryption=generate_master_key()))
    with pytest.raises(PlaintextRowError):
        memory.episodes("user=erin")
    with pytest.raises(Exception, match="encryption on"):
        AgentMemory(
            stores(f"sqlite:///{tmp_path / 'off.db'}", encryption=False)
        ).encrypt_plaintext()


# -- erase reaches backups -----------------------------------------------------------------


def copy_database(backend: str, url: str, pg_servers: PgServers | None) -> str:
    """A copy of the data database at ``url`` (its connections closed)."""
    if backend == "sqlite":
        source = url.removeprefix("sqlite:///")
        target = source + ".backup"
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        return f"sqlite:///{target}"
    import psycopg

    assert pg_servers is not None
    server = pg_servers.get(backend)
    name = url.split("?", 1)[0].rsplit("/", 1)[1]
    copy = f"{name}_copy"
    with psycopg.connect(server.url, autocommit=True) as conn:
        # a closed pool's sessions may still be ending on the server: end them, then copy
        for _ in range(300):
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            try:
                conn.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{name}"')  # raw: test setup
                break
            except psycopg.errors.ObjectInUse:
                time.sleep(0.1)
        else:
            raise AssertionError(f"{name} stays in use: it cannot be copied")
    return url.split("?", 1)[0].rsplit("/", 1)[0] + f"/{copy}"


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("data", backend_params("sqlite", "postgres"))
def test_erase_reaches_a_backup_taken_before_it(
    request: pytest.FixtureRequest, tmp_path: Path, data: str, api: str
) -> None:
    keys = Encryption(
        master_keys=[generate_master_key()], keystore_url=f"sqlite:///{tmp_path / 'keys.db'}"
    )
    url = backend_url(request, data, tmp_path / "data.db")
    assert url is not None
    words = secret_words()

    def open_memory(at: str) -> AgentMemory[Any]:
        store = create_store(at, encryption=keys)
        saver = create_checkpointer(url=at, encryption=keys)
        return AgentMemory(store, checkpointer=saver)

    def close(memory: AgentMemory[Any]) -> None:
        memory.checkpointer.close()
        memory.store.close()

    memory = open_memory(url)
    for scope, thread, said in turns(words):
        memory.checkpointer.put(config_for(thread), make_checkpoint({"said": said}), {}, {})
        if api == "sync":
            memory.record(scope, [HumanMessage(said)], thread_id=thread)
            memory.consolidate()
        else:
            asyncio.run(memory.arecord(scope, [HumanMessage(said)], thread_id=thread))
            asyncio.run(memory.aconsolidate())
    assert memory.facts("user=alice") and memory.facts("user=bob")
    close(memory)
    pg = request.getfixturevalue("pg_servers") if is_postgres(data) else None
    copy = copy_database(data, url, pg)
    if pg is not None:
        request.addfinalizer(lambda: pg.get(data).drop(copy))

    memory = open_memory(url)
    counts = (
        memory.erase("user=alice") if api == "sync" else asyncio.run(memory.aerase("user=alice"))
    )
    assert counts["threads"] == 2 and counts["keys"] >= 1
    close(memory)

    backup = open_memory(copy)
    try:
        for read in (
            lambda: backup.facts("user=alice"),
            lambda: backup.episodes("user=alice"),
            lambda: asyncio.run(backup.afacts("user=alice")),
            lambda: backup.checkpointer.get_tuple(config_for("alice-1")),
            lambda: backup.checkpointer.get_tuple(config_for("alice-2")),
        ):
            with pytest.raises(KeyMissingError):
                read()
        assert {f.value for f in backup.facts("user=bob")} >= {words[2], words[3]}
        assert [e.key for e in asyncio.run(backup.aepisodes("user=bob"))]
        bob = backup.checkpointer.get_tuple(config_for("bob-1"))
        assert bob is not None and words[2] in bob.checkpoint["channel_values"]["said"]
    finally:
        close(backup)


# -- the encrypt command -------------------------------------------------------------------


def test_the_encrypt_command_seals_memory_then_everything_reads_encrypted(
    tmp_path: Path,
    stores: Callable[..., AgentMemoryStore],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from langgraph_checkpoint_agent_memory.cli import main

    path = tmp_path / "cli.db"
    words = secret_words(2)
    plain = stores(f"sqlite:///{path}", encryption=False)
    memory = AgentMemory(plain, extractor=Failing())
    memory.record("user=carol", [HumanMessage(f"I love {words[0]}")], thread_id="c1")
    memory.consolidate()
    AgentMemory(plain).record("user=carol", [HumanMessage(f"I live in {words[1]}")])
    plain.close()
    master = generate_master_key()
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", master)
    assert main(["encrypt", "--url", f"sqlite:///{path}", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["memory"] == {"job_errors": 1, "scope_errors": 1}
    assert counts["store"]["items"] == 2  # the two episodes
    memory = AgentMemory(stores(f"sqlite:///{path}", encryption=master))
    assert len(memory.episodes("user=carol")) == 2
    assert words[0] in memory.jobs(["failed"])[0]["error"]
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM")
    assert found_in(sqlite_files(path), words) == set()


@pytest.mark.parametrize("keystore", ["same database", "its own database"])
def test_the_tools_change_a_new_scopes_facts_creating_its_key(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore], keystore: str
) -> None:
    master = generate_master_key()
    setting: Any = master
    if keystore != "same database":
        setting = Encryption(master_keys=[master], keystore_url=f"sqlite:///{tmp_path / 'k.db'}")
    store = stores(f"sqlite:///{tmp_path / 'tools.db'}", encryption=setting, index=word_index())
    memory = AgentMemory(store)
    tools = MemoryTools(memory)
    frank: RunnableConfig = {"configurable": {"user_id": "frank"}}
    assert asyncio.run(tools.aremember("city", "Oslo", config=frank)).startswith("Remembered")
    assert tools.remember("city", "Bergen", config=frank).startswith("Updated")
    assert [(f.attribute, f.value) for f in memory.facts("user=frank")] == [("city", "Bergen")]
    assert [f.value for f in memory.history("user=frank", "city")] == ["Oslo", "Bergen"]
    with sqlite3.connect(tmp_path / "tools.db") as conn:
        rows = conn.execute("SELECT value, sealed FROM am_store_items").fetchall()
    assert rows and all(v == "{}" and s is not None for v, s in rows)
