"""``TimedInMemorySaver``: LangGraph's ``InMemorySaver`` whose idle threads expire.

It keeps ``InMemorySaver``'s data layout (``storage``, ``writes``, ``blobs``), so code and
tools that know that class keep working, and adds three things:

* an activity clock per thread, ordered by last use, so a sweep pops expired threads from the
  front in time proportional to what it evicts;
* an index of each thread's write and blob keys, so evicting or deleting a thread costs its
  own size, not the whole saver's (``InMemorySaver.delete_thread`` scans every key);
* one lock that makes a write and an eviction of the same thread atomic with respect to each
  other. Serialization and deserialization of channel values happen outside the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.activity import (
    tombstone_seconds,
    validate_keep_last,
    validate_prune_strategy,
)
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    checked_checkpoint_id,
    checked_thread_id,
    checkpoint_config,
    checkpoints_to_keep,
    delta_channels_of,
    list_coordinates,
    metadata_matches,
    parent_config,
    thread_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.sweeping import SweeperHookup
from langgraph_checkpoint_agent_memory.checkpoint.timed_life import ThreadLife
from langgraph_checkpoint_agent_memory.checkpoint.ttl import (
    default_sweep_interval,
    validate_interval,
    validate_ttl,
)
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: How long a deleted or expired thread is remembered, to refuse late writes that name one of
#: its checkpoints as parent. Never shorter than the TTL itself.
TOMBSTONE_SECONDS = 3600.0

#: A sweep evicts at most this many threads per lock hold, so writers are never starved.
SWEEP_BATCH = 256

BlobKey = tuple[str, str, str, str | int | float]
WriteKey = tuple[str, str, str]


@dataclass
class _ThreadIndex:
    """Every key one thread owns in the shared dicts, and its checkpoints grouped by run."""

    writes: set[WriteKey] = field(default_factory=set)
    blobs: set[BlobKey] = field(default_factory=set)
    runs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)


class TimedInMemorySaver(InMemorySaver):
    """An ``InMemorySaver`` that forgets threads idle for more than ``ttl_seconds``.

    Any ``put``, ``put_writes``, ``get_tuple`` or ``list`` of a thread (sync or async) counts
    as activity. An idle thread is invisible to reads at once; a daemon sweeper, started on the
    first write and stopped by :meth:`close`, the context manager or garbage collection, frees
    its memory within ``ttl_seconds + sweep_interval_seconds``.

    Args:
        ttl_seconds: Idle time after which a thread expires; a positive whole number.
        sweep_interval_seconds: Time between sweeps; defaults to a tenth of the TTL, kept
            between 0.5 s and 60 s.
        keep_last: How many checkpoints of each namespace :meth:`prune` keeps with
            ``strategy="keep_latest"`` (at least 1; default 1, the latest), each with what it
            needs to read back whole.
        serde: Serializer for checkpoints and writes (e.g. LangGraph's
            ``EncryptedSerializer``); defaults to LangGraph's ``JsonPlusSerializer``.
        clock: Monotonic clock in seconds; injectable so tests need not sleep.
    """

    def __init__(
        self,
        ttl_seconds: int,
        *,
        sweep_interval_seconds: float | None = None,
        keep_last: int = 1,
        serde: SerializerProtocol | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        ttl = validate_ttl(ttl_seconds)
        self.keep_last = validate_keep_last(keep_last)
        if ttl is None:
            raise ConfigurationError(
                "ttl_seconds must be positive for TimedInMemorySaver; "
                "use InMemorySaver (or create_checkpointer(ttl_seconds=None)) for no expiry"
            )
        super().__init__(serde=serde)
        self.ttl_seconds: int = ttl
        self.sweep_interval_seconds: float = validate_interval(
            sweep_interval_seconds
        ) or default_sweep_interval(ttl)
        self._clock = clock
        self._lock = threading.RLock()
        self._life = ThreadLife(ttl, tombstone_seconds(TOMBSTONE_SECONDS, ttl))
        self._index: dict[str, _ThreadIndex] = {}
        self._run_threads: dict[str, set[str]] = {}
        self._sweeping = SweeperHookup(
            f"TimedInMemorySaver-sweeper-{id(self):x}", self.sweep_interval_seconds
        )
        fork.register(self)

    def _after_fork(self) -> None:
        """A forked child keeps a copy of the threads but not the sweeper thread: its next
        write starts its own."""
        self._sweeping.after_fork()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(ttl_seconds={self.ttl_seconds}, keep_last={self.keep_last}, "
            f"sweep_interval_seconds={self.sweep_interval_seconds}, threads={len(self._index)})"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the sweeper thread. The saver stays usable; a later write restarts it."""
        self._sweeping.stop()

    def __enter__(self) -> TimedInMemorySaver:
        super().__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> bool | None:
        self.close()
        return super().__exit__(*exc_info)

    async def __aenter__(self) -> TimedInMemorySaver:
        await super().__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self.close()
        return await super().__aexit__(*exc_info)

    @property
    def sweeper_running(self) -> bool:
        """Whether the background sweeper thread is alive."""
        return self._sweeping.running

    # -- activity and eviction (callers hold self._lock) -----------------------------------

    def _expire_if_due(self, thread_id: str, now: float) -> bool:
        """Evict ``thread_id`` if it is idle past the TTL; return whether it did."""
        if self._life.expired(thread_id, now):
            self._evict(thread_id, now)
            return True
        return False

    def _evict(self, thread_id: str, now: float) -> None:
        namespaces = self.storage.pop(thread_id, None) or {}
        self._life.end(thread_id, now, [max(c, default=None) for c in namespaces.values()])
        index = self._index.pop(thread_id, None)
        if index is not None:
            for wkey in index.writes:
                self.writes.pop(wkey, None)
            for bkey in index.blobs:
                self.blobs.pop(bkey, None)
            for run_id in index.runs:
                threads = self._run_threads.get(run_id)
                if threads is not None:
                    threads.discard(thread_id)
                    if not threads:
                        del self._run_threads[run_id]

    def _thread_index(self, thread_id: str) -> _ThreadIndex:
        index = self._index.get(thread_id)
        if index is None:
            index = self._index[thread_id] = _ThreadIndex()
        return index

    def sweep(self) -> int:
        """Evict every expired thread now; the sweeper calls this.

        Returns:
            How many threads were evicted.

        Example:
            >>> saver = TimedInMemorySaver(ttl_seconds=60)
            >>> saver.sweep()
            0
        """
        evicted = 0
        while True:
            with self._lock:
                now = self._clock()
                idle = self._life.idle(now, SWEEP_BATCH)
                for thread_id in idle:
                    self._evict(thread_id, now)
                batch = len(idle)
                self._life.forget_old_tombstones(now)
            evicted += batch
            if batch < SWEEP_BATCH:
                return evicted

    # -- writes ----------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; a write counts as activity and starts the sweeper.

        Args:
            config: The thread and, as ``checkpoint_id``, the parent checkpoint.
            checkpoint: The checkpoint to store.
            metadata: Its metadata.
            new_versions: The channels whose values changed since the parent.

        Raises:
            ThreadDeletedError: The thread was deleted or expired after the parent was read.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> saver = TimedInMemorySaver(ttl_seconds=60)
            >>> cfg = saver.put({"configurable": {"thread_id": "1"}}, empty_checkpoint(), {}, {})
            >>> sorted(cfg["configurable"])
            ['checkpoint_id', 'checkpoint_ns', 'thread_id']
            >>> saver.close()
        """
        thread_id, checkpoint_ns, parent_id = thread_coordinates(config)
        own_id = checked_checkpoint_id(checkpoint["id"])
        dumps = self.serde.dumps_typed
        stored = checkpoint.copy()
        values: dict[str, Any] = stored.pop("channel_values")  # type: ignore[misc]
        blobs = {
            (thread_id, checkpoint_ns, k, v): dumps(values[k]) if k in values else ("empty", b"")
            for k, v in new_versions.items()
        }
        full_metadata = get_checkpoint_metadata(config, metadata)
        entry = (dumps(stored), dumps(full_metadata), parent_id)
        run_id = full_metadata.get("run_id")
        life = self._life
        with self._lock:
            now = self._clock()
            if life.needs_admission(thread_id, now):
                self._expire_if_due(thread_id, now)
                life.admit(thread_id, parent_id, own_id)
            else:
                life.check_floor(thread_id, parent_id)
            self.storage[thread_id][checkpoint_ns][checkpoint["id"]] = entry
            self.blobs.update(blobs)
            index = self._index.get(thread_id) or self._thread_index(thread_id)
            index.blobs.update(blobs)
            if isinstance(run_id, str):
                index.runs.setdefault(run_id, set()).add((checkpoint_ns, checkpoint["id"]))
                self._run_threads.setdefault(run_id, set()).add(thread_id)
            life.touch(thread_id, now)
        if self._sweeping.sweeper is None:
            self._sweeping.start_thread(self, "sweep")
        return checkpoint_config(thread_id, checkpoint_ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes to a checkpoint (first write wins; special channels upsert).

        Args:
            config: Names the checkpoint (``thread_id``, ``checkpoint_id``).
            writes: ``(channel, value)`` pairs.
            task_id: The task that wrote them.
            task_path: The task's path in the graph.

        Example:
            >>> saver.put_writes(cfg, [("messages", ["hi"])], task_id="t1")  # doctest: +SKIP
        """
        thread_id, checkpoint_ns, checkpoint_id = thread_coordinates(config)
        if checkpoint_id is None:
            raise ValueError("put_writes needs config['configurable']['checkpoint_id']")
        outer_key = (thread_id, checkpoint_ns, checkpoint_id)
        dumps = self.serde.dumps_typed
        idx_map = WRITES_IDX_MAP
        encoded = [
            (task_id, idx_map.get(c, idx), (task_id, c, dumps(v), task_path))
            for idx, (c, v) in enumerate(writes)
        ]
        life = self._life
        with self._lock:
            now = self._clock()
            if life.needs_admission(thread_id, now):
                self._expire_if_due(thread_id, now)
                life.admit(thread_id, checkpoint_id)
            else:
                life.check_floor(thread_id, checkpoint_id)
            stored = self.writes.get(outer_key)
            if stored is None:  # a checkpoint's first writes: index them for eviction
                stored = self.writes[outer_key] = {}
                self._thread_index(thread_id).writes.add(outer_key)
            for task, idx, value in encoded:
                # Regular writes: first write wins; special channels (negative idx) upsert.
                if idx >= 0 and (task, idx) in stored:
                    continue
                stored[task, idx] = value
            life.touch(thread_id, now)
        if self._sweeping.sweeper is None:
            self._sweeping.start_thread(self, "sweep")

    # -- reads -----------------------------------------------------------------------------

    def _read_raw(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> (
        tuple[str, Checkpoint, bytes | tuple[str, bytes], str | None, list[Any], dict[str, Any]]
        | None
    ):
        """Collect one checkpoint's stored parts; the caller holds the lock."""
        ns_store = self.storage.get(thread_id, {}).get(checkpoint_ns)
        if not ns_store:
            return None
        if checkpoint_id is None:
            checkpoint_id = max(ns_store)
        saved = ns_store.get(checkpoint_id)
        if saved is None:
            return None
        checkpoint_b, metadata_b, parent_id = saved
        checkpoint: Checkpoint = self.serde.loads_typed(checkpoint_b)
        blobs = {
            k: self.blobs.get((thread_id, checkpoint_ns, k, v))
            for k, v in checkpoint["channel_versions"].items()
        }
        writes = self._ordered_writes(thread_id, checkpoint_ns, checkpoint_id)
        return checkpoint_id, checkpoint, metadata_b, parent_id, writes, blobs

    def _decode(
        self,
        thread_id: str,
        checkpoint_ns: str,
        raw: tuple[str, Checkpoint, Any, str | None, list[Any], dict[str, Any]],
        metadata: CheckpointMetadata | None = None,
    ) -> CheckpointTuple:
        checkpoint_id, checkpoint, metadata_b, parent_id, writes, blobs = raw
        loads = self.serde.loads_typed
        values = {k: loads(b) for k, b in blobs.items() if b is not None and b[0] != "empty"}
        return CheckpointTuple(
            config=checkpoint_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=metadata if metadata is not None else loads(metadata_b),
            parent_config=parent_config(thread_id, checkpoint_ns, parent_id),
            pending_writes=[(tid, c, loads(v)) for tid, c, v, _ in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest; none once it expired.

        Args:
            config: ``thread_id``, optionally ``checkpoint_ns`` and ``checkpoint_id``.

        Example:
            >>> saver.get_tuple({"configurable": {"thread_id": "1"}})  # doctest: +SKIP
        """
        thread_id, checkpoint_ns, checkpoint_id = thread_coordinates(config)
        with self._lock:
            now = self._clock()
            if self._expire_if_due(thread_id, now):
                return None
            raw = self._read_raw(thread_id, checkpoint_ns, checkpoint_id)
            if raw is None:
                return None
            self._life.touch(thread_id, now)
        return self._decode(thread_id, checkpoint_ns, raw)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints newest first, skipping expired threads.

        Args:
            config: One thread (and optionally its namespace and checkpoint id), or ``None``
                for every live thread (which sweeps expired ones first).
            filter: Metadata keys and values each checkpoint must have.
            before: List only checkpoints older than this config's ``checkpoint_id``.
            limit: The most checkpoints to yield.

        Example:
            >>> list(saver.list({"configurable": {"thread_id": "1"}}, limit=1))  # doctest: +SKIP
        """
        before_id = (before or {}).get("configurable", {}).get("checkpoint_id")
        with self._lock:
            now = self._clock()
            listed, wanted_ns, wanted_id = list_coordinates(config)
            if listed is not None:
                if self._expire_if_due(listed, now):
                    return
                thread_ids = [listed] if listed in self.storage else []
            else:
                self.sweep()
                thread_ids = list(self.storage)
            candidates = [
                (thread_id, ns, cid)
                for thread_id in thread_ids
                for ns, ns_store in list(self.storage[thread_id].items())
                if wanted_ns is None or ns == wanted_ns
                for cid in sorted(ns_store, reverse=True)
                if (wanted_id is None or cid == wanted_id)
                and (before_id is None or cid < before_id)
            ]
            for thread_id in thread_ids:
                self._life.touch(thread_id, now)
        remaining = limit
        for thread_id, ns, cid in candidates:
            if remaining is not None and remaining <= 0:
                return
            with self._lock:
                if self._life.expired(thread_id, self._clock()):
                    continue
                saved = self.storage.get(thread_id, {}).get(ns, {}).get(cid)
                if saved is None:
                    continue
                metadata = self.serde.loads_typed(saved[1])
                if not metadata_matches(metadata, filter):
                    continue
                raw = self._read_raw(thread_id, ns, cid)
            if raw is None:
                continue
            if remaining is not None:
                remaining -= 1
            yield self._decode(thread_id, ns, raw, metadata)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The writes that rebuild each ``DeltaChannel`` at a checkpoint, and their seed.

        Args:
            config: The checkpoint (its thread's latest when no ``checkpoint_id`` is given);
                an expired thread has an empty history.
            channels: Names of the ``DeltaChannel`` channels.

        Example:
            >>> saver.get_delta_channel_history(config=cfg, channels=["m"])  # doctest: +SKIP
        """
        thread_id, _, _ = thread_coordinates(config)
        with self._lock:
            now = self._clock()
            if self._expire_if_due(thread_id, now) or thread_id not in self.storage:
                return {ch: {"writes": []} for ch in channels}
            self._life.touch(thread_id, now)
            return super().get_delta_channel_history(config=config, channels=channels)

    # -- thread management -----------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Forget a thread, leaving a tombstone that refuses late writes into it.

        Args:
            thread_id: The thread to delete.

        Example:
            >>> saver.delete_thread("1")  # doctest: +SKIP
        """
        with self._lock:
            self._evict(checked_thread_id(thread_id), self._clock())

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints runs created, with their writes and unreferenced blobs.

        Args:
            run_ids: The ``run_id`` values of the checkpoints' metadata.

        Example:
            >>> saver.delete_for_runs([run_id])  # doctest: +SKIP
        """
        with self._lock:
            touched: set[str] = set()
            for run_id in run_ids:
                for thread_id in self._run_threads.pop(run_id, set()):
                    index = self._index.get(thread_id)
                    if index is None:
                        continue
                    for ns, cid in index.runs.pop(run_id, set()):
                        self._drop_checkpoint(thread_id, ns, cid, index)
                    touched.add(thread_id)
            for thread_id in touched:
                self._collect_blobs(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a live thread's checkpoints, writes and blobs to another; both count as active.

        Args:
            source_thread_id: The thread to copy from.
            target_thread_id: The thread to copy to.

        Example:
            >>> saver.copy_thread("1", "1-fork")  # doctest: +SKIP
        """
        src, dst = str(source_thread_id), str(target_thread_id)
        with self._lock:
            now = self._clock()
            if self._expire_if_due(src, now) or src not in self._index:
                return
            self._expire_if_due(dst, now)
            src_index = self._index[src]
            dst_index = self._thread_index(dst)
            for ns, ns_store in self.storage.get(src, {}).items():
                self.storage[dst][ns].update(ns_store)
            for _, ns, cid in src_index.writes:
                wkey = (dst, ns, cid)
                self.writes[wkey] = dict(self.writes.get((src, ns, cid), {}))
                dst_index.writes.add(wkey)
            for _, ns, ch, version in src_index.blobs:
                bkey = (dst, ns, ch, version)
                self.blobs[bkey] = self.blobs[(src, ns, ch, version)]
                dst_index.blobs.add(bkey)
            for run_id, members in src_index.runs.items():
                dst_index.runs.setdefault(run_id, set()).update(members)
                self._run_threads.setdefault(run_id, set()).add(dst)
            self._life.took_history(dst)  # the copied history is the target's now
            self._life.touch(dst, now)
            self._life.touch(src, now)

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Shrink threads' history: ``"keep_latest"`` keeps each namespace's last
        ``keep_last`` checkpoints and the ancestors their ``DeltaChannel`` values need;
        ``"delete"`` deletes the threads.

        Args:
            thread_ids: The threads to prune.
            strategy: ``"keep_latest"`` or ``"delete"``.
            keep_last: Checkpoints kept per namespace (at least 1); ``None``: the saver's
                ``keep_last``.

        Example:
            >>> saver.prune(["1"], keep_last=3)  # doctest: +SKIP
        """
        validate_prune_strategy(strategy)
        n = self.keep_last if keep_last is None else validate_keep_last(keep_last)
        with self._lock:
            now = self._clock()
            for thread_id in map(str, thread_ids):
                if self._expire_if_due(thread_id, now) or thread_id not in self._index:
                    continue
                if strategy == "delete":
                    self._evict(thread_id, now)
                    continue
                index = self._index[thread_id]
                for ns, ns_store in list(self.storage.get(thread_id, {}).items()):
                    if not ns_store:
                        continue
                    keep = self._checkpoints_to_keep(thread_id, ns, ns_store, n)
                    for cid in [c for c in ns_store if c not in keep]:
                        self._drop_checkpoint(thread_id, ns, cid, index)
                self._collect_blobs(thread_id)

    def _checkpoints_to_keep(
        self,
        thread_id: str,
        ns: str,
        ns_store: dict[str, tuple[Any, Any, str | None]],
        keep_last: int,
    ) -> set[str]:
        loads = self.serde.loads_typed

        def has_value(cid: str, channel: str) -> bool:
            version = loads(ns_store[cid][0])["channel_versions"].get(channel)
            blob = self.blobs.get((thread_id, ns, channel, version))
            return blob is not None and blob[0] != "empty"

        return checkpoints_to_keep(
            sorted(ns_store, reverse=True),
            keep_last,
            lambda cid: delta_channels_of(loads(ns_store[cid][1])),
            lambda cid: ns_store[cid][2] if ns_store[cid][2] in ns_store else None,
            has_value,
        )

    def _drop_checkpoint(self, thread_id: str, ns: str, cid: str, index: _ThreadIndex) -> None:
        self.storage.get(thread_id, {}).get(ns, {}).pop(cid, None)
        self.writes.pop((thread_id, ns, cid), None)
        index.writes.discard((thread_id, ns, cid))

    def _collect_blobs(self, thread_id: str) -> None:
        """Drop the blobs of ``thread_id`` that no remaining checkpoint refers to."""
        index = self._index.get(thread_id)
        if index is None:
            return
        loads = self.serde.loads_typed
        referenced = {
            (thread_id, ns, ch, v)
            for ns, ns_store in self.storage.get(thread_id, {}).items()
            for saved in ns_store.values()
            for ch, v in loads(saved[0])["channel_versions"].items()
        }
        for key in index.blobs - referenced:
            self.blobs.pop(key, None)
        index.blobs &= referenced

    # -- async API: the work is in-memory and short, so it runs inline ---------------------
    # (InMemorySaver's aget_tuple, alist, aput, aput_writes, adelete_thread and
    # aget_delta_channel_history already call the methods above)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Asynchronously :meth:`delete_for_runs` (in-memory work runs inline)."""
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Asynchronously :meth:`copy_thread` (in-memory work runs inline)."""
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Asynchronously :meth:`prune` (in-memory work runs inline)."""
        self.prune(thread_ids, strategy=strategy, keep_last=keep_last)
