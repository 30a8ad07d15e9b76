"""The plans of ``get_tuple``, ``list`` and ``get_delta_channel_history``.

``get_tuple`` looks blobs up by their full key, so its cost does not grow with the thread's
history. ``list`` reads keyset-paginated pages and decodes each checkpoint only when the
caller reaches it. A due refresh-on-read goes first in the read's batch: it waits for a sweep
holding the thread's row, so the read never sees a thread live that the sweep then removes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_checkpoint_agent_memory.checkpoint.codec import (
    BlobRows,
    ChainRow,
    CheckpointRow,
    ListCache,
    ListState,
    MissingBlob,
    WriteRow,
    blob_rows_of,
    chain_row,
    channel_value,
    checkpoint_row,
    decode,
    load,
    pending_writes,
    split_union,
    write_rows_of,
)
from langgraph_checkpoint_agent_memory.checkpoint.core import (
    ancestors,
    checked_before_id,
    checked_filter,
    checked_limit,
    delta_history,
    list_coordinates,
    metadata_matches,
    thread_coordinates,
)
from langgraph_checkpoint_agent_memory.checkpoint.lifetime import ThreadActivity
from langgraph_checkpoint_agent_memory.checkpoint.sealing import Sealer, lazily_opened, opened_rows
from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect

#: Checkpoints per ``list`` page.
LIST_PAGE = 32
Keyset = tuple[str, str, str]
#: One checkpoint of a ``list`` page with the blobs and writes of its namespace.
PageRow = tuple[CheckpointRow, BlobRows, list[WriteRow]]


class Details(NamedTuple):
    """The statements fetching the blobs, then the writes, of one thread namespace."""

    blobs: list[Stmt]
    writes: list[Stmt]

    @property
    def statements(self) -> list[Stmt]:
        return [*self.blobs, *self.writes]

    def split(self, results: Sequence[Any]) -> tuple[BlobRows, list[WriteRow]]:
        """The blob rows and write rows of these statements' ``results``."""
        n = len(self.blobs)
        return blob_rows_of(results[:n]), write_rows_of(results[n : n + len(self.writes)])


@dataclass
class Reader:
    """Builds the read plans of one saver from its dialect, activity policy and list cache."""

    dialect: Dialect
    activity: ThreadActivity
    cache: ListCache
    #: Opens sealed rows (encryption on), else ``None``.
    sealer: Sealer | None = None

    def refresh(self, thread_id: str, now: float) -> list[Stmt]:
        """The refresh-on-read statement, when due."""
        activity = self.activity
        if not activity.refresh_due(thread_id, now):
            return []
        params = {"thread_id": thread_id, "now": now, "slack": activity.slack}
        return [Stmt(S.refresh_thread(self.dialect), params)]

    def details(self, thread_id: str, ns: str, rows: Sequence[CheckpointRow]) -> Details:
        """Statements fetching the blobs and writes of ``rows`` (one thread namespace)."""
        keys = sorted({(ch, v) for r in rows for ch, v in r.blob_versions.items()})
        blob_stmts = self.blob_keys(thread_id, ns, keys)
        write_stmts: list[Stmt] = []
        ids = sorted({r.checkpoint_id for r in rows})
        for start in range(0, len(ids), S.MAX_KEYS):
            chunk = ids[start : start + S.MAX_KEYS]
            n = S.bucket(len(chunk))
            params = {"thread_id": thread_id, "checkpoint_ns": ns}
            for i, cid in enumerate(chunk + [chunk[-1]] * (n - len(chunk))):
                params[f"k{i}"] = cid
            write_stmts.append(Stmt(S.select_writes(self.dialect, n), params, fetch=True))
        return Details(blob_stmts, write_stmts)

    def blob_keys(self, thread_id: str, ns: str, keys: Sequence[tuple[str, str]]) -> list[Stmt]:
        """Statements fetching blobs by ``(channel, version)``, padded to a few sizes."""
        out: list[Stmt] = []
        for start in range(0, len(keys), S.MAX_KEYS):
            chunk = list(keys[start : start + S.MAX_KEYS])
            n = S.bucket(len(chunk))
            padded = chunk + [chunk[-1]] * (n - len(chunk))
            params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
            for i, (ch, v) in enumerate(padded):
                params[f"c{i}"], params[f"v{i}"] = ch, v
            out.append(Stmt(S.select_blobs(self.dialect, n), params, fetch=True))
        return out

    def complete_chains(
        self, thread_id: str, ns: str, blob_rows: BlobRows, known: ListCache | None = None
    ) -> Plan[None]:
        """Fetch, a level per round trip, the list bases a dialect without recursive queries
        left out, but none ``known`` (the read's list cache) holds, nor below one."""
        thread = (thread_id, ns)

        def held(ch: str, version: str) -> bool:
            return known is not None and known.known(thread, ch, version) is not None

        while True:
            missing = sorted(
                {
                    (ch, r.base_version)
                    for (ch, v), r in blob_rows.items()
                    if r.base_version is not None
                    and (ch, r.base_version) not in blob_rows
                    and not held(ch, v)
                    and not held(ch, r.base_version)
                }
            )
            if not missing:
                return
            results = yield Batch(self.blob_keys(thread_id, ns, missing))
            if not (found := blob_rows_of(results)):
                return
            blob_rows.update(found)

    def get_tuple(
        self, serde: SerializerProtocol, config: RunnableConfig
    ) -> Plan[CheckpointTuple | None]:
        """The checkpoint ``config`` names (the latest without a ``checkpoint_id``)."""
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        activity = self.activity
        now = activity.clock()
        d = self.dialect
        cache = self.cache
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "live_after": activity.live_after(now),
        }
        refresh = self.refresh(thread_id, now)
        fast = d.fast_get_tuple(checkpoint_id is not None)
        if fast is not None:
            *counts, rows = yield Batch(
                [*refresh, Stmt(fast, params, fetch=True)], write=bool(refresh)
            )
            activity.refreshed(thread_id, bool(refresh), counts)
            found = split_union(thread_id, ns, rows)
            if found is None:
                return None
            row, blob_rows, write_rows = found
        else:
            first = Stmt(
                S.select_checkpoint(d, by_id=checkpoint_id is not None), params, fetch=True
            )
            *counts, found_rows = yield Batch([*refresh, first], write=bool(refresh))
            activity.refreshed(thread_id, bool(refresh), counts)
            if not found_rows:
                return None
            row = checkpoint_row(found_rows[0])
            details = self.details(thread_id, ns, [row])
            blob_rows, write_rows = details.split((yield Batch(details.statements)))
            # chains completed and decoded against the lists held now, whatever others remember
            cache = _pinned(self.cache, (thread_id, ns))
            yield from self.complete_chains(thread_id, ns, blob_rows, cache)
        opener = None
        if self.sealer is not None:
            row, write_rows, opener = lazily_opened(
                self.sealer, thread_id, ns, row, blob_rows, write_rows
            )
        lists: dict[str, ListState | None] = {}
        try:
            tup = decode(serde, cache, row, blob_rows, write_rows, lists=lists, opener=opener)
        except MissingBlob:
            return None  # a delete or erase raced this read, or the write of this checkpoint
        self.cache.remember(thread_id, ns, row.checkpoint_id, row.blob_versions, lists)
        return tup

    def page(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        keyset: Keyset | None,
        page_size: int,
    ) -> Plan[tuple[list[PageRow], Keyset | None]]:
        """One page of ``list``: rows plus the blobs and writes they need, undecoded."""
        d = self.dialect
        activity = self.activity
        now = activity.clock()
        thread_id, ns, cid = list_coordinates(config)
        before_id = checked_before_id(before)
        # sealed metadata is matched after opening (ListCursor.take), never in SQL
        pushed = S.pushed_filters(d, filter) if self.sealer is None else ()
        params: dict[str, Any] = {
            "live_after": activity.live_after(now),
            "page_size": page_size,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": cid,
            "before_id": before_id,
        }
        for i, name in enumerate(pushed):
            params[f"f{i}"] = d.prefilter_value(name, filter[name])  # type: ignore[index]
        if keyset is not None:
            params["k_id"], params["k_thread"], params["k_ns"] = keyset
        sql = S.list_page(
            d,
            thread=thread_id is not None,
            ns=ns is not None,
            cid=cid is not None,
            before=before_id is not None,
            after=keyset is not None,
            filters=pushed,
        )
        refresh = self.refresh(thread_id, now) if thread_id is not None else []
        *counts, found = yield Batch([*refresh, Stmt(sql, params, fetch=True)], write=bool(refresh))
        if thread_id is not None:
            activity.refreshed(thread_id, bool(refresh), counts)
        rows = [checkpoint_row(r) for r in found]
        if not rows:
            return [], None
        groups: dict[tuple[str, str], list[CheckpointRow]] = {}
        for r in rows:
            groups.setdefault((r.thread_id, r.ns), []).append(r)
        spans = {g: self.details(g[0], g[1], members) for g, members in groups.items()}
        results = yield Batch([s for details in spans.values() for s in details.statements])
        by_group: dict[tuple[str, str], tuple[BlobRows, list[WriteRow]]] = {}
        at = 0
        for group, details in spans.items():
            by_group[group] = details.split(results[at:])
            yield from self.complete_chains(group[0], group[1], by_group[group][0])
            at += len(details.statements)
        last = rows[-1]
        next_keyset = (last.checkpoint_id, last.thread_id, last.ns)
        if self.sealer is not None:
            self.sealer.ensure(
                [
                    *(v for r in rows for v in (r.body, r.metadata)),
                    *(b.blob for blobs, _ in by_group.values() for b in blobs.values()),
                    *(w.blob for _, writes in by_group.values() for w in writes),
                ]
            )
            opened: dict[tuple[str, str, str], CheckpointRow] = {}
            for group, members in groups.items():
                plain, blobs, writes = opened_rows(
                    self.sealer, group[0], group[1], members, *by_group[group]
                )
                opened.update(((r.thread_id, r.ns, r.checkpoint_id), r) for r in plain)
                by_group[group] = (blobs, writes)
            rows = [opened[(r.thread_id, r.ns, r.checkpoint_id)] for r in rows]
        out: list[PageRow] = [(r, *by_group[(r.thread_id, r.ns)]) for r in rows]
        return out, next_keyset if len(rows) == page_size else None

    def opened_details(
        self, thread_id: str, ns: str, blob_rows: BlobRows, write_rows: list[WriteRow]
    ) -> tuple[BlobRows, list[WriteRow]]:
        """Blob and write rows of a namespace with their values opened (encryption on)."""
        if self.sealer is None:
            return blob_rows, write_rows
        _, blobs, writes = opened_rows(self.sealer, thread_id, ns, [], blob_rows, write_rows)
        return blobs, writes

    def opened_chain(
        self, thread_id: str, ns: str, by_id: dict[str, ChainRow]
    ) -> dict[str, ChainRow]:
        """A namespace's chain rows with their bodies opened (encryption on)."""
        sealer = self.sealer
        if sealer is None:
            return by_id
        sealer.ensure(r.checkpoint for r in by_id.values())
        return {
            cid: r._replace(checkpoint=sealer.open_body(thread_id, ns, cid, r.type, r.checkpoint))
            for cid, r in by_id.items()
        }

    def history(
        self, serde: SerializerProtocol, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[Mapping[str, DeltaChannelHistory]]:
        """One read of the namespace's chain, then the blobs and writes each channel needs."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = thread_coordinates(config)
        now = self.activity.clock()
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id or "\U0010ffff",
            "live_after": self.activity.live_after(now),
        }
        [rows] = yield Batch([Stmt(S.select_chain(self.dialect), params, fetch=True)])
        by_id = self.opened_chain(thread_id, ns, {r.checkpoint_id: r for r in map(chain_row, rows)})
        target = checkpoint_id if checkpoint_id is not None else max(by_id, default=None)
        if target is None or target not in by_id:
            return {ch: {"writes": []} for ch in channels}
        chain = list(ancestors(by_id, by_id[target].parent_id))
        versions = {cid: json.loads(by_id[cid].blob_versions) for cid in chain}
        inline_cache: dict[str, dict[str, Any]] = {}

        def inline(cid: str) -> dict[str, Any]:
            if cid not in inline_cache:
                row = by_id[cid]
                what = f"checkpoint {cid} of thread {thread_id!r}"
                inline_cache[cid] = load(serde, row.type, row.checkpoint, what)["channel_values"]
            return inline_cache[cid]

        def has_value(cid: str, ch: str) -> bool:
            return ch in versions[cid] or ch in inline(cid)

        # Walk once to learn where (at which index) each channel's seed is, then fetch only that.
        needed = delta_history(
            chain, channels, has_value, lambda c, ch: chain.index(c), lambda c: []
        )
        span = chain[: max(h.get("seed", len(chain) - 1) for h in needed.values()) + 1]
        seed_rows = [
            CheckpointRow(
                thread_id=thread_id,
                ns=ns,
                checkpoint_id=cid,
                parent_id=None,
                type=by_id[cid].type,
                body=by_id[cid].checkpoint,
                metadata="{}",
                blob_versions={
                    ch: v
                    for ch, v in versions[cid].items()
                    if ch in needed and "seed" in needed[ch]
                },
            )
            for cid in span
        ]
        blob_rows: BlobRows = {}
        write_rows: list[WriteRow] = []
        if span:
            details = self.details(thread_id, ns, seed_rows)
            blob_rows, write_rows = details.split((yield Batch(details.statements)))
            yield from self.complete_chains(thread_id, ns, blob_rows)
            blob_rows, write_rows = self.opened_details(thread_id, ns, blob_rows, write_rows)
        writes_by_cp: dict[str, list[WriteRow]] = {}
        for w in write_rows:
            writes_by_cp.setdefault(w.checkpoint_id, []).append(w)

        def value_of(cid: str, ch: str) -> Any:
            if ch in versions[cid]:
                return channel_value(serde, self.cache, blob_rows, ch, versions[cid][ch])[0]
            return inline(cid)[ch]

        return _history_or_gone(
            span,
            channels,
            has_value,
            value_of,
            lambda cid: pending_writes(serde, writes_by_cp.get(cid, []), channels),
        )


def _history_or_gone(
    span: Sequence[str],
    channels: Sequence[str],
    has_value: Callable[[str, str], bool],
    value_of: Callable[[str, str], Any],
    writes_of: Callable[[str], Any],
) -> Mapping[str, DeltaChannelHistory]:
    """:func:`delta_history`, or a gone thread's when a racing delete or erase removed a value."""
    try:
        return delta_history(span, channels, has_value, value_of, writes_of)
    except MissingBlob:
        return {ch: {"writes": []} for ch in channels}


def _pinned(cache: ListCache, thread: tuple[str, str]) -> ListCache:
    """A copy of ``thread``'s head in ``cache`` as of now (the cache updates lists in place)."""
    pinned = ListCache(cache.enabled)
    with cache.lock:
        head = cache.heads.get(thread)
        if head is not None:
            pinned.heads[thread] = head._replace(lists=dict(head.lists))
    return pinned


class ListCursor:
    """The state of one ``list()``; the sync and async shells only run its page plans."""

    def __init__(
        self,
        reader: Reader,
        serde: SerializerProtocol,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> None:
        self.reader, self.serde = reader, serde
        self.config, self.filter, self.before = config, checked_filter(filter), before
        self.remaining = limit = checked_limit(limit)
        self.keyset: Keyset | None = None
        self.page_size = LIST_PAGE if limit is None or filter else max(1, min(limit, LIST_PAGE))
        self.done = limit is not None and limit <= 0

    def next_page(self) -> Plan[tuple[list[PageRow], Keyset | None]]:
        return self.reader.page(self.config, self.filter, self.before, self.keyset, self.page_size)

    def take(self, fetched: tuple[list[PageRow], Keyset | None]) -> Iterator[CheckpointTuple]:
        """Decode a fetched page lazily, up to the items still wanted."""
        page, self.keyset = fetched
        self.done = self.keyset is None
        for row, blob_rows, write_rows in page:
            metadata = json.loads(row.metadata)
            if not metadata_matches(metadata, self.filter):
                continue
            writes_here = [w for w in write_rows if w.checkpoint_id == row.checkpoint_id]
            try:
                tup = decode(self.serde, self.reader.cache, row, blob_rows, writes_here, metadata)
            except MissingBlob:
                continue  # a delete or erase of its thread raced this page: listed as gone
            yield tup
            if self.remaining is not None:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.done = True
                    return
