"""The checkpointer's SQL, as SQLAlchemy Core compiled and cached per dialect."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import (
    blobs,
    checkpoints,
    matching,
    rows_named,
    threads,
    writes,
)
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

B = sa.bindparam

#: Key lists are padded up to one of these sizes, so a few compiled statements serve all.
KEY_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
MAX_KEYS = KEY_BUCKETS[-1]


def _each(
    d: Dialect, name: str, build: Callable[[sa.Table], Any], tables: Sequence[sa.Table]
) -> list[Sql]:
    """``build(t)`` per table ``t`` of ``tables``, cached as ``(name, t.name)``."""
    return [d.sql((name, t.name), partial(build, t)) for t in tables]


def bucket(n: int) -> int:
    return next(b for b in KEY_BUCKETS if b >= n)


def _gone(t: Any) -> list[Any]:
    return [t.c.deleted_at.is_not(None), t.c.expires_at < B("live_after", type_=sa.Float)]


def thread_is_live(thread_id: Any) -> Any:
    t = threads.alias("t")
    return ~sa.exists().where(t.c.thread_id == thread_id, sa.or_(*_gone(t)))


def _late(t: Any) -> Any:
    """The write names (``:named``) a checkpoint within the thread's ended history."""
    return t.c.ended_after >= B("named", type_=sa.String)


def takes_write(t: Any) -> list[Any]:
    """The activity row ``t`` takes a write (a NULL comparison refuses nothing)."""
    late = (t.c.expires_at < B("live_after", type_=sa.Float), _late(t))
    return [t.c.deleted_at.is_(None), *(r.is_not(sa.true()) for r in late)]


def thread_takes(thread_id: Any) -> Any:
    t = threads.alias("t")
    return ~sa.exists().where(t.c.thread_id == thread_id, sa.or_(*_gone(t), _late(t)))


COPIED_TABLES = (checkpoints, blobs, writes)


def touch_thread(d: Dialect) -> Sql:
    """Record activity on a live (or new) thread; rowcount 0 leaves the slow path."""

    def build() -> Any:
        live = sa.and_(
            threads.c.deleted_at.is_(None),
            sa.or_(threads.c.expires_at.is_(None), threads.c.expires_at >= B("live_after")),
        )
        return d.upsert(
            threads, ["thread_id"], ["last_active", "ttl_seconds", "expires_at"], where=live
        )

    return d.sql("touch_thread", build)


def revive_thread(d: Dialect) -> Sql:
    """Unconditional upsert of the activity row (a fresh start, or a :func:`tombstone`)."""
    return d.sql(
        "revive_thread",
        lambda: d.upsert(
            threads, ["thread_id"], ["last_active", "ttl_seconds", "expires_at", "deleted_at"]
        ),
    )


tombstone = revive_thread


def _if_live(d: Dialect, table: sa.Table, *, upsert_cols: list[str] | None) -> Any:
    """Insert (or upsert) one row of ``table`` from parameters, only while its thread is live."""
    cols = [c.name for c in table.columns]
    if d.distributed:
        # Citus routes an INSERT ... SELECT to one shard only if the thread's activity row (a
        # co-located table) exists: a thread without one takes the slow path, which writes it
        t = threads.alias("t")
        refusals = (*_gone(t), _late(t))
        values = d.values_select(table, cols[1:])
        source = sa.select(t.c.thread_id, *values.selected_columns).where(
            # a NULL (no value, no boundary) refuses nothing
            t.c.thread_id == B("thread_id"),
            *(r.is_not(sa.true()) for r in refusals),
        )
    else:
        source = d.values_select(table, cols).where(thread_takes(B("thread_id")))
    return d.insert_from_select(
        table, cols, source, keys=[c.name for c in table.primary_key], update=upsert_cols
    )


def insert_blob(d: Dialect) -> Sql:
    return d.sql(("insert_blob", d.distributed), lambda: _if_live(d, blobs, upsert_cols=None))


def upsert_checkpoint(d: Dialect) -> Sql:
    update = ["parent_checkpoint_id", "run_id", "type", "checkpoint", "metadata", "blob_versions"]
    return d.sql(
        ("upsert_checkpoint", d.distributed), lambda: _if_live(d, checkpoints, upsert_cols=update)
    )


def insert_write(d: Dialect, *, replace: bool) -> Sql:
    update = ["channel", "type", "blob", "task_path"] if replace else None
    return d.sql(
        ("insert_write", replace, d.distributed), lambda: _if_live(d, writes, upsert_cols=update)
    )


def thread_state(d: Dialect, *, lock: bool) -> Sql:
    def build() -> Any:
        state = ("deleted_at", "expires_at", "ttl_seconds", "ended_after")
        stmt = sa.select(*(threads.c[n] for n in state)).where(
            threads.c.thread_id == B("thread_id")
        )
        return stmt.with_for_update() if lock and d.row_locks else stmt

    return d.sql(("thread_state", lock), build)


def _newest(t: sa.Table, thread_id: Any) -> Any:
    return sa.select(sa.func.max(t.c.checkpoint_id)).where(t.c.thread_id == thread_id)


def newest_ids(d: Dialect) -> list[Sql]:
    """The newest checkpoint id a thread's checkpoints and its writes name (or NULL)."""
    return _each(d, "newest_id", lambda t: _newest(t, B("thread_id")), (checkpoints, writes))


def _raise_boundary(t: sa.Table) -> Any:
    # the thread by parameter, not correlation: Citus sends the update to one shard
    newest = _newest(t, B("thread_id")).scalar_subquery()
    return (
        sa.update(threads)
        .where(
            threads.c.thread_id == B("thread_id"),
            newest.is_not(None),
            sa.or_(threads.c.ended_after.is_(None), threads.c.ended_after < newest),
        )
        .values(ended_after=newest)
    )


def end_generation(d: Dialect) -> list[Sql]:
    """Raise a thread's boundary to its newest checkpoint id (it never moves back)."""
    return _each(d, "end_generation", _raise_boundary, (checkpoints, writes))


def set_generation(d: Dialect) -> Sql:
    return d.sql("set_generation", partial(_set_on_thread, ended_after=B("ended_after")))


def _set_on_thread(**values: Any) -> Any:
    return sa.update(threads).where(threads.c.thread_id == B("thread_id")).values(**values)


def forget_generation(d: Dialect) -> Sql:
    return d.sql("forget_generation", partial(_set_on_thread, ended_after=sa.null()))


def _delete_ended(t: sa.Table) -> Any:
    ended = sa.select(threads.c.ended_after).where(threads.c.thread_id == B("thread_id"))
    return sa.delete(t).where(
        t.c.thread_id == B("thread_id"), t.c.checkpoint_id <= ended.scalar_subquery()
    )


def delete_ended_rows(d: Dialect) -> list[Sql]:
    """Delete the history :func:`end_generation` bounded (writes above it: a fresh start's)."""
    return [
        *_each(d, "delete_thread_rows", _delete_thread_rows, (blobs, checkpoints)),
        d.sql("delete_ended_writes", partial(_delete_ended, writes)),
    ]


def refresh_thread(d: Dialect) -> Sql:
    def build() -> Any:
        slack = B("slack", type_=sa.Float)
        return (
            sa.update(threads)
            .where(
                threads.c.thread_id == B("thread_id"),
                threads.c.ttl_seconds.is_not(None),
                threads.c.deleted_at.is_(None),
                threads.c.expires_at >= B("now"),
            )
            .values(last_active=B("now"), expires_at=B("now") + threads.c.ttl_seconds * slack)
        )

    return d.sql("refresh_thread", build)


def _delete_thread_rows(t: sa.Table) -> Any:
    return sa.delete(t).where(t.c.thread_id == B("thread_id"))


def delete_thread_rows(d: Dialect) -> list[Sql]:
    return _each(d, "delete_thread_rows", _delete_thread_rows, (blobs, writes, checkpoints))


def erase_thread_rows(d: Dialect) -> list[Sql]:
    """Delete every row of one thread, its activity row first: the lock order, so none deadlock."""
    return [*_each(d, "erase_thread_rows", _delete_thread_rows, [threads]), *delete_thread_rows(d)]


def delete_checkpoint(d: Dialect) -> list[Sql]:
    def build(t: sa.Table) -> Any:
        return sa.delete(t).where(*matching(t, "thread_id", "checkpoint_ns", "checkpoint_id"))

    return _each(d, "delete_checkpoint", build, (writes, checkpoints))


def delete_blob(d: Dialect) -> Sql:
    key = ("thread_id", "checkpoint_ns", "channel", "version")
    return d.sql("delete_blob", lambda: sa.delete(blobs).where(*matching(blobs, *key)))


def select_copy_rows(d: Dialect) -> list[Sql]:
    """Every row of thread ``:src`` per copied table, for a copy across Citus shards."""
    return _each(
        d,
        "select_copy_rows",
        lambda t: sa.select(*t.columns).where(t.c.thread_id == B("src")),
        COPIED_TABLES,
    )


def _insert_copied(d: Dialect, t: sa.Table) -> Any:
    insert = d.insert_row_ignore if d.distributed else d.insert_ignore
    return insert(t, [c.name for c in t.primary_key])


def insert_copied_rows(d: Dialect) -> list[Sql]:
    return [
        d.sql(("insert_copied_rows", t.name, d.distributed), partial(_insert_copied, d, t))
        for t in COPIED_TABLES
    ]


def retarget(found: Sequence[Sequence[Any]], target: str) -> list[list[dict[str, Any]]]:
    """The rows :func:`select_copy_rows` read, as parameters under thread ``target``."""
    out = []
    for table, rows in zip(COPIED_TABLES, found, strict=True):
        names = [c.name for c in table.columns]
        out.append([{**dict(zip(names, row, strict=True)), "thread_id": target} for row in rows])
    return out


def copy_rows(d: Dialect) -> list[Sql]:
    def build(t: sa.Table) -> Any:
        cols = [c.name for c in t.columns]
        dst = B("dst", type_=t.c.thread_id.type).label("thread_id")
        copied = [dst if c == "thread_id" else t.c[c] for c in cols]
        source = sa.select(*copied).where(t.c.thread_id == B("src"))
        return d.insert_from_select(
            t, cols, source, keys=[c.name for c in t.primary_key], update=None
        )

    return _each(d, "copy_rows", build, COPIED_TABLES)


BLOB_COLUMNS = ("channel", "version", "type", "blob", "base_version")

_CHECKPOINT_CELLS = (
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
    "blob_versions",
)
_WRITE_CELLS = ("task_id", "channel", "type", "blob", "task_path")
CHECKPOINT_COLUMNS = tuple(
    checkpoints.c[n] for n in ("thread_id", "checkpoint_ns", *_CHECKPOINT_CELLS)
)


def select_checkpoint(d: Dialect, *, by_id: bool) -> Sql:
    def build() -> Any:
        stmt = sa.select(*CHECKPOINT_COLUMNS).where(
            *matching(checkpoints, "thread_id", "checkpoint_ns"), thread_is_live(B("thread_id"))
        )
        if by_id:
            return stmt.where(checkpoints.c.checkpoint_id == B("checkpoint_id"))
        return stmt.order_by(checkpoints.c.checkpoint_id.desc()).limit(1)

    return d.sql(("select_checkpoint", by_id), build)


#: A get_tuple's way to blobs: versions as rows; a blob by key, its join, outer (fixes scan order).
VersionRows = Callable[[Any], Any]
BlobByKey = Callable[[Any, Any], tuple[Any, Any, bool]]


def get_tuple_statement(by_id: bool, version_rows: VersionRows, blob: BlobByKey) -> Any:
    """``get_tuple`` as one statement, one snapshot: the checkpoint (tag 0), its blobs down
    their chains of bases (tag 1), its writes (tag 2)."""
    thread: Any = B("thread_id")
    ns: Any = B("checkpoint_ns")
    one = sa.literal_column("1", sa.Integer)  # a literal: each lookup reads one row
    cp = checkpoints
    by = [cp.c.checkpoint_id == B("checkpoint_id")] if by_id else []
    c = (
        sa.select(*CHECKPOINT_COLUMNS)
        .where(cp.c.thread_id == thread, cp.c.checkpoint_ns == ns, *by, thread_is_live(thread))
        .order_by(cp.c.checkpoint_id.desc())
        .limit(one)
        .cte("c")
    )
    versions = version_rows(c)
    first, joined, outer = blob(versions.c.key, versions.c.value)
    chain = (
        sa.select(*(first.c[n] for n in BLOB_COLUMNS))
        .select_from(c.join(versions, sa.true()).join(first, joined, isouter=outer))
        .cte("chain", recursive=True)
    )
    base, joined, _ = blob(chain.c.channel, chain.c.base_version)
    chain = chain.union_all(
        sa.select(*(base.c[n] for n in BLOB_COLUMNS)).select_from(chain.join(base, joined))
    )
    found = [chain.c.channel.is_not(None)] if outer else []
    w = writes.alias("w")
    # a scalar, so the whole key is the index condition (a join may filter a scan instead)
    of_checkpoint = sa.select(c.c.checkpoint_id).scalar_subquery()
    return sa.union_all(
        _tagged(0, *(c.c[n] for n in _CHECKPOINT_CELLS), sa.cast(sa.null(), sa.Integer)),
        _tagged(1, *(chain.c[n] for n in BLOB_COLUMNS), sa.null(), sa.null()).where(*found),
        _tagged(2, *(w.c[n] for n in _WRITE_CELLS), sa.null(), w.c.idx).where(
            w.c.thread_id == thread, w.c.checkpoint_ns == ns, w.c.checkpoint_id == of_checkpoint
        ),
    )


def _tagged(tag: int, *cells: Any) -> Any:
    """A row of the get_tuple union; strings as text, so all rows share column types."""
    typed = (sa.cast(c, sa.Text) if isinstance(c.type, sa.String) else c for c in cells)
    return sa.select(sa.literal_column(str(tag)), *typed)


def select_blobs(d: Dialect, n: int) -> Sql:
    """Blobs by ``(:c{i}, :v{i})`` keys, with their chains of bases where recursive."""

    def build() -> Any:
        wanted = sa.select(*[blobs.c[c] for c in BLOB_COLUMNS]).where(
            *matching(blobs, "thread_id", "checkpoint_ns"),
            rows_named(blobs, n, (("channel", "c"), ("version", "v"))),
        )
        if not d.recursive_cte:
            return wanted
        chain = wanted.cte("chain", recursive=True)
        base = blobs.alias("base")
        chain = chain.union_all(
            sa.select(*[base.c[c] for c in BLOB_COLUMNS]).where(
                *matching(base, "thread_id", "checkpoint_ns"),
                base.c.channel == chain.c.channel,
                base.c.version == chain.c.base_version,
            )
        )
        return sa.select(*[chain.c[c] for c in BLOB_COLUMNS])

    return d.sql(("select_blobs", n), build)


def select_writes(d: Dialect, n: int) -> Sql:
    def build() -> Any:
        columns = ("checkpoint_id", "task_id", "idx", *_WRITE_CELLS[1:])
        return sa.select(*(writes.c[c] for c in columns)).where(
            *matching(writes, "thread_id", "checkpoint_ns"),
            writes.c.checkpoint_id.in_([B(f"k{i}") for i in range(n)]),
        )

    return d.sql(("select_writes", n), build)


def pushed_filters(d: Dialect, filter: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The keys of a ``list(filter=...)`` to pre-filter in SQL: values JSON compares as Python
    does (not 0 and 1, which equal booleans in Python, nor floats of 2**53 or more)."""
    return tuple(
        k
        for k, v in (filter or {}).items()
        if (type(v) is str or (type(v) in (int, float) and v not in (0, 1) and abs(v) < 2**53))
        and d.metadata_prefilter(checkpoints.c.metadata, k, None) is not None
    )


def list_page(
    d: Dialect,
    *,
    thread: bool,
    ns: bool,
    cid: bool,
    before: bool,
    after: bool,
    filters: tuple[str, ...],
) -> Sql:
    """One page of ``list()``: newest first, keyset-paginated on (id, thread, ns)."""

    def build() -> Any:
        c = checkpoints.c
        given = (("thread_id", thread), ("checkpoint_ns", ns), ("checkpoint_id", cid))
        stmt = sa.select(*CHECKPOINT_COLUMNS).where(
            thread_is_live(c.thread_id), *matching(checkpoints, *(n for n, on in given if on))
        )
        if before:
            stmt = stmt.where(c.checkpoint_id < B("before_id"))
        if after:  # the keyset of the previous page's last row
            keyset = c.checkpoint_ns < B("k_ns")
            for column, name in ((c.thread_id, "k_thread"), (c.checkpoint_id, "k_id")):
                keyset = sa.or_(column < B(name), sa.and_(column == B(name), keyset))
            stmt = stmt.where(keyset)
        for i, key in enumerate(filters):
            clause = d.metadata_prefilter(c.metadata, key, B(f"f{i}"))
            if clause is not None:
                stmt = stmt.where(clause)
        return stmt.order_by(
            c.checkpoint_id.desc(), c.thread_id.desc(), c.checkpoint_ns.desc()
        ).limit(B("page_size", type_=sa.Integer))

    return d.sql(("list_page", thread, ns, cid, before, after, filters), build)


CHAIN_COLUMNS = tuple(
    checkpoints.c[n]
    for n in ("checkpoint_id", "parent_checkpoint_id", "blob_versions", "type", "checkpoint")
)


def _of_thread(d: Dialect, name: str, table: sa.Table, *columns: Any) -> Sql:
    """``columns`` of ``table``'s rows of the thread ``:thread_id``."""
    return d.sql(name, lambda: sa.select(*columns).where(table.c.thread_id == B("thread_id")))


def select_thread_checkpoints(d: Dialect) -> Sql:
    c = checkpoints.c
    columns = (c.checkpoint_ns, *CHAIN_COLUMNS[:2], c.metadata, *CHAIN_COLUMNS[2:])
    return _of_thread(d, "select_thread_checkpoints", checkpoints, *columns)


def select_thread_blob_keys(d: Dialect) -> Sql:
    b = blobs.c
    columns = (b.checkpoint_ns, b.channel, b.version, b.base_version)
    return _of_thread(d, "select_thread_blob_keys", blobs, *columns)


def select_run_checkpoints(d: Dialect) -> Sql:
    c = checkpoints.c
    key = (c.thread_id, c.checkpoint_ns, c.checkpoint_id)
    return d.sql("select_run_checkpoints", lambda: sa.select(*key).where(c.run_id == B("run_id")))


def select_chain(d: Dialect) -> Sql:
    """A namespace's checkpoints up to a target, for DeltaChannel history."""
    return d.sql(
        "select_chain",
        lambda: sa.select(*CHAIN_COLUMNS).where(
            *matching(checkpoints, "thread_id", "checkpoint_ns"),
            checkpoints.c.checkpoint_id <= B("checkpoint_id"),
            thread_is_live(B("thread_id")),
        ),
    )


def select_expired(d: Dialect) -> Sql:
    """Up to ``:batch_size`` expired, live threads, skipping those another sweeper locked
    (not under Citus, which refuses the locks: the claims keep sweepers apart)."""

    def build() -> Any:
        stmt = (
            sa.select(threads.c.thread_id)
            .where(threads.c.expires_at < B("now"), threads.c.deleted_at.is_(None))
            # one order, ties included, so sweepers' claims never lock in a cycle
            .order_by(threads.c.expires_at, threads.c.thread_id)
            .limit(B("batch_size", type_=sa.Integer))
        )
        return stmt if d.distributed else d.skip_locked(stmt)

    return d.sql(("select_expired", d.distributed), build)


def claim_expired(d: Dialect, *, keep: bool) -> Sql:
    """Claim a candidate still expired and live (row count 1); ``keep``: unexpire, not tombstone."""

    def build() -> Any:
        update = sa.update(threads).where(
            threads.c.thread_id == B("thread_id"),
            threads.c.deleted_at.is_(None),
            threads.c.expires_at < B("now"),
        )
        if keep:
            return update.values(expires_at=None)
        return update.values(
            last_active=B("now"), ttl_seconds=None, expires_at=None, deleted_at=B("now")
        )

    return d.sql(("claim_expired", keep), build)


def _purge_rows(t: sa.Table) -> Any:
    forgotten = sa.select(threads.c.thread_id).where(threads.c.deleted_at < B("horizon"))
    return sa.delete(t).where(t.c.thread_id.in_(forgotten))


def purge_tombstones(d: Dialect) -> list[Sql]:
    """Forget old tombstones, and any row a racing write left under them."""
    return [
        *_each(d, "purge_rows", _purge_rows, (blobs, writes, checkpoints)),
        d.sql(
            "purge_tombstones",
            lambda: sa.delete(threads).where(threads.c.deleted_at < B("horizon")),
        ),
    ]


def select_thread_ids_after(d: Dialect) -> list[Sql]:
    """A page of the thread ids after ``:after`` in each copied table."""

    def build(t: sa.Table) -> Any:
        return (
            sa.select(t.c.thread_id)
            .where(t.c.thread_id > B("after"))
            .group_by(t.c.thread_id)
            .order_by(t.c.thread_id)
            .limit(B("page_size", type_=sa.Integer))
        )

    return _each(d, "select_thread_ids_after", build, COPIED_TABLES)


def _reseal(t: sa.Table) -> Any:
    columns = ("checkpoint", "metadata") if t is checkpoints else ("blob",)
    return (
        sa.update(t)
        .where(*(c == B(f"k_{c.name}", type_=c.type) for c in t.primary_key))
        .values({name: B(f"v_{name}", type_=t.c[name].type) for name in columns})
    )


def reseal_rows(d: Dialect) -> list[Sql]:
    """Rewrite the value columns (``v_<column>``) of one row by key (``k_<column>``)."""
    return _each(d, "reseal_rows", _reseal, COPIED_TABLES)


#: How :func:`thread_stats` orders threads.
THREAD_ORDERS = ("bytes", "checkpoints", "last_active", "expires_at", "thread_id")


#: Literals: HANA cannot type a parameter alone in a CASE branch.
_ZERO, _ONE = sa.literal_column("0", sa.Integer), sa.literal_column("1", sa.Integer)


def _size(column: Any) -> Any:
    """Bytes of a binary value, characters of a text; 0 for NULL."""
    return sa.func.coalesce(sa.func.length(column), _ZERO)


def _per_thread(t: sa.Table, name: str, size: Any, *counted: Any) -> Any:
    return (
        sa.select(t.c.thread_id, *counted, sa.func.sum(size).label("stored"))
        .group_by(t.c.thread_id)
        .subquery(name)
    )


def _nulls_last(column: Any) -> Any:
    return sa.case((column.is_(None), _ONE), else_=_ZERO)


def thread_stats(d: Dialect, *, order: str, expired: bool) -> Sql:
    """Per thread: checkpoints, stored bytes, activity, expiry, TTL, tombstone; ``:limit``
    rows. ``expired``: the live threads expired before ``:now``, checkpoints or not."""

    def build() -> Any:
        cp, b, w = checkpoints.c, blobs.c, writes.c
        size = _size(cp.checkpoint) + _size(cp.metadata) + _size(cp.blob_versions)
        c = _per_thread(checkpoints, "c", size, sa.func.count().label("n"))
        bs = _per_thread(blobs, "b", _size(b.blob))
        ws = _per_thread(writes, "w", _size(w.blob))
        t = threads.c
        base = t.thread_id if expired else c.c.thread_id
        stored = (
            sa.func.coalesce(c.c.stored, _ZERO)
            + sa.func.coalesce(bs.c.stored, _ZERO)
            + sa.func.coalesce(ws.c.stored, _ZERO)
        ).label("stored_bytes")
        count = sa.func.coalesce(c.c.n, _ZERO).label("checkpoint_count")
        if expired:
            joined = threads.outerjoin(c, c.c.thread_id == base)
        else:
            joined = c.outerjoin(threads, t.thread_id == base)
        joined = joined.outerjoin(bs, bs.c.thread_id == base).outerjoin(ws, ws.c.thread_id == base)
        activity = (t.last_active, t.expires_at, t.ttl_seconds, t.deleted_at)
        stmt = sa.select(base.label("thread_id"), count, stored, *activity).select_from(joined)
        if expired:
            stmt = stmt.where(t.expires_at < B("now", type_=sa.Float), t.deleted_at.is_(None))
        keys: dict[str, list[Any]] = {
            "bytes": [stored.desc()],
            "checkpoints": [count.desc()],
            "last_active": [_nulls_last(t.last_active), t.last_active.desc()],
            "expires_at": [_nulls_last(t.expires_at), t.expires_at],
            "thread_id": [],
        }
        return stmt.order_by(*keys[order], base).limit(B("limit", type_=sa.Integer))

    if order not in THREAD_ORDERS:
        raise ConfigurationError(f"order must be one of {', '.join(THREAD_ORDERS)}, got {order!r}")
    return d.sql(("thread_stats", order, expired), build)


def thread_counts(d: Dialect) -> list[Sql]:
    """The threads holding checkpoints; the live ones expired at ``:now`` and before ``:until``."""

    def expiry() -> Any:
        t = threads.c
        expired = sa.case((t.expires_at < B("now", type_=sa.Float), _ONE))
        return sa.select(sa.func.count(expired), sa.func.count()).where(
            t.deleted_at.is_(None), t.expires_at < B("until", type_=sa.Float)
        )

    threads_held = sa.func.count(sa.distinct(checkpoints.c.thread_id))
    return [
        d.sql("count_threads", lambda: sa.select(threads_held)),
        d.sql("count_thread_expiry", expiry),
    ]


def select_thread_blob_sizes(d: Dialect) -> Sql:
    b = blobs.c
    columns = (b.checkpoint_ns, b.channel, b.version, _size(b.blob))
    return _of_thread(d, "select_thread_blob_sizes", blobs, *columns)


def select_thread_write_sizes(d: Dialect) -> Sql:
    w = writes.c
    return d.sql(
        "select_thread_write_sizes",
        lambda: (
            sa.select(w.checkpoint_ns, w.checkpoint_id, sa.func.sum(_size(w.blob)))
            .where(w.thread_id == B("thread_id"))
            .group_by(w.checkpoint_ns, w.checkpoint_id)
        ),
    )


__all__ = ["THREAD_ORDERS"]
