"""The plans of ``put`` and ``put_writes``: the hot path of every graph step.

Each is one round trip where the driver pipelines: the thread's activity, the blobs and the
checkpoint row (or the writes), written only while the thread is live. Zero rows written sends
the plan down the slow path (:meth:`Writer.admit`), which refuses a late write or starts afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.codec import (
    ListCache,
    compact_json,
    encode_checkpoint,
    metadata_json,
    packed,
)
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    checkpoint_config,
    checkpoint_id_of,
    thread_coordinates,
    writes_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import (
    ThreadActivity,
    ThreadState,
    generation_boundary,
    is_late,
    thread_deleted,
    thread_ttl,
)
from langgraph_checkpoint_agent_memory.checkpoint.sealing import Sealer
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey
from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, FastWrite
from langgraph_checkpoint_agent_memory.telemetry.tracing import IDLE


@dataclass
class Writer:
    """Builds the write plans of one saver from its dialect, activity policy and list cache."""

    dialect: Dialect
    activity: ThreadActivity
    cache: ListCache

    def put(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        key: DataKey | None = None,
        op: Any = IDLE,
    ) -> Plan[RunnableConfig]:
        """Store ``checkpoint`` and its new blobs, sealed with ``key``; the bytes told to ``op``."""
        thread_id, ns, parent_id = thread_coordinates(config)
        checkpoint_id = checkpoint_id_of(checkpoint)
        activity = self.activity
        full_metadata = get_checkpoint_metadata(config, metadata)
        now = activity.clock()
        ttl = thread_ttl(config, activity.ttl_seconds)
        thread = activity.thread_row(thread_id, now, ttl)
        thread["named"] = parent_id
        live_after = thread["live_after"]
        body_type, body, blob_versions, blob_rows, lists = encode_checkpoint(
            serde, self.cache, thread_id, ns, parent_id, checkpoint, new_versions, live_after
        )
        row = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_id,
            "run_id": full_metadata.get("run_id"),
            "type": body_type,
            "checkpoint": body,
            "metadata": metadata_json(full_metadata),
            "blob_versions": compact_json(blob_versions),
            "live_after": live_after,
            "named": parent_id,
        }
        if key is not None:
            Sealer.seal_blob_rows(key, blob_rows)
            Sealer.seal_checkpoint_row(key, row)
        if op.live:
            op.written(len(row["checkpoint"]) + len(row["metadata"]) + _blobs(blob_rows))
        d = self.dialect
        touch = activity.touch_due(thread_id, now, ttl)
        fast = d.fast_write("put", touch, {**thread, **row}, {"b": blob_rows})
        done = fast is not None and (yield from self._fast(fast))
        if not done:
            writes = [
                Stmt(S.insert_blob(d), blob_rows, many=True),
                Stmt(S.upsert_checkpoint(d), row),
            ]
            if fast is None and d.conditional_upsert:
                head = [Stmt(S.touch_thread(d), thread)] if touch else []
                results = yield Batch([*head, *writes], write=True)
                done = bool(results[-1])  # the checkpoint row was written: the thread is live
            if not done:
                yield from self.admit(thread_id, parent_id, thread, now, writes, checkpoint_id)
                touch = True
        if touch:
            activity.touched_at(thread_id, now, ttl)
        self.cache.remember(thread_id, ns, checkpoint_id, blob_versions, lists)
        return checkpoint_config(thread_id, ns, checkpoint_id)

    def put_writes(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        key: DataKey | None = None,
        op: Any = IDLE,
    ) -> Plan[None]:
        """Store a task's writes (first write wins, special channels upsert), as :meth:`put`."""
        thread_id, ns, checkpoint_id = writes_coordinates(config)
        dumps = serde.dumps_typed
        activity = self.activity
        now = activity.clock()
        ttl = thread_ttl(config, activity.ttl_seconds)
        thread = activity.thread_row(thread_id, now, ttl)
        thread["named"] = checkpoint_id
        first_wins: list[dict[str, Any]] = []
        # a special channel written twice in one call keeps its last value, as a repeated
        # call would (one statement must not upsert the same row twice)
        replace: dict[int, dict[str, Any]] = {}
        for idx, (channel, value) in enumerate(writes):
            kind, blob = packed(*dumps(value))
            special = WRITES_IDX_MAP.get(channel)
            row = {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "idx": idx if special is None else special,
                "channel": channel,
                "type": kind,
                "blob": blob,
                "task_path": task_path,
                "live_after": thread["live_after"],
                "named": checkpoint_id,
            }
            if special is None:
                first_wins.append(row)
            else:
                replace[special] = row
        replacing = list(replace.values())
        if key is not None:
            Sealer.seal_write_rows(key, first_wins)
            Sealer.seal_write_rows(key, replacing)
        if op.live:
            op.written(_blobs(first_wins) + _blobs(replacing))
        d = self.dialect
        touch = activity.touch_due(thread_id, now, ttl)
        fixed = {
            **thread,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
        }
        fast = d.fast_write("writes", touch, fixed, {"f": first_wins, "r": replacing})
        done = fast is not None and (yield from self._fast(fast))
        if not done:
            statements = [
                Stmt(S.insert_write(d, replace=False), first_wins, many=True),
                Stmt(S.insert_write(d, replace=True), replacing, many=True),
            ]
            if fast is None and d.conditional_upsert:
                head = [Stmt(S.touch_thread(d), thread)] if touch else []
                results = yield Batch([*head, *statements], write=True)
                # Rows written prove the thread live and the write on time; zero rows may be a
                # repeat of first-write-wins writes, a deleted thread or a late write: the slow
                # path tells them apart (the touch alone proves nothing about the boundary).
                done = bool(results[-2] + results[-1])
            if not done:
                yield from self.admit(thread_id, checkpoint_id, thread, now, statements)
                touch = True
        if touch:
            activity.touched_at(thread_id, now, ttl)
        return None

    def _fast(self, fast: FastWrite) -> Plan[bool]:
        """Run a dialect's one-statement write; False when the thread is gone (nothing written)."""
        statements = [
            Stmt(fast.sql, fast.params, fetch=fast.fetch),
            *(Stmt(sql, params) for sql, params in fast.then),
        ]
        if fast.then:  # checked, then written, in a transaction the check decides on
            [head, *_] = yield Batch(statements, hold=True)
            yield Batch([], write=True, rollback=not head)
            return bool(head)
        try:
            result = (yield Batch(statements, write=True))[0]
        except Exception as exc:
            if self.dialect.thread_gone(exc):
                return False
            raise
        return bool(result and result[0][0]) if fast.fetch else True

    def admit(
        self,
        thread_id: str,
        parent_id: str | None,
        thread: dict[str, Any],
        now: float,
        writes: list[Stmt],
        own_id: str | None = None,
    ) -> Plan[None]:
        """The slow path: under a lock, refuse a late write into an ended thread, or start it."""
        d = self.dialect
        key = {"thread_id": thread_id}
        [state] = yield Batch(
            [Stmt(S.thread_state(d, lock=True), key, fetch=True)], lock=True, hold=True
        )
        row = ThreadState(*state[0]) if state else None
        statements: list[Stmt] = []
        if row is not None and self.activity.is_gone(row, now):
            newest = yield Batch(
                [Stmt(sql, key, fetch=True) for sql in S.newest_ids(d)], lock=True, hold=True
            )
            ended = generation_boundary(row.ended_after, *(rows[0][0] for rows in newest))
            if is_late(parent_id, ended) or is_late(own_id, ended):
                raise thread_deleted(thread_id, parent_id or own_id or "")
            # a fresh start: drop what the ended history (or an expiry) left behind
            statements = [Stmt(S.set_generation(d), {**key, "ended_after": ended})]
            statements += [Stmt(sql, key) for sql in S.delete_ended_rows(d)]
        elif row is not None and is_late(parent_id, row.ended_after):
            raise thread_deleted(thread_id, parent_id or "")
        statements.append(Stmt(S.revive_thread(d), thread))
        yield Batch([*statements, *writes], write=True)


def _blobs(rows: Sequence[dict[str, Any]]) -> int:
    """Bytes of the ``blob`` column of ``rows``."""
    return sum(len(r["blob"]) for r in rows)
