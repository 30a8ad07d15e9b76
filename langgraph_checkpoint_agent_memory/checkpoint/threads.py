"""The SQL saver's plans over whole threads: delete, erase, delete_for_runs, copy, prune, the
TTL sweep, encrypting plaintext, and what each thread stores.

Pruning keeps what each kept checkpoint needs to read back whole (its ``DeltaChannel``
ancestors, its lists' bases). The sweep claims expired threads with ``SKIP LOCKED`` where the
database has it, so exactly one sweeper removes each. Sizes sum each stored value's size per
thread: what retention frees, not the database's own overhead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.codec import ListCache, load
from langgraph_checkpoint_agent_memory.checkpoint.core import checkpoints_to_keep
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import (
    ThreadActivity,
    ThreadState,
    tombstone_seconds,
    validate_keep_last,
    validate_strategy,
)
from langgraph_checkpoint_agent_memory.checkpoint.sealing import Sealer
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, is_sealed, is_sealed_text
from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: Tombstones are purged after this long (never sooner than the TTL).
TOMBSTONE_SECONDS = 7 * 24 * 3600.0


class StoredCheckpoint(NamedTuple):
    """A checkpoint of a thread snapshot (``select_thread_checkpoints``)."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    metadata: str
    blob_versions: str
    type: str
    checkpoint: bytes

    @property
    def size(self) -> int:
        """The row's size as ``thread_stats`` measures it."""
        return len(bytes(self.checkpoint)) + len(self.metadata) + len(self.blob_versions)


class StoredBlob(NamedTuple):
    """A blob key of a thread snapshot (``select_thread_blob_keys``)."""

    ns: str
    channel: str
    version: str
    base_version: str | None


class Snapshot(NamedTuple):
    """Every checkpoint and blob key of one thread (for a preview, with sizes)."""

    checkpoints: list[StoredCheckpoint]
    blobs: list[StoredBlob]
    blob_sizes: dict[tuple[str, str, str], int] = {}
    write_sizes: dict[tuple[str, str], int] = {}


#: What ``limit=None`` reads: every thread.
ALL = 2**31 - 1

ThreadOrder = Literal["bytes", "checkpoints", "last_active", "expires_at", "thread_id"]


class StatsRow(NamedTuple):
    """A row of :func:`~langgraph_checkpoint_agent_memory.db.checkpoint.thread_stats`."""

    thread_id: str
    checkpoints: int
    stored_bytes: int
    last_active: float | None
    expires_at: float | None
    ttl_seconds: int | None
    deleted_at: float | None

    def info(self, now: float) -> ThreadInfo:
        """The row as a :class:`ThreadInfo` as of ``now``."""
        status: Literal["live", "expired", "deleted"] = "live"
        if self.deleted_at is not None:
            status = "deleted"
        elif self.expires_at is not None and self.expires_at < now:
            status = "expired"
        return ThreadInfo(
            thread_id=self.thread_id,
            checkpoints=int(self.checkpoints),
            bytes=int(self.stored_bytes or 0),
            last_active=None if self.last_active is None else float(self.last_active),
            expires_at=None if self.expires_at is None else float(self.expires_at),
            ttl_seconds=None if self.ttl_seconds is None else int(self.ttl_seconds),
            status=status,
        )


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
        totals = {"checkpoints_removed": self.checkpoints_removed, "bytes_freed": self.bytes_freed}
        return {**asdict(self), **totals}


def _keys(row: Mapping[str, Any], table: Any) -> dict[str, Any]:
    """A row's primary key as the ``k_<column>`` parameters of :func:`S.reseal_rows`."""
    return {f"k_{c.name}": row[c.name] for c in table.primary_key}


def _kept_in(
    serde: SerializerProtocol, thread_id: str, rows: Mapping[str, StoredCheckpoint], keep_last: int
) -> set[str]:
    """:meth:`Maintenance.kept` in one namespace."""
    held: dict[str, set[str]] = {}  # checkpoint -> channels it stores a value of

    def has_value(cid: str, ch: str) -> bool:
        if cid not in held:
            cp = rows[cid]
            what = f"checkpoint {cid} of thread {thread_id!r}"
            inline = load(serde, cp.type, cp.checkpoint, what)["channel_values"]
            held[cid] = set(json.loads(cp.blob_versions)) | set(inline)
        return ch in held[cid]

    return checkpoints_to_keep(
        rows, keep_last, lambda cid: json.loads(rows[cid].metadata), has_value
    )


@dataclass
class Maintenance:
    """Builds the maintenance plans of one saver."""

    dialect: Dialect
    activity: ThreadActivity
    #: Forgotten for every thread whose history changes.
    cache: ListCache
    sweep_batch: int
    keep_last: int = 1
    #: Opens sealed rows (encryption on), else ``None``.
    sealer: Sealer | None = None

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop what this process remembers of threads whose history changed under it."""
        gone = set(thread_ids)
        self.cache.forget(gone)
        self.activity.forget(gone)

    def bury(self, thread_ids: Sequence[str], now: float | None) -> list[Stmt]:
        """Statements deleting threads' rows behind tombstones (new at ``now``, else claimed)."""
        d = self.dialect
        params = [{"thread_id": t} for t in thread_ids]
        tombs = [] if now is None else self.activity.tombstone_rows(thread_ids, now)
        return [
            *([Stmt(S.tombstone(d), tombs, many=True)] if tombs else []),
            *(Stmt(sql, params, many=True) for sql in S.end_generation(d)),
            *(Stmt(sql, params, many=True) for sql in S.delete_ended_rows(d)),
        ]

    def delete_thread(self, thread_id: str) -> Plan[None]:
        yield Batch(self.bury([thread_id], self.activity.clock()), write=True)
        self.forget([thread_id])

    def erase_threads(self, thread_ids: Sequence[str]) -> Plan[None]:
        # their activity rows locked in one order (sorted), as by every erase
        params = [{"thread_id": t} for t in sorted(set(thread_ids))]
        if params:
            yield Batch(
                [Stmt(sql, params, many=True) for sql in S.erase_thread_rows(self.dialect)],
                write=True,
            )
        self.forget(thread_ids)

    def snapshot(self, thread_ids: Sequence[str], sized: bool = False) -> Plan[dict[str, Snapshot]]:
        """Each thread's checkpoints and blob keys, locked; ``sized``: unlocked, with sizes."""
        d = self.dialect
        reads = [S.select_thread_checkpoints(d), S.select_thread_blob_keys(d)]
        if sized:
            reads += [S.select_thread_blob_sizes(d), S.select_thread_write_sizes(d)]
        n = len(reads)
        statements = [Stmt(sql, {"thread_id": t}, fetch=True) for t in thread_ids for sql in reads]
        results = yield Batch(statements, lock=not sized, hold=not sized)
        out = {}
        for i, t in enumerate(thread_ids):
            cps, keys, *sizes = results[n * i : n * i + n]
            blob_sizes, write_sizes = sizes or ([], [])
            out[t] = Snapshot(
                [StoredCheckpoint(*r) for r in cps],
                [StoredBlob(*r) for r in keys],
                {(ns, ch, v): int(size) for ns, ch, v, size in blob_sizes},
                {(ns, cid): int(size or 0) for ns, cid, size in write_sizes},
            )
        return out

    def doomed(
        self, snapshot: Mapping[str, Snapshot], keep: Mapping[str, set[tuple[str, str]]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Keys of the checkpoints not kept and of the blobs no kept one needs (bases included)."""
        drop_cp: list[dict[str, Any]] = []
        drop_blobs: list[dict[str, Any]] = []
        for thread_id, snap in snapshot.items():
            kept = keep.get(thread_id, set())
            referenced = {
                (cp.ns, ch, v)
                for cp in snap.checkpoints
                if (cp.ns, cp.checkpoint_id) in kept
                for ch, v in json.loads(cp.blob_versions).items()
            }
            drop_cp += [
                {"thread_id": thread_id, "checkpoint_ns": cp.ns, "checkpoint_id": cp.checkpoint_id}
                for cp in snap.checkpoints
                if (cp.ns, cp.checkpoint_id) not in kept
            ]
            bases = {(b.ns, b.channel, b.version): b.base_version for b in snap.blobs}
            pending = list(referenced)
            while pending:
                ns, ch, v = pending.pop()
                base = bases.get((ns, ch, v))
                if base is not None and (ns, ch, base) not in referenced:
                    referenced.add((ns, ch, base))
                    pending.append((ns, ch, base))
            drop_blobs += [
                dict(thread_id=thread_id, checkpoint_ns=b.ns, channel=b.channel, version=b.version)
                for b in snap.blobs
                if (b.ns, b.channel, b.version) not in referenced
            ]
        return drop_cp, drop_blobs

    def drop(
        self, snapshot: Mapping[str, Snapshot], keep: Mapping[str, set[tuple[str, str]]]
    ) -> Batch:
        """Delete every checkpoint not in ``keep[thread]`` and the blobs no kept one needs."""
        d = self.dialect
        checkpoints, blobs = self.doomed(snapshot, keep)
        self.forget(list(snapshot))
        return Batch(
            [
                *(Stmt(sql, checkpoints, many=True) for sql in S.delete_checkpoint(d)),
                Stmt(S.delete_blob(d), blobs, many=True),
            ],
            write=True,
        )

    def kept(
        self, serde: SerializerProtocol, t: str, cps: Sequence[StoredCheckpoint], keep_last: int
    ) -> set[tuple[str, str]]:
        """Per namespace: :func:`checkpoints_to_keep` of ``keep_last``."""
        if (sealer := self.sealer) is not None:  # bodies and metadata opened
            sealer.ensure(v for cp in cps for v in (cp.checkpoint, cp.metadata))
            cps = [
                cp._replace(
                    checkpoint=sealer.open_body(t, cp.ns, cp.checkpoint_id, cp.type, cp.checkpoint),
                    metadata=sealer.open_metadata(t, cp.ns, cp.checkpoint_id, cp.metadata),
                )
                for cp in cps
            ]
        by_ns: dict[str, dict[str, StoredCheckpoint]] = {}
        for cp in cps:
            by_ns.setdefault(cp.ns, {})[cp.checkpoint_id] = cp
        return {
            (ns, cid) for ns, rows in by_ns.items() for cid in _kept_in(serde, t, rows, keep_last)
        }

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        if not run_ids:
            return
        d = self.dialect
        found = yield Batch(
            [Stmt(S.select_run_checkpoints(d), {"run_id": r}, fetch=True) for r in run_ids],
            lock=True,
            hold=True,
        )
        doomed = {(t, ns, cid) for rows in found for t, ns, cid in rows}
        threads_hit = sorted({t for t, _, _ in doomed})
        if not threads_hit:
            yield Batch([], write=True)
            return
        snapshot = yield from self.snapshot(threads_hit)
        keep = {
            t: {
                (cp.ns, cp.checkpoint_id)
                for cp in snapshot[t].checkpoints
                if (t, cp.ns, cp.checkpoint_id) not in doomed
            }
            for t in threads_hit
        }
        yield self.drop(snapshot, keep)

    def locked_rows(self, source: str, target: str) -> Plan[list[list[dict[str, Any]]]]:
        """``source``'s rows (checkpoints, blobs, writes), read under a lock, as ``target``'s."""
        reads = [Stmt(sql, {"src": source}, fetch=True) for sql in S.select_copy_rows(self.dialect)]
        return S.retarget((yield Batch(reads, lock=True, hold=True)), target)

    def copy_thread(self, source: str, target: str, key: DataKey | None = None) -> Plan[None]:
        """Copy ``source``'s rows to ``target``, each value resealed with ``key`` if given."""
        d, activity = self.dialect, self.activity
        now = activity.clock()
        [state] = yield Batch(
            [Stmt(S.thread_state(d, lock=True), {"thread_id": source}, fetch=True)],
            lock=True,
            hold=True,
        )
        if state:
            source_state = ThreadState(*state[0])
            if activity.is_gone(source_state, now):
                yield Batch([], write=True)
                return
            ttl = source_state.ttl_seconds
        else:
            ttl = activity.ttl_seconds
        if d.distributed or key is not None:  # read, then write (one shard each; or reseal)
            rows = yield from self.locked_rows(source, source if key is not None else target)
            if key is not None:
                assert self.sealer is not None
                rows = self.sealer.resealed(rows, target, key)
            copy = [
                Stmt(sql, params, many=True)
                for sql, params in zip(S.insert_copied_rows(d), rows, strict=True)
                if params
            ]
        else:
            copy = [Stmt(sql, {"src": source, "dst": target}) for sql in S.copy_rows(d)]
        touch = activity.thread_row(source, now, ttl)
        yield Batch(
            [
                Stmt(S.revive_thread(d), activity.thread_row(target, now, ttl)),
                Stmt(S.forget_generation(d), {"thread_id": target}),
                *copy,
                *([Stmt(S.revive_thread(d), touch)] if state else []),
            ],
            write=True,
        )

    def prune(
        self,
        serde: SerializerProtocol,
        thread_ids: Sequence[str],
        strategy: str,
        keep_last: int | None = None,
    ) -> Plan[None]:
        validate_strategy(strategy, "prune strategy")
        n = self.keep_last if keep_last is None else validate_keep_last(keep_last)
        if not thread_ids:
            return
        if strategy == "delete":
            for t in thread_ids:
                yield from self.delete_thread(t)
        else:
            yield from self.keep_latest(serde, thread_ids, n)

    def keep_latest(
        self, serde: SerializerProtocol, thread_ids: Sequence[str], keep_last: int
    ) -> Plan[None]:
        """Drop all but each namespace's last ``keep_last`` checkpoints (and what they need)."""
        snapshot = yield from self.snapshot(thread_ids)
        keep = {t: self.kept(serde, t, s.checkpoints, keep_last) for t, s in snapshot.items()}
        yield self.drop(snapshot, keep)

    def thread_ids_page(self, table: int, after: str, size: int) -> Plan[list[str]]:
        """The next ``size`` thread ids after ``after`` in table 0 (checkpoints), 1 or 2."""
        sql = S.select_thread_ids_after(self.dialect)[table]
        [rows] = yield Batch([Stmt(sql, {"after": after, "page_size": size}, fetch=True)])
        return [r[0] for r in rows]

    def encrypt_thread(self, thread_id: str, key: DataKey) -> Plan[dict[str, int]]:
        """Seal ``thread_id``'s plaintext values with ``key``; how many of each kind it sealed."""
        cps, blobs, writes = yield from self.locked_rows(thread_id, thread_id)
        updates: list[list[dict[str, Any]]] = [[], [], []]
        for r in cps:
            body, meta = bytes(r["checkpoint"]), r["metadata"]
            if is_sealed(body) and is_sealed_text(meta):
                continue
            sealed = dict(r, checkpoint=body)
            Sealer.seal_checkpoint_row(key, sealed)  # each half kept when already sealed
            body = body if is_sealed(body) else sealed["checkpoint"]
            meta = meta if is_sealed_text(meta) else sealed["metadata"]
            updates[0].append(
                {**_keys(r, S.COPIED_TABLES[0]), "v_checkpoint": body, "v_metadata": meta}
            )
        for i, (rows, seal) in enumerate(
            ((blobs, Sealer.seal_blob_rows), (writes, Sealer.seal_write_rows)), start=1
        ):
            todo = [dict(r, blob=bytes(r["blob"])) for r in rows if r["blob"]]
            todo = [r for r in todo if not is_sealed(r["blob"])]
            seal(key, todo)
            updates[i] = [{**_keys(r, S.COPIED_TABLES[i]), "v_blob": r["blob"]} for r in todo]
        statements = [
            Stmt(sql, params, many=True)
            for sql, params in zip(S.reseal_rows(self.dialect), updates, strict=True)
            if params
        ]
        yield Batch(statements, write=True)
        if statements:
            self.forget([thread_id])
        return dict(zip(("checkpoints", "blobs", "writes"), map(len, updates), strict=True))

    def threads(self, order: ThreadOrder, limit: int | None) -> Plan[list[ThreadInfo]]:
        """Every thread with checkpoints (at most ``limit``) in ``order``."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ConfigurationError(f"limit must be a whole number >= 0 or None, got {limit!r}")
        now = self.activity.clock()
        sql = S.thread_stats(self.dialect, order=order, expired=False)
        [rows] = yield Batch([Stmt(sql, {"limit": ALL if limit is None else limit}, fetch=True)])
        return [StatsRow._make(r).info(now) for r in rows]

    def preview(self, serde: SerializerProtocol) -> Plan[SweepPreview]:
        """What :meth:`sweep` would remove now, decided as it decides, without a lock."""
        now = self.activity.clock()
        sql = S.thread_stats(self.dialect, order="expires_at", expired=True)
        [rows] = yield Batch([Stmt(sql, {"now": now, "limit": ALL}, fetch=True)])
        expired = [StatsRow._make(r) for r in rows]
        preview = SweepPreview(self.activity.strategy, self.keep_last, now)
        if self.activity.strategy == "delete":
            for r in expired:
                n, size = int(r.checkpoints), int(r.stored_bytes or 0)
                preview.threads.append(ThreadSweep(r.thread_id, "delete", r.expires_at, n, n, size))
            return preview
        for start in range(0, len(expired), self.sweep_batch):
            batch = expired[start : start + self.sweep_batch]
            sized = yield from self.snapshot([r.thread_id for r in batch], sized=True)
            for r in batch:
                t, n, snap = r.thread_id, int(r.checkpoints), sized[r.thread_id]
                keep = self.kept(serde, t, snap.checkpoints, self.keep_last)
                checkpoints, blobs = self.doomed({t: snap}, {t: keep})
                sizes = {(cp.ns, cp.checkpoint_id): cp.size for cp in snap.checkpoints}
                keys = [(c["checkpoint_ns"], c["checkpoint_id"]) for c in checkpoints]
                freed = sum(sizes[k] + snap.write_sizes.get(k, 0) for k in keys) + sum(
                    snap.blob_sizes.get((b["checkpoint_ns"], b["channel"], b["version"]), 0)
                    for b in blobs
                )
                preview.threads.append(ThreadSweep(t, "prune", r.expires_at, n, len(keys), freed))
        return preview

    def sweep(
        self,
        serde: SerializerProtocol,
        on_progress: Callable[[int, int | None], None] | None = None,
    ) -> Plan[list[str]]:
        """Remove expired threads batch by batch, then old tombstones; the ids removed."""
        d, activity = self.dialect, self.activity
        swept: list[str] = []
        while True:
            now = activity.clock()
            params = {"now": now, "batch_size": self.sweep_batch}
            [rows] = yield Batch(
                [Stmt(S.select_expired(d), params, fetch=True)], lock=True, hold=True
            )
            candidates = [r[0] for r in rows]
            if not candidates:
                horizon = now - tombstone_seconds(TOMBSTONE_SECONDS, activity.ttl_seconds)
                yield Batch(
                    [Stmt(sql, {"horizon": horizon}) for sql in S.purge_tombstones(d)], write=True
                )
                return swept
            keep_latest = activity.strategy != "delete"
            claim = S.claim_expired(d, keep=keep_latest)
            counts = yield Batch(
                [Stmt(claim, {"thread_id": t, "now": now}) for t in candidates],
                lock=True,
                hold=True,
            )
            batch = [t for t, n in zip(candidates, counts, strict=True) if n]
            if not batch:  # another sweeper took them all, or they were used since
                yield Batch([], write=True)
            elif not keep_latest:
                yield Batch(self.bury(batch, None), write=True)
                self.forget(batch)
            else:
                yield from self.keep_latest(serde, batch, self.keep_last)
            swept += batch
            if on_progress is not None:
                on_progress(len(swept), None)
            if len(candidates) < self.sweep_batch:
                return swept
