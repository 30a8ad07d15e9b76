"""How the SQL saver turns checkpoints into rows and rows back, with no I/O (the format is
told in ``docs/internals/checkpoint-storage.md``).

Short scalar channel values stay inline in the checkpoint row; others get a blob row per
``(channel, version)``. A list that only grew since its parent's version is stored as the
appended items (type ``append:<serde type>``, ``base_version`` naming its base), recognized by
object identity against :class:`ListCache`; after :data:`MAX_CHAIN` appends comes a *segment*
(``segment:<serde type>``), after :data:`MAX_SEGMENTS` segments the full list again. Values
are compressed where that pays, their type then prefixed with :data:`PACKED`. The serde is
passed to each call, because ``with_allowlist`` gives a copy of the saver its own serde.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple, TypeVar

from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.core import (
    check_metadata,
    checkpoint_config,
    parent_config,
)
from langgraph_checkpoint_agent_memory.compression import pack, unpack
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError

#: A string channel value at most this long stays inline in the checkpoint row.
INLINE_STR_MAX = 256
#: Appends in a row after which a list's next version is a segment.
MAX_CHAIN = 16
#: Segments in a row after which a list's next version is written in full.
MAX_SEGMENTS = 8
#: Blob type prefix of "the items appended to the list at base_version".
APPEND = "append:"
#: Blob type prefix of "the items appended since the segment (or full list) at base_version".
SEGMENT = "segment:"
#: Threads whose last written lists and head checkpoint this process remembers.
CACHE_THREADS = 2000
#: Type prefix of a value stored compressed (a zstd frame of :mod:`..compression`).
PACKED = "z:"
#: The longest type the type columns hold.
TYPE_MAX = 32


def packed(kind: str, data: bytes) -> tuple[str, bytes]:
    """A serialized value as stored: compressed and its type prefixed with :data:`PACKED`
    where that makes it smaller, else as it is.

    Example:
        >>> kind, data = packed("msgpack", b"hello " * 20)
        >>> kind, len(data) < 120, unpacked(kind, data, "a value") == ("msgpack", b"hello " * 20)
        ('z:msgpack', True, True)
    """
    if len(kind) + len(PACKED) <= TYPE_MAX and (frame := pack(data)) is not None:
        return PACKED + kind, frame
    return kind, data


def unpacked(kind: str, data: bytes, what: str) -> tuple[str, bytes]:
    """A stored value's type and bytes as the serde wrote them (see :func:`.unpack`)."""
    if kind.startswith(PACKED):
        return kind[len(PACKED) :], unpack(data, what)
    return kind, data


def load(serde: SerializerProtocol, kind: str, data: bytes, what: str) -> Any:
    """A stored value, decompressed if it was, then deserialized."""
    return serde.loads_typed(unpacked(kind, data, what))


#: Encoders built once: ``json.dumps`` builds one per call when given options.
compact_json = json.JSONEncoder(separators=(",", ":")).encode
_metadata_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Metadata as compact JSON, else ``TypeError`` naming the key or :func:`.check_metadata`'s
    error (looked for only where the JSON hints at one: the common case scans the text twice)."""
    try:
        text = _metadata_encoder(metadata)
    except (TypeError, ValueError) as exc:
        check_metadata(metadata)  # NaN or an infinity: the package's error
        bad = next((k for k, v in metadata.items() if not _json_ok(v)), "?")
        raise TypeError(
            f"checkpoint metadata must be JSON-serializable; key {bad!r} is not ({exc})"
        ) from None
    if "\\u0000" in text or not text.isascii():
        check_metadata(metadata)
    return text


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# -- rows: a NamedTuple per kind of fetched row, its fields in its statement's column order


class CheckpointRow(NamedTuple):
    """A checkpoint row (``CHECKPOINT_COLUMNS``), only its ``blob_versions`` decoded."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    type: str
    body: bytes
    metadata: str
    blob_versions: dict[str, str]


class BlobRow(NamedTuple):
    """A stored channel value (``BLOB_COLUMNS``)."""

    channel: str
    version: str
    type: str
    blob: bytes
    base_version: str | None


class WriteRow(NamedTuple):
    """A pending write as stored (the columns of ``select_writes``)."""

    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    type: str
    blob: bytes
    task_path: str


class ChainRow(NamedTuple):
    """A checkpoint of a namespace's history (``CHAIN_COLUMNS``, ``select_chain``)."""

    checkpoint_id: str
    parent_id: str | None
    blob_versions: str
    type: str
    checkpoint: bytes


# The rows of a dialect's ``fast_get_tuple``: three kinds in one layout, tagged in column 0.


class UnionHead(NamedTuple):
    """Tag 0: the checkpoint."""

    tag: int
    checkpoint_id: str
    parent_id: str | None
    type: str
    body: bytes
    metadata: str
    blob_versions: str
    unused: None


class UnionBlob(NamedTuple):
    """Tag 1: a blob (one per channel of the checkpoint, then the bases of appended lists)."""

    tag: int
    channel: str
    version: str
    type: str
    blob: bytes | None
    base_version: str | None
    unused: None
    unused2: None


class UnionWrite(NamedTuple):
    """Tag 2: a pending write of the checkpoint."""

    tag: int
    task_id: str
    channel: str
    type: str
    blob: bytes
    task_path: str
    unused: None
    idx: int


#: Where every row of the one-statement ``get_tuple`` holds its tag, and the kind per tag.
UNION_TAG = 0
UNION_KINDS = (UnionHead, UnionBlob, UnionWrite)


class Anchor(NamedTuple):
    """The segment (or full copy) a list's chain last passed: where its next segment starts."""

    version: str
    #: the list's length at ``version``
    length: int
    #: segments in a row down to the full copy
    segments: int


class ListState(NamedTuple):
    """A list channel as this process last wrote or read it."""

    version: str
    items: list[Any]
    #: appends since ``anchor``
    depth: int
    anchor: Anchor | None = None

    def extended(self, version: str, value: list[Any]) -> tuple[str, str, int, ListState]:
        """How ``value`` (these items and more) is stored at ``version``: type prefix, base
        version, the base's length and the new state; ``("", "", 0, state)``: in full."""
        anchor = self.anchor
        if self.depth < MAX_CHAIN:
            after = ListState(version, list(value), self.depth + 1, anchor)
            return APPEND, self.version, len(self.items), after
        if anchor is not None and anchor.segments < MAX_SEGMENTS:
            mark = Anchor(version, len(value), anchor.segments + 1)
            return SEGMENT, anchor.version, anchor.length, ListState(version, list(value), 0, mark)
        return "", "", 0, full_list(version, value)


def full_list(version: str, value: list[Any]) -> ListState:
    """The state of a list written in full at ``version``."""
    return ListState(version, list(value), 0, Anchor(version, len(value), 0))


class Head(NamedTuple):
    """What this process last wrote or read of a thread namespace, for appending to its lists."""

    checkpoint_id: str
    blob_versions: dict[str, str]
    lists: dict[str, ListState]


BlobRows = dict[tuple[str, str], BlobRow]
R = TypeVar("R", BlobRow, WriteRow)
#: The plaintext of a stored blob (encryption on), called only for blobs decoded.
BlobOpener = Callable[[BlobRow], bytes]

#: Row constructors from one fetched tuple, in C: the hot path builds a row per blob and
#: write, and a NamedTuple's own ``__new__`` is a Python call.
_checkpoint_row: Any = partial(tuple.__new__, CheckpointRow)
_blob_row: Any = partial(tuple.__new__, BlobRow)
write_row: Any = partial(tuple.__new__, WriteRow)
_union_rows: Any = tuple(partial(tuple.__new__, kind) for kind in UNION_KINDS)
chain_row: Any = partial(tuple.__new__, ChainRow)


def checkpoint_row(fetched: Sequence[Any]) -> CheckpointRow:
    """A fetched checkpoint row (``CHECKPOINT_COLUMNS``), named, its ``blob_versions`` decoded."""
    row: CheckpointRow = _checkpoint_row(fetched)
    return row._replace(blob_versions=json.loads(row.blob_versions))  # type: ignore[arg-type]


def _blob(value: Any) -> bytes:
    """A fetched ``bytea``/``BLOB`` as bytes (``b""`` for NULL, the value of an empty channel)."""
    return b"" if value is None else bytes(value)


def _fetched(results: Sequence[Sequence[Sequence[Any]]], make: Callable[[Any], R]) -> Iterator[R]:
    """The rows of ``results`` built by ``make``, their ``blob`` as bytes."""
    for rows in results:
        for fetched in rows:
            row = make(fetched)
            yield row if type(row.blob) is bytes else row._replace(blob=_blob(row.blob))


def blob_rows_of(results: Sequence[Sequence[Sequence[Any]]]) -> BlobRows:
    """The rows of ``select_blobs`` statements by ``(channel, version)``."""
    return {(row.channel, row.version): row for row in _fetched(results, _blob_row)}


def write_rows_of(results: Sequence[Sequence[Sequence[Any]]]) -> list[WriteRow]:
    """The rows of ``select_writes`` statements."""
    return list(_fetched(results, write_row))


def split_union(
    thread_id: str, ns: str, rows: Sequence[Sequence[Any]]
) -> tuple[CheckpointRow, BlobRows, list[WriteRow]] | None:
    """The rows of a dialect's ``fast_get_tuple``, or ``None`` without a checkpoint."""
    head: UnionHead | None = None
    blob_rows: BlobRows = {}
    writes: list[UnionWrite] = []
    kinds = _union_rows
    for fetched in rows:
        part = kinds[fetched[UNION_TAG]](fetched)
        if type(part) is UnionBlob:
            blob = part.blob
            if type(blob) is not bytes:
                blob = _blob(blob)
            blob_rows[(part.channel, part.version)] = _blob_row(
                (part.channel, part.version, part.type, blob, part.base_version)
            )
        elif type(part) is UnionWrite:
            writes.append(
                part if type(part.blob) is bytes else part._replace(blob=_blob(part.blob))
            )
        else:
            head = part
    if head is None:
        return None
    cid = head.checkpoint_id
    versions = json.loads(head.blob_versions)
    row: CheckpointRow = _checkpoint_row(
        (thread_id, ns, cid, head.parent_id, head.type, head.body, head.metadata, versions)
    )
    write_rows = [
        write_row((cid, w.task_id, w.idx, w.channel, w.type, w.blob, w.task_path)) for w in writes
    ]
    return row, blob_rows, write_rows


def pending_writes(
    serde: SerializerProtocol, write_rows: Sequence[WriteRow], channels: Any = None
) -> list[PendingWrite]:
    """Write rows as LangGraph's pending writes (of ``channels`` only, when given)."""
    ordered = sorted(write_rows, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
    return [
        (w.task_id, w.channel, load(serde, w.type, w.blob, f"a pending write of {w.task_id!r}"))
        for w in ordered
        if channels is None or w.channel in channels
    ]


class ListCache:
    """Per thread namespace, the head and lists this process last wrote or read (LRU-bounded)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.heads: OrderedDict[tuple[str, str], Head] = OrderedDict()
        self.lock = threading.Lock()

    def after_fork(self) -> None:
        self.lock = threading.Lock()

    def append_base(
        self, thread_id: str, ns: str, parent_id: str | None, channel: str, value: Any
    ) -> ListState | None:
        """The stored version that ``value`` extends by appends, if this process knows one:
        only the parent checkpoint's version (so any prune keeping this checkpoint keeps the
        base), and only if each of its items is the very same object in ``value``."""
        if not self.enabled or type(value) is not list or parent_id is None:
            return None
        with self.lock:
            head = self.heads.get((thread_id, ns))
        if head is None or head.checkpoint_id != parent_id:
            return None
        known = head.lists.get(channel)
        if (
            known is None
            or head.blob_versions.get(channel) != known.version
            or len(value) < len(known.items)
            or any(a is not b for a, b in zip(known.items, value, strict=False))  # value is longer
        ):
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


def encode_checkpoint(
    serde: SerializerProtocol,
    cache: ListCache,
    thread_id: str,
    ns: str,
    parent_id: str | None,
    checkpoint: Checkpoint,
    new_versions: Mapping[str, Any],
    live_after: float,
) -> tuple[str, bytes, dict[str, str], list[dict[str, Any]], dict[str, ListState | None]]:
    """Body type and bytes, ``blob_versions``, the new channels' blob rows, lists to remember."""
    dumps = serde.dumps_typed
    values = checkpoint["channel_values"]
    inline = {  # the values that stay in the checkpoint row
        k: v
        for k, v in values.items()
        if v is None
        or type(v) in (bool, int, float)
        or (type(v) is str and len(v) <= INLINE_STR_MAX)
    }
    body_type, body = packed(*dumps({**checkpoint, "channel_values": inline}))
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
        value, version = values[k], str(v)
        known = cache.append_base(thread_id, ns, parent_id, k, value)
        prefix, base, start, state = (
            known.extended(version, value) if known is not None else ("", "", 0, None)
        )
        if prefix:
            kind, blob = dumps(value[start:])
            if len(prefix) + len(kind) > TYPE_MAX:  # no room for the prefix: a full copy
                prefix = base = ""
        if prefix:
            blob_type, blob = packed(prefix + kind, blob)
        else:
            blob_type, blob = packed(*dumps(value))
            state = full_list(version, value) if type(value) is list else None
        blob_rows.append(
            {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "channel": k,
                "version": version,
                "type": blob_type,
                "blob": blob,
                "base_version": base or None,
                "live_after": live_after,
                "named": parent_id,
            }
        )
        lists[k] = state
    return body_type, body, blob_versions, blob_rows, lists


def channel_value(
    serde: SerializerProtocol,
    cache: ListCache,
    blob_rows: Mapping[tuple[str, str], BlobRow],
    channel: str,
    version: str,
    thread: tuple[str, str] | None = None,
    opener: BlobOpener | None = None,
) -> tuple[Any, int, Anchor | None]:
    """A channel's value at ``version``, its appends since its :class:`Anchor`, and that anchor;
    only what was appended to a list the cache holds for ``thread`` is decoded."""
    if thread is not None and (known := cache.known(thread, channel, version)) is not None:
        return list(known.items), known.depth, known.anchor
    if (found := blob_rows.get((channel, version))) is None:
        raise MissingBlob(f"stored channel {channel!r} lacks its value at version {version}")
    what = f"the value of channel {channel!r} at version {version}"
    kind, blob = unpacked(found.type, found.blob if opener is None else opener(found), what)
    if found.base_version is None:
        value = serde.loads_typed((kind, blob))
        return value, 0, Anchor(version, len(value), 0) if type(value) is list else None
    try:
        head, depth, anchor = channel_value(
            serde, cache, blob_rows, channel, found.base_version, thread, opener
        )
    except MissingBlob:
        raise MissingBlob(
            f"stored list {channel!r} at version {version} lacks its base {found.base_version}"
        ) from None
    if kind.startswith(APPEND):
        return head + serde.loads_typed((kind[len(APPEND) :], blob)), depth + 1, anchor
    value = head + serde.loads_typed((kind[len(SEGMENT) :], blob))
    return value, 0, Anchor(version, len(value), 1 + (anchor.segments if anchor else 0))


class MissingBlob(AgentMemoryError):
    """A checkpoint names a value (or an appended list's base) that a racing delete or erase
    removed: the readers answer as for a thread that is gone. Never raised to a caller."""


def decode(
    serde: SerializerProtocol,
    cache: ListCache,
    row: CheckpointRow,
    blob_rows: Mapping[tuple[str, str], BlobRow],
    write_rows: Sequence[WriteRow],
    metadata: CheckpointMetadata | None = None,
    lists: dict[str, ListState | None] | None = None,
    opener: BlobOpener | None = None,
) -> CheckpointTuple:
    """A checkpoint tuple; fills ``lists`` (when given) with the list channels read."""
    what = f"checkpoint {row.checkpoint_id} of thread {row.thread_id!r}"
    checkpoint: Checkpoint = load(serde, row.type, bytes(row.body), what)
    values = dict(checkpoint["channel_values"])
    thread = (row.thread_id, row.ns)
    for ch, v in row.blob_versions.items():
        found = blob_rows.get((ch, v))
        if found is not None and found.type != "empty":
            value, depth, anchor = channel_value(serde, cache, blob_rows, ch, v, thread, opener)
            values[ch] = value
            if lists is not None:
                is_list = type(value) is list
                lists[ch] = ListState(v, list(value), depth, anchor) if is_list else None
    checkpoint["channel_values"] = values
    return CheckpointTuple(
        config=checkpoint_config(row.thread_id, row.ns, row.checkpoint_id),
        checkpoint=checkpoint,
        metadata=metadata if metadata is not None else json.loads(row.metadata),
        parent_config=parent_config(row.thread_id, row.ns, row.parent_id),
        pending_writes=pending_writes(serde, write_rows),
    )
