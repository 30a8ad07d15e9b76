"""The named rows of the checkpoint codec: each row kind's fields follow its statement's
columns on real SQLite files and PostgreSQL, and the one-statement ``get_tuple`` (PostgreSQL)
decodes to exactly what the two-batch route reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import SQLSaver
from langgraph_checkpoint_agent_memory.checkpoint.codec import (
    UNION_KINDS,
    UNION_TAG,
    BlobRow,
    ChainRow,
    CheckpointRow,
    UnionBlob,
    UnionHead,
    UnionWrite,
    WriteRow,
    blob_rows_of,
    checkpoint_row,
    split_union,
    write_rows_of,
)
from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from tests.helpers import config_for, make_checkpoint

#: Each row kind's fields, and the column each one reads, in the statement's order.
COLUMNS_OF: dict[Any, tuple[str, ...]] = {
    CheckpointRow: (
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "type",
        "checkpoint",
        "metadata",
        "blob_versions",
    ),
    BlobRow: ("channel", "version", "type", "blob", "base_version"),
    WriteRow: ("checkpoint_id", "task_id", "idx", "channel", "type", "blob", "task_path"),
    ChainRow: ("checkpoint_id", "parent_checkpoint_id", "blob_versions", "type", "checkpoint"),
}


def test_fields_are_named_after_the_columns_they_read() -> None:
    renamed = {"ns": "checkpoint_ns", "parent_id": "parent_checkpoint_id", "body": "checkpoint"}
    for kind, columns in COLUMNS_OF.items():
        assert tuple(renamed.get(f, f) for f in kind._fields) == columns, kind.__name__
    assert tuple(c.name for c in S.CHECKPOINT_COLUMNS) == COLUMNS_OF[CheckpointRow]
    assert COLUMNS_OF[BlobRow] == S.BLOB_COLUMNS
    assert tuple(c.name for c in S.CHAIN_COLUMNS) == COLUMNS_OF[ChainRow]


def test_every_union_kind_starts_with_its_tag() -> None:
    assert {len(kind._fields) for kind in UNION_KINDS} == {8}
    assert all(kind._fields[UNION_TAG] == "tag" for kind in UNION_KINDS)


def a_thread(saver: Any) -> tuple[str, str]:
    """A thread with a parent and a child checkpoint: inline values, a blob, an appended
    list (a blob with a base version), an empty channel, and writes of both kinds."""
    items = ["first " * 50, "second " * 50]
    parent = make_checkpoint({"items": items, "n": 1, "text": "x" * 400}, version=1)
    first = saver.put(config_for("t"), parent, {"step": 1}, parent["channel_versions"])
    child = make_checkpoint(
        {"items": [*items, "third " * 50], "n": 2, "text": "x" * 400}, version=2
    )
    child["channel_versions"]["text"] = 1  # unchanged since the parent
    child["channel_versions"]["gone"] = 2
    stored = saver.put(first, child, {"step": 2}, {"items": 2, "n": 2, "gone": 2})
    saver.put_writes(stored, [("items", ["w"]), ("n", 3)], "task-a", "p")
    saver.put_writes(stored, [("__error__", "boom")], "task-b")
    return stored["configurable"]["checkpoint_id"], first["configurable"]["checkpoint_id"]


def fetch(url: str, sql: Sql, params: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """Run one statement on a fresh connection; return its column names and rows."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            lite = conn.execute(sql.text, sql.bind(params))
            return [d[0] for d in lite.description], lite.fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as pg, pg.cursor(binary=True) as cur:
        cur.execute(sql.text, sql.bind(params))
        return [d.name for d in cur.description or []], list(cur.fetchall())


def test_rows_of_every_read_statement_decode_by_name(
    database_url: str, make_saver: Callable[..., SQLSaver]
) -> None:
    saver = make_saver()
    child_id, parent_id = a_thread(saver)
    d = saver.dialect
    key = {"thread_id": "t", "checkpoint_ns": "", "live_after": -1e300}

    columns, rows = fetch(database_url, S.select_checkpoint(d, by_id=False), key)
    assert tuple(columns) == COLUMNS_OF[CheckpointRow]
    row = checkpoint_row(rows[0])
    assert (row.thread_id, row.ns, row.checkpoint_id, row.parent_id) == (
        "t",
        "",
        child_id,
        parent_id,
    )
    assert set(row.blob_versions) == {"items", "text"}  # "n" is inline, "gone" has no value

    keys = {"c0": "items", "v0": row.blob_versions["items"]}
    columns, rows = fetch(database_url, S.select_blobs(d, 1), {**key, **keys})
    assert tuple(columns) == COLUMNS_OF[BlobRow]
    blobs = blob_rows_of([rows])
    appended = blobs[("items", row.blob_versions["items"])]
    assert "append:" in appended.type and appended.base_version is not None

    columns, rows = fetch(database_url, S.select_writes(d, 1), {**key, "k0": child_id})
    assert tuple(columns) == COLUMNS_OF[WriteRow]
    writes = write_rows_of([rows])
    assert {(w.task_id, w.idx, w.channel, w.task_path) for w in writes} == {
        ("task-a", 0, "items", "p"),
        ("task-a", 1, "n", "p"),
        ("task-b", -1, "__error__", ""),
    }
    assert all(type(w.blob) is bytes and w.checkpoint_id == child_id for w in writes)

    columns, rows = fetch(database_url, S.select_chain(d), {**key, "checkpoint_id": child_id})
    assert tuple(columns) == COLUMNS_OF[ChainRow]


def test_one_statement_get_tuple_reads_what_two_batches_read(pg_url: str) -> None:
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver

    saver = PostgresSaver(pg_url)
    try:
        child_id, parent_id = a_thread(saver)
        d = saver.dialect
        key = {"thread_id": "t", "checkpoint_ns": "", "live_after": -1e300}
        for cid, by_id in ((child_id, False), (child_id, True), (parent_id, True)):
            fast = d.fast_get_tuple(by_id)
            assert fast is not None
            params = {**key, "checkpoint_id": cid}
            found = split_union("t", "", fetch(pg_url, fast, params)[1])
            assert found is not None
            row, blobs, writes = found
            _, rows = fetch(pg_url, S.select_checkpoint(d, by_id=True), params)
            assert row == checkpoint_row(rows[0])
            wanted: dict[str, Any] = {**key}
            for i, (ch, v) in enumerate(sorted(row.blob_versions.items())):
                wanted[f"c{i}"], wanted[f"v{i}"] = ch, v
            _, rows = fetch(pg_url, S.select_blobs(d, len(row.blob_versions)), wanted)
            assert blobs == blob_rows_of([rows])
            assert len(blobs) == 2 + (cid == child_id)  # the child's list has its base too
            _, rows = fetch(pg_url, S.select_writes(d, 1), {**key, "k0": cid})
            assert sorted(writes) == sorted(write_rows_of([rows]))
            assert len(writes) == (3 if cid == child_id else 0)
        missing = {**key, "checkpoint_id": "no-such-checkpoint"}
        fast = d.fast_get_tuple(True)
        assert fast is not None
        assert split_union("t", "", fetch(pg_url, fast, missing)[1]) is None
    finally:
        saver.close()


# -- split_union on generated rows, in any order ---------------------------------------------

TEXT = st.text(max_size=5)
BLOB = st.binary(max_size=8)
heads = st.builds(
    lambda cid, parent, body: UnionHead(0, cid, parent, "msgpack", body, '{"step": 1}', "{}", None),
    TEXT,
    st.none() | TEXT,
    BLOB,
)
blob_parts = st.builds(
    lambda ch, v, blob, base: UnionBlob(1, ch, v, "msgpack", blob, base, None, None),
    TEXT,
    TEXT,
    st.none() | BLOB,
    st.none() | TEXT,
)
write_parts = st.builds(
    lambda task, ch, blob, path, idx: UnionWrite(2, task, ch, "msgpack", blob, path, None, idx),
    TEXT,
    TEXT,
    BLOB,
    TEXT,
    st.integers(-4, 10),
)


@given(
    st.none() | heads,
    st.lists(blob_parts, max_size=4, unique_by=lambda b: (b.channel, b.version)),
    st.lists(write_parts, max_size=4),
    st.randoms(use_true_random=False),
)
def test_split_union_names_every_part_whatever_the_row_order(
    head: UnionHead | None,
    blobs: list[UnionBlob],
    writes: list[UnionWrite],
    rng: Any,
) -> None:
    rows: list[tuple[Any, ...]] = [tuple(r) for r in [*blobs, *writes]]
    if head is not None:
        rows.append(tuple(head))
    rng.shuffle(rows)
    found = split_union("thread", "ns", rows)
    if head is None:
        assert found is None
        return
    assert found is not None
    row, blob_rows, write_rows = found
    assert row == CheckpointRow(
        "thread", "ns", head.checkpoint_id, head.parent_id, "msgpack", head.body, head.metadata, {}
    )
    assert blob_rows == {
        (b.channel, b.version): BlobRow(
            b.channel, b.version, b.type, b.blob if b.blob is not None else b"", b.base_version
        )
        for b in blobs
    }
    assert sorted(write_rows) == sorted(
        WriteRow(head.checkpoint_id, w.task_id, w.idx, w.channel, w.type, w.blob, w.task_path)
        for w in writes
    )
