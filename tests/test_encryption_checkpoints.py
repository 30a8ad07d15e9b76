"""Encryption of checkpoints (issue 27): what the savers seal, and what stays readable.

Round trips on memory, SQLite and each PostgreSQL server, sync and async (an encrypted saver
answers as an unencrypted one does); the grep test (secret words written as values do not
appear in the SQLite file, its WAL or PostgreSQL's files, and do without encryption); a
value moved to another row or thread does not open; plaintext rows are refused, read in
the migration mode and sealed by ``encrypt_plaintext``; deleting, erasing or sweeping a
thread destroys its key, so a copy of the database taken before cannot be read for it.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_checkpoint_agent_memory import (
    DecryptionError,
    Encryption,
    KeyMissingError,
    PlaintextRowError,
    SqliteSaver,
    SQLSaver,
    TimedInMemorySaver,
    create_checkpointer,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.crypto.cipher import (
    is_sealed,
    key_id_of,
    store_owner,
    thread_owner,
)
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from tests.helpers import FakeClock, config_for, make_checkpoint, sql_checkpointer
from tests.pg import backend_url

# -- helpers --------------------------------------------------------------------------------


def graph(saver: Any) -> Any:
    """A conversation: each invoke appends the user's message and an answer quoting it."""

    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(f"noted: {last}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def secrets(n: int = 4) -> list[str]:
    """Distinct short words no other test writes (so a grep finds only this test's)."""
    return [f"zqx{uuid.uuid4().hex[:10]}" for _ in range(n)]


def workload(saver: BaseCheckpointSaver[str], words: list[str], thread: str = "t-grep") -> None:
    """Each secret word where a checkpointer keeps values: an inline channel value (in the
    checkpoint body), a list in a blob (appended items too), metadata, and a pending write."""
    inline, listed, meta, written = words
    config = config_for(thread)
    first = make_checkpoint({"note": inline, "items": [listed, "x" * 300]}, step=0)
    metadata: Any = {"source": "input", "step": 0, "memo": meta}
    saved = saver.put(config, first, metadata, {"note": 1, "items": 1})
    saver.put_writes(saved, [("items", written), ("note", f"{written} again")], "task-1")
    second = make_checkpoint({"note": inline, "items": [listed, "x" * 300, f"{listed}!"]}, step=1)
    second["channel_versions"] = {"note": 1, "items": 2}
    looped: Any = {**metadata, "source": "loop", "step": 1}
    saver.put(saved, second, looped, {"items": 2})


def found_in(paths: list[Path], words: list[str]) -> set[str]:
    """The words that occur in any of ``paths`` (files that exist), as they are or inside a
    compressed value (a zstd frame, which anyone can open)."""
    data = b"".join(p.read_bytes() for p in paths if p.is_file())
    return {w for w in words if w.encode() in data + opened_frames(data)}


def opened_frames(data: bytes) -> bytes:
    """What every zstd frame in ``data`` holds, made with the package's dictionary."""
    import zstandard

    from langgraph_checkpoint_agent_memory import compression

    dictionary = zstandard.ZstdCompressionDict(compression.DICTIONARY.read_bytes())
    opened = []
    at = data.find(b"\x28\xb5\x2f\xfd")
    while at >= 0:
        try:
            opened.append(zstandard.ZstdDecompressor(dict_data=dictionary).decompressobj()
                          .decompress(data[at : at + 65536]))  # fmt: skip
        except zstandard.ZstdError:
            pass  # the magic number by chance
        at = data.find(b"\x28\xb5\x2f\xfd", at + 1)
    return b"".join(opened)


def run_sql(saver: SQLSaver, sql: str, params: dict[str, Any] | None = None) -> Any:
    def plan() -> Plan[Any]:
        [rows] = yield Batch([Stmt(Sql(sql), params or {}, fetch=True)])
        return rows

    return saver.db.run(plan())


def run_update(saver: SQLSaver, sql: str, params: dict[str, Any]) -> None:
    def plan() -> Plan[None]:
        yield Batch([Stmt(Sql(sql), params)], write=True)

    saver.db.run(plan())


def placeholder(saver: SQLSaver, name: str) -> str:
    return f"%({name})s" if saver.dialect.name == "postgresql" else f":{name}"


def comparable(value: Any) -> Any:
    """``value`` with messages as (type, content): their ids differ between two runs."""
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k != "thread_id"}
    if hasattr(value, "content") and hasattr(value, "type"):
        return (value.type, value.content)
    return value


def same_tuple(a: Any, b: Any) -> None:
    """Two checkpoint tuples hold the same checkpoint (ids differ between threads)."""
    assert a is not None and b is not None
    assert comparable(a.checkpoint["channel_values"]) == comparable(b.checkpoint["channel_values"])
    assert comparable(dict(a.metadata)) == comparable(dict(b.metadata))
    assert [comparable(w[1:]) for w in a.pending_writes] == [
        comparable(w[1:]) for w in b.pending_writes
    ]


@pytest.fixture
def master() -> str:
    return generate_master_key()


@pytest.fixture
def make_memory_saver() -> Callable[..., TimedInMemorySaver]:
    def make(**kwargs: Any) -> TimedInMemorySaver:
        saver = create_checkpointer(**kwargs)
        assert isinstance(saver, TimedInMemorySaver)
        return saver

    return make


# -- round trips ----------------------------------------------------------------------------


def test_a_conversation_reads_back_as_without_encryption(
    make_saver: Callable[..., SQLSaver],
    master: str,
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    sealed = make_saver(encryption=master)
    # a database of its own: an encrypted one refuses a saver without the key
    plain_url = backend_url(request, backend, tmp_path / "plain.db")
    assert plain_url is not None
    plain = sql_checkpointer(plain_url, encryption=False)
    request.addfinalizer(plain.close)
    assert sealed.keyring is not None and plain.keyring is None
    graphs = graph(sealed), graph(plain)
    for turn in range(5):
        for i, g in enumerate(graphs):
            g.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config_for(f"c{i}"))
    same_tuple(sealed.get_tuple(config_for("c0")), plain.get_tuple(config_for("c1")))
    listed = [list(s.list(config_for(f"c{i}"))) for i, s in enumerate((sealed, plain))]
    assert len(listed[0]) == len(listed[1]) > 5
    for a, b in zip(*listed, strict=True):
        same_tuple(a, b)
    # a fresh saver (nothing cached) reads it too
    again = make_saver(encryption=master)
    same_tuple(again.get_tuple(config_for("c0")), plain.get_tuple(config_for("c1")))
    rows = run_sql(sealed, "SELECT checkpoint, metadata FROM am_checkpoints WHERE thread_id = 'c0'")
    assert rows and all(is_sealed(bytes(r[0])) and r[1].startswith("!") for r in rows)


def test_async_round_trip_and_filtered_list(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    async def scenario() -> None:
        saver = make_saver(encryption=master)
        g = graph(saver)
        for turn in range(4):
            await g.ainvoke({"messages": [HumanMessage(f"turn {turn}")]}, config_for("a"))
        latest = await saver.aget_tuple(config_for("a"))
        assert latest is not None
        assert [m.content for m in latest.checkpoint["channel_values"]["messages"]][-1] == (
            "noted: turn 3"
        )
        # metadata is sealed: the filter is matched after opening, and limit still counts
        loops = [t async for t in saver.alist(config_for("a"), filter={"source": "loop"})]
        assert loops and all(t.metadata["source"] == "loop" for t in loops)
        two = [t async for t in saver.alist(None, filter={"source": "loop"}, limit=2)]
        assert [t.config for t in two] == [t.config for t in loops[:2]]
        await saver.acopy_thread("a", "b")
        copied = await saver.aget_tuple(config_for("b"))
        assert copied is not None
        assert copied.checkpoint["channel_values"] == latest.checkpoint["channel_values"]
        await saver.aprune(["b"], keep_last=1)
        assert len([t async for t in saver.alist(config_for("b"))]) == 1
        await saver.adelete_thread("a")
        assert await saver.aget_tuple(config_for("a")) is None
        assert saver.keyring is not None
        assert await saver.keyring.afind(thread_owner("a")) is None

    asyncio.run(scenario())


@pytest.mark.parametrize("api", ["sync", "async"])
def test_memory_saver_round_trip(
    make_memory_saver: Callable[..., TimedInMemorySaver], master: str, api: str
) -> None:
    sealed = make_memory_saver(encryption=master)
    plain = make_memory_saver(ttl_seconds=3600, encryption=False)
    assert sealed.ttl_seconds is None and sealed.keyring is not None
    g_sealed, g_plain = graph(sealed), graph(plain)
    for turn in range(3):
        message = {"messages": [HumanMessage(f"turn {turn}")]}
        if api == "sync":
            g_sealed.invoke(message, config_for("m"))
        else:
            asyncio.run(g_sealed.ainvoke(message, config_for("m")))
        g_plain.invoke(message, config_for("m"))
    same_tuple(sealed.get_tuple(config_for("m")), plain.get_tuple(config_for("m")))
    sealed.copy_thread("m", "n")
    same_tuple(sealed.get_tuple(config_for("n")), plain.get_tuple(config_for("m")))
    sealed.delete_thread("m")
    assert sealed.keyring.find(thread_owner("m")) is None
    same_tuple(sealed.get_tuple(config_for("n")), plain.get_tuple(config_for("m")))


def json_values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """JSON values whose strings are drawn from ``text``."""
    return st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
        max_leaves=20,
    )


JSON_VALUES = json_values(st.text(max_size=400))
#: Metadata is stored as JSON text, which no backend keeps a NUL or a lone surrogate in:
#: every saver refuses such metadata at ``put`` (tests/test_saver_inputs.py).
METADATA_VALUES = json_values(
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=400)
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.dictionaries(st.sampled_from(["a", "b", "c"]), JSON_VALUES, max_size=3),
    metadata=st.dictionaries(st.sampled_from(["m", "n"]), METADATA_VALUES, max_size=2),
    write=JSON_VALUES,
)
def test_any_value_reads_back(
    tmp_path: Path, values: dict[str, Any], metadata: dict[str, Any], write: Any
) -> None:
    saver = SqliteSaver(tmp_path / "h.db", encryption=HYPOTHESIS_KEY)
    try:
        thread = uuid.uuid4().hex
        checkpoint = make_checkpoint(values)
        meta: Any = metadata
        saved = saver.put(config_for(thread), checkpoint, meta, dict.fromkeys(values, 1))
        saver.put_writes(saved, [("a", write)], "task")
        got = saver.get_tuple(config_for(thread))
        assert got is not None
        assert got.checkpoint["channel_values"] == values
        assert {k: got.metadata[k] for k in metadata} == metadata  # type: ignore[literal-required]
        assert got.pending_writes == [("task", "a", write)]
    finally:
        saver.close()


HYPOTHESIS_KEY = generate_master_key()


# -- the grep test --------------------------------------------------------------------------


@pytest.mark.parametrize("encrypted", [True, False])
def test_sqlite_file_and_wal_hold_no_secret(tmp_path: Path, master: str, encrypted: bool) -> None:
    path = tmp_path / "grep.db"
    words = secrets()
    saver = SqliteSaver(path, encryption=master if encrypted else False)
    workload(saver, words)
    files = [path, Path(f"{path}-wal")]
    while_open = found_in(files, words)
    saver.close()
    after_close = found_in(files, words) | while_open
    if encrypted:
        assert after_close == set()
        reopened = SqliteSaver(path, encryption=master)  # and all of it reads back
        listed = list(reopened.list(config_for("t-grep")))
        assert [len(t.pending_writes or ()) for t in listed] == [0, 2]
        assert dict(listed[0].metadata)["memo"] == words[2]
        reopened.close()
    else:  # the control: the same workload shows every word
        assert after_close == set(words)


@pytest.mark.parametrize("encrypted", [True, False])
def test_postgres_files_hold_no_secret(
    pg_server: Any, pg_url: str, master: str, encrypted: bool
) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver

    if pg_server.local is None:
        pytest.skip("a server given by URL: its files are not on this machine")
    saver = PostgresSaver(pg_url, encryption=master if encrypted else False)
    server = pg_server
    words = secrets()
    workload(saver, words)
    [[oid]] = run_sql(saver, "SELECT oid FROM pg_database WHERE datname = current_database()")
    run_update(saver, "CHECKPOINT", {})
    data: Path = server.local.data
    files = [p for folder in (data / "base" / str(oid), data / "pg_wal") for p in folder.rglob("*")]
    saver.close()
    if encrypted:
        assert found_in(files, words) == set()
    else:  # the control: the same workload shows every word
        assert found_in(files, words) == set(words)


# -- integrity ------------------------------------------------------------------------------


def test_a_value_moved_to_another_thread_does_not_open(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    saver = make_saver(encryption=master)
    for thread in ("alice", "bob", "carol"):
        saver.put(config_for(thread), make_checkpoint({"n": thread}), {"step": 0}, {"n": 1})
    p = placeholder(saver, "t")
    for column, thread in (("checkpoint", "bob"), ("metadata", "carol")):
        run_update(
            saver,
            f"UPDATE am_checkpoints SET {column} = (SELECT {column} FROM am_checkpoints "
            f"WHERE thread_id = 'alice') WHERE thread_id = {p}",
            {"t": thread},
        )
    fresh = make_saver(encryption=master)
    for thread in ("bob", "carol"):
        with pytest.raises(DecryptionError):
            fresh.get_tuple(config_for(thread))
    alice = fresh.get_tuple(config_for("alice"))
    assert alice is not None and alice.checkpoint["channel_values"]["n"] == "alice"


def test_a_blob_moved_to_another_version_does_not_open(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    saver = make_saver(encryption=master)
    long = "v" * 400  # a blob row, not an inline value
    first = saver.put(config_for("t"), make_checkpoint({"x": long + "1"}), {}, {"x": 1})
    second = make_checkpoint({"x": long + "2"}, step=1, version=2)
    saver.put(first, second, {}, {"x": 2})
    rows = run_sql(saver, "SELECT version, blob FROM am_checkpoint_blobs WHERE channel = 'x'")
    old = next(bytes(r[1]) for r in rows if r[0] == "1")
    run_update(
        saver,
        f"UPDATE am_checkpoint_blobs SET blob = {placeholder(saver, 'b')} "
        f"WHERE channel = 'x' AND version = {placeholder(saver, 'v')}",
        {"b": old, "v": "2"},
    )
    with pytest.raises(DecryptionError):
        make_saver(encryption=master).get_tuple(config_for("t"))


# -- plaintext and migration ----------------------------------------------------------------


def test_plaintext_is_refused_read_in_migration_mode_and_sealed(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    plain = make_saver(encryption=False)
    words = secrets()
    workload(plain, words, thread="old")
    expected = plain.get_tuple(config_for("old"))
    with pytest.raises(PlaintextRowError, match="agent-memory encrypt"):
        make_saver(encryption=master).get_tuple(config_for("old"))
    migrating = make_saver(encryption=Encryption(master_keys=[master], allow_plaintext=True))
    same_tuple(migrating.get_tuple(config_for("old")), expected)
    # a new write under migration is sealed at once; the old rows stay plaintext for now
    migrating.put(config_for("new"), make_checkpoint({"n": 1}), {}, {"n": 1})
    counts = migrating.encrypt_plaintext()
    assert counts == {"threads": 1, "checkpoints": 2, "blobs": 2, "writes": 2}
    assert migrating.encrypt_plaintext() == dict.fromkeys(counts, 0)  # idempotent
    strict = make_saver(encryption=master)
    same_tuple(strict.get_tuple(config_for("old")), expected)
    assert len(list(strict.list(config_for("old")))) == 2


def test_aencrypt_plaintext(make_saver: Callable[..., SQLSaver], master: str) -> None:
    plain = make_saver(encryption=False)
    plain.put(config_for("old"), make_checkpoint({"n": "x" * 300}), {"step": 1}, {"n": 1})
    migrating = make_saver(encryption=Encryption(master_keys=[master], allow_plaintext=True))
    counts = asyncio.run(migrating.aencrypt_plaintext())
    assert counts == {"threads": 1, "checkpoints": 1, "blobs": 1, "writes": 0}
    got = make_saver(encryption=master).get_tuple(config_for("old"))
    assert got is not None and got.checkpoint["channel_values"]["n"] == "x" * 300


def test_encrypt_plaintext_needs_encryption(make_saver: Callable[..., SQLSaver]) -> None:
    from langgraph_checkpoint_agent_memory import ConfigurationError

    with pytest.raises(ConfigurationError):
        make_saver(encryption=False).encrypt_plaintext()


# -- erasure --------------------------------------------------------------------------------


#: The background sweeper never runs during the test: the test sweeps itself.
NO_SWEEPER: dict[str, Any] = {"sweep_interval_seconds": 3600}


def open_copy(path: Path, encryption: Encryption) -> SqliteSaver:
    """The backup, read at the time it was taken (its threads live then)."""
    return SqliteSaver(path, encryption=encryption, ttl_seconds=60, clock=FakeClock(1_000_000.0))


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("how", ["delete_thread", "erase_threads", "sweep"])
def test_a_backup_taken_before_a_delete_cannot_be_read_for_that_thread(
    tmp_path: Path, master: str, how: str, api: str
) -> None:
    clock = FakeClock(start=1_000_000.0)
    encryption = Encryption(master_keys=[master], keystore_url=f"sqlite:///{tmp_path / 'keys.db'}")
    path = tmp_path / "data.db"
    saver = SqliteSaver(path, encryption=encryption, ttl_seconds=60, clock=clock, **NO_SWEEPER)
    for thread in ("gone", "kept"):
        saver.put(config_for(thread), make_checkpoint({"x": thread * 100}), {}, {"x": 1})
    saver.close()
    shutil.copy(path, tmp_path / "backup.db")
    saver = SqliteSaver(path, encryption=encryption, ttl_seconds=60, clock=clock, **NO_SWEEPER)
    gone_key = key_id_of(
        bytes(
            run_sql(saver, "SELECT checkpoint FROM am_checkpoints WHERE thread_id = 'gone'")[0][0]
        )
    )
    clock.advance(30)
    saver.get_tuple(config_for("kept"))  # activity: it stays
    clock.advance(45)  # "gone" has expired
    removal: dict[str, Callable[[], Any]]
    if api == "sync":
        removal = {
            "delete_thread": lambda: saver.delete_thread("gone"),
            "erase_threads": lambda: saver.erase_threads(["gone"]),
            "sweep": lambda: saver.sweep(),
        }
        removed = removal[how]()
    else:
        removal = {
            "delete_thread": lambda: saver.adelete_thread("gone"),
            "erase_threads": lambda: saver.aerase_threads(["gone"]),
            "sweep": lambda: saver.asweep(),
        }
        removed = asyncio.run(removal[how]())
    assert removed == (["gone"] if how == "sweep" else None)
    saver.close()
    backup = open_copy(tmp_path / "backup.db", encryption)
    with pytest.raises(KeyMissingError) as missing:
        backup.get_tuple(config_for("gone"))
    assert missing.value.key_id == gone_key and gone_key in str(missing.value)
    kept = backup.get_tuple(config_for("kept"))
    assert kept is not None and kept.checkpoint["channel_values"]["x"] == "kept" * 100
    backup.close()


def test_a_store_scope_key_is_never_destroyed_by_a_thread_delete(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    saver = make_saver(encryption=master)
    config = config_for("scoped")
    config["configurable"]["encryption_scope"] = "memory.user=alice"
    saver.put(config, make_checkpoint({"x": 1}), {}, {"x": 1})
    assert saver.keyring is not None
    scope_key = saver.keyring.find(store_owner("memory.user=alice"))
    assert scope_key is not None and saver.keyring.find(thread_owner("scoped")) is None
    [[body]] = run_sql(saver, "SELECT checkpoint FROM am_checkpoints")
    assert key_id_of(bytes(body)) == scope_key.key_id
    saver.delete_thread("scoped")
    assert saver.keyring.find(store_owner("memory.user=alice")) is not None


def test_the_key_table_comes_with_setup(make_saver: Callable[..., SQLSaver], master: str) -> None:
    saver = make_saver(encryption=master)
    saver.setup()
    [[count]] = run_sql(saver, "SELECT count(*) FROM am_keys")  # the table is there
    assert count == 0


# -- cost -----------------------------------------------------------------------------------


def count_batches(saver: SQLSaver, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make ``saver.db.run`` count the batches (round trips) of every plan it runs."""
    counted = [0]
    real_run = saver.db.run

    def watched(plan: Any) -> Any:
        try:
            batch = plan.send(None)
            while True:
                counted[0] += 1
                try:
                    value = yield batch
                except Exception as exc:
                    batch = plan.throw(exc)
                else:
                    batch = plan.send(value)
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(saver.db, "run", lambda plan: real_run(watched(plan)))
    return counted


def test_the_hot_path_keeps_its_round_trips(
    make_saver: Callable[..., SQLSaver], master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a thread's key is in memory, put, put_writes, get_tuple and list send as many
    batches with encryption as without."""
    per_saver = []
    # without encryption first: once encrypted, the database refuses a saver without the key
    for i, setting in enumerate((False, master)):
        saver = make_saver(encryption=setting)
        thread = f"hot{i}"
        parent = saver.put(config_for(thread), make_checkpoint({"x": "y" * 300}), {}, {"x": 1})
        counted = count_batches(saver, monkeypatch)
        second = make_checkpoint({"x": "z" * 300}, step=1, version=2)
        saved = saver.put(parent, second, {"step": 1}, {"x": 2})
        saver.put_writes(saved, [("x", "w")], "task")
        assert saver.get_tuple(config_for(thread)) is not None
        assert len(list(saver.list(config_for(thread)))) == 2
        per_saver.append(counted[0])
    assert per_saver[0] == per_saver[1] > 0


def test_savers_creating_a_thread_key_at_once_share_one(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    savers = [make_saver(encryption=master) for _ in range(4)]
    for saver in savers:
        saver.setup()
    owners = [thread_owner(f"race-{i}") for i in range(10)]

    def keys_of(saver: SQLSaver) -> list[str]:
        assert saver.keyring is not None
        return [saver.keyring.key(owner).key_id for owner in owners]

    with ThreadPoolExecutor(len(savers)) as pool:
        found = list(pool.map(keys_of, savers))
    assert all(ids == found[0] for ids in found)
    assert len(set(found[0])) == len(owners)


def test_tasks_missing_one_key_look_it_up_once(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    saver = make_saver(encryption=master)
    saver.setup()
    keyring = saver.keyring
    assert keyring is not None
    runs = [0]
    real = keyring.keystore.arun

    async def counted(plan: Any) -> Any:
        runs[0] += 1
        return await real(plan)

    keyring.keystore.arun = counted  # type: ignore[method-assign]

    async def scenario() -> list[str]:
        keys = await asyncio.gather(*(keyring.akey(thread_owner("t")) for _ in range(8)))
        return [k.key_id for k in keys]

    ids = asyncio.run(scenario())
    assert len(set(ids)) == 1 and runs[0] == 1
