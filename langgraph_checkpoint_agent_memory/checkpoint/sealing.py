"""Checkpoint rows sealed with their thread's data key, and opened again, with no I/O (apart
from :mod:`.codec` so only a saver with encryption on loads it).

Every value column is sealed, the metadata as a whole (its keys say as much as its values; a
filter on it is matched after opening), with its row's identity as associated data, so a value
moved to another row or thread does not open. A read's plan asks :meth:`Sealer.ensure` for the
key ids it fetched; a key not in memory ends it with :class:`~..crypto.keyring.KeysNeeded`,
and the shell loads it and runs the plan again, so the hot path keeps its round trips.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_checkpoint_agent_memory.checkpoint.codec import (
    PACKED,
    BlobOpener,
    BlobRow,
    BlobRows,
    CheckpointRow,
    WriteRow,
)
from langgraph_checkpoint_agent_memory.crypto.cipher import (
    SCOPE_CONFIG_KEY,
    DataKey,
    aad,
    is_sealed,
    is_sealed_text,
    key_id_of,
    looks_damaged,
    plaintext_refused,
    store_owner,
    text_bytes,
    thread_owner,
)
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, KeysNeeded
from langgraph_checkpoint_agent_memory.errors import DecryptionError, InvalidValueError


def owner_of(thread_id: str, config: RunnableConfig | None) -> str:
    """The key owner of a write to ``thread_id``: the store scope the config names
    (``config["configurable"]["encryption_scope"]``), else the thread itself.

    Example:
        >>> owner_of("t1", {"configurable": {"thread_id": "t1"}})
        'thread:t1'
        >>> owner_of("t1", {"configurable": {"encryption_scope": "memory.user=alice"}})
        'store:memory.user=alice'
    """
    scope = ((config or {}).get("configurable") or {}).get(SCOPE_CONFIG_KEY)
    if scope is None or scope == "":
        return thread_owner(thread_id)
    if not isinstance(scope, str):
        raise InvalidValueError(
            f"config['configurable']['{SCOPE_CONFIG_KEY}'] must be a store shard key (a "
            f"string), got {type(scope).__name__}"
        )
    return store_owner(scope)


def raw(kind: str) -> bool:
    """Whether a value is stored uncompressed (an old row): then the cipher compresses it."""
    return not kind.startswith(PACKED)


def refused_or_plaintext(value: bytes, allow_plaintext: bool, what: str) -> bytes:
    """An unsealed ``value`` if plaintext is allowed, else why not (damaged, or plaintext)."""
    if allow_plaintext:
        return value
    if looks_damaged(value):
        raise DecryptionError(
            f"{what} is not a whole sealed value ({len(value)} bytes): damaged (cut short, "
            "its header altered), or, if this database held plaintext, a plaintext value "
            "that starts like a sealed one (`agent-memory encrypt` seals those)"
        )
    raise plaintext_refused(what)


class Sealer:
    """Seals and opens the values of one saver's rows with the keys of ``keyring``."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring

    def ensure(self, values: Iterable[bytes | str | None]) -> None:
        """Raise :class:`~..crypto.keyring.KeysNeeded` for sealed ``values`` whose keys are out."""
        ids = set()
        for v in values:
            if isinstance(v, str):
                if is_sealed_text(v):
                    ids.add(key_id_of(text_bytes(v)))
            elif v and is_sealed(v):
                ids.add(key_id_of(v))
        if missing := {k for k in ids if self.keyring.cached_id(k) is None}:
            raise KeysNeeded(ids=missing)

    def _key(self, key_id: str) -> DataKey:
        if (found := self.keyring.cached_id(key_id)) is None:
            raise KeysNeeded(ids=[key_id])
        return found

    def open(self, value: bytes, associated: bytes, what: str) -> bytes:
        """The plaintext of a bytes column (empty stays empty: it hides nothing)."""
        if not value:
            return value
        if is_sealed(value):
            return self._key(key_id_of(value)).open(value, associated)
        return refused_or_plaintext(value, self.keyring.allow_plaintext, what)

    def open_text(self, value: str, associated: bytes, what: str) -> str:
        """The plaintext of a text column."""
        if is_sealed_text(value):
            raw = text_bytes(value)
            return self._key(key_id_of(raw)).open(raw, associated).decode("utf-8")
        if self.keyring.allow_plaintext:
            return value
        raise plaintext_refused(what)

    def open_body(self, thread_id: str, ns: str, checkpoint_id: str, kind: str, body: Any) -> bytes:
        what = f"checkpoint {checkpoint_id} of thread {thread_id!r}"
        return self.open(bytes(body), aad("checkpoint", thread_id, ns, checkpoint_id, kind), what)

    def open_metadata(self, thread_id: str, ns: str, checkpoint_id: str, text: str) -> str:
        what = f"the metadata of checkpoint {checkpoint_id} of thread {thread_id!r}"
        return self.open_text(text, aad("metadata", thread_id, ns, checkpoint_id), what)

    def open_blob(self, thread_id: str, ns: str, b: BlobRow) -> bytes:
        what = f"the value of channel {b.channel!r} at version {b.version} of thread {thread_id!r}"
        associated = aad("blob", thread_id, ns, b.channel, b.version, b.type, b.base_version)
        return self.open(b.blob, associated, what)

    def open_write(self, thread_id: str, ns: str, w: WriteRow) -> bytes:
        what = f"a pending write of task {w.task_id!r} in thread {thread_id!r}"
        associated = aad(
            "write", thread_id, ns, w.checkpoint_id, w.task_id, w.idx, w.channel, w.type
        )
        return self.open(w.blob, associated, what)

    @staticmethod
    def seal_blob_rows(key: DataKey, rows: Sequence[dict[str, Any]]) -> None:
        """Seal the ``blob`` of blob rows (insert parameters) in place."""
        for r in rows:
            associated = aad(
                "blob", r["thread_id"], r["checkpoint_ns"], r["channel"], r["version"], r["type"],
                r["base_version"],
            )  # fmt: skip
            r["blob"] = key.seal(r["blob"] or b"", associated, compress=raw(r["type"]))

    @staticmethod
    def seal_write_rows(key: DataKey, rows: Sequence[dict[str, Any]]) -> None:
        """Seal the ``blob`` of pending-write rows (insert parameters) in place."""
        for r in rows:
            associated = aad(
                "write", r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"], r["task_id"],
                r["idx"], r["channel"], r["type"],
            )  # fmt: skip
            r["blob"] = key.seal(r["blob"] or b"", associated, compress=raw(r["type"]))

    @staticmethod
    def seal_checkpoint_row(key: DataKey, row: dict[str, Any]) -> None:
        """Seal the body and metadata of a checkpoint row (insert parameters) in place."""
        t, ns, cid = row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"]
        body = bytes(row["checkpoint"])
        associated = aad("checkpoint", t, ns, cid, row["type"])
        row["checkpoint"] = key.seal(body, associated, compress=raw(row["type"]))
        row["metadata"] = key.seal_text(
            row["metadata"].encode("utf-8"), aad("metadata", t, ns, cid)
        )

    def resealed(
        self, tables: list[list[dict[str, Any]]], target: str, key: DataKey
    ) -> list[list[dict[str, Any]]]:
        """A thread's rows (``db.checkpoint.retarget``'s) opened, then sealed as ``target``'s."""
        cps, blobs, writes = tables
        self.ensure(
            [
                *(v for r in cps for v in (r["checkpoint"], r["metadata"])),
                *(bytes(r["blob"] or b"") for r in [*blobs, *writes]),
            ]
        )
        for r in cps:
            t, ns, cid = r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"]
            r["checkpoint"] = self.open_body(t, ns, cid, r["type"], r["checkpoint"])
            r["metadata"] = self.open_metadata(t, ns, cid, r["metadata"])
            r["thread_id"] = target
            Sealer.seal_checkpoint_row(key, r)
        for r in blobs:
            blob = BlobRow(
                r["channel"], r["version"], r["type"], bytes(r["blob"] or b""), r["base_version"]
            )
            r["blob"] = self.open_blob(r["thread_id"], r["checkpoint_ns"], blob)
            r["thread_id"] = target
        Sealer.seal_blob_rows(key, blobs)
        for r in writes:
            w = WriteRow(
                r["checkpoint_id"], r["task_id"], r["idx"], r["channel"], r["type"],
                bytes(r["blob"] or b""), r["task_path"],
            )  # fmt: skip
            r["blob"] = self.open_write(r["thread_id"], r["checkpoint_ns"], w)
            r["thread_id"] = target
        Sealer.seal_write_rows(key, writes)
        return [cps, blobs, writes]


def lazily_opened(
    sealer: Sealer,
    thread_id: str,
    ns: str,
    row: CheckpointRow,
    blob_rows: BlobRows,
    write_rows: Sequence[WriteRow],
) -> tuple[CheckpointRow, list[WriteRow], BlobOpener]:
    """:func:`opened_rows` for ``get_tuple``, but with an opener of blobs for the decoder,
    so only the blobs it decodes are opened (not lists this process already holds)."""
    sealer.ensure([row.body, row.metadata, *(b.blob for b in blob_rows.values())])
    [opened], _, writes = opened_rows(sealer, thread_id, ns, [row], {}, write_rows)
    return opened, writes, partial(sealer.open_blob, thread_id, ns)


def opened_rows(
    sealer: Sealer,
    thread_id: str,
    ns: str,
    rows: Sequence[CheckpointRow],
    blob_rows: BlobRows,
    write_rows: Sequence[WriteRow],
) -> tuple[list[CheckpointRow], BlobRows, list[WriteRow]]:
    """Checkpoint, blob and write rows of one thread namespace, their values opened."""
    sealer.ensure(
        [
            *(v for r in rows for v in (r.body, r.metadata)),
            *(b.blob for b in blob_rows.values()),
            *(w.blob for w in write_rows),
        ]
    )
    out_rows = [
        r._replace(
            body=sealer.open_body(thread_id, ns, r.checkpoint_id, r.type, r.body),
            metadata=sealer.open_metadata(thread_id, ns, r.checkpoint_id, r.metadata),
        )
        for r in rows
    ]
    out_blobs = {
        k: b._replace(blob=sealer.open_blob(thread_id, ns, b)) for k, b in blob_rows.items()
    }
    out_writes = [w._replace(blob=sealer.open_write(thread_id, ns, w)) for w in write_rows]
    return out_rows, out_blobs, out_writes


class ThreadSerde:
    """A serializer sealing what it dumps with ``key`` (``None``: it only loads) and opening what
    it loads, bound to the thread and the type: how :class:`~.timed.TimedInMemorySaver` encrypts."""

    def __init__(
        self, inner: Any, keyring: Keyring, thread_id: str, key: DataKey | None = None
    ) -> None:
        self.inner, self.keyring, self.thread_id, self.key = inner, keyring, thread_id, key

    def _aad(self, kind: str) -> bytes:
        return aad("memory", self.thread_id, kind)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.inner.dumps_typed(obj)
        assert self.key is not None
        return kind, self.key.seal(data, self._aad(kind))

    def opened(self, data: tuple[str, bytes]) -> tuple[str, bytes]:
        """``data`` (a stored typed value) with its bytes opened."""
        kind, raw = data
        if kind == "empty" or not raw:
            return data
        if is_sealed(raw):
            return kind, self.keyring.by_id(key_id_of(raw)).open(raw, self._aad(kind))
        what = f"a value of thread {self.thread_id!r}"
        return kind, refused_or_plaintext(raw, self.keyring.allow_plaintext, what)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(self.opened(data))

    def resealed(self, data: tuple[str, bytes], target: ThreadSerde) -> tuple[str, bytes]:
        """``data`` opened as this thread's and sealed as ``target``'s."""
        kind, raw = self.opened(data)
        if kind == "empty" or not raw:
            return data
        assert target.key is not None
        return kind, target.key.seal(raw, target._aad(kind))


def thread_serde(
    serde: Any, keyring: Keyring | None, thread_id: str, config: RunnableConfig | None = None
) -> Any:
    """``serde``, or with encryption a :class:`ThreadSerde` (sealing for a write: ``config``)."""
    if keyring is None:
        return serde
    key = None if config is None else keyring.key(owner_of(thread_id, config))
    return ThreadSerde(serde, keyring, thread_id, key)


def resealed_copy(serde: Any, keyring: Keyring, source: Any, src: str, dst: str) -> Any:
    """A copy of ``ThreadData`` ``source`` of ``src`` with every value sealed for ``dst``."""
    before = ThreadSerde(serde, keyring, src)
    after = ThreadSerde(serde, keyring, dst, keyring.key(thread_owner(dst)))
    return source.mapped(lambda typed: before.resealed(typed, after))
