"""LangGraph's ``InMemorySaver``, refusing what the package's other savers refuse, so that one
input gets one outcome in memory as on a database (``create_checkpointer()`` without a URL or
a TTL returns it)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_checkpoint_agent_memory.checkpoint.codec import metadata_json
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    checked_before_id,
    checked_filter,
    checked_limit,
    checked_thread_id,
    checkpoint_id_of,
    list_coordinates,
    metadata_matches,
    slice_stop,
    thread_coordinates,
    writes_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import thread_ttl


class CheckedInMemorySaver(InMemorySaver):
    """An ``InMemorySaver`` whose every method (sync and async) checks its input as the
    package's SQL savers do, raising :class:`InvalidValueError` (ids, filters, metadata) or
    :class:`ConfigurationError` (a missing ``thread_id``, a thread's ``ttl_seconds``) before
    anything is stored.

    Example:
        >>> from langgraph_checkpoint_agent_memory import InvalidValueError
        >>> try:
        ...     CheckedInMemorySaver().get_tuple({"configurable": {"thread_id": "x" * 256}})
        ... except InvalidValueError as error:
        ...     print(error)
        config['configurable']['thread_id'] is 256 characters; at most 255
    """

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """LangGraph's ``get_tuple``, the config checked first."""
        return super().get_tuple(_checked(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """LangGraph's ``list``, the config and filter checked first; a filter's key must be
        in the metadata (``{"k": None}`` does not match metadata without ``k``), and the
        limit counts what the filter kept."""
        checked_filter(filter)
        limit = checked_limit(limit)
        checked_before_id(before)
        if config is not None:
            thread_id, _, _ = list_coordinates(config)
            config = _with_ids(config, thread_id, None)
        found = super().list(config, filter=filter, before=before)
        kept = (t for t in found if metadata_matches(t.metadata, filter))
        yield from kept if limit is None else itertools.islice(kept, slice_stop(limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """LangGraph's ``put``, the config, checkpoint id, thread TTL and metadata checked first."""
        checked = _checked(config)
        checkpoint_id_of(checkpoint)
        thread_ttl(config, None)
        metadata_json(get_checkpoint_metadata(config, metadata))
        return super().put(checked, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """LangGraph's ``put_writes``, the config checked first."""
        thread_id, ns, _ = writes_coordinates(config)
        super().put_writes(_with_ids(config, thread_id, ns), writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """LangGraph's ``delete_thread``, the id checked first."""
        super().delete_thread(checked_thread_id(thread_id))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's ``get_delta_channel_history``, the config checked first."""
        return super().get_delta_channel_history(config=_checked(config), channels=channels)


def _checked(config: RunnableConfig) -> RunnableConfig:
    """``config`` checked as every saver checks it, its ids as stored (thread id as text)."""
    thread_id, ns, _ = thread_coordinates(config)
    return _with_ids(config, thread_id, ns)


def _with_ids(config: RunnableConfig, thread_id: str | None, ns: str | None) -> RunnableConfig:
    configurable = config.get("configurable") or {}
    ids = {"thread_id": thread_id, "checkpoint_ns": ns}
    if all(v is None or configurable.get(k) is v for k, v in ids.items()):
        return config
    updated = {k: v for k, v in ids.items() if v is not None}
    return {**config, "configurable": {**configurable, **updated}}
