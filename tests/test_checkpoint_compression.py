"""Checkpoint values are stored compressed, read back whole, and a crafted compressed row
gives the package's error; rows written before compression (raw) still read."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_checkpoint_agent_memory import (
    DamagedValueError,
    Encryption,
    SqliteSaver,
    SQLSaver,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.checkpoint.codec import (
    APPEND,
    MAX_CHAIN,
    MAX_SEGMENTS,
    PACKED,
    SEGMENT,
    TYPE_MAX,
)
from langgraph_checkpoint_agent_memory.compression import BOUND, DICTIONARY, FLOOR, pack, unpack
from langgraph_checkpoint_agent_memory.db import schema
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from tests.test_sql_incremental import graph


def config_for(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def checkpoint_of(values: dict[str, Any], step: int = 0) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = dict.fromkeys(values, step + 1)
    return checkpoint


def rows(saver: SQLSaver, sql: str) -> list[Any]:
    def plan() -> Plan[list[Any]]:
        [found] = yield Batch([Stmt(Sql(sql), fetch=True)])
        return list(found)

    return saver.db.run(plan())


def update(saver: SQLSaver, statement: Any, params: dict[str, Any]) -> None:
    """Run a SQLAlchemy statement (compiled for the saver's dialect) with ``params``."""
    sql = saver.dialect.compile(statement)

    def plan() -> Plan[None]:
        yield Batch([Stmt(sql, params)], write=True)

    saver.db.run(plan())


LONG = "the delivery date of purchase order 4500012345 is the fifth of May; " * 20


def test_values_are_stored_compressed_and_read_back(
    make_saver: Callable[..., SQLSaver],
) -> None:
    saver = make_saver()
    config: Any = {"configurable": {"thread_id": "z"}}
    g = graph(saver)
    for turn in range(3):
        g.invoke({"messages": [HumanMessage(f"{turn} {LONG}")]}, config)
    head = saver.get_tuple(config)
    assert head is not None
    saver.put_writes(head.config, [("messages", [AIMessage(LONG)])], "t1")
    kinds = [r[0] for r in rows(saver, "SELECT type FROM am_checkpoint_blobs")]
    kinds += [r[0] for r in rows(saver, "SELECT type FROM am_checkpoints")]
    kinds += [r[0] for r in rows(saver, "SELECT type FROM am_checkpoint_writes")]
    assert any(k.startswith(PACKED) for k in kinds)
    sizes = [len(bytes(r[0])) for r in rows(saver, "SELECT blob FROM am_checkpoint_blobs")]
    assert max(sizes) < len(LONG) // 4  # the long message, compressed
    fresh = graph(make_saver())  # another process: no cache
    messages = fresh.get_state(config).values["messages"]
    assert [m.content for m in messages][::2] == [f"{t} {LONG}" for t in range(3)]
    assert fresh.checkpointer.get_tuple(config).pending_writes[0][2][0].content == LONG


def test_a_long_conversation_is_chained_in_segments(make_saver: Callable[..., SQLSaver]) -> None:
    """Past MAX_CHAIN appends a segment, past MAX_SEGMENTS segments a full copy; every
    version reads back whole in another process."""
    saver = make_saver()
    config = {"configurable": {"thread_id": "s"}}
    g = graph(saver)
    turns = (MAX_CHAIN + 1) * (MAX_SEGMENTS + 2) // 2
    for turn in range(turns):
        g.invoke({"messages": [HumanMessage(f"question {turn}")]}, config)
    found = rows(
        saver, "SELECT type, base_version FROM am_checkpoint_blobs WHERE channel = 'messages'"
    )
    segments = [k for k, _ in found if "segment:" in k]
    full = [k for k, base in found if base is None]
    assert segments and len(full) == 2  # the first version, and one after MAX_SEGMENTS
    fresh = graph(make_saver())
    expected = [m.content for m in g.get_state(config).values["messages"]]
    for snapshot in fresh.get_state_history(config):
        n = len(snapshot.values.get("messages", []))
        assert [m.content for m in snapshot.values.get("messages", [])] == expected[:n]
    # a reader that took over the thread keeps extending its chains
    g2 = graph(make_saver())
    g2.invoke({"messages": [HumanMessage("one more")]}, config)
    again = graph(make_saver()).get_state(config).values["messages"]
    assert [m.content for m in again] == [*expected, "one more", f"answer {len(expected) + 1}"]


def raw_put(saver: SQLSaver, thread: str, messages: list[Any]) -> None:
    """A checkpoint and its blob as written before compression: the serde's bytes as they are."""
    serde = JsonPlusSerializer()
    checkpoint = checkpoint_of({})
    version = "00000000000000000000000000000001.0.5"
    checkpoint["channel_versions"] = {"messages": version}
    body_type, body = serde.dumps_typed(checkpoint)
    blob_type, blob_bytes = serde.dumps_typed(messages)
    key = {"thread_id": thread, "checkpoint_ns": ""}
    metadata = '{"source":"loop","step":0,"parents":{}}'
    cp = {"checkpoint_id": checkpoint["id"], "type": body_type, "checkpoint": body}
    versions = f'{{"messages":"{version}"}}'
    update(
        saver,
        sa.insert(schema.checkpoints).values({c: sa.bindparam(c) for c in COLUMNS}),
        {**key, **cp, "metadata": metadata, "blob_versions": versions},
    )
    blob = {"channel": "messages", "version": version, "type": blob_type, "blob": blob_bytes}
    update(
        saver,
        sa.insert(schema.blobs).values({c: sa.bindparam(c) for c in (*key, *blob)}),
        {**key, **blob},
    )


COLUMNS = ("thread_id", "checkpoint_ns", "checkpoint_id", "type", "checkpoint", "metadata",
           "blob_versions")  # fmt: skip


def test_rows_written_raw_still_read(make_saver: Callable[..., SQLSaver]) -> None:
    saver = make_saver()
    saver.setup()
    raw_put(saver, "old", [HumanMessage(LONG), AIMessage("short")])
    got = saver.get_tuple(config_for("old"))
    assert got is not None
    assert [m.content for m in got.checkpoint["channel_values"]["messages"]] == [LONG, "short"]
    # and a new checkpoint on top of it appends to the raw list
    g = graph(saver)
    g.invoke({"messages": [HumanMessage("next")]}, {"configurable": {"thread_id": "old"}})
    state = graph(make_saver()).get_state({"configurable": {"thread_id": "old"}})
    assert [m.content for m in state.values["messages"]] == [LONG, "short", "next", "answer 3"]


def bomb() -> bytes:
    """A frame of a few hundred bytes that claims (and holds) more than BOUND bytes."""
    return zstandard.ZstdCompressor(level=1).compress(bytes(BOUND + 1))


def no_size() -> bytes:
    return zstandard.ZstdCompressor(write_content_size=False).compress(LONG.encode())


CRAFTED: dict[str, Callable[[], bytes]] = {
    "expansion bomb": bomb,
    "truncated frame": lambda: (pack(LONG.encode()) or b"")[:-5],
    "unknown marker": lambda: b"\x00\x01garbage that is no zstd frame at all, not a bit of it",
    "frame without a size": no_size,
    "trailing bytes": lambda: (pack(LONG.encode()) or b"") + b"more",
}


@pytest.mark.parametrize("crafted", list(CRAFTED))
@pytest.mark.parametrize("column", ["body", "blob", "write"])
def test_a_crafted_compressed_row_gives_the_package_error(
    make_saver: Callable[..., SQLSaver], crafted: str, column: str
) -> None:
    saver = make_saver()
    config: Any = {"configurable": {"thread_id": "c"}}
    graph(saver).invoke({"messages": [HumanMessage(LONG)]}, config)
    head = saver.get_tuple(config)
    assert head is not None
    saver.put_writes(head.config, [("messages", [AIMessage(LONG)])], "t1")
    table = {"body": schema.checkpoints, "blob": schema.blobs, "write": schema.writes}[column]
    where = (
        table.c.checkpoint_id == head.config["configurable"]["checkpoint_id"]
        if column == "body"
        else table.c.channel == "messages"
    )
    value = "checkpoint" if column == "body" else "blob"
    statement = (
        sa.update(table).where(where).values({"type": sa.bindparam("t"), value: sa.bindparam("v")})
    )
    update(saver, statement, {"t": PACKED + "msgpack", "v": CRAFTED[crafted]()})
    with pytest.raises(DamagedValueError, match="damaged"):
        make_saver().get_tuple(config)  # a reader without the thread in its cache


def test_pack_keeps_small_and_incompressible_values_raw() -> None:
    assert pack(b"x" * (FLOOR - 1)) is None
    noise = uuid.uuid4().bytes * 2 + bytes(range(256))[::7]
    assert pack(noise) is None or len(pack(noise) or b"") < len(noise)
    assert unpack(pack(LONG.encode()) or b"", "a value") == LONG.encode()
    with pytest.raises(DamagedValueError, match="claims"):
        unpack(bomb(), "a value")


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what msgpack holds
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.dictionaries(st.sampled_from(["a", "b", "messages"]), VALUES, max_size=3),
    long=st.text(min_size=0, max_size=400),
    write=VALUES,
)
def test_any_checkpoint_round_trips(
    tmp_path: Any, values: dict[str, Any], long: str, write: Any
) -> None:
    """Any values (raw below the floor, compressed above it) read back equal, in this
    process and in another one."""
    path = tmp_path / "h.db"
    saver = SqliteSaver(path)
    try:
        thread = uuid.uuid4().hex
        values = {**values, "text": long * 3}
        saved = saver.put(config_for(thread), checkpoint_of(values), {}, dict.fromkeys(values, 1))
        saver.put_writes(saved, [("a", write)], "task")
        for reader in (saver, SqliteSaver(path)):
            got = reader.get_tuple(config_for(thread))
            assert got is not None
            assert got.checkpoint["channel_values"] == values
            assert got.pending_writes == [("task", "a", write)]
    finally:
        saver.close()


def sealed_as_before(secret: bytes, key_id: str, plaintext: bytes, associated: bytes) -> bytes:
    """A value sealed as format 2 did before compression had its module: marker 0xA8 and
    the plaintext zlib-compressed."""
    import os
    import zlib

    from langgraph_checkpoint_agent_memory.crypto.cipher import VALUE_LABEL, aesgcm, subkey

    head = bytes((0xA8,)) + bytes.fromhex(key_id)
    header = head + (zlib.crc32(head) & 0xFFFFFFFF).to_bytes(4, "big")
    nonce = os.urandom(12)
    cipher = aesgcm(subkey(secret, VALUE_LABEL))
    sealed: bytes = cipher.encrypt(nonce, zlib.compress(plaintext), header + associated)
    return header + nonce + sealed


def test_values_sealed_with_zlib_still_open_and_a_zlib_bomb_is_refused() -> None:
    from langgraph_checkpoint_agent_memory import DecryptionError
    from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, aad, new_key, new_key_id

    secret, key_id = new_key(), new_key_id()
    key = DataKey(key_id, "thread:t1", secret)
    old = sealed_as_before(secret, key_id, LONG.encode(), aad("row", "1"))
    assert key.open(old, aad("row", "1")) == LONG.encode()
    fresh = key.seal(LONG.encode(), aad("row", "1"))
    assert fresh[0] == 0xA9 and len(fresh) < len(old)  # zstd with the dictionary now
    assert key.open(fresh, aad("row", "1")) == LONG.encode()
    bomb = sealed_as_before(secret, key_id, bytes(BOUND + 1), aad("row", "1"))
    with pytest.raises(DecryptionError, match="expands beyond"):
        key.open(bomb, aad("row", "1"))


def test_rows_written_raw_are_compressed_when_sealed(make_saver: Callable[..., SQLSaver]) -> None:
    """``encrypt_plaintext`` seals a row written before compression compressed: the cipher
    compresses what the codec did not."""
    saver = make_saver()
    saver.setup()
    raw_put(saver, "old", [HumanMessage(LONG), AIMessage(LONG)])
    [(raw_length,)] = rows(saver, "SELECT length(blob) FROM am_checkpoint_blobs")
    migrating = make_saver(
        encryption=Encryption(master_keys=[generate_master_key()], allow_plaintext=True)
    )
    assert migrating.encrypt_plaintext()["blobs"] == 1
    [(sealed_length,)] = rows(saver, "SELECT length(blob) FROM am_checkpoint_blobs")
    assert sealed_length < raw_length / 4
    got = migrating.get_tuple(config_for("old"))
    assert got is not None
    assert [m.content for m in got.checkpoint["channel_values"]["messages"]] == [LONG, LONG]


def test_a_serde_type_too_long_for_a_prefix_is_written_in_full(
    make_saver: Callable[..., SQLSaver],
) -> None:
    """A list whose serde type leaves no room in the type column for ``append:`` or
    ``segment:`` is written in full each time, and reads back whole."""

    class LongTyped(JsonPlusSerializer):
        name = "x" * (TYPE_MAX - len(APPEND) + 1)

        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            kind, data = super().dumps_typed(obj)
            return (self.name, data) if kind == "msgpack" else (kind, data)

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            kind, raw = data
            return super().loads_typed(("msgpack" if kind == self.name else kind, raw))

    saver = make_saver(serde=LongTyped())
    config = {"configurable": {"thread_id": "long-typed"}}
    g = graph(saver)
    for turn in range(3):
        g.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config)
    types = {t for (t,) in rows(saver, "SELECT type FROM am_checkpoint_blobs")}
    assert all(len(t) <= TYPE_MAX for t in types)
    assert not any(t.startswith((APPEND, SEGMENT)) for t in types)
    state = graph(make_saver(serde=LongTyped())).get_state(config)
    assert len(state.values["messages"]) == 6


def test_the_dictionary_is_the_one_values_were_written_with() -> None:
    """Frames do not name their dictionary: a changed ``values.zdict`` would make every value
    written with the old one unreadable, or read back wrong."""
    digest = hashlib.sha256(DICTIONARY.read_bytes()).hexdigest()
    assert digest == "4f2e88ff23c938046dbc11da0f61ef4ba78951a6121a93bd2dbdfa17012201bf"
