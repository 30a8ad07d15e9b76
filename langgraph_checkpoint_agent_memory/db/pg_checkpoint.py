"""PostgreSQL's one-statement checkpoint reads and writes, as SQLAlchemy Core statements:
``get_tuple`` as one recursive query, ``put`` and ``put_writes`` as data-modifying CTEs (or,
on a distributed database, as routed ``INSERT ... VALUES`` statements). The dialect
(:class:`.postgres.PostgresDialect`) compiles and caches them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as sa_pg

from langgraph_checkpoint_agent_memory.db import checkpoint as checkpoint_sql
from langgraph_checkpoint_agent_memory.db.checkpoint import takes_write, thread_takes
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.schema import TIME, blobs, checkpoints, threads, writes


def get_tuple_statement(by_id: bool) -> Any:
    """The statement of :meth:`.PostgresDialect.fast_get_tuple`."""
    return checkpoint_sql.get_tuple_statement(by_id, _version_rows, _blob)


def _version_rows(c: Any) -> Any:
    """The checkpoint's ``blob_versions`` as rows ``(key, value)``."""
    return (
        sa.func.jsonb_each_text(sa.cast(c.c.blob_versions, sa_pg.JSONB))
        .table_valued("key", "value")
        .render_derived(name="v")
        .lateral()
    )


def _blob(channel: Any, version: Any) -> tuple[Any, Any, bool]:
    """One blob by its full primary key, the thread named by parameter (Citus routes a
    recursive query only when every table in it is filtered on thread_id), as a LATERAL
    ... LIMIT 1, so the planner cannot turn it into a scan of the thread's blobs."""
    bb = blobs.alias("bb")
    found = sa.select(*(bb.c[n] for n in checkpoint_sql.BLOB_COLUMNS))
    one = sa.literal_column("1", sa.Integer)
    lookup = found.where(
        bb.c.thread_id == sa.bindparam("thread_id"),
        bb.c.checkpoint_ns == sa.bindparam("checkpoint_ns"),
        bb.c.channel == channel,
        bb.c.version == version,
    )
    return lookup.limit(one).lateral("b"), sa.true(), False


#: The row groups of a fast write, by kind (see :meth:`.PostgresDialect.fast_write`).
GROUPS = {"put": ("b",), "writes": ("f", "r")}
#: Per row group: the table, the columns whose value is a fixed parameter of their name (the
#: others take the row's own cell), and whether a key conflict overwrites the row.
_ROUTED_ROWS: dict[str, tuple[sa.Table, frozenset[str], bool]] = {
    "b": (blobs, frozenset({"thread_id", "checkpoint_ns"}), False),
    **{
        group: (
            writes,
            frozenset({"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path"}),
            overwrite,
        )
        for group, overwrite in (("f", False), ("r", True))
    },
}


def routed_insert(group: str, count: int) -> Any:
    """``INSERT ... VALUES`` of ``count`` rows of ``group`` (the parameters of
    :func:`cell_names`)."""
    table, fixed, overwrite = _ROUTED_ROWS[group]
    rows: list[dict[str, Any]] = [
        {
            c.name: sa.bindparam(c.name if c.name in fixed else f"{group}{i}_{c.name}")
            for c in table.columns
        }
        for i in range(count)
    ]
    stmt = sa_pg.insert(table).values(rows)
    if not overwrite:
        return stmt.on_conflict_do_nothing()
    # a special channel's write overwrites the pending write of the same key
    return stmt.on_conflict_do_update(
        index_elements=list(table.primary_key.columns),
        set_={c: stmt.excluded[c] for c in ("channel", "type", "blob", "task_path")},
    )


def routed_touch() -> Any:
    """Touch the thread's activity row where it takes the write, returning a row if so."""
    t = threads
    cols = ("thread_id", "last_active", "ttl_seconds", "expires_at")
    stmt = sa_pg.insert(t).values({**{c: sa.bindparam(c) for c in cols}, "deleted_at": sa.null()})
    return stmt.on_conflict_do_update(
        index_elements=[t.c.thread_id],
        set_={c: stmt.excluded[c] for c in cols[1:]},
        where=sa.and_(*takes_write(t)),
    ).returning(sa.literal_column("1"))


def routed_live() -> Any:
    """The thread's activity row, locked for share, where it takes the write."""
    t = threads.alias("t")
    return (
        sa.select(sa.literal_column("1"))
        .select_from(t)
        .where(t.c.thread_id == sa.bindparam("thread_id"), *takes_write(t))
        .with_for_update(read=True)
    )


def fast_write_statement(d: Dialect, kind: str, touch: bool, counts: tuple[int, ...]) -> Any:
    """The one statement of :meth:`.PostgresDialect.fast_write`: data-modifying CTEs, each
    inserting its rows only while the ``live`` CTE holds a row; the count of that row."""
    live = (
        sa.select(sa.literal_column("1").label("ok"))
        .where(thread_takes(sa.bindparam("thread_id")))
        .cte("live")
    )
    ctes = []
    if touch:
        t = threads
        touched: Any = sa.select(
            sa.bindparam("thread_id"),
            sa.bindparam("last_active"),
            sa.cast(sa.bindparam("ttl_seconds"), sa.Integer),
            sa.cast(sa.bindparam("expires_at"), TIME),
            sa.null(),
        ).select_from(live)
        cols = ["thread_id", "last_active", "ttl_seconds", "expires_at", "deleted_at"]
        touch_stmt: Any = d.upsert_select(t, cols, touched, ["thread_id"], cols[1:4])
        ctes.append(touch_stmt.cte("touch"))
    for name, insert in _row_inserts(d, kind, counts, live):
        ctes.append(insert.cte(name))
    return sa.select(sa.func.count()).select_from(live).add_cte(*ctes)


def _row_inserts(
    d: Dialect, kind: str, counts: tuple[int, ...], live: Any
) -> list[tuple[str, Any]]:
    """The inserts of a one-statement fast write, named, each selecting from ``live``."""
    fixed: dict[str, Any] = {
        c: sa.bindparam(c) for c in ("thread_id", "checkpoint_ns", "checkpoint_id")
    }
    fixed |= {c: sa.bindparam(c) for c in ("task_id", "task_path")}
    if kind == "put":
        out = []
        if counts[0]:
            out.append(("blobs", _rows_insert(d, blobs, "b", counts[0], fixed, live, False)))
        cols = [c.name for c in checkpoints.columns]
        row: Any = sa.select(*(sa.bindparam(c) for c in cols)).select_from(live)
        keys = [c.name for c in checkpoints.primary_key.columns]
        out.append(("cp", d.upsert_select(checkpoints, cols, row, keys, cols[len(keys) :])))
        return out
    groups = (("first", "f", False), ("special", "r", True))
    return [
        (name, _rows_insert(d, writes, group, count, fixed, live, overwrite))
        for (name, group, overwrite), count in zip(groups, counts, strict=True)
        if count
    ]


def _rows_insert(
    d: Dialect,
    table: sa.Table,
    group: str,
    count: int,
    fixed: Mapping[str, Any],
    live: Any,
    overwrite: bool,
) -> Any:
    """``INSERT INTO table SELECT <fixed parameters and the rows' cells> FROM live,
    (VALUES ...) AS u`` of ``count`` rows of ``group``; on a key conflict, keep the row or
    (``overwrite``: a special channel's write) overwrite its value."""
    kind = "put" if table is blobs else "writes"
    rows = _values(kind, group, count)
    cols = [c.name for c in table.columns]
    source = sa.select(*(fixed[c] if c in fixed else rows.c[c] for c in cols))
    keys = [c.name for c in table.primary_key.columns]
    if not overwrite:
        return d.insert_missing(table, cols, source.select_from(live).select_from(rows), keys)
    update = ["channel", "type", "blob", "task_path"]
    return d.upsert_select(table, cols, source.select_from(live).select_from(rows), keys, update)


#: Rows one fast write sends as plain parameters; more take the generic statements.
MAX_VALUES_ROWS = 64
#: The row keys a fast write's rows carry, in order, with their SQL types.
_ROW_COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "put": [
        ("channel", sa.Text),
        ("version", sa.Text),
        ("type", sa.Text),
        ("blob", sa_pg.BYTEA),
        ("base_version", sa.Text),
    ],
    "writes": [("idx", sa.Integer), ("channel", sa.Text), ("type", sa.Text), ("blob", sa_pg.BYTEA)],
}


@functools.cache
def cell_names(kind: str, group: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Per row of a fast write, each column with the parameter that carries it."""
    return tuple(
        tuple((column, f"{group}{i}_{column}") for column, _ in _ROW_COLUMNS[kind])
        for i in range(MAX_VALUES_ROWS)
    )


def _values(kind: str, group: str, count: int) -> Any:
    """``(VALUES (...), ...) AS u`` over ``count`` rows of ``group``'s parameters; the first
    row carries the types (a parameter alone in VALUES would be taken as text)."""
    columns = _ROW_COLUMNS[kind]
    rows = [
        tuple(
            sa.cast(sa.bindparam(f"{group}{i}_{c}"), t)
            if i == 0
            else sa.bindparam(f"{group}{i}_{c}")
            for c, t in columns
        )
        for i in range(count)
    ]
    return sa.values(*(sa.column(c, t) for c, t in columns), name="u").data(rows)
