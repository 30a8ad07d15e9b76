"""The async API of :class:`~.timed.TimedInMemorySaver`: its work is in memory and short,
so each async method runs the sync one inline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)


class _Sync(Protocol):
    """The saver's sync API, which the async one runs."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]: ...

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig: ...

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None: ...

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]: ...

    def delete_thread(self, thread_id: str) -> None: ...

    def delete_for_runs(self, run_ids: Sequence[str]) -> None: ...

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None: ...

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None: ...


class InlineAsync:
    """The async methods of ``TimedInMemorySaver``, each running the sync one inline."""

    async def aget_tuple(self: _Sync, config: RunnableConfig) -> CheckpointTuple | None:
        """Asynchronously :meth:`get_tuple` (in-memory work runs inline)."""
        return self.get_tuple(config)

    async def alist(
        self: _Sync,
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
        self: _Sync,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Asynchronously :meth:`put` (in-memory work runs inline)."""
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self: _Sync,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Asynchronously :meth:`put_writes` (in-memory work runs inline)."""
        self.put_writes(config, writes, task_id, task_path)

    async def aget_delta_channel_history(
        self: _Sync, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Asynchronously :meth:`get_delta_channel_history` (in-memory work runs inline)."""
        return self.get_delta_channel_history(config=config, channels=channels)

    async def adelete_thread(self: _Sync, thread_id: str) -> None:
        """Asynchronously :meth:`delete_thread` (in-memory work runs inline)."""
        self.delete_thread(thread_id)

    async def adelete_for_runs(self: _Sync, run_ids: Sequence[str]) -> None:
        """Asynchronously :meth:`delete_for_runs` (in-memory work runs inline)."""
        self.delete_for_runs(run_ids)

    async def acopy_thread(self: _Sync, source_thread_id: str, target_thread_id: str) -> None:
        """Asynchronously :meth:`copy_thread` (in-memory work runs inline)."""
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(
        self: _Sync,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Asynchronously :meth:`prune` (in-memory work runs inline)."""
        self.prune(thread_ids, strategy=strategy, keep_last=keep_last)
