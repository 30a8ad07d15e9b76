"""One ``BaseCheckpointSaver`` for SQLite, PostgreSQL and SAP HANA.

Every operation is a *plan* (see :mod:`langgraph_checkpoint_agent_memory.db.database`): it
builds statements and decodes rows without I/O, and the database object runs it with a sync
or an async driver. So ``put`` and ``aput`` share one implementation, and each dialect only
contributes compiled SQL (:mod:`langgraph_checkpoint_agent_memory.db.checkpoint`).

:class:`SQLSaver` is a façade over small parts, each a module:

* :mod:`.codec`: channel values to rows and back; inline values, blobs, and lists stored as
  only their appended items;
* :mod:`.activity`: the TTL policy (thread rows, the live-after bound, touch coalescing,
  tombstones), shared with :class:`TimedInMemorySaver`;
* :mod:`.writes` and :mod:`.reads`: the plans of the hot path (``put``, ``put_writes``,
  ``get_tuple``) and of ``list`` and ``get_delta_channel_history``;
* :mod:`.upkeep` over :mod:`.maintenance`: delete, erase, delete_for_runs, copy, prune and
  the sweep;
* :mod:`.retention` (through :mod:`.upkeep`): what each thread stores, and what a sweep
  would free;
* :mod:`.sweeping`: the background sweeper, a thread or a task.

TTL: with ``ttl_seconds`` (or ``config["configurable"]["ttl_seconds"]`` per thread) each thread
row carries ``expires_at``. Reads ignore expired threads at once; a sweeper deletes them (or
prunes them to their last ``keep_last`` checkpoints with ``strategy="keep_latest"``). A
deleted or expired thread leaves a tombstone, so a late write that names one of its
checkpoints is refused with :class:`ThreadDeletedError` instead of resurrecting it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.background import ClosesOnExit
from langgraph_checkpoint_agent_memory.checkpoint.codec import ListCache
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    next_channel_version,
)
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import (
    Strategy,
    SweeperHookup,
    ThreadActivity,
    default_sweep_interval,
    validate_interval,
    validate_keep_last,
    validate_strategy,
    validate_ttl,
)
from langgraph_checkpoint_agent_memory.checkpoint.reads import ListCursor, Reader
from langgraph_checkpoint_agent_memory.checkpoint.sealing import Sealer
from langgraph_checkpoint_agent_memory.checkpoint.threads import Maintenance
from langgraph_checkpoint_agent_memory.checkpoint.upkeep import ThreadUpkeep
from langgraph_checkpoint_agent_memory.checkpoint.writes import Writer
from langgraph_checkpoint_agent_memory.crypto.config import EncryptionLike, resolve
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Database
from langgraph_checkpoint_agent_memory.db.migrations import CHECKPOINT, KEYS

__all__ = ["SQLSaver", "Strategy"]


class SQLSaver(ThreadUpkeep, ClosesOnExit, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over any :class:`Database` (SQLite, PostgreSQL, SAP HANA).

    Every method has an async twin (``aput``, ``aget_tuple``, ...) running the same plan.

    Args:
        database: Where checkpoints live.
        ttl_seconds: Idle seconds after which a thread expires; ``None`` or ``0``: never.
            A thread's own ``config["configurable"]["ttl_seconds"]`` overrides it.
        strategy: What expiry does: ``"delete"`` the thread, or ``"keep_latest"`` (prune its
            history to the last ``keep_last`` checkpoints of each namespace; the thread stays
            readable).
        keep_last: How many checkpoints of each namespace ``keep_latest`` keeps, in the sweep
            and in :meth:`prune` (at least 1; default 1, the latest). Each kept checkpoint
            reads back whole: the ancestors its ``DeltaChannel`` values are rebuilt from and
            the bases of its appended lists are kept with it.
        refresh_on_read: Whether reads count as activity.
        activity_precision: Activity is written to the thread's row at most once per this
            fraction of its TTL (per thread and process), not on every graph step; expiry is
            pushed out by the same slack, so an idle thread expires after between ``ttl`` and
            ``ttl * (1 + activity_precision)`` seconds. ``0`` writes activity on every call.
        incremental_lists: Store a list that only grew as its appended items (see
            :mod:`.codec`). Assumes list items are not mutated in place once stored, which
            holds for LangGraph's ``add_messages``; turn it off for state that mutates list
            items.
        sweep_interval_seconds: Time between background sweeps (default: a tenth of the TTL,
            between 0.5 s and 60 s). The sweeper starts with the first write when a TTL is set.
        sweep_batch: Threads removed per sweep transaction.
        auto_setup: Create or migrate the schema on first use.
        serde: Serializer; defaults to LangGraph's ``JsonPlusSerializer``.
        clock: Wall clock in seconds since the epoch (shared by processes through the rows).
        encryption: Encryption at rest (see the user guide's "Encryption and erasure"):
            ``None`` (the default) follows the environment (``AGENT_MEMORY_MASTER_KEY``,
            ``AGENT_MEMORY_KEYSTORE_URL``), ``False`` is off, or a master key, a
            ``KeyProvider`` or an ``Encryption``. On: checkpoint bodies, channel values,
            pending writes and metadata are sealed with the data key of the thread (or of
            the store scope ``config["configurable"]["encryption_scope"]`` names), and
            deleting, erasing or sweeping a thread destroys its key.

    Example:
        >>> from langgraph_checkpoint_agent_memory import SqliteSaver
        >>> saver = SqliteSaver("memory.db", ttl_seconds=3600)  # an SQLSaver over SQLite
        >>> graph = builder.compile(checkpointer=saver)
        >>> result = graph.invoke(inputs, {"configurable": {"thread_id": "user-42"}})
        >>> saver.close()
    """

    def __init__(
        self,
        database: Database[Any],
        *,
        ttl_seconds: int | None = None,
        strategy: Strategy = "delete",
        keep_last: int = 1,
        refresh_on_read: bool = True,
        activity_precision: float = 0.1,
        incremental_lists: bool = True,
        sweep_interval_seconds: float | None = None,
        sweep_batch: int = 500,
        auto_setup: bool = True,
        serde: SerializerProtocol | None = None,
        clock: Callable[[], float] = time.time,
        encryption: EncryptionLike = None,
    ) -> None:
        super().__init__(serde=serde)
        setting = resolve(encryption)
        self.keyring = setting.open_keyring(database) if setting is not None else None
        self._sealer = Sealer(self.keyring) if self.keyring is not None else None
        self.encrypted = self.keyring is not None
        if self.keyring is not None and self.keyring.keystore.db is database:
            self.components = (CHECKPOINT, KEYS)  # the key table comes with the setup
            self.key_check = self.keyring.provider_check_plan  # and the master key's check
        self.strategy: Strategy = validate_strategy(strategy)
        self.keep_last = validate_keep_last(keep_last)
        self.db = database
        self.dialect = database.dialect
        self.ttl_seconds = validate_ttl(ttl_seconds)
        self.activity = ThreadActivity(
            self.ttl_seconds, strategy, refresh_on_read, activity_precision, clock
        )
        self.refresh_on_read = refresh_on_read
        self.activity_precision = self.activity.precision
        self.incremental_lists = incremental_lists
        self.sweep_interval_seconds = validate_interval(sweep_interval_seconds) or (
            default_sweep_interval(self.ttl_seconds) if self.ttl_seconds else 60.0
        )
        self.sweep_batch = sweep_batch
        self.auto_setup = auto_setup
        self._clock = clock
        self._lists = ListCache(incremental_lists)
        self._writer = Writer(self.dialect, self.activity, self._lists)
        self._reader = Reader(self.dialect, self.activity, self._lists, self._sealer)
        self._maintenance = Maintenance(
            self.dialect, self.activity, self._lists, sweep_batch, self.keep_last, self._sealer
        )
        self._sweeping = SweeperHookup(
            f"{type(self).__name__}-sweeper-{id(self):x}", self.sweep_interval_seconds
        )
        fork.register(self)

    def after_fork(self) -> None:
        """A forked child has none of the parent's threads: its next write starts its own
        sweeper (the database resets its connections itself)."""
        self._sweeping.after_fork()
        self._lists.after_fork()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.db.describe()}, ttl_seconds={self.ttl_seconds}, "
            f"strategy={self.strategy!r}, keep_last={self.keep_last})"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start_sweeper(self) -> None:
        """Run :meth:`sweep` every ``sweep_interval_seconds`` in a daemon thread.

        The first write starts it when a TTL is set; call this to start it earlier.

        Example:
            >>> saver.start_sweeper()
            >>> saver.sweeper_running
            True
        """
        self._sweeping.start_thread(self, "sweep")

    def start_async_sweeper(self) -> Any:
        """Run :meth:`asweep` every ``sweep_interval_seconds`` as a task of the running loop.

        Returns:
            The ``asyncio.Task``; :meth:`aclose` cancels and awaits it.
        """
        return self._sweeping.start_task(self.asweep)

    @property
    def sweeper_running(self) -> bool:
        """Whether a background sweeper thread or task is alive."""
        return self._sweeping.running

    def stop_sweeper(self) -> None:
        """Stop the background sweeper; the next write starts it again."""
        self._sweeping.stop()

    def close(self) -> None:
        """Stop the sweeper and release connections this saver opened.

        Example:
            >>> from langgraph_checkpoint_agent_memory import SqliteSaver
            >>> with SqliteSaver("memory.db") as saver:
            ...     graph = builder.compile(checkpointer=saver)
        """
        self._sweeping.stop()
        self.db.close()
        if self.keyring is not None:
            self.keyring.close()

    async def aclose(self) -> None:
        """Stop the sweeper (awaiting its task) and release connections this saver opened."""
        task = self._sweeping.stop()
        if task is not None:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await self.db.aclose()
        if self.keyring is not None:
            self.keyring.close()

    def _after_write(self) -> None:
        if self.ttl_seconds and not self._sweeping.started:
            self._sweeping.start(self, "sweep", self.asweep)

    # -- the hot path ----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint with its configuration and metadata.

        One transaction and one round trip: the blobs of the channels in ``new_versions``,
        the checkpoint row and, when due, the thread's activity.

        Args:
            config: The thread (``thread_id``, ``checkpoint_ns``) and, as ``checkpoint_id``,
                the parent checkpoint; ``ttl_seconds`` overrides the saver's TTL.
            checkpoint: The checkpoint to store.
            metadata: Its metadata (JSON-serializable).
            new_versions: The channels whose values changed since the parent.

        Returns:
            The config naming the stored checkpoint.

        Raises:
            ThreadDeletedError: The thread was deleted or expired after the parent was read.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "1", "checkpoint_ns": ""}}
            >>> saved = saver.put(config, empty_checkpoint(), {"step": -1}, {})
            >>> sorted(saved["configurable"])
            ['checkpoint_id', 'checkpoint_ns', 'thread_id']
        """
        writer, serde = self._writer, self.serde
        with self._traced("put", config) as op:
            result = self._write(
                config,
                lambda key: writer.put(serde, config, checkpoint, metadata, new_versions, key, op),
            )
        self._after_write()
        return result

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Asynchronously store a checkpoint: :meth:`put` for async code.

        Args:
            config: The thread and the parent checkpoint, as for :meth:`put`.
            checkpoint: The checkpoint to store.
            metadata: Its metadata (JSON-serializable).
            new_versions: The channels whose values changed since the parent.

        Example:
            ```python
            from langgraph.checkpoint.base import empty_checkpoint

            saved = await saver.aput(config, empty_checkpoint(), {"step": 1}, {})
            ```
        """
        writer, serde = self._writer, self.serde
        with self._traced("put", config) as op:
            result = await self._awrite(
                config,
                lambda key: writer.put(serde, config, checkpoint, metadata, new_versions, key, op),
            )
        self._after_write()
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store intermediate writes of a task, linked to a checkpoint.

        A regular channel's write is stored once (the first wins); a special channel's
        (``__error__``, ``__interrupt__``, ...) is replaced.

        Args:
            config: Names the checkpoint (``thread_id``, ``checkpoint_ns``, ``checkpoint_id``).
            writes: ``(channel, value)`` pairs.
            task_id: The task that wrote them.
            task_path: The task's path in the graph.

        Example:
            >>> saver.put_writes(saved, [("messages", ["hi"])], task_id="t1")
        """
        writer, serde = self._writer, self.serde
        with self._traced("put_writes", config) as op:
            self._write(
                config,
                lambda key: writer.put_writes(serde, config, writes, task_id, task_path, key, op),
            )
        self._after_write()

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Asynchronously store a task's writes: :meth:`put_writes` for async code.

        Args:
            config: Names the checkpoint the writes belong to.
            writes: ``(channel, value)`` pairs.
            task_id: The task that wrote them.
            task_path: The task's path in the graph.

        Example:
            ```python
            await saver.aput_writes(saved, [("x", 1)], task_id="t1")
            ```
        """
        writer, serde = self._writer, self.serde
        with self._traced("put_writes", config) as op:
            await self._awrite(
                config,
                lambda key: writer.put_writes(serde, config, writes, task_id, task_path, key, op),
            )
        self._after_write()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Fetch a checkpoint tuple: the one ``checkpoint_id`` names, or the thread's latest.

        An expired or deleted thread has none. A read counts as activity when
        ``refresh_on_read`` is on.

        Args:
            config: ``thread_id``, optionally ``checkpoint_ns`` and ``checkpoint_id``.

        Returns:
            The checkpoint tuple, or ``None`` when there is none.

        Example:
            >>> latest = saver.get_tuple({"configurable": {"thread_id": "user-42"}})
            >>> latest.checkpoint["channel_values"]
            {'messages': [...]}
        """
        with self._traced("get_tuple", config) as op:
            found = self._read(lambda: self._reader.get_tuple(self.serde, config))
            op.set("agent_memory.result_count", int(found is not None))
            return found

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Asynchronously fetch a checkpoint tuple: :meth:`get_tuple` for async code.

        Args:
            config: ``thread_id``, optionally ``checkpoint_ns`` and ``checkpoint_id``.

        Example:
            ```python
            latest = await saver.aget_tuple({"configurable": {"thread_id": "user-42"}})
            ```
        """
        with self._traced("get_tuple", config) as op:
            found = await self._aread(lambda: self._reader.get_tuple(self.serde, config))
            op.set("agent_memory.result_count", int(found is not None))
            return found

    # -- list ------------------------------------------------------------------------------

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints, newest first, reading a page at a time.

        Args:
            config: Restrict to a thread (and namespace, and checkpoint id); ``None``: all.
            filter: Metadata every listed checkpoint has (every key equal).
            before: Only checkpoints older than the one this config names.
            limit: At most this many.

        Example:
            >>> config = {"configurable": {"thread_id": "user-42"}}
            >>> [t.metadata["step"] for t in saver.list(config, limit=2)]
            [4, 3]
        """
        cursor = ListCursor(self._reader, self.serde, config, filter, before, limit)
        while not cursor.done:
            with self._traced("list", config) as op:  # a span per page read
                page = self._read(cursor.next_page)
                op.set("agent_memory.result_count", len(page[0]))
            yield from cursor.take(page)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Asynchronously list checkpoints, newest first: :meth:`list` for async code.

        Args:
            config: Restrict to a thread (and namespace, and checkpoint id); ``None``: all.
            filter: Metadata every listed checkpoint has.
            before: Only checkpoints older than the one this config names.
            limit: At most this many.

        Example:
            ```python
            async for t in saver.alist({"configurable": {"thread_id": "user-42"}}):
                print(t.config["configurable"]["checkpoint_id"])
            ```
        """
        cursor = ListCursor(self._reader, self.serde, config, filter, before, limit)
        while not cursor.done:
            with self._traced("list", config) as op:  # a span per page read
                page = await self._aread(cursor.next_page)
                op.set("agent_memory.result_count", len(page[0]))
            for item in cursor.take(page):
                yield item

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The writes that rebuild each ``DeltaChannel`` at a checkpoint, and their seed.

        Args:
            config: Names the checkpoint (the thread's latest without ``checkpoint_id``).
            channels: The delta channels to rebuild.

        Example:
            >>> saver.get_delta_channel_history(config=saved, channels=["messages"])
            {'messages': {'writes': [...]...}}
        """
        return self._read(lambda: self._reader.history(self.serde, config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Asynchronously :meth:`get_delta_channel_history`.

        Args:
            config: Names the checkpoint.
            channels: The delta channels to rebuild.

        Example:
            ```python
            history = await saver.aget_delta_channel_history(config=saved, channels=["messages"])
            ```
        """
        return await self._aread(lambda: self._reader.history(self.serde, config, channels))

    # -- versions --------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The channel version after ``current``: a zero-padded counter and a random tail.

        Args:
            current: The current version (``None`` for a new channel).
            channel: Unused (LangGraph's signature).

        Example:
            >>> saver.get_next_version(None, None)[:32]
            '00000000000000000000000000000001'
        """
        return next_channel_version(current)
