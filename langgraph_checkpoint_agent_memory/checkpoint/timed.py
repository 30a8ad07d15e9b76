"""``TimedInMemorySaver``: an in-memory checkpointer whose idle threads expire.

Not built on ``InMemorySaver``, whose public methods cannot evict one thread at its own cost,
atomically with writes, or drop single checkpoints; it answers as ``InMemorySaver`` does. One
lock makes a write and an eviction atomic; (de)serialization runs outside it.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.background import ClosesOnExit
from langgraph_checkpoint_agent_memory.checkpoint.codec import (
    WriteRow,
    metadata_json,
    pending_writes,
    write_row,
)
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    VersionCounter,
    ancestors,
    checked_before_id,
    checked_filter,
    checked_limit,
    checked_thread_id,
    checkpoint_config,
    checkpoint_id_of,
    checkpoints_to_keep,
    delta_history,
    list_coordinates,
    metadata_matches,
    parent_config,
    slice_stop,
    thread_coordinates,
    writes_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import (
    SweeperHookup,
    ThreadLife,
    sweep_interval,
    thread_ttl,
    tombstone_seconds,
    validate_keep_last,
    validate_strategy,
    validate_ttl,
)
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import (
    AttributeValue,
    Target,
    live,
    operation,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.crypto.config import EncryptionLike
    from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring

#: How long an ended thread is remembered, to refuse late writes into it (at least the TTL).
TOMBSTONE_SECONDS = 3600.0
#: A sweep evicts at most this many threads per lock hold, so writers are never starved.
SWEEP_BATCH = 256
#: The environment variable that turns encryption on (``crypto.config.MASTER_KEY_ENV``).
MASTER_KEY_ENV = "AGENT_MEMORY_MASTER_KEY"
F = TypeVar("F", bound=Callable[..., Any])
#: No database, no server: this saver's spans are internal ones.
MEMORY = Target("")


def traced(
    name: str, counts: Callable[[Any], Mapping[str, AttributeValue]] | None = None
) -> Callable[[F], F]:
    """Run a method in the span ``checkpoint.<name>``, with ``counts`` of its result."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(saver: Any, *args: Any, **kwargs: Any) -> Any:
            if not live():
                return method(saver, *args, **kwargs)
            about = args[0] if args else kwargs.get("config", kwargs.get("thread_id"))
            if isinstance(about, Mapping):
                about = (about.get("configurable") or {}).get("thread_id")
            sealed = saver.keyring is not None
            ids = {"langgraph.thread_id": None if sealed or not isinstance(about, str) else about}
            with operation(f"checkpoint.{name}", MEMORY, ids, sealed=sealed) as op:
                result = method(saver, *args, **kwargs)
                for key, value in (counts(result) if counts else {}).items():
                    op.set(key, value)
                return result

        return cast(F, run)

    return wrap


def listed(result: Any) -> dict[str, AttributeValue]:
    """How many checkpoints a listing selected."""
    return {"db.response.returned_rows": len(result)}


def swept(result: int) -> dict[str, AttributeValue]:
    """How many threads a sweep evicted, also counted in the swept-threads metric."""
    metrics.add("threads_swept", result, {})
    return {"agent_memory.thread_count": result}


Version = str | int | float
Typed = tuple[str, bytes]
Loads = Callable[[Typed], Any]

#: The stored value of a channel that has a version but no value.
EMPTY: Typed = ("empty", b"")


class Saved(NamedTuple):
    """One checkpoint as stored (serialized without its channel values)."""

    checkpoint: Typed
    metadata: Typed
    parent_id: str | None


class Found(NamedTuple):
    """One checkpoint's stored parts, collected under the saver's lock and decoded outside it."""

    checkpoint_id: str
    checkpoint: Checkpoint
    saved: Saved
    blobs: dict[str, Typed | None]
    writes: list[WriteRow]


@dataclass(slots=True)
class ThreadData:
    """Everything one thread holds."""

    #: namespace -> checkpoint id -> checkpoint
    checkpoints: dict[str, dict[str, Saved]] = field(default_factory=dict)
    #: (namespace, channel, version) -> serialized value (:data:`EMPTY` for none)
    blobs: dict[tuple[str, str, Version], Typed] = field(default_factory=dict)
    #: (namespace, checkpoint id) -> (task id, write index) -> write
    writes: dict[tuple[str, str], dict[tuple[str, int], WriteRow]] = field(default_factory=dict)
    #: run id -> the (namespace, checkpoint id) it created
    runs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)

    def find(self, checkpoint_ns: str, checkpoint_id: str | None, loads: Loads) -> Found | None:
        """One checkpoint's stored parts (by default the namespace's latest), or ``None``."""
        ns_store = self.checkpoints.get(checkpoint_ns)
        if not ns_store:
            return None
        checkpoint_id = max(ns_store) if checkpoint_id is None else checkpoint_id
        saved = ns_store.get(checkpoint_id)
        if saved is None:
            return None
        checkpoint: Checkpoint = loads(saved.checkpoint)
        blobs = self.blobs
        values = {
            k: blobs.get((checkpoint_ns, k, v)) for k, v in checkpoint["channel_versions"].items()
        }
        writes = self.writes.get((checkpoint_ns, checkpoint_id))
        return Found(
            checkpoint_id, checkpoint, saved, values, list(writes.values()) if writes else []
        )

    def listed(
        self, wanted_ns: str | None, wanted_id: str | None, before_id: str | None
    ) -> list[tuple[str, str]]:
        """The ``(namespace, checkpoint id)`` pairs a ``list`` call selects, newest first."""
        return [
            (ns, cid)
            for ns, ns_store in self.checkpoints.items()
            if wanted_ns is None or ns == wanted_ns
            for cid in sorted(ns_store, reverse=True)
            if (wanted_id is None or cid == wanted_id) and (before_id is None or cid < before_id)
        ]

    def value_blob(self, ns: str, channel: str, version: Version | None) -> Typed | None:
        """The stored value of ``channel`` at ``version``; ``None`` when it has none."""
        found = self.blobs.get((ns, channel, version)) if version is not None else None
        return found if found is not None and found[0] != "empty" else None

    def delta_history(
        self,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        channels: Sequence[str],
        serde: SerializerProtocol,
    ) -> Mapping[str, DeltaChannelHistory]:
        """:func:`~.core.delta_history` at a checkpoint of this thread."""
        loads = serde.loads_typed
        ns_store = self.checkpoints.get(checkpoint_ns, {})
        target = ns_store.get(checkpoint_id or max(ns_store, default=""))
        chain = list(ancestors(ns_store, target.parent_id if target is not None else None))
        versions: dict[str, ChannelVersions] = {}

        def blob(cid: str, channel: str) -> Typed | None:
            if cid not in versions:
                versions[cid] = loads(ns_store[cid].checkpoint)["channel_versions"]
            return self.value_blob(checkpoint_ns, channel, versions[cid].get(channel))

        def writes_of(cid: str) -> list[Any]:
            stored = self.writes.get((checkpoint_ns, cid))
            return pending_writes(serde, list(stored.values()), channels) if stored else []

        return delta_history(
            chain,
            channels,
            lambda cid, ch: blob(cid, ch) is not None,
            lambda cid, ch: loads(blob(cid, ch) or EMPTY),
            writes_of,
        )

    def copy_into(self, target: ThreadData) -> None:
        """Add this thread's checkpoints, values, writes and runs to ``target``."""
        for ns, ns_store in self.checkpoints.items():
            target.checkpoints.setdefault(ns, {}).update(ns_store)
        target.blobs.update(self.blobs)
        for key, stored in self.writes.items():
            target.writes[key] = dict(stored)
        for run_id, members in self.runs.items():
            target.runs.setdefault(run_id, set()).update(members)

    def mapped(self, change: Callable[[Typed], Typed]) -> ThreadData:
        """A copy with every stored value passed through ``change`` (to re-seal it)."""
        copy = ThreadData()
        self.copy_into(copy)
        for by_id in copy.checkpoints.values():
            for cid, saved in by_id.items():
                by_id[cid] = Saved(
                    change(saved.checkpoint), change(saved.metadata), saved.parent_id
                )
        copy.blobs = {key: change(typed) for key, typed in copy.blobs.items()}
        for rows in copy.writes.values():
            for k, w in rows.items():
                kind, blob = change((w.type, w.blob))
                rows[k] = WriteRow(*w[:4], kind, blob, w.task_path)
        return copy

    def keep_latest(self, keep_last: int, loads: Loads) -> None:
        """Keep each namespace's :func:`checkpoints_to_keep`; drop the rest and their values."""
        for ns, ns_store in list(self.checkpoints.items()):
            keep = self._to_keep(ns, ns_store, keep_last, loads)
            for cid in [c for c in ns_store if c not in keep]:
                self.drop_checkpoint(ns, cid)
        self.collect_blobs(loads)

    def _to_keep(
        self, ns: str, ns_store: dict[str, Saved], keep_last: int, loads: Loads
    ) -> set[str]:
        def has_value(cid: str, channel: str) -> bool:
            version = loads(ns_store[cid].checkpoint)["channel_versions"].get(channel)
            return self.value_blob(ns, channel, version) is not None

        return checkpoints_to_keep(
            ns_store, keep_last, lambda cid: loads(ns_store[cid].metadata), has_value
        )

    def drop_checkpoint(self, ns: str, cid: str) -> None:
        """Forget one checkpoint and its writes (its values stay until :meth:`collect_blobs`)."""
        self.checkpoints.get(ns, {}).pop(cid, None)
        self.writes.pop((ns, cid), None)

    def collect_blobs(self, loads: Loads) -> None:
        """Drop the values no remaining checkpoint refers to."""
        referenced = {
            (ns, ch, v)
            for ns, ns_store in self.checkpoints.items()
            for saved in ns_store.values()
            for ch, v in loads(saved.checkpoint)["channel_versions"].items()
        }
        self.blobs = {k: b for k, b in self.blobs.items() if k in referenced}


class TimedInMemorySaver(ClosesOnExit, VersionCounter, BaseCheckpointSaver[str]):
    """An in-memory checkpointer that forgets threads idle for more than ``ttl_seconds``.

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
        encryption: As for the SQL savers: values sealed with a key per thread (kept in
            memory), destroyed when the thread is deleted or evicted; with it on,
            ``ttl_seconds=None`` is accepted (threads never expire).

    Example:
        >>> with TimedInMemorySaver(ttl_seconds=600) as saver:
        ...     saver.ttl_seconds, saver.sweep_interval_seconds
        (600, 60.0)
    """

    def __init__(
        self,
        ttl_seconds: int | None,
        *,
        sweep_interval_seconds: float | None = None,
        keep_last: int = 1,
        serde: SerializerProtocol | None = None,
        clock: Callable[[], float] = time.monotonic,
        encryption: EncryptionLike = None,
    ) -> None:
        ttl = validate_ttl(ttl_seconds)
        self.keep_last = validate_keep_last(keep_last)
        #: The data keys, else ``None``; crypto loads only when encryption may be on.
        self.keyring: Keyring | None = None
        if encryption is not False and (
            encryption is not None or os.environ.get(MASTER_KEY_ENV, "").strip()
        ):
            from langgraph_checkpoint_agent_memory.crypto.config import resolve

            setting = resolve(encryption)
            self.keyring = setting.open_keyring(None) if setting else None
        if ttl is None and self.keyring is None:
            raise ConfigurationError(
                "ttl_seconds must be positive for TimedInMemorySaver; "
                "use InMemorySaver (or create_checkpointer(ttl_seconds=None)) for no expiry"
            )
        super().__init__(serde=serde)
        self.ttl_seconds: int | None = ttl
        self.sweep_interval_seconds = sweep_interval(sweep_interval_seconds, ttl)
        self._clock = clock
        self._lock = threading.RLock()
        self._life = ThreadLife(
            math.inf if ttl is None else ttl, tombstone_seconds(TOMBSTONE_SECONDS, ttl)
        )
        #: thread id -> its data, in the order threads got their first checkpoint
        self._threads: dict[str, ThreadData] = {}
        self._run_threads: dict[str, set[str]] = {}
        self._sweeping = SweeperHookup(
            f"TimedInMemorySaver-sweeper-{id(self):x}", self.sweep_interval_seconds
        )
        fork.register(self)

    def after_fork(self) -> None:
        """A forked child keeps the threads but not the sweeper: its next write starts one."""
        self._sweeping.after_fork()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(ttl_seconds={self.ttl_seconds}, keep_last={self.keep_last}, "
            f"sweep_interval_seconds={self.sweep_interval_seconds}, threads={len(self._threads)})"
        )

    def _serde_for(self, thread_id: str, config: RunnableConfig | None = None) -> Any:
        """The serializer of ``thread_id``'s values (see :func:`.sealing.thread_serde`)."""
        if self.keyring is None:
            return self.serde
        from langgraph_checkpoint_agent_memory.checkpoint.sealing import thread_serde

        return thread_serde(self.serde, self.keyring, thread_id, config)

    def _start_sweeper(self) -> None:
        if self._sweeping.sweeper is None and self.ttl_seconds is not None:
            self._sweeping.start_thread(self, "sweep")

    def close(self) -> None:
        """Stop the sweeper thread. The saver stays usable; a later write restarts it.

        Example:
            >>> saver = TimedInMemorySaver(ttl_seconds=60)
            >>> saver.close()
            >>> saver.sweeper_running
            False
        """
        self._sweeping.stop()

    async def aclose(self) -> None:
        """Asynchronously :meth:`close` (it only signals the sweeper thread)."""
        self.close()

    @property
    def sweeper_running(self) -> bool:
        """Whether the background sweeper thread is alive."""
        return self._sweeping.running

    # -- activity and eviction (callers hold self._lock) -----------------------------------

    def _live(self, thread_id: str, now: float) -> ThreadData | None:
        """``thread_id``'s data; ``None`` if it has none, or is idle past the TTL (evicted)."""
        if self._life.expired(thread_id, now):
            self._evict(thread_id, now)
            return None
        return self._threads.get(thread_id)

    def _evict(self, thread_id: str, now: float) -> None:
        thread = self._threads.pop(thread_id, None)
        namespaces = thread.checkpoints.values() if thread is not None else ()
        self._life.end(thread_id, now, [max(ids, default=None) for ids in namespaces])
        if self.keyring is not None:  # deleted or expired: its key goes too
            from langgraph_checkpoint_agent_memory.crypto.cipher import thread_owner

            self.keyring.destroy([thread_owner(thread_id)])
        if thread is None:
            return
        for run_id in thread.runs:
            if (threads := self._run_threads.get(run_id)) is not None:
                threads.discard(thread_id)
                if not threads:
                    del self._run_threads[run_id]

    @traced("sweep", swept)
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
                self._life.forget_old_tombstones(now)
            evicted += len(idle)
            if len(idle) < SWEEP_BATCH:
                return evicted

    @traced("put")
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
        own_id = checkpoint_id_of(checkpoint)
        thread_ttl(config, None)  # refused as the SQL savers refuse it, before any write
        dumps = self._serde_for(thread_id, config).dumps_typed
        stored = checkpoint.copy()
        values: dict[str, Any] = stored.pop("channel_values")  # type: ignore[misc]
        blobs = {
            (checkpoint_ns, k, v): dumps(values[k]) if k in values else EMPTY
            for k, v in new_versions.items()
        }
        full_metadata = get_checkpoint_metadata(config, metadata)
        metadata_json(full_metadata)  # refused as the SQL savers refuse it
        saved = Saved(dumps(stored), dumps(full_metadata), parent_id)
        run_id = full_metadata.get("run_id")
        life = self._life
        with self._lock:
            now = self._clock()
            if life.needs_admission(thread_id, now):
                self._live(thread_id, now)
                life.admit(thread_id, parent_id, own_id)
            else:
                life.check_floor(thread_id, parent_id)
            thread = self._threads.get(thread_id) or self._threads.setdefault(
                thread_id, ThreadData()
            )
            if not thread.checkpoints:  # listed in the order of first checkpoints
                self._threads[thread_id] = self._threads.pop(thread_id)
            thread.checkpoints.setdefault(checkpoint_ns, {})[own_id] = saved
            thread.blobs.update(blobs)
            if isinstance(run_id, str):
                thread.runs.setdefault(run_id, set()).add((checkpoint_ns, own_id))
                self._run_threads.setdefault(run_id, set()).add(thread_id)
            life.touch(thread_id, now)
        self._start_sweeper()
        return checkpoint_config(thread_id, checkpoint_ns, own_id)

    @traced("put_writes")
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
            >>> saver.put_writes(saved, [("messages", ["hi"])], task_id="t1")
        """
        thread_id, checkpoint_ns, checkpoint_id = writes_coordinates(config)
        dumps = self._serde_for(thread_id, config).dumps_typed
        idx_map = WRITES_IDX_MAP
        rows: list[WriteRow] = [
            write_row(
                (checkpoint_id, task_id, idx_map.get(channel, i), channel, *dumps(value), task_path)
            )
            for i, (channel, value) in enumerate(writes)
        ]
        life = self._life
        with self._lock:
            now = self._clock()
            if life.needs_admission(thread_id, now):
                self._live(thread_id, now)
                life.admit(thread_id, checkpoint_id)
            else:
                life.check_floor(thread_id, checkpoint_id)
            thread = self._threads.get(thread_id) or self._threads.setdefault(
                thread_id, ThreadData()
            )
            key = (checkpoint_ns, checkpoint_id)
            stored = thread.writes.get(key)
            if stored is None:
                stored = thread.writes[key] = {}
            for row in rows:  # regular writes: first write wins; special ones (idx < 0) upsert
                if row.idx < 0 or (task_id, row.idx) not in stored:
                    stored[task_id, row.idx] = row
            life.touch(thread_id, now)
        self._start_sweeper()

    def _decode(
        self,
        thread_id: str,
        checkpoint_ns: str,
        found: Found,
        metadata: CheckpointMetadata | None = None,
    ) -> CheckpointTuple:
        serde = self._serde_for(thread_id)
        loads = serde.loads_typed
        values = {k: loads(b) for k, b in found.blobs.items() if b is not None and b[0] != "empty"}
        return CheckpointTuple(
            config=checkpoint_config(thread_id, checkpoint_ns, found.checkpoint_id),
            checkpoint={**found.checkpoint, "channel_values": values},
            metadata=metadata if metadata is not None else loads(found.saved.metadata),
            parent_config=parent_config(thread_id, checkpoint_ns, found.saved.parent_id),
            pending_writes=pending_writes(serde, found.writes),
        )

    @traced("get_tuple", lambda found: listed([found] if found else []))
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest; none once it expired.

        Args:
            config: ``thread_id``, optionally ``checkpoint_ns`` and ``checkpoint_id``.

        Example:
            >>> saver.get_tuple({"configurable": {"thread_id": "user-17"}}) is None  # expired
            True
        """
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        with self._lock:
            now = self._clock()
            thread = self._live(thread_id, now)
            if thread is None:
                return None
            found = thread.find(ns, checkpoint_id, self._serde_for(thread_id).loads_typed)
            if found is None:
                return None
            self._life.touch(thread_id, now)
        return self._decode(thread_id, ns, found)

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
            >>> [t.metadata["step"] for t in saver.list({"configurable": {"thread_id": "user-42"}})]
            [4, 3, 2, 1, 0, -1]
        """
        checked_filter(filter)
        limit = checked_limit(limit)
        before_id = checked_before_id(before)
        found = (
            self._decode(thread_id, ns, *parts)
            for thread_id, ns, cid in self._list_candidates(config, before_id)
            if (parts := self._listed(thread_id, ns, cid, filter)) is not None
        )
        yield from found if limit is None else itertools.islice(found, slice_stop(limit))

    @traced("list", listed)  # the span of finding what to list; tuples decode lazily
    def _list_candidates(
        self, config: RunnableConfig | None, before_id: str | None
    ) -> Sequence[tuple[str, str, str]]:
        """The ``(thread, namespace, id)`` a ``list`` call selects; its threads count as active."""
        with self._lock:
            now = self._clock()
            listed, wanted_ns, wanted_id = list_coordinates(config)
            if listed is not None:
                thread_ids = [listed] if self._live(listed, now) is not None else []
            else:
                self.sweep()
                thread_ids = list(self._threads)
            for thread_id in thread_ids:
                self._life.touch(thread_id, now)
            return [
                (thread_id, ns, cid)
                for thread_id in thread_ids
                for ns, cid in self._threads[thread_id].listed(wanted_ns, wanted_id, before_id)
            ]

    def _listed(
        self, thread_id: str, ns: str, cid: str, filter: dict[str, Any] | None
    ) -> tuple[Found, CheckpointMetadata] | None:
        """One listed checkpoint's parts and metadata, if it is still there and matches."""
        loads = self._serde_for(thread_id).loads_typed
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or self._life.expired(thread_id, self._clock()):
                return None
            saved = thread.checkpoints.get(ns, {}).get(cid)
            if saved is None:
                return None
            metadata: CheckpointMetadata = loads(saved.metadata)
            if not metadata_matches(metadata, filter):
                return None
            found = thread.find(ns, cid, loads)
        return None if found is None else (found, metadata)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The writes that rebuild each ``DeltaChannel`` at a checkpoint, and their seed.

        Args:
            config: The checkpoint (its thread's latest when no ``checkpoint_id`` is given);
                an expired thread has an empty history.
            channels: Names of the ``DeltaChannel`` channels.

        Example:
            >>> saver.get_delta_channel_history(config=saved, channels=["messages"])
            {'messages': {'writes': [...]...}}
        """
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        with self._lock:
            now = self._clock()
            thread = self._live(thread_id, now)
            if thread is None:
                return {ch: {"writes": []} for ch in channels}
            self._life.touch(thread_id, now)
            return thread.delta_history(ns, checkpoint_id, channels, self._serde_for(thread_id))

    @traced("delete_thread")
    def delete_thread(self, thread_id: str) -> None:
        """Forget a thread, leaving a tombstone that refuses late writes into it.

        Args:
            thread_id: The thread to delete.

        Example:
            >>> saver.delete_thread("user-42")
        """
        with self._lock:
            self._evict(checked_thread_id(thread_id), self._clock())

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints runs created, with their writes and unreferenced blobs.

        Args:
            run_ids: The ``run_id`` values of the checkpoints' metadata.

        Example:
            >>> saver.delete_for_runs(["1ef4f797-8335-6428-8001-8a1503f9b875"])
        """
        with self._lock:
            touched: set[str] = set()
            for run_id in run_ids:
                for thread_id in self._run_threads.pop(run_id, set()):
                    if (thread := self._threads.get(thread_id)) is None:
                        continue
                    for ns, cid in thread.runs.pop(run_id, set()):
                        thread.drop_checkpoint(ns, cid)
                    touched.add(thread_id)
            for thread_id in touched:
                self._threads[thread_id].collect_blobs(self._serde_for(thread_id).loads_typed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a live thread's checkpoints, writes and blobs to another; both count as active.

        Args:
            source_thread_id: The thread to copy from.
            target_thread_id: The thread to copy to.

        Example:
            >>> saver.copy_thread("user-42", "user-42-fork")
        """
        src, dst = str(source_thread_id), str(target_thread_id)
        with self._lock:
            now = self._clock()
            source = self._live(src, now)
            if source is None:
                return
            self._live(dst, now)
            if self.keyring is not None:  # sealed for the source: re-sealed for the target
                from langgraph_checkpoint_agent_memory.checkpoint.sealing import resealed_copy

                source = resealed_copy(self.serde, self.keyring, source, src, dst)
            source.copy_into(self._threads.setdefault(dst, ThreadData()))
            for run_id in source.runs:
                self._run_threads.setdefault(run_id, set()).add(dst)
            self._life.took_history(dst)  # the copied history is the target's now
            self._life.touch(dst, now)
            self._life.touch(src, now)

    @traced("prune")
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
            >>> saver.prune(["user-42"], keep_last=3)
            >>> len(list(saver.list({"configurable": {"thread_id": "user-42"}})))
            3
        """
        validate_strategy(strategy, "prune strategy")
        n = self.keep_last if keep_last is None else validate_keep_last(keep_last)
        with self._lock:
            now = self._clock()
            for thread_id in map(str, thread_ids):
                if self._live(thread_id, now) is None:
                    continue
                if strategy == "delete":
                    self._evict(thread_id, now)
                    continue
                self._threads[thread_id].keep_latest(n, self._serde_for(thread_id).loads_typed)

    # -- async: the work is in memory and short, so each runs its sync twin inline --------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Asynchronously :meth:`get_tuple` (in-memory work runs inline)."""
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Asynchronously :meth:`list` (in-memory work runs inline)."""
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Asynchronously :meth:`put` (in-memory work runs inline)."""
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Asynchronously :meth:`put_writes` (in-memory work runs inline)."""
        self.put_writes(config, writes, task_id, task_path)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Asynchronously :meth:`get_delta_channel_history` (in-memory work runs inline)."""
        return self.get_delta_channel_history(config=config, channels=channels)

    async def adelete_thread(self, thread_id: str) -> None:
        """Asynchronously :meth:`delete_thread` (in-memory work runs inline)."""
        self.delete_thread(thread_id)

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
