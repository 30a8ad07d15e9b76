"""One ``BaseCheckpointSaver`` for SQLite, PostgreSQL and SAP HANA.

Every operation is a *plan* (see :mod:`langgraph_checkpoint_agent_memory.db.database`): it
builds statements and decodes rows without I/O, and the database object runs it with a sync
or an async driver. So ``put`` and ``aput`` share one implementation, and each dialect only
contributes compiled SQL.

The hot path:

* ``put`` is one transaction and one round trip where the driver pipelines: the blobs of the
  channels that changed and the checkpoint row (the thread's activity row only when due, see
  ``activity_precision``). Only non-primitive channel values get a blob; ``None``, booleans,
  numbers and short strings stay inline. A list that grew by appends since the version in the
  parent checkpoint (the conversation's ``messages``) is stored as just the new items: the
  saver recognizes the unchanged prefix by object identity, so neither serialization nor
  storage grows with the length of the conversation.
* ``get_tuple`` looks blobs up by their full key, so its cost does not grow with the thread's
  history; on PostgreSQL it is a single statement.
* ``list`` reads pages and decodes each checkpoint only when the caller reaches it.

TTL: with ``ttl_seconds`` (or ``config["configurable"]["ttl_seconds"]`` per thread) each thread
row carries ``expires_at``. Reads ignore expired threads at once; a sweeper deletes them (or
prunes them to their latest checkpoint with ``strategy="keep_latest"``). A deleted or expired
thread leaves a tombstone, so a late write that names one of its checkpoints is refused with
:class:`ThreadDeletedError` instead of resurrecting it.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    SerializerProtocol,
    get_checkpoint_metadata,
    writes_sort_key,
)

from langgraph_checkpoint_agent_memory.checkpoint.core import (
    ancestors_to_keep,
    checkpoint_config,
    delta_channels_of,
    delta_history,
    metadata_matches,
    parent_config,
    thread_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.ttl import (
    Sweeper,
    default_sweep_interval,
    validate_interval,
    validate_ttl,
)
from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import FastWrite
from langgraph_checkpoint_agent_memory.db.migrations import SchemaOnFirstUse
from langgraph_checkpoint_agent_memory.errors import (
    AgentMemoryError,
    ConfigurationError,
    ThreadDeletedError,
)

Strategy = Literal["delete", "keep_latest"]

#: A string channel value at most this long stays inline in the checkpoint row.
INLINE_STR_MAX = 256
#: Tombstones are purged after this long (never sooner than the TTL).
TOMBSTONE_SECONDS = 7 * 24 * 3600.0
#: An appended list is written in full after this many appends in a row.
MAX_CHAIN = 16
#: Blob type prefix of "the items appended to the list at base_version".
APPEND = "append:"
#: Threads whose last written lists and head checkpoint this process remembers.
CACHE_THREADS = 2000
#: Without a TTL, a thread's activity row is written at most this often per process.
IDLE_TOUCH_SECONDS = 600.0
LIST_PAGE = 32
NEVER = -1e300  # a "live after" bound that nothing expires before


def _inline(value: Any) -> bool:
    kind = type(value)
    return (
        value is None
        or kind in (bool, int, float)
        or (kind is str and len(value) <= INLINE_STR_MAX)
    )


#: Encoders built once: ``json.dumps`` builds one per call when given options.
_compact_json = json.JSONEncoder(separators=(",", ":")).encode
_metadata_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _metadata_json(metadata: Mapping[str, Any]) -> str:
    try:
        return _metadata_encoder(metadata)
    except (TypeError, ValueError) as exc:
        bad = next((k for k, v in metadata.items() if not _json_ok(v)), "?")
        raise TypeError(
            f"checkpoint metadata must be JSON-serializable; key {bad!r} is not ({exc})"
        ) from None


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


class _Head(NamedTuple):
    """What this process last wrote of a thread namespace, for appending to its lists."""

    checkpoint_id: str
    blob_versions: dict[str, str]
    # channel -> (version, the list's items, appends since a full copy)
    lists: dict[str, tuple[str, list[Any], int]]


class _Row:
    """A checkpoint row as fetched: decoded only when asked."""

    __slots__ = (
        "blob_versions",
        "body",
        "checkpoint_id",
        "metadata",
        "ns",
        "parent_id",
        "thread_id",
        "type",
    )

    def __init__(self, row: Sequence[Any]) -> None:
        (
            self.thread_id,
            self.ns,
            self.checkpoint_id,
            self.parent_id,
            self.type,
            self.body,
            self.metadata,
            blob_versions,
        ) = row
        self.blob_versions: dict[str, str] = json.loads(blob_versions)


class SQLSaver(SchemaOnFirstUse, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over any :class:`Database` (SQLite, PostgreSQL, SAP HANA).

    Args:
        database: Where checkpoints live.
        ttl_seconds: Idle seconds after which a thread expires; ``None`` or ``0``: never.
            A thread's own ``config["configurable"]["ttl_seconds"]`` overrides it.
        strategy: What expiry does: ``"delete"`` the thread, or ``"keep_latest"`` (prune its
            history to the latest checkpoint of each namespace; the thread stays readable).
        refresh_on_read: Whether reads count as activity.
        activity_precision: Activity is written to the thread's row at most once per this
            fraction of its TTL (per thread and process), not on every graph step; expiry is
            pushed out by the same slack, so an idle thread expires after between ``ttl`` and
            ``ttl * (1 + activity_precision)`` seconds. ``0`` writes activity on every call.
        incremental_lists: Store a list that only grew as its appended items (see above).
            Assumes list items are not mutated in place once stored, which holds for
            LangGraph's ``add_messages``; turn it off for state that mutates list items.
        sweep_interval_seconds: Time between background sweeps (default: a tenth of the TTL,
            between 0.5 s and 60 s). The sweeper starts with the first write when a TTL is set.
        sweep_batch: Threads removed per sweep transaction.
        auto_setup: Create or migrate the schema on first use.
        serde: Serializer; defaults to LangGraph's ``JsonPlusSerializer``.
        clock: Wall clock in seconds since the epoch (shared by processes through the rows).
    """

    def __init__(
        self,
        database: Database[Any],
        *,
        ttl_seconds: int | None = None,
        strategy: Strategy = "delete",
        refresh_on_read: bool = True,
        activity_precision: float = 0.1,
        incremental_lists: bool = True,
        sweep_interval_seconds: float | None = None,
        sweep_batch: int = 500,
        auto_setup: bool = True,
        serde: SerializerProtocol | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(serde=serde)
        if strategy not in ("delete", "keep_latest"):
            raise ConfigurationError(
                f"strategy must be 'delete' or 'keep_latest', got {strategy!r}"
            )
        self.db = database
        self.dialect = database.dialect
        self.ttl_seconds = validate_ttl(ttl_seconds)
        self.strategy: Strategy = strategy
        self.refresh_on_read = refresh_on_read
        if not 0 <= activity_precision <= 1:
            raise ConfigurationError(
                f"activity_precision must be between 0 and 1, got {activity_precision!r}"
            )
        self.activity_precision = float(activity_precision)
        self.incremental_lists = incremental_lists
        # (thread, ns) -> the checkpoint last written here, with the lists it holds; one entry
        # per thread, so evicting the oldest costs the same however many threads are cached
        self._heads: OrderedDict[tuple[str, str], _Head] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.sweep_interval_seconds = validate_interval(sweep_interval_seconds) or (
            default_sweep_interval(self.ttl_seconds) if self.ttl_seconds else 60.0
        )
        self.sweep_batch = sweep_batch
        self.auto_setup = auto_setup
        self._clock = clock
        # thread -> (time this process last wrote its activity row, the TTL it wrote)
        self._touched: OrderedDict[str, tuple[float, int | None]] = OrderedDict()
        self._sweeper: Sweeper | None = None
        self._sweeper_lock = threading.Lock()
        self._sweep_task: asyncio.Task[None] | None = None
        fork.register(self)

    def _after_fork(self) -> None:
        """A forked child has none of the parent's threads: its next write starts its own
        sweeper (the database resets its connections itself)."""
        self._sweeper, self._sweep_task = None, None
        self._sweeper_lock = threading.Lock()
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.db.describe()}, ttl_seconds={self.ttl_seconds}, "
            f"strategy={self.strategy!r})"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start_sweeper(self) -> None:
        """Run :meth:`sweep` every ``sweep_interval_seconds`` in a daemon thread."""
        with self._sweeper_lock:
            if self._sweeper is None or not self._sweeper.alive:
                self._sweeper = Sweeper(
                    self,
                    "_sweep_quietly",
                    self.sweep_interval_seconds,
                    name=f"{type(self).__name__}-sweeper-{id(self):x}",
                )
                self._sweeper.start()

    def start_async_sweeper(self) -> asyncio.Task[None]:
        """Run :meth:`asweep` every ``sweep_interval_seconds`` as a task of the running loop."""
        if self._sweep_task is None or self._sweep_task.done():
            self._sweep_task = asyncio.get_running_loop().create_task(self._sweep_forever())
        return self._sweep_task

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_seconds)
            try:
                await self.asweep()
            except Exception:  # the next sweep retries; never let the task die
                import logging

                logging.getLogger(__name__).exception("TTL sweep failed")

    def _sweep_quietly(self) -> None:
        self.sweep()

    @property
    def sweeper_running(self) -> bool:
        return (self._sweeper is not None and self._sweeper.alive) or (
            self._sweep_task is not None and not self._sweep_task.done()
        )

    def stop_sweeper(self) -> None:
        with self._sweeper_lock:
            sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop()
        task, self._sweep_task = self._sweep_task, None
        if task is not None and not task.done():
            task.cancel()

    def close(self) -> None:
        """Stop the sweeper and release connections this saver opened."""
        self.stop_sweeper()
        self.db.close()

    async def aclose(self) -> None:
        task = self._sweep_task
        self.stop_sweeper()
        if task is not None:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await self.db.aclose()

    def __enter__(self) -> SQLSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SQLSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _after_write(self) -> None:
        if self.ttl_seconds and self._sweeper is None and self._sweep_task is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self.start_sweeper()
            else:
                self.start_async_sweeper()

    # -- helpers ---------------------------------------------------------------------------

    def _live_after(self, now: float) -> float:
        return now if self.strategy == "delete" else NEVER

    def _thread_ttl(self, config: RunnableConfig) -> int | None:
        override = (config.get("configurable") or {}).get("ttl_seconds")
        if override is None:
            return self.ttl_seconds
        return validate_ttl(override, name="config['configurable']['ttl_seconds']")

    def _thread_row(self, thread_id: str, now: float, ttl: int | None) -> dict[str, Any]:
        return {
            "thread_id": thread_id,
            "last_active": now,
            "ttl_seconds": ttl,
            "expires_at": now + ttl * (1 + self.activity_precision) if ttl else None,
            "deleted_at": None,
            "live_after": self._live_after(now),
        }

    def _touch_due(self, thread_id: str, now: float, ttl: int | None) -> bool:
        """Whether this call must write the thread's activity row (see activity_precision)."""
        seen = self._touched.get(thread_id)
        if seen is None or seen[1] != ttl:
            return True
        every = ttl * self.activity_precision if ttl else IDLE_TOUCH_SECONDS
        return now - seen[0] >= every

    def _touched_at(self, thread_id: str, now: float, ttl: int | None) -> None:
        self._touched[thread_id] = (now, ttl)
        self._touched.move_to_end(thread_id)
        while len(self._touched) > 10_000:
            self._touched.popitem(last=False)

    def _refresh_stmt(self, thread_id: str, now: float) -> list[Stmt]:
        """Refresh-on-read, when due: only threads with a TTL have expiry to extend."""
        seen = self._touched.get(thread_id)
        ttl = seen[1] if seen is not None else self.ttl_seconds
        if not self.refresh_on_read or not ttl or not self._touch_due(thread_id, now, ttl):
            return []
        self._touched_at(thread_id, now, ttl)
        return [
            Stmt(
                S.refresh_thread(self.dialect),
                {"thread_id": thread_id, "now": now, "slack": 1 + self.activity_precision},
            )
        ]

    def _refreshed(self, thread_id: str, refresh: list[Stmt], counts: Sequence[Any]) -> None:
        """A refresh that found no activity row (a new thread, or one written before the TTL
        was on) refreshed nothing: the next write must record the thread's activity."""
        if refresh and counts and not counts[0]:
            self._touched.pop(thread_id, None)

    def _run(self, plan: Plan[Any]) -> Any:
        self._ready()
        return self.db.run(plan)

    async def _arun(self, plan: Plan[Any]) -> Any:
        await self._aready()
        return await self.db.arun(plan)

    # -- put -------------------------------------------------------------------------------

    def _put_plan(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Plan[RunnableConfig]:
        thread_id, ns, parent_id = thread_coordinates(config)
        dumps = self.serde.dumps_typed
        values = checkpoint["channel_values"]
        inline = {k: v for k, v in values.items() if _inline(v)}
        body = {**checkpoint, "channel_values": inline}
        body_type, body_bytes = dumps(body)
        full_metadata = get_checkpoint_metadata(config, metadata)
        blob_versions = {
            k: str(v)
            for k, v in checkpoint["channel_versions"].items()
            if k in values and k not in inline
        }
        now = self._clock()
        ttl = self._thread_ttl(config)
        thread = self._thread_row(thread_id, now, ttl)
        live_after = thread["live_after"]
        blob_rows = []
        remembered: dict[str, tuple[str, list[Any], int] | None] = {}
        for k, v in new_versions.items():
            if k not in blob_versions:
                continue
            value = values[k]
            base = self._append_base(thread_id, ns, parent_id, k, value)
            if base is None:
                blob_type, blob = dumps(value)
                depth = 0
            else:
                kind, blob = dumps(value[len(base[1]) :])
                blob_type, depth = APPEND + kind, base[2] + 1
            blob_rows.append(
                {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "channel": k,
                    "version": str(v),
                    "type": blob_type,
                    "blob": blob,
                    "base_version": base[0] if base is not None else None,
                    "live_after": live_after,
                }
            )
            remembered[k] = (str(v), list(value), depth) if type(value) is list else None
        row = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent_id,
            "run_id": full_metadata.get("run_id"),
            "type": body_type,
            "checkpoint": body_bytes,
            "metadata": _metadata_json(full_metadata),
            "blob_versions": _compact_json(blob_versions),
            "live_after": live_after,
        }
        d = self.dialect
        touch = self._touch_due(thread_id, now, ttl)
        fast = d.fast_write("put", touch, {**thread, **row}, {"b": blob_rows})
        if fast is not None and (yield from self._fast(fast)):
            if touch:
                self._touched_at(thread_id, now, ttl)
            self._remember(thread_id, ns, checkpoint["id"], blob_versions, remembered)
            return checkpoint_config(thread_id, ns, checkpoint["id"])
        writes = [
            Stmt(S.insert_blob(d), blob_rows, many=True),
            Stmt(S.upsert_checkpoint(d), row),
        ]
        if fast is None and d.conditional_upsert:
            head = [Stmt(S.touch_thread(d), thread)] if touch else []
            results = yield Batch([*head, *writes], write=True)
            if results[-1]:  # the checkpoint row was written: the thread is live
                if touch:
                    self._touched_at(thread_id, now, ttl)
                self._remember(thread_id, ns, checkpoint["id"], blob_versions, remembered)
                return checkpoint_config(thread_id, ns, checkpoint["id"])
        yield from self._admit(thread_id, parent_id, thread, now, ns, writes)
        self._touched_at(thread_id, now, ttl)
        self._remember(thread_id, ns, checkpoint["id"], blob_versions, remembered)
        return checkpoint_config(thread_id, ns, checkpoint["id"])

    # -- incremental lists -----------------------------------------------------------------

    def _append_base(
        self, thread_id: str, ns: str, parent_id: str | None, channel: str, value: Any
    ) -> tuple[str, list[Any], int] | None:
        """The stored version that ``value`` extends by appends, if this process knows one.

        Only the version the parent checkpoint holds qualifies (so the base is kept by any
        prune that keeps this checkpoint), and only if every one of its items is the very
        same object at the same position in ``value``.
        """
        if not self.incremental_lists or type(value) is not list or parent_id is None:
            return None
        with self._cache_lock:
            head = self._heads.get((thread_id, ns))
        if head is None or head.checkpoint_id != parent_id:
            return None
        known = head.lists.get(channel)
        if known is None:
            return None
        version, items, depth = known
        if head.blob_versions.get(channel) != version or depth >= MAX_CHAIN:
            return None
        if len(value) <= len(items):
            return None
        if any(a is not b for a, b in zip(items, value, strict=False)):  # value is longer
            return None
        return known

    def _remember(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        blob_versions: dict[str, str],
        lists: Mapping[str, tuple[str, list[Any], int] | None],
    ) -> None:
        if not self.incremental_lists:
            return
        with self._cache_lock:
            old = self._heads.pop((thread_id, ns), None)
            kept = {} if old is None else old.lists
            for channel, state in lists.items():
                if state is None:
                    kept.pop(channel, None)
                else:
                    kept[channel] = state
            self._heads[(thread_id, ns)] = _Head(checkpoint_id, blob_versions, kept)
            while len(self._heads) > CACHE_THREADS:
                self._heads.popitem(last=False)

    def _forget(self, thread_ids: Sequence[str]) -> None:
        """Drop what this process remembers of threads whose history changed under it."""
        gone = set(thread_ids)
        with self._cache_lock:
            for head in [k for k in self._heads if k[0] in gone]:
                del self._heads[head]
            for thread_id in gone:
                self._touched.pop(thread_id, None)

    def _fast(self, fast: FastWrite) -> Plan[bool]:
        """Run a dialect's one-statement write; False when the thread was deleted or
        expired (nothing was written, and the slow path decides)."""
        try:
            [result] = yield Batch([Stmt(fast.sql, fast.params, fetch=fast.fetch)], write=True)
        except Exception as exc:
            if self.dialect.thread_gone(exc):
                return False
            raise
        return bool(result[0][0]) if fast.fetch else True

    def _admit(
        self,
        thread_id: str,
        parent_id: str | None,
        thread: dict[str, Any],
        now: float,
        ns: str,
        writes: list[Stmt],
    ) -> Plan[None]:
        """The slow path of a write: read the thread's row under a lock, refuse a late write
        into a deleted or expired thread, or start it afresh."""
        d = self.dialect
        [state] = yield Batch(
            [Stmt(S.thread_state(d, lock=True), {"thread_id": thread_id}, fetch=True)],
            lock=True,
            hold=True,
        )
        gone = bool(state) and (
            state[0][0] is not None
            or (state[0][1] is not None and state[0][1] < self._live_after(now))
        )
        if gone and parent_id is not None:
            raise ThreadDeletedError(
                f"thread {thread_id!r} was deleted or expired; refusing a write that names "
                f"its checkpoint {parent_id!r}. Start the thread afresh (a config without "
                "checkpoint_id) or use a new thread_id."
            )
        statements: list[Stmt] = []
        if gone:  # a fresh start: drop what an unswept expiry left behind
            statements += [Stmt(sql, {"thread_id": thread_id}) for sql in S.delete_thread_rows(d)]
        statements.append(Stmt(S.revive_thread(d), thread))
        yield Batch([*statements, *writes], write=True)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        result = self._run(self._put_plan(config, checkpoint, metadata, new_versions))
        self._after_write()
        return result

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        result = await self._arun(self._put_plan(config, checkpoint, metadata, new_versions))
        self._after_write()
        return result

    # -- put_writes ------------------------------------------------------------------------

    def _put_writes_plan(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Plan[None]:
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        if checkpoint_id is None:
            raise ConfigurationError(
                "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint the "
                "writes belong to)"
            )
        dumps = self.serde.dumps_typed
        now = self._clock()
        ttl = self._thread_ttl(config)
        thread = self._thread_row(thread_id, now, ttl)
        first_wins: list[dict[str, Any]] = []
        # a special channel written twice in one call keeps its last value, as a repeated
        # call would (one statement must not upsert the same row twice)
        replace: dict[int, dict[str, Any]] = {}
        for idx, (channel, value) in enumerate(writes):
            kind, blob = dumps(value)
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
            }
            if special is None:
                first_wins.append(row)
            else:
                replace[special] = row
        replacing = list(replace.values())
        d = self.dialect
        touch = self._touch_due(thread_id, now, ttl)
        fixed = {
            **thread,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
        }
        fast = d.fast_write("writes", touch, fixed, {"f": first_wins, "r": replacing})
        if fast is not None and (yield from self._fast(fast)):
            if touch:
                self._touched_at(thread_id, now, ttl)
            return None
        statements = [
            Stmt(S.insert_write(d, replace=False), first_wins, many=True),
            Stmt(S.insert_write(d, replace=True), replacing, many=True),
        ]
        if fast is None and d.conditional_upsert:
            head = [Stmt(S.touch_thread(d), thread)] if touch else []
            results = yield Batch([*head, *statements], write=True)
            # Rows written (or the touch) prove the thread live; zero rows may be a repeat of
            # first-write-wins writes or a deleted thread: the slow path tells them apart.
            if results[0] if touch else results[0] + results[1]:
                if touch:
                    self._touched_at(thread_id, now, ttl)
                return None
        yield from self._admit(thread_id, checkpoint_id, thread, now, ns, statements)
        self._touched_at(thread_id, now, ttl)
        return None

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self._put_writes_plan(config, writes, task_id, task_path))
        self._after_write()

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._arun(self._put_writes_plan(config, writes, task_id, task_path))
        self._after_write()

    # -- get_tuple -------------------------------------------------------------------------

    def _details_stmts(self, thread_id: str, ns: str, rows: Sequence[_Row]) -> list[Stmt]:
        """Statements fetching the blobs and writes of ``rows`` (one thread namespace)."""
        d = self.dialect
        keys = sorted({(ch, v) for r in rows for ch, v in r.blob_versions.items()})
        out = self._blob_keys_stmts(thread_id, ns, keys)
        ids = sorted({r.checkpoint_id for r in rows})
        for start in range(0, len(ids), S.MAX_KEYS):
            chunk = ids[start : start + S.MAX_KEYS]
            n = S.bucket(len(chunk))
            params = {"thread_id": thread_id, "checkpoint_ns": ns}
            for i, cid in enumerate(chunk + [chunk[-1]] * (n - len(chunk))):
                params[f"k{i}"] = cid
            out.append(Stmt(S.select_writes(d, n), params, fetch=True))
        return out

    def _blob_keys_stmts(
        self, thread_id: str, ns: str, keys: Sequence[tuple[str, str]]
    ) -> list[Stmt]:
        d = self.dialect
        out: list[Stmt] = []
        for start in range(0, len(keys), S.MAX_KEYS):
            chunk = list(keys[start : start + S.MAX_KEYS])
            n = S.bucket(len(chunk))
            padded = chunk + [chunk[-1]] * (n - len(chunk))
            params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
            for i, (ch, v) in enumerate(padded):
                params[f"c{i}"], params[f"v{i}"] = ch, v
            out.append(Stmt(S.select_blobs(d, n), params, fetch=True))
        return out

    def _complete_chains(self, thread_id: str, ns: str, blob_rows: dict[Any, Any]) -> Plan[None]:
        """Fetch the bases of appended lists that a dialect without recursive queries left
        out (a no-op elsewhere: the recursive query already returned them)."""
        while True:
            missing = sorted(
                {
                    (ch, r[2])
                    for (ch, _), r in blob_rows.items()
                    if r[2] is not None and (ch, r[2]) not in blob_rows
                }
            )
            if not missing:
                return
            results = yield Batch(self._blob_keys_stmts(thread_id, ns, missing))
            found, _ = self._split_details(results)
            if not found:
                return
            blob_rows.update(found)

    def _value(
        self,
        blob_rows: Mapping[tuple[str, str], Any],
        channel: str,
        version: str,
        thread: tuple[str, str] | None = None,
    ) -> tuple[Any, int]:
        """A channel's value at ``version`` and the number of appends it is made of.

        A list version this process wrote or read last for ``thread`` is taken from memory
        (a new list of the same items), so reading a conversation decodes only what was
        appended since.
        """
        if thread is not None and self.incremental_lists:
            head = self._heads.get(thread)
            known = head.lists.get(channel) if head is not None else None
            if known is not None and known[0] == version:
                return list(known[1]), known[2]
        found = blob_rows.get((channel, version))
        if found is None:
            raise KeyError((channel, version))
        kind, blob, base = found
        if base is None:
            return self.serde.loads_typed((kind, blob)), 0
        try:
            head, depth = self._value(blob_rows, channel, base, thread)
        except KeyError:
            raise AgentMemoryError(
                f"stored list {channel!r} at version {version} lacks its base {base}; "
                "the checkpoint data is damaged"
            ) from None
        return head + self.serde.loads_typed((kind[len(APPEND) :], blob)), depth + 1

    def _decode(
        self,
        row: _Row,
        blob_rows: Mapping[tuple[str, str], tuple[str, bytes, str | None]],
        write_rows: Sequence[Sequence[Any]],
        metadata: CheckpointMetadata | None = None,
        lists: dict[str, tuple[str, list[Any], int] | None] | None = None,
    ) -> CheckpointTuple:
        loads = self.serde.loads_typed
        checkpoint: Checkpoint = loads((row.type, bytes(row.body)))
        values = dict(checkpoint["channel_values"])
        for ch, v in row.blob_versions.items():
            found = blob_rows.get((ch, v))
            if found is not None and found[0] != "empty":
                values[ch], depth = self._value(blob_rows, ch, v, (row.thread_id, row.ns))
                if lists is not None:
                    value = values[ch]
                    lists[ch] = (v, list(value), depth) if type(value) is list else None
        checkpoint["channel_values"] = values
        ordered = sorted(write_rows, key=lambda w: writes_sort_key(w[6], w[1], w[2]))
        return CheckpointTuple(
            config=checkpoint_config(row.thread_id, row.ns, row.checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata if metadata is not None else json.loads(row.metadata),
            parent_config=parent_config(row.thread_id, row.ns, row.parent_id),
            pending_writes=[(w[1], w[3], loads((w[4], w[5]))) for w in ordered],
        )

    def _get_tuple_plan(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        now = self._clock()
        d = self.dialect
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "live_after": self._live_after(now),
        }
        refresh = self._refresh_stmt(thread_id, now)
        fast = d.fast_get_tuple(checkpoint_id is not None)
        write_rows: builtins.list[Sequence[Any]]
        if fast is not None:
            [rows, *counts] = yield Batch(
                [Stmt(fast, params, fetch=True), *refresh], write=bool(refresh)
            )
            self._refreshed(thread_id, refresh, counts)
            head = next((r for r in rows if r[0] == 0), None)
            if head is None:
                return None
            row = _Row((thread_id, ns, *head[1:7]))
            blob_rows = {
                (r[1], r[2]): (r[3], bytes(r[4]) if r[4] is not None else b"", r[5])
                for r in rows
                if r[0] == 1
            }
            write_rows = [
                (head[1], r[1], r[7], r[2], r[3], bytes(r[4]), r[5]) for r in rows if r[0] == 2
            ]
        else:
            first = Stmt(
                S.select_checkpoint(d, by_id=checkpoint_id is not None), params, fetch=True
            )
            results = yield Batch([first, *refresh], write=bool(refresh))
            self._refreshed(thread_id, refresh, results[1:])
            if not results[0]:
                return None
            row = _Row(results[0][0])
            details = yield Batch(self._details_stmts(thread_id, ns, [row]))
            blob_rows, write_rows = self._split_details(details)
            yield from self._complete_chains(thread_id, ns, blob_rows)
        lists: dict[str, tuple[str, list[Any], int] | None] = {}
        tup = self._decode(row, blob_rows, write_rows, lists=lists)
        self._remember(thread_id, ns, row.checkpoint_id, row.blob_versions, lists)
        return tup

    @staticmethod
    def _split_details(
        details: Sequence[Sequence[Sequence[Any]]],
    ) -> tuple[dict[tuple[str, str], tuple[str, bytes, str | None]], list[Sequence[Any]]]:
        blob_rows: dict[tuple[str, str], tuple[str, bytes, str | None]] = {}
        write_rows: list[Sequence[Any]] = []
        for rows in details:
            for r in rows:
                if len(r) == 5:
                    blob = bytes(r[3]) if r[3] is not None else b""
                    blob_rows[(r[0], r[1])] = (r[2], blob, r[4])
                else:
                    write_rows.append(
                        (
                            r[0],
                            r[1],
                            r[2],
                            r[3],
                            r[4],
                            bytes(r[5]) if r[5] is not None else b"",
                            r[6],
                        )
                    )
        return blob_rows, write_rows

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get_tuple_plan(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._get_tuple_plan(config))

    # -- list ------------------------------------------------------------------------------

    def _page_plan(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        keyset: tuple[str, str, str] | None,
        page_size: int,
    ) -> Plan[tuple[list[tuple[_Row, Any, Any]], tuple[str, str, str] | None]]:
        """One page of ``list``: rows plus the blobs and writes they need, undecoded."""
        d = self.dialect
        now = self._clock()
        configurable = (config or {}).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        cid = configurable.get("checkpoint_id")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        pushed = S.pushed_filters(d, filter)
        params: dict[str, Any] = {
            "live_after": self._live_after(now),
            "page_size": page_size,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": cid,
            "before_id": before_id,
        }
        for i, name in enumerate(pushed):
            params[f"f{i}"] = d.prefilter_value(name, filter[name])  # type: ignore[index]
        if keyset is not None:
            params["k_id"], params["k_thread"], params["k_ns"] = keyset
        sql = S.list_page(
            d,
            thread=thread_id is not None,
            ns=ns is not None,
            cid=cid is not None,
            before=before_id is not None,
            after=keyset is not None,
            filters=pushed,
        )
        refresh = self._refresh_stmt(thread_id, now) if thread_id is not None else []
        results = yield Batch([Stmt(sql, params, fetch=True), *refresh], write=bool(refresh))
        if thread_id is not None:
            self._refreshed(thread_id, refresh, results[1:])
        rows = [_Row(r) for r in results[0]]
        if not rows:
            return [], None
        groups: dict[tuple[str, str], list[_Row]] = {}
        for r in rows:
            groups.setdefault((r.thread_id, r.ns), []).append(r)
        statements: list[Stmt] = []
        spans: list[tuple[tuple[str, str], int]] = []
        for group, members in groups.items():
            stmts = self._details_stmts(group[0], group[1], members)
            spans.append((group, len(stmts)))
            statements += stmts
        details = yield Batch(statements)
        by_group: dict[tuple[str, str], tuple[Any, Any]] = {}
        at = 0
        for group, count in spans:
            by_group[group] = self._split_details(details[at : at + count])
            yield from self._complete_chains(group[0], group[1], by_group[group][0])
            at += count
        last = rows[-1]
        next_keyset = (last.checkpoint_id, last.thread_id, last.ns)
        out = [(r, *by_group[(r.thread_id, r.ns)]) for r in rows]
        return out, next_keyset if len(rows) == page_size else None

    def _list_cursor(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> _ListCursor:
        return _ListCursor(self, config, filter, before, limit)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        cursor = self._list_cursor(config, filter, before, limit)
        while not cursor.done:
            yield from cursor.take(self._run(cursor.next_page()))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        cursor = self._list_cursor(config, filter, before, limit)
        while not cursor.done:
            for item in cursor.take(await self._arun(cursor.next_page())):
                yield item

    # -- deletion, copy, prune -------------------------------------------------------------

    def _bury(self, thread_ids: Sequence[str], now: float) -> builtins.list[Stmt]:
        """Statements deleting threads' rows and leaving their tombstones."""
        d = self.dialect
        params = [{"thread_id": t} for t in thread_ids]
        tombs = [
            {
                "thread_id": t,
                "last_active": now,
                "ttl_seconds": None,
                "expires_at": None,
                "deleted_at": now,
            }
            for t in thread_ids
        ]
        return [
            *(Stmt(sql, params, many=True) for sql in S.delete_thread_rows(d)),
            Stmt(S.tombstone(d), tombs, many=True),
        ]

    def _delete_thread_plan(self, thread_id: str) -> Plan[None]:
        yield Batch(self._bury([str(thread_id)], self._clock()), write=True)
        self._forget([str(thread_id)])

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._delete_thread_plan(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._delete_thread_plan(thread_id))

    def _erase_threads_plan(self, thread_ids: Sequence[str]) -> Plan[None]:
        params = [{"thread_id": str(t)} for t in thread_ids]
        if params:
            yield Batch(
                [Stmt(sql, params, many=True) for sql in S.erase_thread_rows(self.dialect)],
                write=True,
            )
        self._forget([str(t) for t in thread_ids])

    def erase_threads(self, thread_ids: Sequence[str]) -> None:
        """Delete threads leaving no trace, not even a tombstone (for erasing a user's data:
        unlike :meth:`delete_thread`, a late write could start such a thread afresh)."""
        self._run(self._erase_threads_plan(thread_ids))

    async def aerase_threads(self, thread_ids: Sequence[str]) -> None:
        await self._arun(self._erase_threads_plan(thread_ids))

    def _thread_snapshot(self, thread_ids: Sequence[str]) -> Plan[dict[str, Any]]:
        """Every checkpoint and blob key of ``thread_ids`` (inside a held transaction)."""
        d = self.dialect
        statements = []
        for t in thread_ids:
            statements.append(Stmt(S.select_thread_checkpoints(d), {"thread_id": t}, fetch=True))
            statements.append(Stmt(S.select_thread_blob_keys(d), {"thread_id": t}, fetch=True))
        results = yield Batch(statements, lock=True, hold=True)
        return {t: (results[2 * i], results[2 * i + 1]) for i, t in enumerate(thread_ids)}

    def _drop_plan(
        self, snapshot: Mapping[str, Any], keep: Mapping[str, set[tuple[str, str]]]
    ) -> Batch:
        """Delete every checkpoint not in ``keep[thread]`` and the blobs no kept one needs."""
        d = self.dialect
        drop_cp: list[dict[str, Any]] = []
        drop_blobs: list[dict[str, Any]] = []
        for thread_id, (cps, blob_keys) in snapshot.items():
            kept = keep.get(thread_id, set())
            referenced: set[tuple[str, str, str]] = set()
            for ns, cid, _parent, _md, blob_versions, *_ in cps:
                if (ns, cid) in kept:
                    referenced.update((ns, ch, v) for ch, v in json.loads(blob_versions).items())
                else:
                    drop_cp.append(
                        {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
                    )
            # an appended list needs every base down its chain
            bases = {(ns, ch, v): base for ns, ch, v, base in blob_keys}
            pending = list(referenced)
            while pending:
                ns, ch, v = pending.pop()
                base = bases.get((ns, ch, v))
                if base is not None and (ns, ch, base) not in referenced:
                    referenced.add((ns, ch, base))
                    pending.append((ns, ch, base))
            drop_blobs += [
                {"thread_id": thread_id, "checkpoint_ns": ns, "channel": ch, "version": v}
                for ns, ch, v, _ in blob_keys
                if (ns, ch, v) not in referenced
            ]
        self._forget(list(snapshot))
        return Batch(
            [
                *(Stmt(sql, drop_cp, many=True) for sql in S.delete_checkpoint(d)),
                Stmt(S.delete_blob(d), drop_blobs, many=True),
            ],
            write=True,
        )

    def _delete_for_runs_plan(self, run_ids: Sequence[str]) -> Plan[None]:
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
        snapshot = yield from self._thread_snapshot(threads_hit)
        keep = {
            t: {(ns, cid) for ns, cid, *_ in snapshot[t][0] if (t, ns, cid) not in doomed}
            for t in threads_hit
        }
        yield self._drop_plan(snapshot, keep)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._delete_for_runs_plan(list(run_ids)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._delete_for_runs_plan(list(run_ids)))

    def _copy_thread_plan(self, source: str, target: str) -> Plan[None]:
        d = self.dialect
        now = self._clock()
        [state] = yield Batch(
            [Stmt(S.thread_state(d, lock=True), {"thread_id": source}, fetch=True)],
            lock=True,
            hold=True,
        )
        if state:
            deleted_at, expires_at, ttl = state[0]
            if deleted_at is not None or (
                expires_at is not None and expires_at < self._live_after(now)
            ):
                yield Batch([], write=True)
                return
        else:
            ttl = self.ttl_seconds
        copy = [Stmt(sql, {"src": source, "dst": target}) for sql in S.copy_rows(d)]
        revive = self._thread_row(target, now, ttl)
        touch = self._thread_row(source, now, ttl)
        yield Batch(
            [
                Stmt(S.revive_thread(d), revive),
                *copy,
                *([Stmt(S.revive_thread(d), touch)] if state else []),
            ],
            write=True,
        )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._copy_thread_plan(str(source_thread_id), str(target_thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._copy_thread_plan(str(source_thread_id), str(target_thread_id)))

    def _keep_latest(self, cps: Sequence[Sequence[Any]]) -> set[tuple[str, str]]:
        """Per namespace: the latest checkpoint and the ancestors its DeltaChannels need."""
        loads = self.serde.loads_typed
        by_ns: dict[str, dict[str, Sequence[Any]]] = {}
        for row in cps:
            by_ns.setdefault(row[0], {})[row[1]] = row
        keep: set[tuple[str, str]] = set()
        for ns, rows in by_ns.items():
            latest = max(rows)

            def has_value(cid: str, ch: str, rows: Mapping[str, Sequence[Any]] = rows) -> bool:
                row = rows[cid]
                if ch in json.loads(row[4]):
                    return True
                return ch in loads((row[5], row[6]))["channel_values"]

            def parent_of(cid: str, rows: Mapping[str, Sequence[Any]] = rows) -> str | None:
                parent = rows[cid][2]
                return parent if parent in rows else None

            kept = ancestors_to_keep(
                latest, delta_channels_of(json.loads(rows[latest][3])), parent_of, has_value
            )
            keep.update((ns, cid) for cid in kept)
        return keep

    def _prune_plan(self, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        if not thread_ids:
            return
        if strategy == "delete":
            for t in thread_ids:
                yield from self._delete_thread_plan(t)
            return
        snapshot = yield from self._thread_snapshot(list(thread_ids))
        keep = {t: self._keep_latest(cps) for t, (cps, _) in snapshot.items()}
        yield self._drop_plan(snapshot, keep)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._prune_plan([str(t) for t in thread_ids], strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._prune_plan([str(t) for t in thread_ids], strategy))

    # -- DeltaChannel history --------------------------------------------------------------

    def _history_plan(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        d = self.dialect
        now = self._clock()
        [rows] = yield Batch(
            [
                Stmt(
                    S.select_chain(d),
                    {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": checkpoint_id or "\U0010ffff",
                        "live_after": self._live_after(now),
                    },
                    fetch=True,
                )
            ]
        )
        by_id = {r[0]: r for r in rows}
        target = checkpoint_id if checkpoint_id is not None else max(by_id, default=None)
        if target not in by_id:
            return {ch: {"writes": []} for ch in channels}
        loads = self.serde.loads_typed
        chain: list[str] = []
        parent = by_id[target][1]
        while parent is not None and parent in by_id:
            chain.append(parent)
            parent = by_id[parent][1]
        versions = {cid: json.loads(by_id[cid][2]) for cid in chain}
        inline_cache: dict[str, dict[str, Any]] = {}

        def inline(cid: str) -> dict[str, Any]:
            if cid not in inline_cache:
                inline_cache[cid] = loads((by_id[cid][3], by_id[cid][4]))["channel_values"]
            return inline_cache[cid]

        def has_value(cid: str, ch: str) -> bool:
            return ch in versions[cid] or ch in inline(cid)

        # Walk once to learn how far back each channel must go, then fetch only that.
        needed = delta_history(chain, channels, has_value, lambda c, ch: None, lambda c: [])
        depth = 0
        remaining = set(channels)
        for depth, cid in enumerate(chain, start=1):  # noqa: B007 - depth is used below
            remaining -= {ch for ch in remaining if has_value(cid, ch)}
            if not remaining:
                break
        span = chain[:depth]
        seed_rows = [
            _Row(
                (
                    thread_id,
                    ns,
                    cid,
                    None,
                    by_id[cid][3],
                    by_id[cid][4],
                    "{}",
                    json.dumps(
                        {
                            ch: v
                            for ch, v in versions[cid].items()
                            if ch in needed and "seed" in needed[ch]
                        }
                    ),
                )
            )
            for cid in span
        ]
        blob_rows: dict[tuple[str, str], tuple[str, bytes, str | None]] = {}
        write_rows: list[Sequence[Any]] = []
        if span:
            details = yield Batch(self._details_stmts(thread_id, ns, seed_rows))
            blob_rows, write_rows = self._split_details(details)
            yield from self._complete_chains(thread_id, ns, blob_rows)
        writes_by_cp: dict[str, list[Sequence[Any]]] = {}
        for w in write_rows:
            writes_by_cp.setdefault(w[0], []).append(w)

        def writes_of(cid: str) -> list[PendingWrite]:
            ordered = sorted(
                writes_by_cp.get(cid, []), key=lambda w: writes_sort_key(w[6], w[1], w[2])
            )
            return [(w[1], w[3], loads((w[4], w[5]))) for w in ordered if w[3] in channels]

        def value_of(cid: str, ch: str) -> Any:
            if ch in versions[cid]:
                return self._value(blob_rows, ch, versions[cid][ch])[0]
            return inline(cid)[ch]

        return delta_history(span, channels, has_value, value_of, writes_of)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._run(self._history_plan(config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._arun(self._history_plan(config, channels))

    # -- TTL sweep -------------------------------------------------------------------------

    def _sweep_plan(self) -> Plan[builtins.list[str]]:
        d = self.dialect
        swept: list[str] = []
        while True:
            now = self._clock()
            [rows] = yield Batch(
                [
                    Stmt(
                        S.select_expired(d),
                        {"now": now, "batch_size": self.sweep_batch},
                        fetch=True,
                    )
                ],
                lock=True,
                hold=True,
            )
            batch = [r[0] for r in rows]
            if not batch:
                horizon = now - max(TOMBSTONE_SECONDS, float(self.ttl_seconds or 0))
                yield Batch(
                    [Stmt(sql, {"horizon": horizon}) for sql in S.purge_tombstones(d)],
                    write=True,
                )
                return swept
            if self.strategy == "delete":
                yield Batch(self._bury(batch, now), write=True)
                self._forget(batch)
            else:
                snapshot = yield from self._thread_snapshot(batch)
                keep = {t: self._keep_latest(cps) for t, (cps, _) in snapshot.items()}
                drop = self._drop_plan(snapshot, keep)
                yield Batch(
                    [
                        *drop.statements,
                        Stmt(S.expire_keep_latest(d), [{"thread_id": t} for t in batch], many=True),
                    ],
                    write=True,
                )
            swept += batch
            if len(batch) < self.sweep_batch:
                return swept

    def sweep(self) -> builtins.list[str]:
        """Remove expired threads now (any number of processes may sweep at once; each thread
        is removed by exactly one). Returns the thread ids this call removed."""
        return self._run(self._sweep_plan())

    async def asweep(self) -> builtins.list[str]:
        return await self._arun(self._sweep_plan())

    # -- versions --------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


class _ListCursor:
    """The state of one ``list()``: which page comes next, how many items are still wanted,
    and the exact metadata filter; the sync and async shells only run its page plans."""

    def __init__(
        self,
        saver: SQLSaver,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> None:
        self.saver = saver
        self.config = config
        self.filter = filter
        self.before = before
        self.remaining = limit
        self.keyset: tuple[str, str, str] | None = None
        self.page_size = LIST_PAGE if limit is None or filter else max(1, min(limit, LIST_PAGE))
        self.done = limit is not None and limit <= 0

    def next_page(self) -> Plan[Any]:
        return self.saver._page_plan(
            self.config, self.filter, self.before, self.keyset, self.page_size
        )

    def take(self, fetched: tuple[Any, tuple[str, str, str] | None]) -> Iterator[CheckpointTuple]:
        """Decode a fetched page lazily, up to the items still wanted."""
        page, self.keyset = fetched
        if self.keyset is None:
            self.done = True
        for row, blob_rows, write_rows in page:
            if self.remaining is not None and self.remaining <= 0:
                self.done = True
                return
            metadata = json.loads(row.metadata)
            if not metadata_matches(metadata, self.filter):
                continue
            writes_here = [w for w in write_rows if w[0] == row.checkpoint_id]
            yield self.saver._decode(row, blob_rows, writes_here, metadata)
            if self.remaining is not None:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.done = True
                    return
