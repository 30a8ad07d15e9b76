"""Blocks of postings: how a query of common words ranks without reading them one by one
(``docs/internals/store-search.md`` says why and what it measured).

A block keeps one term's postings in one namespace as one row, in item-hash order. Its
scores bound the true ones from above (an item deleted or rewritten since keeps its entry),
so an answer is exact when its last candidate, scored from its postings, beats the best score
left out (:func:`settled`); otherwise the query reads the postings.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import StoreStatements

#: A term in fewer items than this under a namespace is read posting by posting (cheaper
#: than a block's round trips).
MIN_DF = 2048
#: Blocks serve a query whose terms have this many postings under the namespace: below it,
#: the database's sum (1,000 postings in 0.6-0.8 ms) beats blocks and numpy (2-5 ms).
MIN_POSTINGS = 8192
#: Unpacked postings of one term in one namespace that make a query build its block, at
#: most and at least (see :func:`build_at`).
BUILD_AT = 1024
BUILD_MIN = 256
#: The most unpacked postings of one term a query reads; more, and it reads the postings.
FRESH_CAP = 8192

#: One entry of a block: the item's hash (:func:`item_hash`), the term's frequency in it
#: and its length, little-endian whatever the machine.
ENTRY = np.dtype([("h", "<i8"), ("tf", "<u4"), ("dl", "<u4")])

logger = logging.getLogger(__name__)


def build_at(entries: int) -> int:
    """How many unpacked postings make a query build the block of their term and namespace
    that holds ``entries`` (0: none yet). A small block is built sooner (cheap, while each
    query reads its unpacked postings): below 8,192 entries a build reads at most nine
    postings per one it newly packs; above, one build per 1,024 postings written.

    Example:
        >>> build_at(0), build_at(4000), build_at(50_000)
        (256, 500, 1024)
    """
    return min(BUILD_AT, max(BUILD_MIN, entries // 8))


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
    """The block of one term's postings ``(key, tf, dl)`` in namespace ``prefix``.

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
    """The keys at ``positions`` of a block's keys column (``entries + 1`` offsets, text)."""
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

    @property
    def nbytes(self) -> int:  # with room for the keys' heads, once a tie computes them
        return int(self.entries.nbytes) + len(self.keys) + 8 * len(self.entries)

    def key_at(self, position: int) -> str:
        return keys_at(self.keys, len(self.entries), [position])[0]

    @functools.cached_property
    def heads(self) -> Any:
        """Each entry's key's first eight bytes as one big-endian number (missing bytes
        zero): UTF-8 sorts as its text, so keys sort no lower than their heads."""
        n = len(self.entries)
        offsets = np.frombuffer(self.keys, dtype="<u4", count=n + 1).astype(np.int64)
        text = np.frombuffer(self.keys, dtype=np.uint8, offset=4 * (n + 1))
        if not len(text):
            return np.zeros(n, dtype=np.uint64)
        at = offsets[:-1, None] + np.arange(8)
        head = np.where(at < offsets[1:, None], text[np.minimum(at, len(text) - 1)], 0)
        shifts = np.arange(56, -8, -8, dtype=np.uint64)
        return (head.astype(np.uint64) << shifts).sum(axis=1, dtype=np.uint64)

    def first_keys(self, positions: Any, n: int) -> list[str]:
        """The ``n`` smallest keys at ``positions`` (reading only those of the smallest heads)."""
        if len(positions) > 4 * n:
            heads = self.heads[positions]
            positions = positions[heads <= np.partition(heads, n - 1)[n - 1]]
        return sorted(keys_at(self.keys, len(self.entries), positions.tolist()))[:n]


#: Queries that read postings, not blocks, for a while: namespace, exact, common words.
Declined = tuple[str, bool, tuple[str, ...]]
#: What names a block's content: its term, shard key, namespace and build.
BlockKey = tuple[str, str, str, int]


class BlockCache:
    """Blocks read before, by :data:`BlockKey` (a build never changes), and the
    :class:`Items` of blocks ranked together, the most recently used up to ``max_bytes``."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[Any, ...], Block | Items] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._declined: dict[Declined, float] = {}

    def declines(self, where: Declined) -> bool:
        """Whether queries of ``where`` skip blocks for now (see :meth:`decline`)."""
        until = self._declined.get(where)
        return until is not None and time.monotonic() < until

    def decline(self, where: Declined, seconds: float = 60.0) -> None:
        """Queries of ``where`` read postings for ``seconds``: blocks did not answer them,
        and finding that out again costs a read of thousands of postings."""
        with self._lock:
            if len(self._declined) >= 4096:
                self._declined.clear()
            self._declined[where] = time.monotonic() + seconds

    def items(self, blocks: Sequence[Block]) -> Items:
        """The :class:`Items` of ``blocks``, made the first time they are ranked together."""
        key = ("items", *((b.term, b.shard, b.prefix, b.built) for b in blocks))
        found = self.get(key)
        if not isinstance(found, Items):
            found = items_of(blocks)
            self.put(key, found)
        return found

    def get(self, key: tuple[Any, ...]) -> Block | Items | None:
        with self._lock:
            if (found := self._kept.get(key)) is not None:
                self._kept.move_to_end(key)
            return found

    def put(self, key: tuple[Any, ...], value: Block | Items) -> None:
        with self._lock:
            if key in self._kept:
                return
            self._kept[key] = value
            self._bytes += value.nbytes
            while self._bytes > self.max_bytes and len(self._kept) > 1:
                _, old = self._kept.popitem(last=False)
                self._bytes -= old.nbytes

    def after_fork(self) -> None:
        self._lock = threading.Lock()  # a lock another thread of the parent held


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
        """Term ``term``'s share of the score of items with ``tf`` and ``dl``."""
        return self.score_of(self.terms[term], tf, dl)

    def score_of(self, weight: Any, tf: Any, dl: Any) -> Any:
        """A term of weight ``weight``'s share (numbers, or arrays of one per entry)."""
        return weight * tf / (self.k_base + tf + self.k_len * dl)


class Source(NamedTuple):
    """Where a candidate's key is: entry ``position`` of block ``block`` (an index into
    the blocks read), or, with ``block == -1``, fresh posting ``position``."""

    block: int
    position: int


@dataclass(frozen=True)
class Candidates:
    """The best items by the scores here: where each one's key is, its score here, and
    ``bound``, the best score of an item left out (0 when every scored item is a
    candidate). With too many items tied at the last score for all to be candidates,
    ``tied`` holds where their keys are (each a block times 2**32 plus a position, as
    :class:`Items`' ``first``; the block one past the last: a fresh posting), ``cut``
    their score, and ``bound`` the best score below it."""

    sources: list[Source]
    scores: list[float]
    bound: float
    tied: Any = None
    cut: float = 0.0


@dataclass(frozen=True)
class Items:
    """The items of blocks ranked together, numbered once (in hash order), and their
    entries end to end: a query scores every entry in one expression and sums by item.
    ``hashes``: the items' hashes, sorted; ``first``: each item's first entry, block times
    2**32 plus position; ``sizes``: each block's entries; ``ids``, ``tf``, ``dl``: each
    entry's item number, term frequency and item length; ``terms``: the blocks' terms,
    sorted; ``pairs``: sorted, each entry's term index times 2**32 plus its item number,
    and ``at``: that entry's place (an item is in at most one block of a term)."""

    hashes: Any
    first: Any
    sizes: Any
    ids: Any
    tf: Any
    dl: Any
    terms: tuple[str, ...]
    pairs: Any
    at: Any

    @property
    def nbytes(self) -> int:
        arrays = (self.hashes, self.first, self.sizes, self.ids, self.tf, self.dl)
        return int(sum(a.nbytes for a in (*arrays, self.pairs, self.at)))


def items_of(blocks: Sequence[Block]) -> Items:
    sizes = np.array([len(b.entries) for b in blocks], dtype=np.int64)
    entries = np.concatenate([b.entries for b in blocks]) if blocks else np.empty(0, ENTRY)
    hashes, first, inverse = np.unique(entries["h"], return_index=True, return_inverse=True)
    starts = np.cumsum(np.concatenate([[0], sizes]))
    block_of = np.repeat(np.arange(len(blocks), dtype=np.int64), sizes)
    ids = inverse.reshape(-1).astype(np.int64)
    terms = tuple(sorted({b.term for b in blocks}))
    code = np.array([terms.index(b.term) for b in blocks], dtype=np.int64)
    pairs = (np.repeat(code, sizes) << 32) | ids
    at = np.argsort(pairs, kind="stable")
    return Items(
        hashes=hashes,
        first=(block_of[first] << 32) | (first - starts[block_of[first]]),
        sizes=sizes,
        ids=ids,
        tf=entries["tf"].astype(np.float64),
        dl=entries["dl"].astype(np.float64),
        terms=terms,
        pairs=pairs[at],
        at=at,
    )


#: The hashes of the items met as fresh postings, which the next queries meet again.
_fresh_hash = functools.lru_cache(maxsize=1 << 16)(item_hash)


def candidates(
    blocks: Sequence[Block],
    fresh: Sequence[Fresh],
    weights: Weights,
    many: int,
    items: Items | None = None,
) -> Candidates:
    """The ``many`` best items by the scores of ``blocks`` and ``fresh`` together (more
    on a tie with the last; past four times as many, the tied ones apart, see
    :class:`Candidates`). ``items``: the blocks' :class:`Items`, when known."""
    items = items_of(blocks) if items is None else items
    n = len(fresh)
    fresh_h = np.fromiter((_fresh_hash(f.prefix, f.key) for f in fresh), np.int64, n)
    terms = sorted({f.term for f in fresh})
    code = np.fromiter((terms.index(f.term) for f in fresh), np.int64, n)
    tf = np.fromiter((f.tf for f in fresh), np.float64, n)
    dl = np.fromiter((f.dl for f in fresh), np.float64, n)
    weight = np.array([weights.terms[t] for t in terms], dtype=np.float64)[code]
    fresh_scores = weights.score_of(weight, tf, dl)
    each = np.repeat(np.array([weights.terms[b.term] for b in blocks]), items.sizes)
    scores = weights.score_of(each, items.tf, items.dl)
    at, inside = _find(items.hashes, fresh_h)
    # an item rewritten since its block was built is scored from its fresh postings alone
    term_at = {t: j for j, t in enumerate(items.terms)}
    block_term = np.array([term_at.get(t, -1) for t in terms], dtype=np.int64)[code]
    held = inside & (block_term >= 0)
    place, hit = _find(items.pairs, (block_term[held] << 32) | at[held])
    scores[items.at[place[hit]]] = 0.0
    sums = np.bincount(items.ids, scores, len(items.hashes))
    np.add.at(sums, at[inside], fresh_scores[inside])
    outside = np.flatnonzero(~inside)  # items no block holds
    _, once, inverse = np.unique(fresh_h[outside], return_index=True, return_inverse=True)
    totals = np.concatenate([sums, np.bincount(inverse.reshape(-1), fresh_scores[outside])])
    sources = np.concatenate([items.first, outside[once] | (len(blocks) << 32)])
    return _best(totals, sources, len(blocks), many)


def _find(hashes: Any, wanted: Any) -> tuple[Any, Any]:
    """Where each of ``wanted`` would be in the sorted ``hashes``, and whether it is."""
    if not len(hashes):
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    at = np.minimum(np.searchsorted(hashes, wanted), len(hashes) - 1)
    return at, hashes[at] == wanted


def _best(totals: Any, sources: Any, fresh_from: int, many: int) -> Candidates:
    """:func:`candidates`' choice among ``totals`` (``sources``: as :class:`Items`' first)."""
    if not len(totals):
        return Candidates([], [], 0.0)
    tied, cut = None, 0.0
    if len(totals) <= many:
        chosen, bound = np.argsort(-totals, kind="stable"), 0.0
    else:
        cut = np.partition(totals, len(totals) - many)[len(totals) - many]  # many-th best
        chosen = np.flatnonzero(totals >= cut)
        if len(chosen) > 4 * many:  # the tied ones apart: their keys decide among them
            tied = sources[np.flatnonzero(totals == cut)]
            chosen = np.flatnonzero(totals > cut)
            below = totals[totals < cut]
        else:
            below = np.delete(totals, chosen)
        bound = float(below.max()) if len(below) else 0.0
        chosen = chosen[np.argsort(-totals[chosen], kind="stable")]
    found = [
        Source(-1 if w >> 32 == fresh_from else int(w >> 32), int(w & 0xFFFFFFFF))
        for w in sources[chosen].tolist()
    ]
    return Candidates(found, totals[chosen].tolist(), bound, tied, float(cut))


def first_tied(
    tied: Any, blocks: Sequence[Block], fresh: Sequence[Fresh], n: int
) -> list[tuple[str, str, str]]:
    """The first ``n`` items at ``tied`` (see :class:`Candidates`) by namespace then key,
    as ``(prefix, key, shard)``.

    Example:
        >>> block = pack("docs", [("b", 1, 2), ("c", 1, 2), ("a", 1, 2)])
        >>> entries = np.frombuffer(block.postings, dtype=ENTRY)
        >>> at = np.arange(3, dtype=np.int64)  # block 0, every position
        >>> first_tied(at, [Block("t", "docs", "docs", 1, entries, block.keys)], [], 2)
        [('docs', 'a', 'docs'), ('docs', 'b', 'docs')]
    """
    where, position = tied >> 32, tied & 0xFFFFFFFF
    found = [(f.prefix, f.key, f.shard) for f in (fresh[p] for p in position[where == len(blocks)])]
    for b in np.flatnonzero(np.bincount(where[where < len(blocks)])).tolist():
        block = blocks[b]
        found += [(block.prefix, k, block.shard) for k in block.first_keys(position[where == b], n)]
    return sorted(found)[:n]


def settled(
    exact: Sequence[tuple[tuple[str, str], float]],
    bound: float,
    want: int,
    tie: tuple[float, tuple[str, str] | None] | None = None,
) -> list[tuple[tuple[str, str], float]] | None:
    """The best ``want`` of the true scores ``exact`` (``((prefix, key), score)``) in the
    database's order (score, prefix, key) when they are the answer: the last kept scores
    above ``bound``, or none was left out; else ``None``. ``tie``: ``(cut, first item left
    out at cut or None)``: the last kept must score above ``cut`` or, at it, come first.

    Example:
        >>> settled([(("d", "a"), 2.0), (("d", "b"), 1.0)], bound=1.5, want=1)
        [(('d', 'a'), 2.0)]
        >>> settled([(("d", "a"), 2.0), (("d", "b"), 1.0)], bound=1.5, want=2) is None
        True
    """
    kept = sorted((e for e in exact if e[1] > 0), key=lambda e: (-e[1], e[0]))
    cut, after = tie if tie is not None else (0.0, None)
    if after is not None:
        if len(kept) < want:
            return None
        item, last = kept[want - 1]
        if last > cut + 1e-9 * abs(cut):
            return kept[:want] if last > bound else None
        at_cut = last >= cut - 1e-9 * abs(cut) and item < after
        return kept[:want] if at_cut and last > bound else None
    if len(kept) >= want:
        return kept[:want] if kept[want - 1][1] > bound else None
    return kept if bound == 0 else None


#: The most blocks one query builds (the next queries build the rest).
BUILDS_PER_QUERY = 4
NAMESPACE_PARAMS = ("ns", "ns_dot", "ns_len", "ns_end", "shard", "now")
#: Where a block is: its term, shard key and namespace.
BlockId = tuple[str, str, str]
#: A ranked item: ``((prefix, key), score)``.
Scored = tuple[tuple[str, str], float]


def build_plan(st: StoreStatements, term: str, shard: str, prefix: str) -> Plan[int]:
    """(Re)build the block of ``term`` in namespace ``prefix``; returns its entries."""
    built = secrets.randbits(62)
    one = {"term": term, "shard": shard, "prefix": prefix}
    empty = {**one, "built": built, "entries": 0, "postings": b"", "keys": b""}
    claim = [Stmt(st.blocks_claim(), empty), Stmt(st.blocks_mark(), one)]
    reading = Stmt(st.blocks_postings(), one, fetch=True)
    _, _, rows = yield Batch([*claim, reading], write=True, lock=True, hold=True)
    block = pack(prefix, [(str(k), int(tf), int(dl)) for k, tf, dl in rows])
    filled = {**one, "built": built, **block._asdict()}
    yield Batch([Stmt(st.blocks_fill(), filled)], write=True)
    return block.entries


def blocked_plan(
    st: StoreStatements,
    cache: BlockCache,
    flat: Sequence[str],
    df: dict[str, int],
    params: dict[str, Any],
    *,
    exact: bool,
    scoped: bool,
) -> Plan[list[Scored] | None]:
    """BM25's best ``:n`` items for the stored terms ``flat`` (``df``: their document
    frequencies; ``params``: the lexical statement's) from blocks, or ``None``: the postings
    must answer, and for a minute when blocks could not (postings spread over small
    namespaces, or a database that refuses: read-only, a locked SQLite file, an old schema)."""
    if sum(df.get(f, 0) for f in flat) < MIN_POSTINGS:
        return None
    common = tuple(sorted(f for f in flat if df.get(f, 0) >= MIN_DF))
    where = (params["ns"], exact, common)
    # a distributed database reads a query above the shard key one shard at a time, each
    # in a snapshot of its own: blocks only for a query within one shard key there
    if not common or cache.declines(where) or (st.d.distributed and not scoped):
        return None
    try:
        found = yield from _blocked_plan(st, cache, flat, set(common), params, exact, scoped)
    except MoreBuildsDue:
        return None
    except Exception as exc:
        logger.warning("lexical search reads postings, not blocks, for a minute: %r", exc)
        found = None
    if found is None:
        cache.decline(where)
    return found


class MoreBuildsDue(Exception):
    """A query built as many blocks as it may and more are due: the postings answer it."""


def _blocked_plan(
    st: StoreStatements,
    cache: BlockCache,
    flat: Sequence[str],
    common: set[str],
    params: dict[str, Any],
    exact: bool,
    scoped: bool,
    again: bool = True,
) -> Plan[list[Scored] | None]:
    """:func:`blocked_plan`'s work; ``again``: retry once after rebuilding stale blocks."""
    want = int(params["n"])
    w = {t: params[f"w{j}"] for j, t in reversed(list(enumerate(flat)))}
    weights = Weights(w, params["k_base"], params["k_len"])
    base = {k: v for k, v in params.items() if k in NAMESPACE_PARAMS}
    read = st.blocks_read(len(flat), exact, scoped)
    reading = {**base, **{f"t{j}": t for j, t in enumerate(flat)}, "cap": FRESH_CAP + 1}
    heads, fresh = yield from _read_plan(read, reading)
    todo = yield from _todo_plan(st, heads, fresh, common, base, exact, scoped)
    if todo:
        for block in todo[:BUILDS_PER_QUERY]:
            yield from build_plan(st, *block)
        heads, fresh = yield from _read_plan(read, reading)
    if _capped(fresh):
        if len(todo) > BUILDS_PER_QUERY:  # the next queries build the rest
            raise MoreBuildsDue
        return None  # spread over namespaces too small for blocks
    blocks = yield from _blocks_plan(st, cache, list(heads))
    if blocks is None:
        return None
    many = want + want // 4 + 8
    found = candidates(blocks, fresh, weights, many, cache.items(blocks))
    items, here, tie = _chosen(found, blocks, fresh, many)
    scored = yield from _exact_plan(st, items, flat, weights)
    answer = settled(scored, found.bound, want, tie)
    if answer is None:  # entries of items deleted or rewritten since misled: rebuild
        stale = {
            (st.shard(p), p)
            for ((p, _), true), score in zip(scored, here, strict=True)
            if true < score - 1e-9 * abs(score)
        }
        rebuilt = [b for b in blocks if (b.shard, b.prefix) in stale][:BUILDS_PER_QUERY]
        for b in rebuilt:
            yield from build_plan(st, b.term, b.shard, b.prefix)
        if rebuilt and again:
            return (yield from _blocked_plan(st, cache, flat, common, params, exact, scoped, False))
    return answer


def _chosen(
    found: Candidates, blocks: list[Block], fresh: list[Fresh], many: int
) -> tuple[list[tuple[str, str, str]], list[float], tuple[float, tuple[str, str] | None] | None]:
    """The candidates (the first tied ones joining, up to ``many``) and :func:`settled`'s tie."""
    items = [
        (fresh[p].shard, fresh[p].prefix, fresh[p].key)
        if b < 0
        else (blocks[b].shard, blocks[b].prefix, blocks[b].key_at(p))
        for b, p in found.sources
    ]
    here = list(found.scores)
    if found.tied is None:
        return items, here, None
    need = many - len(items)
    first = first_tied(found.tied, blocks, fresh, need + 1)
    items += [(shard, prefix, key) for prefix, key, shard in first[:need]]
    here += [found.cut] * len(first[:need])
    return items, here, (found.cut, first[need][:2] if len(first) > need else None)


def _read_plan(read: Any, params: dict[str, Any]) -> Plan[tuple[dict[BlockKey, int], list[Fresh]]]:
    """The blocks under the namespace (with their entries), and the unpacked postings."""
    [rows] = yield Batch([Stmt(read, params, fetch=True)])
    heads, fresh = {}, []
    for term, shard, prefix, key, tf, dl, built in rows:
        if built is not None:  # a block: ``tf`` is its entries
            heads[(term, shard, prefix, int(built))] = int(tf)
        else:
            fresh.append(Fresh(term, shard, prefix, key, int(tf), int(dl)))
    return heads, fresh


def _blocks_plan(
    st: StoreStatements, cache: BlockCache, heads: list[BlockKey]
) -> Plan[list[Block] | None]:
    """The blocks ``heads`` names, cached or read; ``None`` when one was rebuilt since."""
    found = {h: cache.get(h) for h in heads}
    missing = [h for h, b in found.items() if b is None]
    for start in range(0, len(missing), 64):
        chunk = missing[start : start + 64]
        n = len(chunk) + (-len(chunk) % 4)
        params: dict[str, Any] = {}
        for j, (term, shard, prefix, _) in enumerate(chunk + chunk[-1:] * (n - len(chunk))):
            params.update({f"bt{j}": term, f"bs{j}": shard, f"bp{j}": prefix})
        [rows] = yield Batch([Stmt(st.blocks_payloads(n), params, fetch=True)])
        for term, shard, prefix, built, entries, postings, keys in rows:
            key = (term, shard, prefix, int(built))
            if key in found and found[key] is None:
                data = np.frombuffer(bytes(postings), dtype=ENTRY, count=int(entries))
                found[key] = block = Block(term, shard, prefix, int(built), data, bytes(keys))
                cache.put(key, block)
    blocks = [b for b in (found[h] for h in heads) if isinstance(b, Block)]
    return blocks if len(blocks) == len(heads) else None


def _capped(fresh: list[Fresh]) -> bool:
    """Whether the read left postings of a term out (it reads one past the cap)."""
    return max(Counter(f.term for f in fresh).values(), default=0) > FRESH_CAP


def _todo_plan(
    st: StoreStatements,
    heads: dict[BlockKey, int],
    fresh: list[Fresh],
    common: set[str],
    base: dict[str, Any],
    exact: bool,
    scoped: bool,
) -> Plan[list[BlockId]]:
    """The blocks to build, most unpacked postings first: a common term's, with as many
    as :func:`build_at` asks (counted by the database when the read was capped)."""
    entries = {(t, s, p): n for (t, s, p, _), n in heads.items()}
    if _capped(fresh):
        mine = sorted(common)
        counted = {**base, **{f"t{j}": t for j, t in enumerate(mine)}, "at": BUILD_MIN}
        stmt = Stmt(st.blocks_fresh_counts(len(mine), exact, scoped), counted, fetch=True)
        [rows] = yield Batch([stmt])
        counts = {(str(t), str(s), str(p)): int(n) for t, s, p, n in rows}
    else:
        counts = Counter((f.term, f.shard, f.prefix) for f in fresh)
    due = [(-n, b) for b, n in counts.items() if b[0] in common]
    return [b for n, b in sorted(due) if -n >= build_at(entries.get(b, 0))]


def _exact_plan(
    st: StoreStatements, items: list[tuple[str, str, str]], flat: Sequence[str], weights: Weights
) -> Plan[list[Scored]]:
    """The items' true scores from their postings (none: 0), never prepared: PostgreSQL's
    generic plan filters every posting of the terms by key (20 ms at 10,000 items, not 0.7)."""
    by_ns: dict[tuple[str, str], list[str]] = {}
    for shard, prefix, key in items:
        by_ns.setdefault((shard, prefix), []).append(key)
    terms = {f"t{j}": t for j, t in enumerate(flat)}
    statements = []
    for (shard, prefix), keys in by_ns.items():
        for start in range(0, len(keys), 256):  # within any database's parameter limit
            chunk = keys[start : start + 256]
            params = {**terms, "shard": shard, "prefix": prefix, **st.d.list_params("k", chunk)}
            query = st.blocks_postings_in(len(flat), st.d.list_size(len(chunk)))
            statements.append(Stmt(query, params, fetch=True, prepare=False))
    found = yield Batch(statements)
    scores = {(p, k): 0.0 for _, p, k in items}
    for rows in found:
        for prefix, key, term, tf, dl in rows:
            scores[(prefix, key)] += float(weights.score(term, tf, dl))
    return list(scores.items())
