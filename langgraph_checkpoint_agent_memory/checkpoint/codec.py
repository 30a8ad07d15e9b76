"""How the SQL saver turns checkpoints into rows and rows back into checkpoints, with no I/O.

* Channel values that are ``None``, booleans, numbers or short strings stay *inline* in the
  checkpoint row; every other value gets a blob row keyed by ``(channel, version)``.
* A list that only grew by appends since the version its parent checkpoint holds (the
  conversation's ``messages``) is stored as just the appended items, with type
  ``"append:<serde type>"`` and ``base_version`` naming the version it extends. The unchanged
  prefix is recognized by object identity against what this process last wrote or read of
  the thread (:class:`ListCache`), so neither serialization nor storage grows with the
  length of the conversation. After :data:`MAX_CHAIN` appends in a row the full list is
  written again.
* Decoding follows ``base_version`` down the chain (or takes the list from the cache).

Rows are named (:class:`CheckpointRow`, :class:`BlobRow`, :class:`WriteRow`, ...); the serde is
passed to each call, because ``with_allowlist`` gives a copy of the saver its own serde.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.core import checkpoint_config, parent_config
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError

#: A string channel value at most this long stays inline in the checkpoint row.
INLINE_STR_MAX = 256
#: An appended list is written in full after this many appends in a row.
MAX_CHAIN = 16
#: Blob type prefix of "the items appended to the list at base_version".
APPEND = "append:"
#: Threads whose last written lists and head checkpoint this process remembers.
CACHE_THREADS = 2000


def is_inline(value: Any) -> bool:
    """Whether a channel value stays in the checkpoint row instead of getting a blob."""
    kind = type(value)
    return (
        value is None
        or kind in (bool, int, float)
        or (kind is str and len(value) <= INLINE_STR_MAX)
    )


#: Encoders built once: ``json.dumps`` builds one per call when given options.
compact_json = json.JSONEncoder(separators=(",", ":")).encode
_metadata_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Checkpoint metadata as compact JSON, or a ``TypeError`` naming the offending key."""
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


# -- rows --------------------------------------------------------------------------------


class BlobRow(NamedTuple):
    """A stored channel value, keyed elsewhere by ``(channel, version)``."""

    type: str
    blob: bytes
    base_version: str | None


class WriteRow(NamedTuple):
    """A pending write as stored."""

    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    type: str
    blob: bytes
    task_path: str


class ListState(NamedTuple):
    """A list channel as this process last wrote or read it."""

    version: str
    items: list[Any]
    #: appends since a full copy
    depth: int


class Head(NamedTuple):
    """What this process last wrote or read of a thread namespace, for appending to its lists."""

    checkpoint_id: str
    blob_versions: dict[str, str]
    lists: dict[str, ListState]


class CheckpointRow:
    """A checkpoint row as fetched (``CHECKPOINT_COLUMNS``): decoded only when asked."""

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


BlobRows = dict[tuple[str, str], BlobRow]

#: Row constructors from one tuple, in C: the hot path builds a row per blob and write, and
#: a NamedTuple's own ``__new__`` is a Python call.
_blob_row: Any = partial(tuple.__new__, BlobRow)
_write_row: Any = partial(tuple.__new__, WriteRow)


def split_details(details: Sequence[Sequence[Sequence[Any]]]) -> tuple[BlobRows, list[WriteRow]]:
    """Sort the results of ``select_blobs`` (5 columns) and ``select_writes`` (7) into
    blob rows by ``(channel, version)`` and write rows."""
    blob_rows: BlobRows = {}
    write_rows: list[WriteRow] = []
    for rows in details:
        for r in rows:
            if len(r) == 5:
                channel, version, kind, blob, base = r
                blob_rows[(channel, version)] = _blob_row(
                    (kind, bytes(blob) if blob is not None else b"", base)
                )
            else:
                cid, task_id, idx, channel, kind, blob, path = r
                blob = bytes(blob) if blob is not None else b""
                write_rows.append(_write_row((cid, task_id, idx, channel, kind, blob, path)))
    return blob_rows, write_rows


def split_union(
    thread_id: str, ns: str, rows: Sequence[Sequence[Any]]
) -> tuple[CheckpointRow, BlobRows, list[WriteRow]] | None:
    """Decode a dialect's one-statement ``get_tuple`` result (``fast_get_tuple``): rows tagged
    0 (the checkpoint), 1 (a blob) and 2 (a write); None when there is no checkpoint."""
    head = next((r for r in rows if r[0] == 0), None)
    if head is None:
        return None
    row = CheckpointRow((thread_id, ns, *head[1:7]))
    blob_rows = {
        (r[1], r[2]): _blob_row((r[3], bytes(r[4]) if r[4] is not None else b"", r[5]))
        for r in rows
        if r[0] == 1
    }
    write_rows = [
        _write_row((head[1], r[1], r[7], r[2], r[3], bytes(r[4]), r[5])) for r in rows if r[0] == 2
    ]
    return row, blob_rows, write_rows


def pending_writes(
    serde: SerializerProtocol, write_rows: Sequence[WriteRow], channels: Any = None
) -> list[PendingWrite]:
    """Write rows as LangGraph's pending writes, in ``writes_sort_key`` order (only those of
    ``channels`` when given)."""
    loads = serde.loads_typed
    ordered = sorted(write_rows, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
    return [
        (w.task_id, w.channel, loads((w.type, w.blob)))
        for w in ordered
        if channels is None or w.channel in channels
    ]


# -- the list cache ----------------------------------------------------------------------


class ListCache:
    """The head checkpoint and list channels this process last wrote or read, per thread
    namespace; one entry per namespace, the oldest evicted beyond :data:`CACHE_THREADS`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.heads: OrderedDict[tuple[str, str], Head] = OrderedDict()
        self.lock = threading.Lock()

    def after_fork(self) -> None:
        self.lock = threading.Lock()

    def append_base(
        self, thread_id: str, ns: str, parent_id: str | None, channel: str, value: Any
    ) -> ListState | None:
        """The stored version that ``value`` extends by appends, if this process knows one.

        Only the version the parent checkpoint holds qualifies (so the base is kept by any
        prune that keeps this checkpoint), and only if every one of its items is the very
        same object at the same position in ``value``.
        """
        if not self.enabled or type(value) is not list or parent_id is None:
            return None
        with self.lock:
            head = self.heads.get((thread_id, ns))
        if head is None or head.checkpoint_id != parent_id:
            return None
        known = head.lists.get(channel)
        if known is None:
            return None
        if head.blob_versions.get(channel) != known.version or known.depth >= MAX_CHAIN:
            return None
        if len(value) <= len(known.items):
            return None
        if any(a is not b for a, b in zip(known.items, value, strict=False)):  # value is longer
            return None
        return known

    def known(self, thread: tuple[str, str], channel: str, version: str) -> ListState | None:
        """The list ``channel`` holds at ``version`` in ``thread``, if this process has it."""
        if not self.enabled:
            return None
        head = self.heads.get(thread)
        known = head.lists.get(channel) if head is not None else None
        return known if known is not None and known.version == version else None

    def remember(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        blob_versions: dict[str, str],
        lists: Mapping[str, ListState | None],
    ) -> None:
        """Record the namespace's new head; ``None`` forgets a channel that is no list now."""
        if not self.enabled:
            return
        with self.lock:
            old = self.heads.pop((thread_id, ns), None)
            kept = {} if old is None else old.lists
            for channel, state in lists.items():
                if state is None:
                    kept.pop(channel, None)
                else:
                    kept[channel] = state
            self.heads[(thread_id, ns)] = Head(checkpoint_id, blob_versions, kept)
            while len(self.heads) > CACHE_THREADS:
                self.heads.popitem(last=False)

    def forget(self, thread_ids: set[str]) -> None:
        """Drop every namespace of threads whose history changed under this process."""
        with self.lock:
            for head in [k for k in self.heads if k[0] in thread_ids]:
                del self.heads[head]


# -- encoding ------------------------------------------------------------------------------


class EncodedCheckpoint(NamedTuple):
    """A checkpoint as the rows ``put`` writes, plus the lists to remember once written."""

    body_type: str
    body: bytes
    blob_versions: dict[str, str]
    blob_rows: list[dict[str, Any]]
    lists: dict[str, ListState | None]


def encode_checkpoint(
    serde: SerializerProtocol,
    cache: ListCache,
    thread_id: str,
    ns: str,
    parent_id: str | None,
    checkpoint: Checkpoint,
    new_versions: Mapping[str, Any],
    live_after: float,
) -> EncodedCheckpoint:
    """Serialize the checkpoint body (with its inline values) and a blob row for each
    non-inline channel in ``new_versions``: the appended items only where ``cache`` knows
    the base."""
    dumps = serde.dumps_typed
    values = checkpoint["channel_values"]
    inline = {k: v for k, v in values.items() if is_inline(v)}
    body_type, body = dumps({**checkpoint, "channel_values": inline})
    blob_versions = {
        k: str(v)
        for k, v in checkpoint["channel_versions"].items()
        if k in values and k not in inline
    }
    blob_rows = []
    lists: dict[str, ListState | None] = {}
    for k, v in new_versions.items():
        if k not in blob_versions:
            continue
        value = values[k]
        base = cache.append_base(thread_id, ns, parent_id, k, value)
        if base is None:
            blob_type, blob = dumps(value)
            depth = 0
        else:
            kind, blob = dumps(value[len(base.items) :])
            blob_type, depth = APPEND + kind, base.depth + 1
        blob_rows.append(
            {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "channel": k,
                "version": str(v),
                "type": blob_type,
                "blob": blob,
                "base_version": base.version if base is not None else None,
                "live_after": live_after,
                "named": parent_id,
            }
        )
        lists[k] = ListState(str(v), list(value), depth) if type(value) is list else None
    return EncodedCheckpoint(body_type, body, blob_versions, blob_rows, lists)


# -- decoding ------------------------------------------------------------------------------


def channel_value(
    serde: SerializerProtocol,
    cache: ListCache,
    blob_rows: Mapping[tuple[str, str], BlobRow],
    channel: str,
    version: str,
    thread: tuple[str, str] | None = None,
) -> tuple[Any, int]:
    """A channel's value at ``version`` and the number of appends it is made of.

    A list version this process wrote or read last for ``thread`` is taken from the cache
    (a new list of the same items), so reading a conversation decodes only what was
    appended since.
    """
    if thread is not None:
        known = cache.known(thread, channel, version)
        if known is not None:
            return list(known.items), known.depth
    found = blob_rows.get((channel, version))
    if found is None:
        raise KeyError((channel, version))
    if found.base_version is None:
        return serde.loads_typed((found.type, found.blob)), 0
    try:
        head, depth = channel_value(serde, cache, blob_rows, channel, found.base_version, thread)
    except KeyError:
        raise AgentMemoryError(
            f"stored list {channel!r} at version {version} lacks its base "
            f"{found.base_version}; the checkpoint data is damaged"
        ) from None
    return head + serde.loads_typed((found.type[len(APPEND) :], found.blob)), depth + 1


def decode(
    serde: SerializerProtocol,
    cache: ListCache,
    row: CheckpointRow,
    blob_rows: Mapping[tuple[str, str], BlobRow],
    write_rows: Sequence[WriteRow],
    metadata: CheckpointMetadata | None = None,
    lists: dict[str, ListState | None] | None = None,
) -> CheckpointTuple:
    """A checkpoint tuple from its row, blobs and writes; fills ``lists`` (when given) with
    the list channels read, for :meth:`ListCache.remember`."""
    checkpoint: Checkpoint = serde.loads_typed((row.type, bytes(row.body)))
    values = dict(checkpoint["channel_values"])
    thread = (row.thread_id, row.ns)
    for ch, v in row.blob_versions.items():
        found = blob_rows.get((ch, v))
        if found is not None and found.type != "empty":
            values[ch], depth = channel_value(serde, cache, blob_rows, ch, v, thread)
            if lists is not None:
                value = values[ch]
                lists[ch] = ListState(v, list(value), depth) if type(value) is list else None
    checkpoint["channel_values"] = values
    return CheckpointTuple(
        config=checkpoint_config(row.thread_id, row.ns, row.checkpoint_id),
        checkpoint=checkpoint,
        metadata=metadata if metadata is not None else json.loads(row.metadata),
        parent_config=parent_config(row.thread_id, row.ns, row.parent_id),
        pending_writes=pending_writes(serde, write_rows),
    )
