"""What the checkpoint tables hold per thread, and what a sweep would free: the statements
behind ``saver.threads()``, ``saver.sweep_preview()`` and ``agent-memory threads``.
"""

from __future__ import annotations

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
