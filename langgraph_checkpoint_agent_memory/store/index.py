"""How the store ranks by its term index, and keeps the index's lists (:mod:`..db.term_index`
says how the tables hold them; ``docs/internals/store-search.md`` why).

A query reads, in one snapshot, the chunks of its terms under the namespace, the items not yet
listed and the retractions (:class:`Lists`); sums BM25 in numpy; and reads back the rows of
its best candidates only, live and passing the filter. A merge moves a namespace's unlisted
items into its lists and takes the retracted ones out; it runs when a query finds
:data:`MERGE_AT` of them in a namespace (:data:`MERGE_SOON` where they are an eighth of the
items searched), or this process has written :data:`MERGE_WRITES` there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.store import (
    ItemRow,
    Prefilter,
    StoreStatements,
    rest_params,
)
from langgraph_checkpoint_agent_memory.db.term_index import (
    CHUNK,
    LOW_BITS,
    UNLISTED_BYTES,
    halves,
    high_parts,
    pack_chunks,
    read_ints,
    term_id,
    unpack_chunks,
)

#: A term as the index finds it: its id's high and low parts (``None``: any low part,
#: as relevance feedback asks for the terms of a listed item, of which it kept the high part).
Form = tuple[int, int | None]
#: Unlisted items plus retractions in one namespace that make a query merge it.
MERGE_AT = 256
#: As many that make a query merge the namespace when they are an eighth or more of the
#: items it searched: a namespace of a few hundred items (a user's facts) is then searched
#: by its lists, not by decoding every item's terms (250 items written one by one: a
#: search 0.79 ms unlisted, 0.31 ms listed; a merge of 32 of them about 5 ms).
MERGE_SOON = 16
#: Items this process writes to one namespace that make it merge the namespace: fewer,
#: larger merges rewrite fewer chunks (a query merges at :data:`MERGE_AT`).
MERGE_WRITES = 4096
#: The most items one merge transaction lists: twice :data:`MERGE_WRITES`, so that the
#: merge a batch sets off also lists the rest of the batch (a second one would rewrite the
#: chunks the first wrote).
MERGE_CAP = 2 * MERGE_WRITES
#: Tied candidates at the cut read by number; more, and the items are read in key order.
TIES_READ = 1024
#: The candidates a ranking read, by ``(prefix, key)``: their rows as
#: :meth:`.StoreStatements.by_nums` reads them, ``(num, *ITEM_FIELDS)`` (:func:`item_row`).
Rows = dict[tuple[str, str], Sequence[Any]]

_EMPTY = np.zeros(0, dtype=np.int64)


def form_of(term: str) -> Form:
    """The form of a term as stored (a word, or its keyed hash)."""
    return halves(term_id(term))


class Lists:
    """What one read of the lists found under a namespace (rows of
    :meth:`.StoreStatements.lists`), and each term's entries from it; ``his``: the high
    parts of the terms a query asks for, the unlisted items' other terms left undecoded."""

    def __init__(self, rows: Sequence[Sequence[Any]], his: Sequence[int] | None = None) -> None:
        self.chunks: defaultdict[int, list[tuple[int, int, bytes]]] = defaultdict(list)
        #: Per namespace, its unlisted items and retractions: a merge runs past MERGE_AT.
        self.pending: Counter[str] = Counter()
        #: Each form's entries once worked out: df and the scores both read them.
        self._found: dict[Form, tuple[Any, Any, Any]] = {}
        by_kind: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        for row in rows:
            by_kind[row[0]].append(row)
        listed, unlisted, retracted = by_kind
        for _, _, hi, lo, start, _, payload in listed:
            self.chunks[int(hi)].append((int(lo), int(start), bytes(payload)))
        self.pending.update(row[1] for row in unlisted)
        self.pending.update(row[1] for row in retracted)
        self.unlisted = len(unlisted)
        self._unlisted(
            [row[4] for row in unlisted],
            [row[5] or 0 for row in unlisted],
            [row[6] or b"" for row in unlisted],
            his,
        )
        gone_his = [high_parts(bytes(row[6])) for row in retracted]
        self.gone_hi = np.concatenate(gone_his).astype(np.int64) if gone_his else _EMPTY
        counts = [len(h) for h in gone_his]
        gone = [row[4] for row in retracted]
        self.gone_num = np.repeat(np.asarray(gone, dtype=np.int64), counts) if gone else _EMPTY

    def _unlisted(
        self, nums: list[int], lengths: list[int], blobs: list[Any], his: Sequence[int] | None
    ) -> None:
        """Decode the unlisted items' terms at once: ids, frequencies, owners (of the terms
        whose high part is one of ``his``, unless it is ``None``)."""
        n = np.fromiter(map(len, blobs), np.int64, len(blobs)) // UNLISTED_BYTES
        total = int(n.sum())
        if not total:
            self.u_hi = self.u_lo = self.u_tf = self.u_num = self.u_dl = _EMPTY
            return
        big = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        offsets = np.concatenate(([0], np.cumsum(n * UNLISTED_BYTES)[:-1]))
        owner = np.repeat(np.arange(len(blobs)), n)
        k = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
        base = offsets[owner]
        hi = read_ints(big, base + 3 * k, 3, True)
        if his is not None:  # a query: the rest of what it asks for only
            asked = among(hi, his)
            hi, owner, k, base = hi[asked], owner[asked], k[asked], base[asked]
        size = n[owner]
        self.u_hi = hi
        self.u_lo = read_ints(big, base + 3 * size + 5 * k, 5, False)
        self.u_tf = read_ints(big, base + 8 * size + 2 * k, 2, False)
        self.u_num = np.asarray(nums, dtype=np.int64)[owner]
        self.u_dl = np.asarray(lengths, dtype=np.int64)[owner]

    def entries(self, form: Form) -> tuple[Any, Any, Any]:
        """``(numbers, tf, dl)`` of the items holding ``form``: its chunks' entries but the
        retracted ones, and the unlisted items' (which win over a listed entry)."""
        if (found := self._found.get(form)) is None:
            found = self._found[form] = self._entries(form)
        return found

    def _entries(self, form: Form) -> tuple[Any, Any, Any]:
        hi, lo = form
        mine = [c for c in self.chunks.get(hi, ()) if lo is None or c[0] == lo]
        _, nums, tf, dl = unpack_chunks([c[1] for c in mine], [c[2] for c in mine])
        if not self.unlisted and not len(self.gone_num):  # nothing pending: the lists hold all
            return nums, tf, dl
        gone = self.gone_num[self.gone_hi == hi]
        mask = self.u_hi == hi
        if lo is not None:
            mask &= self.u_lo == lo
        fresh = self.u_num[mask]
        if len(nums) and (len(gone) or len(fresh)):
            keep = ~among(nums, np.concatenate((gone, fresh)))
            nums, tf, dl = nums[keep], tf[keep], dl[keep]
        if len(fresh):
            nums = np.concatenate((nums, fresh))
            tf = np.concatenate((tf, self.u_tf[mask]))
            dl = np.concatenate((dl, self.u_dl[mask]))
        return nums, tf, dl


def among(values: Any, wanted: Any) -> Any:
    """``np.isin(values, wanted)``; a few ``wanted`` compared one at a time (``np.isin``
    sorts: 15 µs for a handful against about 1 µs a comparison).

    Example:
        >>> import numpy as np
        >>> among(np.array([3, 5, 7]), [7, 3]).tolist()
        [True, False, True]
    """
    if len(wanted) > 8:
        return np.isin(values, wanted)
    out = np.zeros(len(values), dtype=bool)
    for w in wanted.tolist() if isinstance(wanted, np.ndarray) else wanted:
        out |= values == w
    return out


def lists_plan(
    statements: StoreStatements, base: dict[str, Any], exact: bool, forms: Sequence[Form]
) -> Plan[Lists]:
    """The lists of ``forms`` under ``base``'s namespace, read in one statement."""
    d = statements.d
    his = sorted({hi for hi, _ in forms})
    params = {**base, **d.list_params("his", his)}
    if "shard" in base:
        params.update(rest_params(base["ns"], base["shard"]))
    sql = statements.lists(exact, "shard" in base, d.list_size(len(his)), bool(params.get("rest")))
    [rows] = yield Batch([Stmt(sql, params, fetch=True)])
    return Lists(rows, his)


def bm25(
    lists: Lists,
    groups: Sequence[Sequence[Form]],
    weight: Sequence[float],
    k_base: float,
    k_len: float,
) -> tuple[Any, Any]:
    """``(numbers, scores)`` of every item holding a term: ``weight[g]`` is group g's idf
    times (k1 + 1) (a group: one term's forms, each weighing as the term)."""
    nums: list[Any] = []
    scores: list[Any] = []
    for group, w in zip(groups, weight, strict=True):
        for form in group:
            n, tf, dl = lists.entries(form)
            nums.append(n)
            # w * tf / (k_base + tf + k_len * dl), to the last bit, in fewer arrays
            below = tf + k_base
            below += k_len * dl
            score = w * tf
            score /= below
            scores.append(score)
    if len(nums) == 1:  # one form's items: each once
        return nums[0], scores[0]
    return sum_by_number(nums, scores)


def sum_by_number(nums: Sequence[Any], scores: Sequence[Any]) -> tuple[Any, Any]:
    """Each number of the arrays ``nums`` once, ascending, with the sum of its ``scores``
    (the arrays beside them; added in the order given). Numbers close together are summed
    in an array they index, part by part (no sort, no array of them all: three terms each in
    half of 100,000 items, 1.4 ms against 5.3 for ``np.unique``; 0.27 against 2.7 where the
    allocator keeps freed memory, this machine's giving it back and faulting it in anew).

    Example:
        >>> import numpy as np
        >>> found, sums = sum_by_number([np.array([5, 3]), np.array([5])],
        ...                             [np.array([1.0, 2.0]), np.array([0.5])])
        >>> found.tolist(), sums.tolist()
        ([3, 5], [2.0, 1.5])
    """
    parts = [(n, s) for n, s in zip(nums, scores, strict=True) if len(n)]
    if not parts:
        return _EMPTY, np.zeros(0)
    low = min(int(n.min()) for n, _ in parts)
    span = max(int(n.max()) for n, _ in parts) - low + 1
    if span > 4 * sum(len(n) for n, _ in parts):
        found, at = np.unique(np.concatenate([n for n, _ in parts]), return_inverse=True)
        weights = np.concatenate([s for _, s in parts])
        return found, np.bincount(at, weights=weights, minlength=len(found))
    sums = np.zeros(span)
    positive = True
    for n, s in parts:
        np.add.at(sums, n - low, s)  # in order, as bincount's weights
        positive = positive and bool(s.min() > 0)
    if positive:  # a sum of positive scores is positive
        present = sums > 0
    else:
        present = np.zeros(span, dtype=bool)
        for n, _ in parts:
            present[n - low] = True
    found = np.flatnonzero(present)  # of a boolean array: 37 µs, of the sums 300
    return found + low, sums[found]


def document_frequencies(lists: Lists, forms: Sequence[Form]) -> dict[Form, int]:
    """How many items hold each form."""
    return {form: len(lists.entries(form)[0]) for form in dict.fromkeys(forms)}


def best_plan(
    statements: StoreStatements,
    nums: Any,
    scores: Any,
    how: tuple[Prefilter, dict[str, Any], int, bool],
    read: Rows | None = None,
) -> Plan[list[tuple[tuple[str, str], float]]]:
    """``((prefix, key), score)`` of the ``want`` best live items passing the filter, ties
    ordered by namespace and key: candidates are read by number, best first, until ``want``
    pass; a tie at the cut of more than :data:`TIES_READ` items reads the items in key order
    instead, until enough of the tied ones are found, and keeps that order (the database's:
    its collation may order keys otherwise than Python, and a page must be the same slice
    of the order whatever its size). ``read`` gets the rows of the items read (those found,
    and any beyond ``want``); without it, only their keys are read."""
    _, _, want, _ = how
    everyone = (nums, scores)
    nums, scores = best_first(*everyone, 4 * want)
    worse = -scores  # ascending, as a search asks
    found: list[tuple[tuple[str, str], float]] = []
    at, size = 0, want
    while at < len(everyone[0]) and len(found) < want:
        if len(nums) < min(at + size, len(everyone[0])):  # more than is sorted
            nums, scores = best_first(*everyone, max(at + size, 4 * len(nums)))
            worse = -scores
        end = first = tied = min(at + size, len(nums))
        if end < len(nums):  # the tie at the slice's end: where it starts and ends
            first = int(worse.searchsorted(worse[end - 1], "left"))
            tied = int(worse.searchsorted(worse[end - 1], "right"))
        if tied - first > TIES_READ and end < tied:
            if first > at:  # the better ones, by number
                found += yield from _by_nums_plan(statements, nums, scores, at, first, how, read)
            found += yield from _tied_plan(statements, nums, scores, first, tied, how, read)
        else:
            found += yield from _by_nums_plan(statements, nums, scores, at, tied, how, read)
        at = tied
        size *= 4
    return found[:want]  # each read's found in order, the reads by score, a tie in one


def best_first(nums: Any, scores: Any, k: int) -> tuple[Any, Any]:
    """The candidates scoring at least the ``k``-th best score, best first, ties by number:
    the ``k`` best and the whole tie at the cut, sorted without sorting the rest (three
    words each in half of 100,000 items: 88,000 candidates sorted in 6.9 ms, the best 40
    selected in 0.9).

    Example:
        >>> import numpy as np
        >>> nums, scores = best_first(np.array([1, 2, 3, 4]), np.array([0.5, 2.0, 0.5, 1.0]), 3)
        >>> nums.tolist(), scores.tolist()
        ([2, 4, 1, 3], [2.0, 1.0, 0.5, 0.5])
    """
    if k < len(nums):
        cut = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= cut)
        nums, scores = nums[keep], scores[keep]
    order = np.lexsort((nums, -scores))
    return nums[order], scores[order]


def _by_nums_plan(
    statements: StoreStatements,
    nums: Any,
    scores: Any,
    start: int,
    end: int,
    how: tuple[Prefilter, dict[str, Any], int, bool],
    read: Rows | None,
) -> Plan[list[tuple[tuple[str, str], float]]]:
    """The candidates ``nums[start:end]`` that are live and pass the filter, with scores
    (their rows into ``read``)."""
    filters, base, _, exact = how
    d = statements.d
    chunk = nums[start:end].tolist()
    sql = statements.by_nums(
        filters, exact, "shard" in base, d.list_size(len(chunk)), read is not None
    )
    [rows] = yield Batch([Stmt(sql, {**base, **d.list_params("nums", chunk)}, fetch=True)])
    score_of = dict(zip(chunk, scores[start:end].tolist(), strict=True))
    # a number read back names another item if it was freed and taken since (SQLite)
    ns = base["ns"]
    under = ns + "."
    found = []
    for row in rows:
        if row[1] == ns or (not exact and (not ns or row[1].startswith(under))):
            if read is not None:
                read[row[1], row[2]] = row
            found.append(((row[1], row[2]), score_of[int(row[0])]))
    found.sort(key=lambda f: (-f[1], f[0]))
    return found


def _tied_plan(
    statements: StoreStatements,
    nums: Any,
    scores: Any,
    start: int,
    end: int,
    how: tuple[Prefilter, dict[str, Any], int, bool],
    read: Rows | None,
) -> Plan[list[tuple[tuple[str, str], float]]]:
    """The first ``want`` of the tied candidates ``nums[start:end]`` in key order, read by
    walking the namespace's items in that order (their rows into ``read``): its own items
    first, then, for a search under it, the deeper namespaces', which come after them in
    that order (walked apart, the namespace's own is a range of the primary key that no
    planner sorts instead, as one did the whole before a table's first statistics)."""
    filters, base, want, exact = how
    tied = nums[start:end]
    score = float(scores[start])
    scoped = "shard" in base
    found: list[tuple[tuple[str, str], float]] = []
    after = {"a_prefix": "", "a_key": ""}
    for own in [exact] if exact or not scoped else [True, False]:
        sql = statements.in_key_order(filters, own, scoped, read is not None)
        page = 4 * want
        while len(found) < want:
            [rows] = yield Batch([Stmt(sql, {**base, **after, "n": page}, fetch=True)])
            if rows:
                hit = np.isin(np.asarray([int(r[0]) for r in rows], dtype=np.int64), tied)
                for r, h in zip(rows, hit.tolist(), strict=True):
                    if h:
                        if read is not None:
                            read[r[1], r[2]] = r
                        found.append(((r[1], r[2]), score))
                after = {"a_prefix": rows[-1][1], "a_key": rows[-1][2]}
            if len(rows) < page:
                break
            page *= 2
        after = {"a_prefix": base["ns"], "a_key": after["a_key"] if own else ""}
    return found[:want]


def item_row(row: Sequence[Any]) -> ItemRow:
    """The item of a row of :data:`Rows`."""
    return ItemRow._make(row[1:])


def merge_plan(statements: StoreStatements, shard: str, prefix: str) -> Plan[int]:
    """List up to :data:`MERGE_CAP` of one namespace's unlisted items and take its retracted
    items out of its lists, in one transaction; how many items it listed."""
    d = statements.d
    ident = {"shard": shard, "prefix": prefix}
    rest = rest_params(prefix, shard)["rest"]
    first = [
        *statements.merge_locks([shard]),
        Stmt(statements.unlisted(), {**ident, "cap": MERGE_CAP}, fetch=True),
        Stmt(statements.retracted(), ident, fetch=True),
    ]
    *_, waiting, retractions = yield Batch(first, lock=True, hold=True)
    keys = [key for key, _, _, _ in waiting]
    reads = _by_list(d, statements.listing, ident, "keys", keys, fetch=True)
    found = (yield Batch(reads, hold=True)) if reads else []
    locked = {key for part in found for (key,) in part}
    items = [(num, length, terms, key) for key, terms, num, length in waiting if key in locked]
    if not items and not retractions:
        yield Batch([], write=True)
        return 0
    lists = Lists([(1, prefix, None, None, n, dl, t) for n, dl, t, _ in items])
    retracted = Lists([(2, prefix, None, None, n, None, t) for n, t in retractions])
    his = np.unique(np.concatenate((lists.u_hi, retracted.gone_hi))).tolist()
    touched = [int(n) for n, _, _, _ in items] + [int(n) for n, _ in retractions]
    params = {"shard": shard, "rest": rest, "min": min(touched)}
    found = yield Batch(
        _by_list(d, statements.chunks_to_merge, params, "his", his, True), hold=True
    )
    rows = [r for part in found for r in part]
    at = {"shard": shard, "rest": rest}
    rewritten, chunks = _rechunked(rows, lists, retracted)
    drops = [{**at, "hi": int(r[0]), "lo": int(r[1]), "start": int(r[2])} for r in rewritten]
    inserts = [{**at, **chunk} for chunk in chunks]
    writes = [Stmt(statements.drop_chunk(), drops, many=True)]
    writes.append(Stmt(statements.insert_chunk(), inserts, many=True))
    writes += _by_list(d, statements.drop_unlisted, ident, "keys", [k for *_, k in items])
    writes += _by_list(d, statements.drop_retractions, ident, "nums", [n for n, _ in retractions])
    yield Batch(writes, write=True)
    return len(items)


def _by_list(
    d: Dialect,
    sql_of: Callable[[int], Sql],
    params: dict[str, Any],
    name: str,
    values: list[Any],
    fetch: bool = False,
) -> list[Stmt]:
    """A statement of ``sql_of`` (by its list's size) per part of ``values`` the dialect binds
    at once (:meth:`.Dialect.one_of`), the list named ``name``."""
    return [
        Stmt(sql_of(d.list_size(len(part))), {**params, **d.list_params(name, part)}, fetch=fetch)
        for part in _parts(values, d.list_cap)
    ]


def _term(hi: Any, lo: Any) -> Any:
    """Term ids of their halves (numpy arrays or integers)."""
    return (hi << LOW_BITS) | lo


def merged_plan(statements: StoreStatements, namespaces: Sequence[tuple[str, str]]) -> Plan[None]:
    """Merge each of ``namespaces`` (``(shard key, namespace)``) until nothing is left."""
    for shard, prefix in namespaces:
        while (yield from merge_plan(statements, shard, prefix)) >= MERGE_CAP:
            pass


def _rechunked(
    rows: Sequence[Sequence[Any]], lists: Lists, retracted: Lists
) -> tuple[list[Sequence[Any]], list[dict[str, Any]]]:
    """Of ``rows`` (chunks read by a merge), those to rewrite, and the chunks that replace
    them: their entries but the retracted ones and those of items listed anew, plus the
    unlisted items' entries, each term's in number order, :data:`CHUNK` to a chunk.

    A chunk holds its term's numbers from its start to the next chunk's; one whose range
    holds none of the numbers listed or retracted stays as it is (a rewrite of an early item
    read every chunk after it: of 71 chunks, one per term changes). Each chunk rewritten is
    split on its own, so none reaches into a range left in place."""
    ids_of = _term(
        np.asarray([int(r[0]) for r in rows], dtype=np.int64),
        np.asarray([int(r[1]) for r in rows], dtype=np.int64),
    )
    ranges = _ranges(ids_of, np.asarray([int(r[2]) for r in rows], dtype=np.int64))
    order, low, high = ranges
    listed = np.sort(np.concatenate((lists.u_num, retracted.gone_num)))
    held = listed.searchsorted(high, "left") > listed.searchsorted(low, "left")
    which = order[held]  # the chunks to rewrite, in (term, start) order
    counts, nums, tf, dl = unpack_chunks(
        [int(rows[i][2]) for i in which], [bytes(rows[i][3]) for i in which]
    )
    # an entry's part: the rank of its chunk in (term, start) order (each split on its own)
    part = np.repeat(np.flatnonzero(held), counts)
    old_ids = ids_of[which].repeat(counts)
    # out: an old entry of an item listed anew (its terms come with it) or retracted
    out = np.isin(nums, lists.u_num)
    maybe = np.flatnonzero(~out & np.isin(nums, retracted.gone_num))
    if len(maybe):
        gone = set(zip(retracted.gone_num.tolist(), retracted.gone_hi.tolist(), strict=True))
        pairs = zip(nums[maybe].tolist(), (old_ids[maybe] >> LOW_BITS).tolist(), strict=True)
        out[maybe] = [pair in gone for pair in pairs]
    keep = ~out
    new_ids = _term(lists.u_hi, lists.u_lo)
    ids = np.concatenate((old_ids[keep], new_ids))
    part = np.concatenate((part[keep], _parts_of(ranges, ids_of, new_ids, lists.u_num)))
    nums = np.concatenate((nums[keep], lists.u_num))
    tf = np.concatenate((tf[keep], lists.u_tf))
    dl = np.concatenate((dl[keep], lists.u_dl))
    rewritten = [rows[i] for i in which]
    if not len(ids):
        return rewritten, []
    if len(nums) and int(nums.max()) < 1 << 40 and int(part.max()) < 1 << 22:
        # the old entries lie sorted already: a stable sort of one key merges the new in
        # (a lexsort of 400,000 entries: 50 ms, this 3)
        by = np.argsort(part << 40 | nums, kind="stable")
    else:
        by = np.lexsort((nums, part))
    ids, part, nums, tf, dl = ids[by], part[by], nums[by], tf[by], dl[by]
    new_part = np.r_[True, part[1:] != part[:-1]]
    part_start = np.flatnonzero(new_part)
    rank = np.arange(len(ids)) - part_start[np.cumsum(new_part) - 1]
    starts = np.flatnonzero(rank % CHUNK == 0)
    hi, lo = ids[starts] >> LOW_BITS, ids[starts] & ((1 << LOW_BITS) - 1)
    chunks = zip(hi.tolist(), lo.tolist(), nums[starts].tolist(), strict=True)
    payloads = pack_chunks(starts, nums, tf, dl)
    return rewritten, [
        {"hi": h, "lo": low, "start": n, "payload": p}
        for (h, low, n), p in zip(chunks, payloads, strict=True)
    ]


def _ranges(ids: Any, starts: Any) -> tuple[Any, Any, Any]:
    """The order of chunks (their terms' ids and starts) by term then start, and in that
    order the numbers each holds: from its start (a term's first: from the lowest) to its
    term's next chunk's start."""
    order = np.lexsort((starts, ids))
    ids, starts = ids[order], starts[order]
    same = ids[1:] == ids[:-1]
    low = np.where(np.r_[False, same], starts, np.iinfo(np.int64).min)
    high = np.where(np.r_[same, False], np.r_[starts[1:], 0], np.iinfo(np.int64).max)
    return order, low, high


def _parts_of(ranges: tuple[Any, Any, Any], ids: Any, new_ids: Any, new_nums: Any) -> Any:
    """Each new entry's part (see :func:`_rechunked`): the rank of its term's chunk whose
    range holds its number, the last chunk before it in (term, number) order; past every
    chunk's rank, one per term that has no chunk."""
    order, low, _ = ranges
    sorted_ids = ids[order]
    n = len(order)
    is_new = np.r_[np.zeros(n, dtype=np.int8), np.ones(len(new_ids), dtype=np.int8)]
    seq = np.lexsort((is_new, np.r_[low, new_nums], np.r_[sorted_ids, new_ids]))
    last = np.maximum.accumulate(np.where(seq < n, seq, -1))  # chunks come in their order
    entry = seq >= n
    j, at = seq[entry] - n, last[entry]
    mine = at >= 0
    mine[mine] = sorted_ids[at[mine]] == new_ids[j[mine]]
    part = np.empty(len(new_ids), dtype=np.int64)
    part[j[mine]] = at[mine]
    alone = j[~mine]  # terms with no chunk: a part each, after the chunks'
    part[alone] = n + np.unique(new_ids[alone], return_inverse=True)[1].reshape(-1)
    return part


def _parts(values: list[Any], cap: int | None) -> list[list[Any]]:
    if not values:
        return []
    size = cap or len(values)
    return [values[i : i + size] for i in range(0, len(values), size)]
