"""One ``BaseCheckpointSaver`` for SQLite, PostgreSQL and SAP HANA.

Every operation is a plan (:mod:`..db.database`) run by a sync or an async driver, so ``put``
and ``aput`` share one implementation, built by :mod:`.writes` (the hot path), :mod:`.reads`
and :mod:`.threads` over :mod:`.codec`, :mod:`.sealing` and :mod:`.lifetime`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
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
    VersionCounter,
    checked_thread_id,
    thread_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import (
    Strategy,
    SweeperHookup,
    ThreadActivity,
    sweep_interval,
    validate_keep_last,
    validate_strategy,
    validate_ttl,
)
from langgraph_checkpoint_agent_memory.checkpoint.reads import ListCursor, Reader
from langgraph_checkpoint_agent_memory.checkpoint.sealing import Sealer, owner_of
from langgraph_checkpoint_agent_memory.checkpoint.threads import (
    Maintenance,
    SweepPreview,
    ThreadInfo,
    ThreadOrder,
)
from langgraph_checkpoint_agent_memory.checkpoint.writes import Writer
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, thread_owner
from langgraph_checkpoint_agent_memory.crypto.config import EncryptionLike, resolve
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, KeysNeeded
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Database, Plan, T, adrive, drive
from langgraph_checkpoint_agent_memory.db.first_use import SchemaOnFirstUse
from langgraph_checkpoint_agent_memory.db.migrations import CHECKPOINT, KEYS
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import IDLE, db_operation, live, target_of

__all__ = ["SQLSaver", "Strategy"]

#: Times a read is run again after loading the data keys it lacked.
KEY_ATTEMPTS = 3
#: Thread ids read per page by :meth:`SQLSaver.encrypt_plaintext`.
ENCRYPT_PAGE = 200


def _owner_and_newness(config: RunnableConfig) -> tuple[str, bool]:
    """A write's key owner, and whether its key is likely new (no parent): created in one trip."""
    thread_id, _, parent_id = thread_coordinates(config)
    owner = owner_of(thread_id, config)
    return owner, parent_id is None and owner == thread_owner(thread_id)


#: The table each operation is about (``db.collection.name``), when not ``am_checkpoints``.
TABLES = {"put_writes": "am_checkpoint_writes", "sweep": "am_threads"}


class SQLSaver(SchemaOnFirstUse, ClosesOnExit, VersionCounter, BaseCheckpointSaver[str]):
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
            and in :meth:`prune` (at least 1; default 1, the latest), each with what it needs
            to read back whole.
        refresh_on_read: Whether reads count as activity.
        activity_precision: Activity is written at most once per this fraction of the TTL
            (per thread and process), and expiry pushed out by the same slack: an idle thread
            expires after ``ttl`` to ``ttl * (1 + activity_precision)`` seconds; ``0``: exact.
        incremental_lists: Store a list that only grew as its appended items; turn it off for
            state that mutates list items in place (``add_messages`` never does).
        sweep_interval_seconds: Time between background sweeps (default: a tenth of the TTL,
            between 0.5 s and 60 s). The sweeper starts with the first write when a TTL is set.
        sweep_batch: Threads removed per sweep transaction.
        auto_setup: Create or migrate the schema on first use.
        serde: Serializer; defaults to LangGraph's ``JsonPlusSerializer``.
        clock: Wall clock in seconds since the epoch (shared by processes through the rows).
        encryption: Encryption at rest (see the user guide's "Encryption and erasure"):
            ``None`` (the default) follows ``AGENT_MEMORY_MASTER_KEY`` and
            ``AGENT_MEMORY_KEYSTORE_URL``, ``False`` is off, or a master key, a ``KeyProvider``
            or an ``Encryption``. Values are sealed with their thread's data key (or the store
            scope's ``config["configurable"]["encryption_scope"]`` names), destroyed with it.

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
        sealer = Sealer(self.keyring) if self.keyring is not None else None
        self.encrypted = self.keyring is not None
        self.components = (CHECKPOINT,)  # opening a checkpointer creates only its tables
        if self.keyring is not None and self.keyring.keystore.db is database:
            self.components = (CHECKPOINT, KEYS)  # the key table comes with the setup
            self.key_check = self.keyring.provider_check_plan  # and the master key's check
        self.strategy: Strategy = validate_strategy(strategy)
        self.keep_last = validate_keep_last(keep_last)
        self.db, self.dialect = database, database.dialect
        self.ttl_seconds = validate_ttl(ttl_seconds)
        self.activity = ThreadActivity(
            self.ttl_seconds, strategy, refresh_on_read, activity_precision, clock
        )
        self.refresh_on_read, self.incremental_lists = refresh_on_read, incremental_lists
        self.activity_precision = self.activity.precision
        self.sweep_interval_seconds = sweep_interval(sweep_interval_seconds, self.ttl_seconds)
        self.sweep_batch, self.auto_setup = sweep_batch, auto_setup
        self._clock = clock  # the schema's first use stamps migrations with it
        self._lists = ListCache(incremental_lists)
        self._writer = Writer(self.dialect, self.activity, self._lists)
        self._reader = Reader(self.dialect, self.activity, self._lists, sealer)
        self._maintenance = Maintenance(
            self.dialect, self.activity, self._lists, sweep_batch, self.keep_last, sealer
        )
        self._sweeping = SweeperHookup(
            f"{type(self).__name__}-sweeper-{id(self):x}", self.sweep_interval_seconds
        )
        fork.register(self)

    def after_fork(self) -> None:
        """A forked child's next write starts its own sweeper."""
        self._sweeping.after_fork()
        self._lists.after_fork()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.db.describe()}, ttl_seconds={self.ttl_seconds}, "
            f"strategy={self.strategy!r}, keep_last={self.keep_last})"
        )

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
        if (task := self._sweeping.stop()) is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.db.aclose()
        if self.keyring is not None:
            self.keyring.close()

    def _after_write(self) -> None:
        if self.ttl_seconds and not self._sweeping.started:
            self._sweeping.start(self, "sweep", self.asweep)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint, its changed channels' blobs and, when due, the thread's
        activity: one transaction and one round trip.

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
        """Async version of :meth:`put`."""
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
        """Store a task's writes to a checkpoint: a regular channel's first write wins, a
        special channel's (``__error__``, ``__interrupt__``, ...) is replaced.

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
        """Async version of :meth:`put_writes`."""
        writer, serde = self._writer, self.serde
        with self._traced("put_writes", config) as op:
            await self._awrite(
                config,
                lambda key: writer.put_writes(serde, config, writes, task_id, task_path, key, op),
            )
        self._after_write()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``checkpoint_id`` names, or the thread's latest; none for an
        expired or deleted thread. Counts as activity with ``refresh_on_read``.

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
            op.set("db.response.returned_rows", int(found is not None))
            return found

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async version of :meth:`get_tuple`."""
        with self._traced("get_tuple", config) as op:
            found = await self._aread(lambda: self._reader.get_tuple(self.serde, config))
            op.set("db.response.returned_rows", int(found is not None))
            return found

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
                op.set("db.response.returned_rows", len(page[0]))
            yield from cursor.take(page)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async version of :meth:`list`."""
        cursor = ListCursor(self._reader, self.serde, config, filter, before, limit)
        while not cursor.done:
            with self._traced("list", config) as op:  # a span per page read
                page = await self._aread(cursor.next_page)
                op.set("db.response.returned_rows", len(page[0]))
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
        """Async version of :meth:`get_delta_channel_history`."""
        return await self._aread(lambda: self._reader.history(self.serde, config, channels))

    def _traced(self, name: str, config: RunnableConfig | None = None) -> Any:
        """The span of ``name`` on ``config``'s thread (its id, maybe a user's, left out sealed)."""
        if not live():
            return IDLE
        conf = (config or {}).get("configurable", {})
        return db_operation(
            f"checkpoint.{name}",
            target_of(self.db),
            TABLES.get(name, "am_checkpoints"),
            {
                "langgraph.thread_id": None if self.keyring else conf.get("thread_id"),
                "langgraph.checkpoint_ns": conf.get("checkpoint_ns"),
            },
            sealed=self.keyring is not None,
        )

    def _swept(self, op: Any, swept: builtins.list[str]) -> None:
        """Count what a sweep removed, on its span and in its metric."""
        op.set("agent_memory.thread_count", len(swept))
        metrics.add("threads_swept", len(swept), {"db.system.name": target_of(self.db).system})

    def _write(self, config: RunnableConfig, make: Callable[[DataKey | None], Plan[T]]) -> T:
        """Run the write ``make`` builds from its sealing key (see :meth:`.Keyring.sealed`)."""
        if self.keyring is None:
            return self._run(make(None))
        owner, new = _owner_and_newness(config)
        return self.keyring.sealed(owner, make, self._run, database=self.db, likely_new=new)

    async def _awrite(self, config: RunnableConfig, make: Callable[[DataKey | None], Plan[T]]) -> T:
        if self.keyring is None:
            return await self._arun(make(None))
        owner, new = _owner_and_newness(config)
        return await self.keyring.asealed(owner, make, self._arun, database=self.db, likely_new=new)

    def _read(self, make: Callable[[], Plan[T]]) -> T:
        """Run the plan ``make`` builds, again after loading the keys it lacked (then cached)."""
        for _ in range(KEY_ATTEMPTS):
            try:
                return self._run(make())
            except KeysNeeded as need:
                assert self.keyring is not None
                for key_id in need.ids:
                    self.keyring.by_id(key_id)
        return self._run(make())

    async def _aread(self, make: Callable[[], Plan[T]]) -> T:
        for _ in range(KEY_ATTEMPTS):
            try:
                return await self._arun(make())
            except KeysNeeded as need:
                assert self.keyring is not None
                for key_id in need.ids:
                    await self.keyring.aby_id(key_id)
        return await self._arun(make())

    def _destroy_keys(self, thread_ids: Sequence[str]) -> None:
        """Destroy the data keys of deleted threads (never a store scope's key)."""
        if self.keyring is not None and thread_ids:
            self.keyring.destroy([thread_owner(t) for t in thread_ids])

    async def _adestroy_keys(self, thread_ids: Sequence[str]) -> None:
        if self.keyring is not None and thread_ids:
            await self.keyring.adestroy([thread_owner(t) for t in thread_ids])

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread, leaving a tombstone that refuses
        late writes naming one of its checkpoints (a fresh start stays possible).

        Args:
            thread_id: The thread to delete.

        Example:
            >>> saver.delete_thread("user-42")
        """
        thread_id = checked_thread_id(thread_id)
        with self._traced("delete_thread", {"configurable": {"thread_id": thread_id}}):
            self._run(self._maintenance.delete_thread(thread_id))
            self._destroy_keys([thread_id])

    async def adelete_thread(self, thread_id: str) -> None:
        """Async version of :meth:`delete_thread`."""
        thread_id = checked_thread_id(thread_id)
        with self._traced("delete_thread", {"configurable": {"thread_id": thread_id}}):
            await self._arun(self._maintenance.delete_thread(thread_id))
            await self._adestroy_keys([thread_id])

    def erase_threads(self, thread_ids: Sequence[str], *, keep_keys: bool = False) -> None:
        """Delete threads leaving no trace, not even a tombstone (for erasing a user's data:
        unlike :meth:`delete_thread`, a late write could start such a thread afresh).

        Args:
            thread_ids: The threads to erase.
            keep_keys: Leave the threads' data keys for the caller to destroy (as agent
                memory's erase does, in its ledger).

        Example:
            >>> saver.erase_threads(["user-42", "user-42-draft"])
        """
        ids = [str(t) for t in thread_ids]
        self._run(self._maintenance.erase_threads(ids))
        if not keep_keys:
            self._destroy_keys(ids)

    async def aerase_threads(self, thread_ids: Sequence[str], *, keep_keys: bool = False) -> None:
        """Async version of :meth:`erase_threads`."""
        ids = [str(t) for t in thread_ids]
        await self._arun(self._maintenance.erase_threads(ids))
        if not keep_keys:
            await self._adestroy_keys(ids)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that runs created, and the blobs no
        remaining checkpoint needs.

        Args:
            run_ids: The ``run_id`` values of the checkpoints' metadata.

        Example:
            >>> saver.delete_for_runs(["1ef4f797-8335-6428-8001-8a1503f9b875"])
        """
        self._run(self._maintenance.delete_for_runs(builtins.list(run_ids)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async version of :meth:`delete_for_runs`."""
        await self._arun(self._maintenance.delete_for_runs(builtins.list(run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of a thread to another (existing ones of the
        target are kept); both count as active. An expired or deleted source copies nothing.

        Args:
            source_thread_id: The thread to copy from.
            target_thread_id: The thread to copy to.

        Example:
            >>> saver.copy_thread("user-42", "user-42-fork")
        """
        source, target = str(source_thread_id), str(target_thread_id)
        key = self.keyring.key(thread_owner(target)) if self.keyring is not None else None
        self._read(lambda: self._maintenance.copy_thread(source, target, key))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async version of :meth:`copy_thread`."""
        source, target = str(source_thread_id), str(target_thread_id)
        key = await self.keyring.akey(thread_owner(target)) if self.keyring is not None else None
        await self._aread(lambda: self._maintenance.copy_thread(source, target, key))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Shrink threads' history.

        Args:
            thread_ids: The threads to prune.
            strategy: ``"keep_latest"``: keep the last ``keep_last`` checkpoints of each
                namespace and the ancestors their ``DeltaChannel`` values are rebuilt from;
                ``"delete"``: delete the threads as :meth:`delete_thread` does.
            keep_last: Checkpoints kept per namespace (at least 1); ``None``: the saver's
                ``keep_last``.

        Example:
            >>> saver.prune(["user-42"], keep_last=3)
            >>> len(list(saver.list({"configurable": {"thread_id": "user-42"}})))
            3
        """
        thread_ids = [str(t) for t in thread_ids]
        with self._traced("prune") as op:
            op.set("agent_memory.thread_count", len(thread_ids))
            self._read(lambda: self._maintenance.prune(self.serde, thread_ids, strategy, keep_last))
            if strategy == "delete":
                self._destroy_keys(thread_ids)

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Async version of :meth:`prune`."""
        thread_ids = [str(t) for t in thread_ids]
        plan = lambda: self._maintenance.prune(self.serde, thread_ids, strategy, keep_last)  # noqa: E731
        with self._traced("prune") as op:
            op.set("agent_memory.thread_count", len(thread_ids))
            await self._aread(plan)
            if strategy == "delete":
                await self._adestroy_keys(thread_ids)

    def sweep(
        self, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> builtins.list[str]:
        """Remove expired threads now; any number of processes may sweep at once, each
        thread removed by exactly one.

        Args:
            on_progress: Called after each batch of threads with ``(threads removed so
                far, None)``, e.g. to show progress.

        Returns:
            The thread ids this call removed (or pruned, with ``strategy="keep_latest"``).

        Example:
            >>> saver.sweep()
            ['user-17']
        """
        with self._traced("sweep") as op:
            swept = self._read(lambda: self._maintenance.sweep(self.serde, on_progress))
            if self.strategy == "delete":
                self._destroy_keys(swept)
            self._swept(op, swept)
        return swept

    async def asweep(
        self, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> builtins.list[str]:
        """Async version of :meth:`sweep`; the async sweeper task calls this."""
        with self._traced("sweep") as op:
            swept = await self._aread(lambda: self._maintenance.sweep(self.serde, on_progress))
            if self.strategy == "delete":
                await self._adestroy_keys(swept)
            self._swept(op, swept)
        return swept

    def _needs_keyring(self) -> Keyring:
        if self.keyring is None:
            raise ConfigurationError(
                "encrypt_plaintext() needs a saver opened with encryption on (encryption=... "
                "or AGENT_MEMORY_MASTER_KEY)"
            )
        return self.keyring

    def encrypt_plaintext(
        self, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> dict[str, int]:
        """Seal every row written without encryption, each thread with its own data key (what
        ``agent-memory encrypt`` runs). Idempotent: sealed rows are left as they are.

        Args:
            on_progress: Called after each thread with ``(threads looked at so far, None)``,
                e.g. to show progress.

        Returns:
            How many were sealed: ``{"threads": ..., "checkpoints": ..., "blobs": ...,
            "writes": ...}`` (``threads``: threads in which something was sealed).

        Raises:
            ConfigurationError: The saver has encryption off.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> from langgraph_checkpoint_agent_memory import (
            ...     Encryption, SqliteSaver, generate_master_key)
            >>> old = SqliteSaver("old.db", encryption=False)
            >>> _ = old.put({"configurable": {"thread_id": "t1"}}, empty_checkpoint(), {}, {})
            >>> setting = Encryption(master_keys=[generate_master_key()], allow_plaintext=True)
            >>> migrating = SqliteSaver("old.db", encryption=setting)
            >>> migrating.encrypt_plaintext()
            {'threads': 1, 'checkpoints': 1, 'blobs': 0, 'writes': 0}
            >>> migrating.encrypt_plaintext()["checkpoints"]
            0
        """
        keyring = self._needs_keyring()
        return drive(
            self._encrypt_steps(on_progress),
            lambda step: keyring.key(step) if isinstance(step, str) else self._run(step),
        )

    async def aencrypt_plaintext(
        self, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> dict[str, int]:
        """Async version of :meth:`encrypt_plaintext`."""
        keyring = self._needs_keyring()

        async def step(step: str | Plan[Any]) -> Any:
            return await (keyring.akey(step) if isinstance(step, str) else self._arun(step))

        return await adrive(self._encrypt_steps(on_progress), step)

    def _encrypt_steps(
        self, on_progress: Callable[[int, int | None], None] | None
    ) -> Generator[str | Plan[Any], Any, dict[str, int]]:
        """:meth:`encrypt_plaintext`'s steps: a plan to run, or a key owner whose key it needs."""
        m = self._maintenance
        counts = Counter(dict.fromkeys(("threads", "checkpoints", "blobs", "writes"), 0))
        done: set[str] = set()
        for table in range(3):
            after = ""
            while page := (yield m.thread_ids_page(table, after, ENCRYPT_PAGE)):
                for thread_id in page:
                    if thread_id not in done:
                        key = yield thread_owner(thread_id)
                        sealed = yield m.encrypt_thread(thread_id, key)
                        counts.update(sealed, threads=any(sealed.values()))
                        done.add(thread_id)
                        if on_progress is not None:
                            on_progress(len(done), None)
                after = page[-1]
        return dict(counts)

    def threads(
        self, *, sort: ThreadOrder = "bytes", limit: int | None = None
    ) -> builtins.list[ThreadInfo]:
        """Every thread that holds checkpoints, with its count, size, activity and expiry
        (``agent-memory threads`` prints it).

        Args:
            sort: ``"bytes"`` or ``"checkpoints"`` (most first), ``"last_active"`` (the
                latest first), ``"expires_at"`` (the soonest first; never-expiring threads
                last) or ``"thread_id"``.
            limit: At most this many; ``None``: all.

        Returns:
            One :class:`ThreadInfo` per thread.

        Example:
            >>> for t in saver.threads(sort="bytes", limit=10):
            ...     print(t.thread_id, t.checkpoints, t.bytes, t.status)
            user-42 6 ... live
            user-17 1 ... expired
        """
        return self._run(self._maintenance.threads(sort, limit))

    async def athreads(
        self, *, sort: ThreadOrder = "bytes", limit: int | None = None
    ) -> builtins.list[ThreadInfo]:
        """Async version of :meth:`threads`."""
        return await self._arun(self._maintenance.threads(sort, limit))

    def sweep_preview(self) -> SweepPreview:
        """What :meth:`sweep` would remove now, with this saver's ``strategy`` and
        ``keep_last``, and how many bytes it would free; nothing is locked or written.

        Returns:
            A :class:`SweepPreview`: each expired thread (``action`` ``"delete"`` or
            ``"prune"``, checkpoints removed, bytes freed) and the totals.

        Example:
            >>> preview = saver.sweep_preview()
            >>> preview.bytes_freed, [t.thread_id for t in preview.threads]
            (..., ['user-17'])
        """
        return self._read(lambda: self._maintenance.preview(self.serde))

    async def asweep_preview(self) -> SweepPreview:
        """Async version of :meth:`sweep_preview`."""
        return await self._aread(lambda: self._maintenance.preview(self.serde))
