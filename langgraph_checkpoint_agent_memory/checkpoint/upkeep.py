"""What a SQL saver does to whole threads: delete, erase, delete a run's checkpoints, copy,
prune, sweep, and read what each thread stores.

:class:`ThreadUpkeep` is one of the parts :class:`~.saver.SQLSaver` is made of: its public
methods, each a thin shell over a plan of :mod:`.maintenance` or :mod:`.retention`, run
through the saver's database like the hot path's.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Generator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.core import checked_thread_id, thread_coordinates
from langgraph_checkpoint_agent_memory.checkpoint.sealing import Sealer, owner_of
from langgraph_checkpoint_agent_memory.checkpoint.threads import (
    Maintenance,
    SweepPreview,
    ThreadInfo,
    ThreadOrder,
    preview_plan,
    threads_plan,
)
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, thread_owner
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, KeysNeeded
from langgraph_checkpoint_agent_memory.db.database import Plan, T, adrive, drive
from langgraph_checkpoint_agent_memory.db.first_use import CheckpointSchemaOnFirstUse
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import IDLE, db_operation, live, target_of

#: Times a read is run again after loading the data keys it lacked.
KEY_ATTEMPTS = 3
#: Thread ids read per page by :meth:`ThreadUpkeep.encrypt_plaintext`.
ENCRYPT_PAGE = 200


def _owner_and_newness(config: RunnableConfig) -> tuple[str, bool]:
    """The key owner of a write, and whether its key is likely new: a thread's first
    checkpoint names no parent, so its key is created at once (one round trip, not a
    lookup and then a creation)."""
    thread_id, _, parent_id = thread_coordinates(config)
    owner = owner_of(thread_id, config)
    return owner, parent_id is None and owner == thread_owner(thread_id)


def _add(counts: dict[str, int], sealed: tuple[int, int, int]) -> None:
    counts["checkpoints"] += sealed[0]
    counts["blobs"] += sealed[1]
    counts["writes"] += sealed[2]
    counts["threads"] += any(sealed)


#: The table each operation is about (``db.collection.name``), when not ``am_checkpoints``.
TABLES = {"put_writes": "am_checkpoint_writes", "sweep": "am_threads"}


class ThreadUpkeep(CheckpointSchemaOnFirstUse):
    """The thread-level operations of a SQL saver (see :class:`~.saver.SQLSaver`)."""

    serde: SerializerProtocol
    _maintenance: Maintenance
    #: The data keys (encryption on), else ``None``.
    keyring: Keyring | None
    _sealer: Sealer | None

    # -- spans -----------------------------------------------------------------------------

    def _traced(self, name: str, config: RunnableConfig | None = None) -> Any:
        """The span of operation ``name`` on ``config``'s thread (its id left out with
        encryption on: ids are what an operator filters by, and may name a user)."""
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
        """Count what a sweep removed: on its span, and in
        ``agent_memory.checkpoint.threads_swept``."""
        op.set("agent_memory.thread_count", len(swept))
        metrics.add("threads_swept", len(swept), {"db.system.name": target_of(self.db).system})

    # -- keys (encryption on) --------------------------------------------------------------

    def _write(self, config: RunnableConfig, make: Callable[[DataKey | None], Plan[T]]) -> T:
        """Run the write ``make`` builds from the key it seals with (``None`` with
        encryption off). A thread's new key is stored in the write's own transaction where
        the key store is this saver's database (see :meth:`.Keyring.sealed`)."""
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
        """Run the plan ``make`` builds; when it meets keys not loaded yet, load them and
        run it again (only the first time a key is met: they stay cached)."""
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

    # -- deletion, copy, prune, sweep ------------------------------------------------------

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
        """Asynchronously :meth:`delete_thread`.

        Args:
            thread_id: The thread to delete.

        Example:
            ```python
            await saver.adelete_thread("user-42")
            ```
        """
        thread_id = checked_thread_id(thread_id)
        with self._traced("delete_thread", {"configurable": {"thread_id": thread_id}}):
            await self._arun(self._maintenance.delete_thread(thread_id))
            await self._adestroy_keys([thread_id])

    def erase_threads(self, thread_ids: Sequence[str], *, keep_keys: bool = False) -> None:
        """Delete threads leaving no trace, not even a tombstone (for erasing a user's data:
        unlike :meth:`delete_thread`, a late write could start such a thread afresh).

        Args:
            thread_ids: The threads to erase.
            keep_keys: Leave the threads' data keys for the caller to destroy (agent
                memory's erase owes them in its erase ledger, which commits with its own
                deletes), rather than destroying them here.

        Example:
            >>> saver.erase_threads(["user-42", "user-42-draft"])
        """
        ids = [str(t) for t in thread_ids]
        self._run(self._maintenance.erase_threads(ids))
        if not keep_keys:
            self._destroy_keys(ids)

    async def aerase_threads(self, thread_ids: Sequence[str], *, keep_keys: bool = False) -> None:
        """Asynchronously :meth:`erase_threads`.

        Args:
            thread_ids: The threads to erase.
            keep_keys: As for :meth:`erase_threads`.

        Example:
            ```python
            await saver.aerase_threads(["user-42"])
            ```
        """
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
        """Asynchronously :meth:`delete_for_runs`.

        Args:
            run_ids: The ``run_id`` values of the checkpoints' metadata.

        Example:
            ```python
            await saver.adelete_for_runs(["1ef4f797-8335-6428-8001-8a1503f9b875"])
            ```
        """
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
        """Asynchronously :meth:`copy_thread`.

        Args:
            source_thread_id: The thread to copy from.
            target_thread_id: The thread to copy to.

        Example:
            ```python
            await saver.acopy_thread("user-42", "user-42-fork")
            ```
        """
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
        """Asynchronously :meth:`prune`.

        Args:
            thread_ids: The threads to prune.
            strategy: ``"keep_latest"`` or ``"delete"``.
            keep_last: Checkpoints kept per namespace; ``None``: the saver's ``keep_last``.

        Example:
            ```python
            await saver.aprune(["user-42"], keep_last=3)
            ```
        """
        thread_ids = [str(t) for t in thread_ids]
        plan = lambda: self._maintenance.prune(self.serde, thread_ids, strategy, keep_last)  # noqa: E731
        with self._traced("prune") as op:
            op.set("agent_memory.thread_count", len(thread_ids))
            await self._aread(plan)
            if strategy == "delete":
                await self._adestroy_keys(thread_ids)

    def sweep(self) -> builtins.list[str]:
        """Remove expired threads now (any number of processes may sweep at once; each thread
        is removed by exactly one). The background sweeper calls this.

        Returns:
            The thread ids this call removed (or pruned, with ``strategy="keep_latest"``).

        Example:
            >>> saver.sweep()
            ['user-17']
        """
        with self._traced("sweep") as op:
            swept = self._read(lambda: self._maintenance.sweep(self.serde))
            if self._maintenance.activity.strategy == "delete":
                self._destroy_keys(swept)
            self._swept(op, swept)
        return swept

    async def asweep(self) -> builtins.list[str]:
        """Asynchronously :meth:`sweep`; the async sweeper task calls this.

        Example:
            ```python
            removed = await saver.asweep()
            ```
        """
        with self._traced("sweep") as op:
            swept = await self._aread(lambda: self._maintenance.sweep(self.serde))
            if self._maintenance.activity.strategy == "delete":
                await self._adestroy_keys(swept)
            self._swept(op, swept)
        return swept

    # -- encryption ------------------------------------------------------------------------

    def _needs_keyring(self) -> Keyring:
        if self.keyring is None:
            raise ConfigurationError(
                "encrypt_plaintext() needs a saver opened with encryption on (encryption=... "
                "or AGENT_MEMORY_MASTER_KEY)"
            )
        return self.keyring

    def encrypt_plaintext(self) -> dict[str, int]:
        """Seal every row written without encryption (what ``agent-memory encrypt`` runs
        when turning encryption on for an existing database), each thread with its own data
        key. Idempotent: sealed rows are left as they are, so it may be run again (after an
        interruption, or while writers still run with encryption off).

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
            self._encrypt_steps(),
            lambda step: keyring.key(step) if isinstance(step, str) else self._run(step),
        )

    async def aencrypt_plaintext(self) -> dict[str, int]:
        """Asynchronously :meth:`encrypt_plaintext`.

        Returns:
            How many threads, checkpoints, blobs and writes were sealed.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import (
                Encryption,
                SqliteSaver,
                generate_master_key,
            )

            setting = Encryption(master_keys=[generate_master_key()], allow_plaintext=True)
            migrating = SqliteSaver("plain.db", encryption=setting)
            counts = await migrating.aencrypt_plaintext()
            ```
        """
        keyring = self._needs_keyring()

        async def step(step: str | Plan[Any]) -> Any:
            return await (keyring.akey(step) if isinstance(step, str) else self._arun(step))

        return await adrive(self._encrypt_steps(), step)

    def _encrypt_steps(self) -> Generator[str | Plan[Any], Any, dict[str, int]]:
        """:meth:`encrypt_plaintext`, written once: it yields a plan to run, or a key
        owner whose data key it needs, and receives the result."""
        m = self._maintenance
        counts = dict.fromkeys(("threads", "checkpoints", "blobs", "writes"), 0)
        done: set[str] = set()
        for table in range(3):
            after = ""
            while page := (yield m.thread_ids_page(table, after, ENCRYPT_PAGE)):
                for thread_id in page:
                    if thread_id not in done:
                        key = yield thread_owner(thread_id)
                        _add(counts, (yield m.encrypt_thread(thread_id, key)))
                        done.add(thread_id)
                after = page[-1]
        return counts

    # -- what is stored ----------------------------------------------------------------------

    def threads(
        self, *, sort: ThreadOrder = "bytes", limit: int | None = None
    ) -> builtins.list[ThreadInfo]:
        """Every thread that holds checkpoints, with its count, size, activity and expiry: a
        read that changes nothing (``agent-memory threads`` prints it).

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
        return self._run(threads_plan(self._maintenance, sort, limit))

    async def athreads(
        self, *, sort: ThreadOrder = "bytes", limit: int | None = None
    ) -> builtins.list[ThreadInfo]:
        """Asynchronously :meth:`threads`.

        Args:
            sort: The order, as for :meth:`threads`.
            limit: At most this many; ``None``: all.

        Example:
            ```python
            biggest = await saver.athreads(limit=5)
            ```
        """
        return await self._arun(threads_plan(self._maintenance, sort, limit))

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
        return self._read(lambda: preview_plan(self._maintenance, self.serde))

    async def asweep_preview(self) -> SweepPreview:
        """Asynchronously :meth:`sweep_preview`.

        Example:
            ```python
            preview = await saver.asweep_preview()
            ```
        """
        return await self._aread(lambda: preview_plan(self._maintenance, self.serde))
