"""Blocks of postings: how a query of common words ranks without reading them one by one.

A term found in half of 100,000 items has 50,000 postings; summing BM25 over them in SQL
(a group by item) costs the database about 30 ms per term however few results are asked
for. A *block* keeps one term's postings in one namespace as one row: their entries
``(item hash, tf, dl)`` packed in hash order, and the items' keys in the same order. A query
reads the blocks of its terms and the postings written since each was built (``packed`` is
NULL on those, and a partial index finds them), sums the scores here with numpy, and checks
its best candidates against the postings themselves:

- an item written since a block was built is scored from its new postings, never from the
  block's entry (the entry is left out);
- an item deleted, or rewritten without the term, since keeps its entry: its score here is
  then at least its true one, never lower;
- so every score here bounds the true one from above, and equals it for every item not
  touched since. The candidates' true scores come from their postings; the answer is exact
  when the last one kept still beats the best score left out (:func:`settled`). Otherwise
  the query reads the postings as it always did.

This module does no I/O: :mod:`.blocked` runs the plans.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

#: A term found in fewer items than this under a namespace is read posting by posting: its
#: postings cost less than a block's round trips.
MIN_DF = 2048
#: Blocks serve a query whose terms have this many postings under the namespace, in all:
#: below it, summing them in the database costs less than the blocks' round trips and
#: numpy (about 10 ms; the database sums 1,000 postings in 0.6-0.8 ms).
MIN_POSTINGS = 32_768
#: Postings of one term in one namespace written since its block (or never packed) that
#: make the query build the block (again).
BUILD_AT = 1024
#: The most postings of one term no block holds that a query reads; more, and it reads
#: every posting as before (and builds the blocks they call for).
FRESH_CAP = 8192

#: One entry of a block: the item's hash (:func:`item_hash`), the term's frequency in it
#: and its length, little-endian whatever the machine.
ENTRY = np.dtype([("h", "<i8"), ("tf", "<u4"), ("dl", "<u4")])


def item_hash(prefix: str, key: str) -> int:
    """A signed 64-bit hash naming one item across terms and namespaces.

    Example:
        >>> item_hash("docs", "a") == item_hash("docs", "a") != item_hash("docs", "b")
        True
    """
    named = f"{len(prefix)}:{prefix}{key}".encode()  # no two (prefix, key) give one text
    digest = hashlib.blake2b(named, digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class Packed(NamedTuple):
    """A block's columns: its entries, its keys (offsets then UTF-8 text), how many."""

    postings: bytes
    keys: bytes
    entries: int


def pack(prefix: str, rows: Sequence[tuple[str, int, int]]) -> Packed:
    """The block of one term's postings ``(key, tf, dl)`` in the namespace ``prefix``.

    Example:
        >>> block = pack("docs", [("b", 2, 10), ("a", 1, 4)])
        >>> block.entries, sorted(keys_at(block.keys, 2, [0, 1]))
        (2, ['a', 'b'])
    """
    hashes = np.fromiter((item_hash(prefix, k) for k, _, _ in rows), dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    entries = np.empty(len(rows), dtype=ENTRY)
    entries["h"] = hashes[order]
    entries["tf"] = np.fromiter((rows[i][1] for i in order), dtype=np.uint32)
    entries["dl"] = np.fromiter((rows[i][2] for i in order), dtype=np.uint32)
    words = [rows[i][0].encode() for i in order]
    offsets = np.zeros(len(words) + 1, dtype="<u4")
    np.cumsum([len(w) for w in words], out=offsets[1:])
    return Packed(entries.tobytes(), offsets.tobytes() + b"".join(words), len(rows))


def keys_at(keys: bytes, entries: int, positions: Sequence[int]) -> list[str]:
    """The keys at ``positions`` of a block of ``entries`` entries whose keys column is
    ``keys`` (``entries + 1`` offsets, then the text)."""
    offsets = np.frombuffer(keys, dtype="<u4", count=entries + 1)
    text = memoryview(keys)[4 * (entries + 1) :]
    return [bytes(text[offsets[p] : offsets[p + 1]]).decode() for p in positions]


@dataclass(frozen=True)
class Block:
    """A block as a query ranks with it: its entries decoded, its keys column."""

    term: str
    shard: str
    prefix: str
    built: int
    entries: Any  # an array of ENTRY
    keys: bytes

    def key_at(self, position: int) -> str:
        """The key of entry ``position``."""
        return keys_at(self.keys, len(self.entries), [position])[0]


#: Queries that read postings, not blocks, for a while: namespace, exact, common words.
Declined = tuple[str, bool, tuple[str, ...]]
#: What names a block's content: its term, shard key, namespace and build.
BlockKey = tuple[str, str, str, int]


class BlockCache:
    """Blocks read before, by :data:`BlockKey` (a build's content never changes), the most
    recently used kept up to ``max_bytes``: a query reads which blocks it needs, and their
    content only when they are new to this process."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[BlockKey, Block] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: (namespace, exact, common words) -> until when such queries read postings
        self._declined: dict[Declined, float] = {}

    def declines(self, where: Declined) -> bool:
        """Whether queries under ``where`` skip blocks for now (see :meth:`decline`)."""
        until = self._declined.get(where)
        return until is not None and time.monotonic() < until

    def decline(self, where: Declined, seconds: float = 60.0) -> None:
        """Queries of ``where`` read postings for ``seconds``: blocks did not answer them
        (see :func:`~.blocked.blocked_plan`), and finding that out again would cost each
        query a read of thousands of postings."""
        with self._lock:
            if len(self._declined) >= 4096:
                self._declined.clear()
            self._declined[where] = time.monotonic() + seconds

    def get(self, key: BlockKey) -> Block | None:
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
            return found

    def put(self, block: Block) -> None:
        key = (block.term, block.shard, block.prefix, block.built)
        with self._lock:
            if key in self._blocks:
                return
            self._blocks[key] = block
            self._bytes += block.entries.nbytes + len(block.keys)
            while self._bytes > self.max_bytes and len(self._blocks) > 1:
                _, old = self._blocks.popitem(last=False)
                self._bytes -= old.entries.nbytes + len(old.keys)

    def after_fork(self) -> None:
        """A forked child must not inherit a lock another thread of the parent held."""
        self._lock = threading.Lock()


class Fresh(NamedTuple):
    """A posting no block holds: written since its term's block was built, or never packed."""

    term: str
    shard: str
    prefix: str
    key: str
    tf: int
    dl: int


@dataclass(frozen=True)
class Weights:
    """BM25's parameters of one query: each stored term's weight (idf times ``k1 + 1``),
    and the length norm ``k_base + k_len * dl``."""

    terms: Mapping[str, float]
    k_base: float
    k_len: float

    def score(self, term: str, tf: Any, dl: Any) -> Any:
        """Term ``term``'s share of the score of items with ``tf`` and ``dl`` (numbers or
        arrays)."""
        return self.terms[term] * tf / (self.k_base + tf + self.k_len * dl)


class Source(NamedTuple):
    """Where a candidate's key is: entry ``position`` of block ``block`` (an index into
    the blocks read), or, with ``block == -1``, fresh posting ``position``."""

    block: int
    position: int


@dataclass(frozen=True)
class Candidates:
    """The best items by the scores here: where each one's key is, its score here, and
    ``bound``, the best score of an item left out (0 when every scored item is a
    candidate)."""

    sources: list[Source]
    scores: list[float]
    bound: float


def candidates(
    blocks: Sequence[Block], fresh: Sequence[Fresh], weights: Weights, many: int
) -> Candidates | None:
    """The ``many`` best items by the scores of ``blocks`` and ``fresh`` together (more
    when items tie with the last one), or ``None`` when ties would take more than four
    times as many."""
    hashes, scores, sources = [], [], []
    newer: dict[str, Any] = {}
    fresh_hashes = np.array([item_hash(f.prefix, f.key) for f in fresh], dtype=np.int64)
    for term in {f.term for f in fresh}:
        mine = np.array([f.term == term for f in fresh])
        newer[term] = np.unique(fresh_hashes[mine])
    for b, block in enumerate(blocks):
        entries = block.entries
        at = np.arange(len(entries), dtype=np.int64)
        if block.term in newer and len(entries):  # rewritten since: scored from the fresh
            found = np.minimum(np.searchsorted(entries["h"], newer[block.term]), len(at) - 1)
            at = np.delete(at, found[entries["h"][found] == newer[block.term]])
            entries = entries[at]
        hashes.append(entries["h"])
        scores.append(weights.score(block.term, entries["tf"].astype(np.float64), entries["dl"]))
        sources.append(at | (b << 32))
    if fresh:
        hashes.append(fresh_hashes)
        scores.append(np.array([weights.score(f.term, f.tf, f.dl) for f in fresh]))
        sources.append(np.arange(len(fresh), dtype=np.int64) | (len(blocks) << 32))
    return _best(hashes, scores, sources, len(blocks), many)


def _best(
    hashes: list[Any], scores: list[Any], sources: list[Any], fresh_from: int, many: int
) -> Candidates | None:
    """:func:`candidates`' ranking of the scored entries: summed per item, the best kept;
    ``sources``: each entry's block (``fresh_from`` for a fresh posting) times 2**32 plus
    its position."""
    h = np.concatenate(hashes) if hashes else np.empty(0, dtype=np.int64)
    if not len(h):
        return Candidates([], [], 0.0)
    order = np.argsort(h, kind="stable")  # each list is sorted: runs that merge
    h = h[order]
    starts = np.flatnonzero(np.concatenate(([True], h[1:] != h[:-1])))
    totals = np.add.reduceat(np.concatenate(scores)[order], starts)
    if len(totals) <= many:
        chosen, bound = np.argsort(-totals, kind="stable"), 0.0
    else:
        cut = np.partition(totals, len(totals) - many)[len(totals) - many]  # many-th best
        chosen = np.flatnonzero(totals >= cut)
        if len(chosen) > 4 * many:
            return None
        rest = np.delete(totals, chosen)
        bound = float(rest.max()) if len(rest) else 0.0
        chosen = chosen[np.argsort(-totals[chosen], kind="stable")]
    where = np.concatenate(sources)[order[starts[chosen]]]  # each item's first entry
    return Candidates(
        [
            Source(-1 if w >> 32 == fresh_from else int(w >> 32), int(w & 0xFFFFFFFF))
            for w in where.tolist()
        ],
        totals[chosen].tolist(),
        bound,
    )


def settled(
    exact: Sequence[tuple[tuple[str, str], float]], bound: float, want: int
) -> list[tuple[tuple[str, str], float]] | None:
    """The best ``want`` of the candidates' true scores ``exact`` (``((prefix, key),
    score)``, items without a posting of the query left out), in the order the database
    ranks them (score, then prefix and key), when they are the true answer: the last one
    kept scores above ``bound``, or no item was left out. ``None``: not settled here.

    Example:
        >>> settled([(("d", "a"), 2.0), (("d", "b"), 1.0)], bound=1.5, want=1)
        [(('d', 'a'), 2.0)]
        >>> settled([(("d", "a"), 2.0), (("d", "b"), 1.0)], bound=1.5, want=2) is None
        True
    """
    kept = sorted((e for e in exact if e[1] > 0), key=lambda e: (-e[1], e[0]))
    if len(kept) >= want:
        return kept[:want] if kept[want - 1][1] > bound else None
    return kept if bound == 0 else None
