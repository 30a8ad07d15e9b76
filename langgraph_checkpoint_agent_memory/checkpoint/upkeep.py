"""What a SQL saver does to whole threads: delete, erase, delete a run's checkpoints, copy,
prune, sweep, and read what each thread stores.

:class:`ThreadUpkeep` is one of the parts :class:`~.saver.SQLSaver` is made of: its public
methods, each a thin shell over a plan of :mod:`.maintenance` or :mod:`.retention`, run
through the saver's database like the hot path's.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.core import checked_thread_id
from langgraph_checkpoint_agent_memory.checkpoint.maintenance import Maintenance
from langgraph_checkpoint_agent_memory.checkpoint.retention import (
    SweepPreview,
    ThreadInfo,
    ThreadOrder,
    preview_plan,
    threads_plan,
)
from langgraph_checkpoint_agent_memory.db.migrations import CheckpointSchemaOnFirstUse


class ThreadUpkeep(CheckpointSchemaOnFirstUse):
    """The thread-level operations of a SQL saver (see :class:`~.saver.SQLSaver`)."""

    serde: SerializerProtocol
    _maintenance: Maintenance

    # -- deletion, copy, prune, sweep ------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread, leaving a tombstone that refuses
        late writes naming one of its checkpoints (a fresh start stays possible).

        Args:
            thread_id: The thread to delete.

        Example:
            >>> saver.delete_thread("user-42")
        """
        self._run(self._maintenance.delete_thread(checked_thread_id(thread_id)))

    async def adelete_thread(self, thread_id: str) -> None:
        """Asynchronously :meth:`delete_thread`.

        Args:
            thread_id: The thread to delete.

        Example:
            ```python
            await saver.adelete_thread("user-42")
            ```
        """
        await self._arun(self._maintenance.delete_thread(checked_thread_id(thread_id)))

    def erase_threads(self, thread_ids: Sequence[str]) -> None:
        """Delete threads leaving no trace, not even a tombstone (for erasing a user's data:
        unlike :meth:`delete_thread`, a late write could start such a thread afresh).

        Args:
            thread_ids: The threads to erase.

        Example:
            >>> saver.erase_threads(["user-42", "user-42-draft"])
        """
        self._run(self._maintenance.erase_threads([str(t) for t in thread_ids]))

    async def aerase_threads(self, thread_ids: Sequence[str]) -> None:
        """Asynchronously :meth:`erase_threads`.

        Args:
            thread_ids: The threads to erase.

        Example:
            ```python
            await saver.aerase_threads(["user-42"])
            ```
        """
        await self._arun(self._maintenance.erase_threads([str(t) for t in thread_ids]))

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
        self._run(self._maintenance.copy_thread(str(source_thread_id), str(target_thread_id)))

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
        plan = self._maintenance.copy_thread(str(source_thread_id), str(target_thread_id))
        await self._arun(plan)

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
        self._run(self._maintenance.prune(self.serde, thread_ids, strategy, keep_last))

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
        await self._arun(self._maintenance.prune(self.serde, thread_ids, strategy, keep_last))

    def sweep(self) -> builtins.list[str]:
        """Remove expired threads now (any number of processes may sweep at once; each thread
        is removed by exactly one). The background sweeper calls this.

        Returns:
            The thread ids this call removed (or pruned, with ``strategy="keep_latest"``).

        Example:
            >>> saver.sweep()
            ['user-17']
        """
        return self._run(self._maintenance.sweep(self.serde))

    async def asweep(self) -> builtins.list[str]:
        """Asynchronously :meth:`sweep`; the async sweeper task calls this.

        Example:
            ```python
            removed = await saver.asweep()
            ```
        """
        return await self._arun(self._maintenance.sweep(self.serde))

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
        return self._run(preview_plan(self._maintenance, self.serde))

    async def asweep_preview(self) -> SweepPreview:
        """Asynchronously :meth:`sweep_preview`.

        Example:
            ```python
            preview = await saver.asweep_preview()
            ```
        """
        return await self._arun(preview_plan(self._maintenance, self.serde))
