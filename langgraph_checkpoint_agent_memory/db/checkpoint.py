"""The checkpointer's SQL, written once as SQLAlchemy Core and compiled per dialect (each
function returns a :class:`Sql` from the dialect's cache); ``checkpoint/`` builds plans from
these statements and writes no SQL itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import blobs, checkpoints, threads, writes
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

B = sa.bindparam

#: Key lists are padded up to one of these sizes, so a handful of compiled statements serve
#: every request (a longer list is split).
KEY_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
MAX_KEYS = KEY_BUCKETS[-1]


def bucket(n: int) -> int:
    return next(b for b in KEY_BUCKETS if b >= n)


def _gone(t: Any) -> list[Any]:
    return [t.c.deleted_at.is_not(None), t.c.expires_at < B("live_after", type_=sa.Float)]


def thread_is_live(thread_id: Any) -> Any:
    """True unless the thread is a tombstone or expired as of ``:live_after``."""
    t = threads.alias("t")
    return ~sa.exists().where(t.c.thread_id == thread_id, sa.or_(*_gone(t)))


def _late(t: Any) -> Any:
    """The write names (``:named``) a checkpoint at or below where the thread's ended
    history stopped."""
    return t.c.ended_after >= B("named", type_=sa.String)


def takes_write(t: Any) -> list[Any]:
    """Core: the activity row ``t`` takes a write: not a tombstone, not expired as of
    ``:live_after``, and the write is not late (:func:`_late`); a NULL comparison, from a
    row or a parameter, refuses nothing."""
    late = (t.c.expires_at < B("live_after", type_=sa.Float), _late(t))
    return [t.c.deleted_at.is_(None), *(r.is_not(sa.true()) for r in late)]


def thread_takes(thread_id: Any) -> Any:
    """True while the thread is live and the write is not late (:func:`_late`)."""
    t = threads.alias("t")
    return ~sa.exists().where(t.c.thread_id == thread_id, sa.or_(*_gone(t), _late(t)))


# -- writes ------------------------------------------------------------------------------

#: The tables a thread copy copies, in order.
COPIED_TABLES = (checkpoints, blobs, writes)


def touch_thread(d: Dialect) -> Sql:
    """Record activity; on an existing row only while it is live, so a tombstone or an
    expired thread is left for the plan's slow path (rowcount 0)."""

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
    """Unconditional upsert of the activity row: a fresh start of a deleted or expired
    thread, or (as :func:`tombstone`, with ``deleted_at`` set) a thread's tombstone."""
    return d.sql(
        "revive_thread",
        lambda: d.upsert(
            threads, ["thread_id"], ["last_active", "ttl_seconds", "expires_at", "deleted_at"]
        ),
    )


tombstone = revive_thread


def _if_live(d: Dialect, table: sa.Table, *, upsert_cols: list[str] | None) -> Any:
    """Insert (or upsert) one row of ``table`` from parameters, only while its thread is live.

    On a distributed database the row is selected from the thread's own activity row (which
    must then exist: a thread without one takes the slow path, which writes it first), so
    the insert goes to that row's shard alone; a source with no table at all cannot be
    routed there.
    """
    cols = [c.name for c in table.columns]
    if d.distributed:
        # the thread id comes from the activity row: Citus routes an INSERT ... SELECT to
        # one shard only when the distribution column is copied from a co-located table
        t = threads.alias("t")
        refusals = (*_gone(t), _late(t))  # a NULL (no value, no boundary) refuses nothing
        values = d.values_select(table, cols[1:])
        source = sa.select(t.c.thread_id, *values.selected_columns).where(
            t.c.thread_id == B("thread_id"), *(r.is_not(sa.true()) for r in refusals)
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
        ("upsert_checkpoint", d.distributed),
        lambda: _if_live(d, checkpoints, upsert_cols=update),
    )


def insert_write(d: Dialect, *, replace: bool) -> Sql:
    update = ["channel", "type", "blob", "task_path"] if replace else None
    return d.sql(
        ("insert_write", replace, d.distributed),
        lambda: _if_live(d, writes, upsert_cols=update),
    )


def thread_state(d: Dialect, *, lock: bool) -> Sql:
    def build() -> Any:
        stmt = sa.select(
            threads.c.deleted_at,
            threads.c.expires_at,
            threads.c.ttl_seconds,
            threads.c.ended_after,
        ).where(threads.c.thread_id == B("thread_id"))
        return stmt.with_for_update() if lock and d.row_locks else stmt

    return d.sql(("thread_state", lock), build)


def _newest(t: sa.Table, thread_id: Any) -> Any:
    return sa.select(sa.func.max(t.c.checkpoint_id)).where(t.c.thread_id == thread_id)


def newest_ids(d: Dialect) -> list[Sql]:
    """The newest checkpoint id a thread's checkpoints and its writes name (``:thread_id``),
    each NULL when there is none."""
    return [
        d.sql(("newest_id", t.name), partial(_newest, t, B("thread_id")))
        for t in (checkpoints, writes)
    ]


def _raise_boundary(t: sa.Table) -> Any:
    # the subquery names the thread by parameter, not by correlation: a distributed database
    # then sends the whole update to the thread's one shard
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
    """Raise a thread's recorded boundary (``:thread_id``) to the newest checkpoint id its
    checkpoints and writes name, before that history is deleted: a boundary never moves
    back."""
    return [
        d.sql(("end_generation", t.name), partial(_raise_boundary, t))
        for t in (checkpoints, writes)
    ]


def set_generation(d: Dialect) -> Sql:
    """Record where a thread's ended history stopped (``:thread_id``, ``:ended_after``)."""
    return d.sql("set_generation", partial(_set_on_thread, ended_after=B("ended_after")))


def _set_on_thread(**values: Any) -> Any:
    return sa.update(threads).where(threads.c.thread_id == B("thread_id")).values(**values)


def forget_generation(d: Dialect) -> Sql:
    """Clear where a thread's ended history stopped (``:thread_id``): a copy gives it a
    history of its own."""
    return d.sql("forget_generation", partial(_set_on_thread, ended_after=sa.null()))


def _delete_ended(t: sa.Table) -> Any:
    ended = sa.select(threads.c.ended_after).where(threads.c.thread_id == B("thread_id"))
    return sa.delete(t).where(
        t.c.thread_id == B("thread_id"), t.c.checkpoint_id <= ended.scalar_subquery()
    )


def delete_ended_rows(d: Dialect) -> list[Sql]:
    """Delete the history :func:`end_generation` bounded (``:thread_id``): blobs and
    checkpoints, and the writes of checkpoints at or below the boundary. Writes above it
    belong to a fresh start whose checkpoint is still on its way; they stay."""
    return [
        *(
            d.sql(("delete_thread_rows", t.name), partial(_delete_thread_rows, t))
            for t in (blobs, checkpoints)
        ),
        d.sql("delete_ended_writes", partial(_delete_ended, writes)),
    ]


def refresh_thread(d: Dialect) -> Sql:
    """Refresh-on-read: extend a live thread's expiry by its own TTL."""

    def build() -> Any:
        return (
            sa.update(threads)
            .where(
                threads.c.thread_id == B("thread_id"),
                threads.c.ttl_seconds.is_not(None),
                threads.c.deleted_at.is_(None),
                threads.c.expires_at >= B("now"),
            )
            .values(
                last_active=B("now"),
                expires_at=B("now") + threads.c.ttl_seconds * B("slack", type_=sa.Float),
            )
        )

    return d.sql("refresh_thread", build)


def _delete_thread_rows(t: sa.Table) -> Any:
    return sa.delete(t).where(t.c.thread_id == B("thread_id"))


def delete_thread_rows(d: Dialect) -> list[Sql]:
    """Delete one thread's blobs, writes and checkpoints (``:thread_id``)."""
    return [
        d.sql(("delete_thread_rows", t.name), partial(_delete_thread_rows, t))
        for t in (blobs, writes, checkpoints)
    ]


def erase_thread_rows(d: Dialect) -> list[Sql]:
    """Delete every row of one thread (``:thread_id``), its activity row first: every
    transaction that changes a thread's history (a delete's tombstone, a sweep's claim, a
    fresh start over an ended history) locks that row before the thread's other rows, so
    an erase takes them in the same order and waits instead of deadlocking."""
    return [
        d.sql(("erase_thread_rows", threads.name), partial(_delete_thread_rows, threads)),
        *delete_thread_rows(d),
    ]


def delete_checkpoint(d: Dialect) -> list[Sql]:
    """Delete one checkpoint and its writes (``:thread_id, :checkpoint_ns, :checkpoint_id``)."""

    def build(t: sa.Table) -> Any:
        return sa.delete(t).where(
            t.c.thread_id == B("thread_id"),
            t.c.checkpoint_ns == B("checkpoint_ns"),
            t.c.checkpoint_id == B("checkpoint_id"),
        )

    return [d.sql(("delete_checkpoint", t.name), partial(build, t)) for t in (writes, checkpoints)]


def delete_blob(d: Dialect) -> Sql:
    return d.sql(
        "delete_blob",
        lambda: sa.delete(blobs).where(
            blobs.c.thread_id == B("thread_id"),
            blobs.c.checkpoint_ns == B("checkpoint_ns"),
            blobs.c.channel == B("channel"),
            blobs.c.version == B("version"),
        ),
    )


def select_copy_rows(d: Dialect) -> list[Sql]:
    """Every row of thread ``:src`` in each table :func:`copy_rows` copies, all columns, for
    a copy that reads then writes (a distributed database: the two threads live on
    different shards, and each statement should name one)."""
    return [
        d.sql(
            ("select_copy_rows", t.name),
            partial(lambda t: sa.select(*t.columns).where(t.c.thread_id == B("src")), t),
        )
        for t in COPIED_TABLES
    ]


def _insert_copied(d: Dialect, t: sa.Table) -> Any:
    keys = [c.name for c in t.primary_key]
    if not d.distributed:
        return d.insert_ignore(t, keys)
    # INSERT ... VALUES: Citus routes it to the row's shard (a SELECT of parameters it
    # would pull through the coordinator)
    values = {c.name: B(c.name, type_=c.type) for c in t.columns}
    return d.insert(t).values(values).on_conflict_do_nothing(index_elements=keys)


def insert_copied_rows(d: Dialect) -> list[Sql]:
    """Insert rows :func:`select_copy_rows` read (existing keys are kept), per table."""
    return [
        d.sql(("insert_copied_rows", t.name, d.distributed), partial(_insert_copied, d, t))
        for t in COPIED_TABLES
    ]


def retarget(found: Sequence[Sequence[Any]], target: str) -> list[list[dict[str, Any]]]:
    """The rows :func:`select_copy_rows` read, per table, as parameters of
    :func:`insert_copied_rows` that put them under thread ``target``."""
    out = []
    for table, rows in zip(COPIED_TABLES, found, strict=True):
        names = [c.name for c in table.columns]
        out.append([{**dict(zip(names, row, strict=True)), "thread_id": target} for row in rows])
    return out


def copy_rows(d: Dialect) -> list[Sql]:
    """Copy every row of ``:src`` to thread ``:dst`` (existing keys are kept)."""

    def build(t: sa.Table) -> Any:
        cols = [c.name for c in t.columns]
        source = sa.select(
            *[
                B("dst", type_=t.c.thread_id.type).label(c) if c == "thread_id" else t.c[c]
                for c in cols
            ]
        ).where(t.c.thread_id == B("src"))
        return d.insert_from_select(
            t, cols, source, keys=[c.name for c in t.primary_key], update=None
        )

    return [d.sql(("copy_rows", t.name), partial(build, t)) for t in COPIED_TABLES]


# -- reads -------------------------------------------------------------------------------

BLOB_COLUMNS = ("channel", "version", "type", "blob", "base_version")

CHECKPOINT_COLUMNS = (
    checkpoints.c.thread_id,
    checkpoints.c.checkpoint_ns,
    checkpoints.c.checkpoint_id,
    checkpoints.c.parent_checkpoint_id,
    checkpoints.c.type,
    checkpoints.c.checkpoint,
    checkpoints.c.metadata,
    checkpoints.c.blob_versions,
)


def select_checkpoint(d: Dialect, *, by_id: bool) -> Sql:
    def build() -> Any:
        stmt = sa.select(*CHECKPOINT_COLUMNS).where(
            checkpoints.c.thread_id == B("thread_id"),
            checkpoints.c.checkpoint_ns == B("checkpoint_ns"),
            thread_is_live(B("thread_id")),
        )
        if by_id:
            return stmt.where(checkpoints.c.checkpoint_id == B("checkpoint_id"))
        return stmt.order_by(checkpoints.c.checkpoint_id.desc()).limit(1)

    return d.sql(("select_checkpoint", by_id), build)


#: A one-statement get_tuple's way to a checkpoint's blobs: given the checkpoint's CTE, its
#: ``blob_versions`` as rows ``(key, value)``; given a channel and a version, a FROM item
#: of the one blob of that key (columns ``BLOB_COLUMNS``), the condition joining it, and
#: whether to join it as an outer join (which fixes the join order where a planner would
#: otherwise scan a thread's blobs; the rows it finds no blob for are left out after).
VersionRows = Callable[[Any], Any]
BlobByKey = Callable[[Any, Any], tuple[Any, Any, bool]]


def get_tuple_statement(by_id: bool, version_rows: VersionRows, blob: BlobByKey) -> Any:
    """``get_tuple`` as one statement, so one snapshot: the checkpoint row (tag 0); its blobs
    by full primary key, each followed down its chain of appended-list bases (tag 1); its
    writes (tag 2). The dialect says how a JSON object becomes rows and how one blob is
    joined (:meth:`.Dialect.fast_get_tuple`)."""
    thread: Any = B("thread_id")
    ns: Any = B("checkpoint_ns")
    one = sa.literal_column("1", sa.Integer)  # a literal: each lookup reads one row
    cp = checkpoints
    by = [cp.c.checkpoint_id == B("checkpoint_id")] if by_id else []
    c = (
        sa.select(*(cp.c[n] for n in ("thread_id", "checkpoint_ns", *_CHECKPOINT_CELLS)))
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
    # the checkpoint id as a scalar, so the whole key is the index condition (as a join
    # condition it may become a filter over the thread's writes)
    of_checkpoint = sa.select(c.c.checkpoint_id).scalar_subquery()
    return sa.union_all(
        _tagged(0, *(c.c[n] for n in _CHECKPOINT_CELLS), sa.cast(sa.null(), sa.Integer)),
        _tagged(1, *(chain.c[n] for n in BLOB_COLUMNS), sa.null(), sa.null()).where(*found),
        _tagged(2, *(w.c[n] for n in _WRITE_CELLS), sa.null(), w.c.idx).where(
            w.c.thread_id == thread, w.c.checkpoint_ns == ns, w.c.checkpoint_id == of_checkpoint
        ),
    )


#: The cells of the checkpoint's and the writes' rows in the one-statement get_tuple.
_CHECKPOINT_CELLS = (
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
    "blob_versions",
)
_WRITE_CELLS = ("task_id", "channel", "type", "blob", "task_path")


def _tagged(tag: int, *cells: Any) -> Any:
    """A row of the get_tuple union, tagged ``tag``; strings as text, so every tag's rows
    share the column types."""
    typed = (sa.cast(c, sa.Text) if isinstance(c.type, sa.String) else c for c in cells)
    return sa.select(sa.literal_column(str(tag)), *typed)


def select_blobs(d: Dialect, n: int) -> Sql:
    """Blobs of one thread namespace by ``(:c{i}, :v{i})`` channel/version keys, with the
    chain of bases of appended lists where the dialect has recursive queries."""

    def build() -> Any:
        wanted = sa.select(*[blobs.c[c] for c in BLOB_COLUMNS]).where(
            blobs.c.thread_id == B("thread_id"),
            blobs.c.checkpoint_ns == B("checkpoint_ns"),
            sa.or_(
                *(
                    sa.and_(blobs.c.channel == B(f"c{i}"), blobs.c.version == B(f"v{i}"))
                    for i in range(n)
                )
            ),
        )
        if not d.recursive_cte:
            return wanted
        chain = wanted.cte("chain", recursive=True)
        base = blobs.alias("base")
        chain = chain.union_all(
            sa.select(*[base.c[c] for c in BLOB_COLUMNS]).where(
                base.c.thread_id == B("thread_id"),
                base.c.checkpoint_ns == B("checkpoint_ns"),
                base.c.channel == chain.c.channel,
                base.c.version == chain.c.base_version,
            )
        )
        return sa.select(*[chain.c[c] for c in BLOB_COLUMNS])

    return d.sql(("select_blobs", n), build)


def select_writes(d: Dialect, n: int) -> Sql:
    """Writes of one thread namespace for checkpoints ``:k{i}``."""

    def build() -> Any:
        return sa.select(
            writes.c.checkpoint_id,
            writes.c.task_id,
            writes.c.idx,
            writes.c.channel,
            writes.c.type,
            writes.c.blob,
            writes.c.task_path,
        ).where(
            writes.c.thread_id == B("thread_id"),
            writes.c.checkpoint_ns == B("checkpoint_ns"),
            writes.c.checkpoint_id.in_([B(f"k{i}") for i in range(n)]),
        )

    return d.sql(("select_writes", n), build)


def pushed_filters(d: Dialect, filter: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The keys of a ``list(filter=...)`` the dialect can pre-filter in SQL; the exact match
    still happens on the decoded metadata, with Python's ``==``. Pushed: strings, and numbers
    that JSON compares as Python does; not booleans and the numbers 0 and 1 (Python holds
    ``True == 1``, ``jsonb`` does not), nor numbers of 2**53 or more (a float there stands
    for an integer Python compares exactly, while its decimal text names another)."""
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
        stmt = sa.select(*CHECKPOINT_COLUMNS).where(thread_is_live(c.thread_id))
        if thread:
            stmt = stmt.where(c.thread_id == B("thread_id"))
        if ns:
            stmt = stmt.where(c.checkpoint_ns == B("checkpoint_ns"))
        if cid:
            stmt = stmt.where(c.checkpoint_id == B("checkpoint_id"))
        if before:
            stmt = stmt.where(c.checkpoint_id < B("before_id"))
        if after:  # the keyset of the previous page's last row
            stmt = stmt.where(
                sa.or_(
                    c.checkpoint_id < B("k_id"),
                    sa.and_(
                        c.checkpoint_id == B("k_id"),
                        sa.or_(
                            c.thread_id < B("k_thread"),
                            sa.and_(c.thread_id == B("k_thread"), c.checkpoint_ns < B("k_ns")),
                        ),
                    ),
                )
            )
        for i, key in enumerate(filters):
            clause = d.metadata_prefilter(c.metadata, key, B(f"f{i}"))
            if clause is not None:
                stmt = stmt.where(clause)
        return stmt.order_by(
            c.checkpoint_id.desc(), c.thread_id.desc(), c.checkpoint_ns.desc()
        ).limit(B("page_size", type_=sa.Integer))

    return d.sql(("list_page", thread, ns, cid, before, after, filters), build)


#: What walking a namespace's history needs of each checkpoint.
CHAIN_COLUMNS = (
    checkpoints.c.checkpoint_id,
    checkpoints.c.parent_checkpoint_id,
    checkpoints.c.blob_versions,
    checkpoints.c.type,
    checkpoints.c.checkpoint,
)


def select_thread_checkpoints(d: Dialect) -> Sql:
    """Every checkpoint of a thread, for prune and blob collection."""
    return d.sql(
        "select_thread_checkpoints",
        lambda: sa.select(
            checkpoints.c.checkpoint_ns,
            *CHAIN_COLUMNS[:2],
            checkpoints.c.metadata,
            *CHAIN_COLUMNS[2:],
        ).where(checkpoints.c.thread_id == B("thread_id")),
    )


def select_thread_blob_keys(d: Dialect) -> Sql:
    return d.sql(
        "select_thread_blob_keys",
        lambda: sa.select(
            blobs.c.checkpoint_ns, blobs.c.channel, blobs.c.version, blobs.c.base_version
        ).where(blobs.c.thread_id == B("thread_id")),
    )


def select_run_checkpoints(d: Dialect) -> Sql:
    return d.sql(
        "select_run_checkpoints",
        lambda: sa.select(
            checkpoints.c.thread_id, checkpoints.c.checkpoint_ns, checkpoints.c.checkpoint_id
        ).where(checkpoints.c.run_id == B("run_id")),
    )


def select_chain(d: Dialect) -> Sql:
    """A namespace's checkpoints up to a target, for DeltaChannel history."""
    return d.sql(
        "select_chain",
        lambda: sa.select(*CHAIN_COLUMNS).where(
            checkpoints.c.thread_id == B("thread_id"),
            checkpoints.c.checkpoint_ns == B("checkpoint_ns"),
            checkpoints.c.checkpoint_id <= B("checkpoint_id"),
            thread_is_live(B("thread_id")),
        ),
    )


def select_expired(d: Dialect) -> Sql:
    """Up to ``:batch_size`` expired, live threads: candidates, each then claimed by
    :func:`claim_expired`. Where row locks reach every row (one database), rows another
    sweeper holds are skipped, so sweepers work on different threads; a distributed database
    refuses locks across shards, and there the claims alone keep sweepers apart."""

    def build() -> Any:
        stmt = (
            sa.select(threads.c.thread_id)
            .where(threads.c.expires_at < B("now"), threads.c.deleted_at.is_(None))
            # one order for every sweeper, ties included: claims then take row locks in the
            # same order, and two sweepers never wait on each other's locks in a cycle
            .order_by(threads.c.expires_at, threads.c.thread_id)
            .limit(B("batch_size", type_=sa.Integer))
        )
        return stmt if d.distributed else d.skip_locked(stmt)

    return d.sql(("select_expired", d.distributed), build)


def claim_expired(d: Dialect, *, keep: bool) -> Sql:
    """Claim one candidate of :func:`select_expired` (``:thread_id``, ``:now``): a write on
    its row only while it is still expired and live (row count 1: claimed; 0: another
    sweeper took it, or it was used since). ``keep``: it stays, pruned, with no expiry until
    its next activity; else it becomes a tombstone."""

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
    """Forget old tombstones, with any row a write racing the sweep left under them (such
    rows are invisible while the tombstone stands, and must not reappear after)."""
    return [
        *(
            d.sql(("purge_rows", t.name), partial(_purge_rows, t))
            for t in (blobs, writes, checkpoints)
        ),
        d.sql(
            "purge_tombstones",
            lambda: sa.delete(threads).where(threads.c.deleted_at < B("horizon")),
        ),
    ]


# -- encryption of plaintext rows ------------------------------------------------------------


def select_thread_ids_after(d: Dialect) -> list[Sql]:
    """A page of the thread ids holding rows in each checkpoint table, after ``:after`` in
    order (what ``encrypt_plaintext`` walks)."""
    return [
        d.sql(
            ("select_thread_ids_after", t.name),
            partial(
                lambda t: (
                    sa.select(t.c.thread_id)
                    .where(t.c.thread_id > B("after"))
                    .group_by(t.c.thread_id)
                    .order_by(t.c.thread_id)
                    .limit(B("page_size", type_=sa.Integer))
                ),
                t,
            ),
        )
        for t in COPIED_TABLES
    ]


def _reseal(t: sa.Table, columns: tuple[str, ...]) -> Any:
    return (
        sa.update(t)
        .where(*(c == B(f"k_{c.name}", type_=c.type) for c in t.primary_key))
        .values({name: B(f"v_{name}", type_=t.c[name].type) for name in columns})
    )


def reseal_rows(d: Dialect) -> list[Sql]:
    """Rewrite the value columns of one row by its key (``k_<column>`` parameters; the
    values as ``v_<column>``), per table of :data:`COPIED_TABLES`: the checkpoint body and
    metadata, a blob, a write."""
    return [
        d.sql(
            ("reseal_rows", t.name),
            partial(_reseal, t, ("checkpoint", "metadata") if t is checkpoints else ("blob",)),
        )
        for t in COPIED_TABLES
    ]


# -- what each thread holds, and what a sweep would free -------------------------------------
# (``saver.threads()``, ``saver.sweep_preview()`` and ``agent-memory threads``)

#: How :func:`thread_stats` orders threads: most bytes or checkpoints first, the latest
#: activity first, the soonest expiry first, or by id.
THREAD_ORDERS = ("bytes", "checkpoints", "last_active", "expires_at", "thread_id")


#: Constants written into the statement, not bound: HANA cannot type a parameter that
#: stands alone in a CASE branch.
_ZERO, _ONE = sa.literal_column("0", sa.Integer), sa.literal_column("1", sa.Integer)


def _size(column: Any) -> Any:
    """A value's size as the database measures it: bytes of a binary value, characters of
    a text (the same for the ASCII of JSON metadata and version maps); 0 for NULL."""
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
    """Per thread: its checkpoints, the bytes of its rows (checkpoint bodies and metadata,
    blobs, pending writes), its last activity, expiry, TTL and whether it is a tombstone;
    at most ``:limit`` rows in ``order`` (one of :data:`THREAD_ORDERS`).

    Without ``expired``: every thread that holds checkpoints. With it: the live threads that
    expired before ``:now`` (what a sweep takes, checkpoints or not), soonest first."""

    def build() -> Any:
        cp, b, w = checkpoints.c, blobs.c, writes.c
        c = _per_thread(
            checkpoints,
            "c",
            _size(cp.checkpoint) + _size(cp.metadata) + _size(cp.blob_versions),
            sa.func.count().label("n"),
        )
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
        stmt = sa.select(
            base.label("thread_id"),
            count,
            stored,
            t.last_active,
            t.expires_at,
            t.ttl_seconds,
            t.deleted_at,
        ).select_from(joined)
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
    """Threads by expiry, for a health view: the threads that hold checkpoints (one row, one
    count), then among the live threads (no tombstone) expiring before ``:until``, one row of
    those already expired at ``:now`` and of all of them (the expiry index reads only
    those)."""

    def expiry() -> Any:
        t = threads.c
        expired = sa.case((t.expires_at < B("now", type_=sa.Float), _ONE))
        return sa.select(sa.func.count(expired), sa.func.count()).where(
            t.deleted_at.is_(None), t.expires_at < B("until", type_=sa.Float)
        )

    return [
        d.sql(
            "count_threads",
            lambda: sa.select(sa.func.count(sa.distinct(checkpoints.c.thread_id))),
        ),
        d.sql("count_thread_expiry", expiry),
    ]


def select_thread_blob_sizes(d: Dialect) -> Sql:
    """The size of each blob of a thread (``:thread_id``), by key."""
    return d.sql(
        "select_thread_blob_sizes",
        lambda: sa.select(
            blobs.c.checkpoint_ns, blobs.c.channel, blobs.c.version, _size(blobs.c.blob)
        ).where(blobs.c.thread_id == B("thread_id")),
    )


def select_thread_write_sizes(d: Dialect) -> Sql:
    """The size of the pending writes of each checkpoint of a thread (``:thread_id``)."""
    return d.sql(
        "select_thread_write_sizes",
        lambda: (
            sa.select(
                writes.c.checkpoint_ns, writes.c.checkpoint_id, sa.func.sum(_size(writes.c.blob))
            )
            .where(writes.c.thread_id == B("thread_id"))
            .group_by(writes.c.checkpoint_ns, writes.c.checkpoint_id)
        ),
    )


__all__ = ["THREAD_ORDERS"]
