"""What the SQL saver stores per thread, and what a sweep would free: the reads behind
``agent-memory threads`` and ``agent-memory sweep --dry-run``.

Sizes are the database's measure of each stored value (bytes of checkpoint bodies, blobs and
pending writes; characters of the JSON metadata), summed per thread: what retention frees,
not the database's own overhead (row headers, indexes, free pages), which comes on top.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.maintenance import (
    Maintenance,
    Snapshot,
    StoredBlob,
    StoredCheckpoint,
)
from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db import checkpoint_stats as stats
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: What ``limit=None`` reads: every thread.
ALL = 2**31 - 1

ThreadOrder = Literal["bytes", "checkpoints", "last_active", "expires_at", "thread_id"]


class StatsRow(NamedTuple):
    """A row of :func:`~langgraph_checkpoint_agent_memory.db.checkpoint_stats.thread_stats`."""

    thread_id: str
    checkpoints: int
    stored_bytes: int
    last_active: float | None
    expires_at: float | None
    ttl_seconds: int | None
    deleted_at: float | None


@dataclass(frozen=True)
class ThreadInfo:
    """One thread as stored.

    Attributes:
        thread_id: The thread.
        checkpoints: How many checkpoints it holds (all namespaces).
        bytes: The size of its checkpoints, blobs and pending writes.
        last_active: Its last recorded activity, in seconds since the epoch (written at most
            once per ``activity_precision`` of the TTL); ``None`` when never recorded.
        expires_at: When it expires, in seconds since the epoch; ``None``: never.
        ttl_seconds: Its TTL (the saver's, or its own); ``None``: none.
        status: ``"live"``; ``"expired"`` (past ``expires_at``: invisible with the
            ``delete`` strategy, and the next sweep removes or prunes it); ``"deleted"``
            (a tombstone over rows a late write left, which the sweep purges).
    """

    thread_id: str
    checkpoints: int
    bytes: int
    last_active: float | None
    expires_at: float | None
    ttl_seconds: int | None
    status: Literal["live", "expired", "deleted"]

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class ThreadSweep:
    """What a sweep would do to one expired thread.

    Attributes:
        thread_id: The thread.
        action: ``"delete"`` (the ``delete`` strategy) or ``"prune"`` (``keep_latest``).
        expires_at: When it expired, in seconds since the epoch.
        checkpoints: The checkpoints it holds now.
        checkpoints_removed: How many of them the sweep would delete.
        bytes_freed: The size of the rows the sweep would delete.
    """

    thread_id: str
    action: Literal["delete", "prune"]
    expires_at: float | None
    checkpoints: int
    checkpoints_removed: int
    bytes_freed: int


@dataclass(frozen=True)
class SweepPreview:
    """What :meth:`SQLSaver.sweep` would remove now, from a read that changes nothing.

    Attributes:
        strategy: The saver's strategy the preview applied.
        keep_last: Checkpoints per namespace ``keep_latest`` keeps.
        now: The time the preview was taken at (seconds since the epoch).
        threads: Each expired thread, soonest expired first.
    """

    strategy: str
    keep_last: int
    now: float
    threads: list[ThreadSweep] = field(default_factory=list)

    @property
    def checkpoints_removed(self) -> int:
        """Checkpoints the sweep would delete, over all threads."""
        return sum(t.checkpoints_removed for t in self.threads)

    @property
    def bytes_freed(self) -> int:
        """Bytes the sweep would free, over all threads."""
        return sum(t.bytes_freed for t in self.threads)

    def as_dict(self) -> dict[str, Any]:
        """The preview as a JSON-ready dict, totals included."""
        return {
            "strategy": self.strategy,
            "keep_last": self.keep_last,
            "now": self.now,
            "threads": [asdict(t) for t in self.threads],
            "checkpoints_removed": self.checkpoints_removed,
            "bytes_freed": self.bytes_freed,
        }


def _status(row: StatsRow, now: float) -> Literal["live", "expired", "deleted"]:
    if row.deleted_at is not None:
        return "deleted"
    if row.expires_at is not None and row.expires_at < now:
        return "expired"
    return "live"


def threads_plan(
    maintenance: Maintenance, order: ThreadOrder, limit: int | None
) -> Plan[list[ThreadInfo]]:
    """Every thread with checkpoints (at most ``limit``) in ``order``: see
    :data:`~langgraph_checkpoint_agent_memory.db.checkpoint_stats.THREAD_ORDERS`."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigurationError(f"limit must be a whole number >= 0 or None, got {limit!r}")
    d = maintenance.dialect
    now = maintenance.activity.clock()
    sql = stats.thread_stats(d, order=order, expired=False)
    params = {"limit": ALL if limit is None else limit}
    [rows] = yield Batch([Stmt(sql, params, fetch=True)])
    return [_info(StatsRow._make(r), now) for r in rows]


def _info(row: StatsRow, now: float) -> ThreadInfo:
    return ThreadInfo(
        thread_id=row.thread_id,
        checkpoints=int(row.checkpoints),
        bytes=int(row.stored_bytes or 0),
        last_active=None if row.last_active is None else float(row.last_active),
        expires_at=None if row.expires_at is None else float(row.expires_at),
        ttl_seconds=None if row.ttl_seconds is None else int(row.ttl_seconds),
        status=_status(row, now),
    )


def preview_plan(maintenance: Maintenance, serde: SerializerProtocol) -> Plan[SweepPreview]:
    """What :meth:`Maintenance.sweep` would remove now, computed as it decides, without a
    lock or a write: the expired threads and, with ``keep_latest``, the checkpoints and blobs
    pruning each to its last ``keep_last`` checkpoints per namespace would delete."""
    d = maintenance.dialect
    activity = maintenance.activity
    now = activity.clock()
    sql = stats.thread_stats(d, order="expires_at", expired=True)
    [rows] = yield Batch([Stmt(sql, {"now": now, "limit": ALL}, fetch=True)])
    expired = [StatsRow._make(r) for r in rows]
    preview = SweepPreview(activity.strategy, maintenance.keep_last, now)
    if activity.strategy == "delete":
        preview.threads.extend(
            ThreadSweep(
                r.thread_id,
                "delete",
                r.expires_at,
                int(r.checkpoints),
                int(r.checkpoints),
                int(r.stored_bytes or 0),
            )
            for r in expired
        )
        return preview
    for start in range(0, len(expired), maintenance.sweep_batch):
        batch = expired[start : start + maintenance.sweep_batch]
        sized = yield from _sized_snapshots([r.thread_id for r in batch], maintenance)
        for r in batch:
            snapshot, blob_sizes, write_sizes = sized[r.thread_id]
            keep = maintenance.kept(serde, r.thread_id, snapshot.checkpoints, maintenance.keep_last)
            doomed = maintenance.doomed({r.thread_id: snapshot}, {r.thread_id: keep})
            sizes = {(cp.ns, cp.checkpoint_id): _checkpoint_size(cp) for cp in snapshot.checkpoints}
            freed = sum(
                sizes[(c["checkpoint_ns"], c["checkpoint_id"])]
                + write_sizes.get((c["checkpoint_ns"], c["checkpoint_id"]), 0)
                for c in doomed.checkpoints
            )
            freed += sum(
                blob_sizes.get((b["checkpoint_ns"], b["channel"], b["version"]), 0)
                for b in doomed.blobs
            )
            preview.threads.append(
                ThreadSweep(
                    r.thread_id,
                    "prune",
                    r.expires_at,
                    int(r.checkpoints),
                    len(doomed.checkpoints),
                    freed,
                )
            )
    return preview


def _checkpoint_size(cp: StoredCheckpoint) -> int:
    """As :func:`~langgraph_checkpoint_agent_memory.db.checkpoint_stats.thread_stats` measures a
    checkpoint row: its body's bytes, its metadata's and version map's characters."""
    return len(bytes(cp.checkpoint)) + len(cp.metadata) + len(cp.blob_versions)


SizedSnapshot = tuple[Snapshot, dict[tuple[str, str, str], int], dict[tuple[str, str], int]]


def _sized_snapshots(
    thread_ids: Sequence[str], maintenance: Maintenance
) -> Plan[dict[str, SizedSnapshot]]:
    """Each thread's checkpoints and blob keys (as the sweep reads them, but without a lock)
    with the size of each blob and of each checkpoint's pending writes."""
    d = maintenance.dialect
    statements = []
    for t in thread_ids:
        params = {"thread_id": t}
        statements += [
            Stmt(S.select_thread_checkpoints(d), params, fetch=True),
            Stmt(S.select_thread_blob_keys(d), params, fetch=True),
            Stmt(stats.select_thread_blob_sizes(d), params, fetch=True),
            Stmt(stats.select_thread_write_sizes(d), params, fetch=True),
        ]
    results = yield Batch(statements)
    out: dict[str, SizedSnapshot] = {}
    for i, t in enumerate(thread_ids):
        cps, keys, blob_sizes, write_sizes = results[4 * i : 4 * i + 4]
        out[t] = (
            Snapshot([StoredCheckpoint(*r) for r in cps], [StoredBlob(*r) for r in keys]),
            {(ns, ch, v): int(n) for ns, ch, v, n in blob_sizes},
            {(ns, cid): int(n or 0) for ns, cid, n in write_sizes},
        )
    return out


__all__ = ["SweepPreview", "ThreadInfo", "ThreadOrder", "ThreadSweep"]
