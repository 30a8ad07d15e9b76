"""What :class:`~.timed.TimedInMemorySaver` keeps of one thread, and what it does with it.

One record per thread holds its checkpoints, channel values, writes and runs, so evicting,
pruning or deleting a thread costs that thread's size, not the whole saver's. The record knows
nothing of expiry or locking: the saver decides when it is read or changed (under its lock),
and passes the serializer's ``loads_typed`` where a stored value must be read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langgraph.checkpoint.base import ChannelVersions, Checkpoint, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.codec import WriteRow, pending_writes
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    checkpoints_to_keep,
    delta_channels_of,
    delta_history,
)

Version = str | int | float
Typed = tuple[str, bytes]
Loads = Callable[[Typed], Any]

#: The stored value of a channel that has a version but no value.
EMPTY: Typed = ("empty", b"")


class Saved(NamedTuple):
    """One checkpoint as stored: the serialized checkpoint without its channel values, the
    serialized metadata, and the parent's id."""

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
        """One checkpoint's stored parts (the namespace's latest when ``checkpoint_id`` is
        ``None``), or ``None``."""
        ns_store = self.checkpoints.get(checkpoint_ns)
        if not ns_store:
            return None
        if checkpoint_id is None:
            checkpoint_id = max(ns_store)
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
        """The ``(namespace, checkpoint id)`` pairs a ``list`` call selects, newest first in
        each namespace."""
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
        """The writes that rebuild each ``DeltaChannel`` at a checkpoint, and their seed
        (:func:`~.core.delta_history` over this thread's ancestors of it)."""
        loads = serde.loads_typed
        ns_store = self.checkpoints.get(checkpoint_ns, {})
        target = ns_store.get(checkpoint_id or max(ns_store, default=""))
        chain: list[str] = []
        parent = target.parent_id if target is not None else None
        while parent is not None and parent in ns_store:
            chain.append(parent)
            parent = ns_store[parent].parent_id
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
        """A copy with every stored value (checkpoint, metadata, channel value, write)
        passed through ``change`` (the in-memory saver re-seals a copy with it)."""
        copy = ThreadData()
        self.copy_into(copy)
        for by_id in copy.checkpoints.values():
            for cid, saved in by_id.items():
                by_id[cid] = Saved(
                    change(saved.checkpoint), change(saved.metadata), saved.parent_id
                )
        for key, typed in copy.blobs.items():
            copy.blobs[key] = change(typed)
        for rows in copy.writes.values():
            for k, w in rows.items():
                kind, blob = change((w.type, w.blob))
                rows[k] = WriteRow(
                    w.checkpoint_id, w.task_id, w.idx, w.channel, kind, blob, w.task_path
                )
        return copy

    def keep_latest(self, keep_last: int, loads: Loads) -> None:
        """Keep each namespace's last ``keep_last`` checkpoints and the ancestors their
        ``DeltaChannel`` values need; drop the rest and the values nothing refers to."""
        for ns, ns_store in list(self.checkpoints.items()):
            if not ns_store:
                continue
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

        def parent_of(cid: str) -> str | None:
            parent = ns_store[cid].parent_id
            return parent if parent in ns_store else None

        return checkpoints_to_keep(
            sorted(ns_store, reverse=True),
            keep_last,
            lambda cid: delta_channels_of(loads(ns_store[cid].metadata)),
            parent_of,
            has_value,
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
