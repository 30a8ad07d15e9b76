"""The store's term index as the tables keep it (``store.index`` ranks and merges with it).

A term is named by a 64-bit hash (:func:`term_id`) of the term as stored: the word, or its
keyed hash with encryption on, split in its high 24 bits (signed) and low 40 bits (the chunks'
key, see :func:`halves`). Until a merge lists an item's terms, a row of ``am_store_unlisted``
holds, for its ``n`` distinct terms, the ids' high parts (3 bytes each, little-endian), their
low parts (5 bytes) and their frequencies up to 65,535 (``<u2``): 10 bytes a term. The item's
own row keeps the high parts alone (:func:`listed_form`), 3 bytes a term: what a retraction
needs to find the lists that hold the item (a list of another term with the same high part
holds no entry of it, so taking the item out of that list too changes nothing).

The lists: a chunk holds one term's entries in one namespace, item numbers ascending from
``start`` on: a byte naming three widths (two bits each), then the gaps between the
numbers, the frequencies and the items' lengths, each array of one fixed width, so numpy
reads them.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any

from langgraph_checkpoint_agent_memory.text import postings

#: The most entries a chunk holds.
CHUNK = 4096
#: Bytes a term takes in an item's ``terms``, before and after it is listed.
UNLISTED_BYTES, LISTED_BYTES = 10, 3
#: The bits of a term id's low part.
LOW_BITS = 40
MAX_TF = 65535
#: Unsigned little-endian widths of a chunk's arrays, by code (``1 << code`` bytes).
WIDTHS = ("<u1", "<u2", "<u4", "<u8")


def term_id(term: str) -> int:
    """The signed 64-bit hash naming ``term`` in the index.

    Example:
        >>> term_id("berlin") == term_id("berlin") != term_id("paris")
        True
    """
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def merge_lock_id(shard: str) -> int:
    """The advisory lock that makes a shard key's merges, deletes and erases take turns."""
    digest = hashlib.blake2b(f"merge:{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def halves(term: int) -> tuple[int, int]:
    """A term id's high 24 bits (signed) and low 40 bits (unsigned): the chunks' key.

    Example:
        >>> halves(-1), halves(1 << 40)
        ((-1, 1099511627775), (1, 0))
    """
    return term >> LOW_BITS, term & ((1 << LOW_BITS) - 1)


@lru_cache(maxsize=65536)
def _stored(term: str) -> tuple[bytes, bytes]:
    """A term id's high part (3 bytes) and low part (5 bytes) as ``terms`` stores them."""
    # the digest is the id's little-endian form: its first 5 bytes the low part
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return digest[5:], digest[:5]


def encode_terms(counts: dict[str, int]) -> bytes:
    """An item's unlisted ``terms`` of ``{term as stored: frequency}``.

    Example:
        >>> len(encode_terms({"a": 1, "b": 300}))
        20
    """
    if not counts:
        return b""
    parts = list(map(_stored, counts))
    tfs: Iterable[int] = counts.values()
    if max(counts.values()) >= MAX_TF:
        tfs = [min(f, MAX_TF) for f in tfs]
    high, low = itemgetter(0), itemgetter(1)
    return (
        b"".join(map(high, parts))
        + b"".join(map(low, parts))
        + struct.pack(f"<{len(parts)}H", *tfs)
    )


def read_ints(data: Any, starts: Any, width: int, signed: bool) -> Any:
    """The little-endian integers of ``width`` bytes at byte offsets ``starts`` (an array) of
    ``data`` (a uint8 array), as int64.

    Example:
        >>> import numpy as np
        >>> read_ints(np.frombuffer(bytes([255, 255, 255, 1, 0, 0]), np.uint8),
        ...           np.array([0, 3]), 3, True).tolist()
        [-1, 1]
    """
    import numpy as np

    # a byte at a time: summing an (n, width) array along its short axis took 5-10x longer
    value = data[starts].astype(np.int64)
    for j in range(1, width):
        value |= data[starts + j].astype(np.int64) << (8 * j)
    if signed:
        value -= (value >> (8 * width - 1)) << (8 * width)
    return value


def index_item(item: dict[str, Any]) -> None:
    """Give an item row its term columns from its ``doc`` (taken out): keyed by its
    ``term_of`` (encryption, taken out); its ``filter_terms`` become its ``tags``; its terms
    to list go to ``unlisted`` (``None``: nothing to list), the row's ``terms`` get their
    :func:`listed_form`."""
    doc = item.pop("doc", None)
    term_of: Callable[[str], str] | None = item.pop("term_of", None)
    if "filter_terms" in item:
        item["tags"] = item.pop("filter_terms")
    if doc is None:
        item.update(doc_len=None, terms=None, unlisted=None)
        return
    found, length = postings(doc)
    if not found:  # stopwords, punctuation: counted in the corpus, in no list
        item.update(doc_len=length, terms=None, unlisted=None)
        return
    if term_of is not None:  # two words may share a keyed hash: their counts add up
        keyed: Counter[str] = Counter()
        for term, n in found.items():
            keyed[term_of(term)] += n
        found = keyed
    blob = encode_terms(found)
    item.update(doc_len=length, terms=listed_form(blob), unlisted=blob)


def listed_form(blob: bytes) -> bytes:
    """What an item's row keeps of its ``terms``: the term ids' high parts, which name the
    lists that hold it (or will).

    Example:
        >>> listed_form(bytes(range(20)))  # two terms: their 3-byte high parts
        b'\\x00\\x01\\x02\\x03\\x04\\x05'
    """
    return blob[: len(blob) // UNLISTED_BYTES * LISTED_BYTES]


def unlisted_terms(blob: bytes) -> tuple[Any, Any]:
    """The term ids and frequencies of an unlisted ``terms``."""
    import numpy as np

    n = len(blob) // UNLISTED_BYTES
    data = np.frombuffer(blob, np.uint8)
    hi = read_ints(data, 3 * np.arange(n), 3, True)
    lo = read_ints(data, 3 * n + 5 * np.arange(n), 5, False)
    return (hi << LOW_BITS) | lo, np.frombuffer(blob, "<u2", n, 8 * n).astype(np.int64)


def high_parts(blob: bytes, listed: bool = True) -> Any:
    """The high parts of the term ids of ``terms``, listed or not."""
    import numpy as np

    n = len(blob) // (LISTED_BYTES if listed else UNLISTED_BYTES)
    return read_ints(np.frombuffer(blob, np.uint8), 3 * np.arange(n), 3, True)


def pack_chunks(firsts: Any, nums: Any, tf: Any, dl: Any) -> list[bytes]:
    """The payloads of chunks laid end to end in ``nums``, ``tf``, ``dl`` (int64 arrays, each
    chunk's numbers ascending), chunk ``j`` starting at entry ``firsts[j]``.

    Example:
        >>> import numpy as np
        >>> nums, tf, dl = np.array([5, 9, 400, 7]), np.array([1, 2, 1, 3]), np.array([3, 4, 70, 9])
        >>> payloads = pack_chunks(np.array([0, 3]), nums, tf, dl)
        >>> [len(p) for p in payloads], [a.tolist() for a in unpack_chunks([5, 7], payloads)]
        ([13, 4], [[3, 1], [5, 9, 400, 7], [1, 2, 1, 3], [3, 4, 70, 9]])
    """
    import numpy as np

    firsts = np.asarray(firsts, dtype=np.int64)
    counts = np.diff(firsts, append=len(nums))
    owner = np.repeat(np.arange(len(firsts)), counts)
    gaps = np.diff(nums, prepend=nums[:1])
    gaps[firsts] = 0
    arrays = (gaps, tf, dl)
    limits = np.array([1 << 8, 1 << 16, 1 << 32], dtype=np.int64)
    codes = [np.searchsorted(limits, np.maximum.reduceat(a, firsts), side="right") for a in arrays]
    widths = [1 << c for c in codes]
    sizes = 1 + counts * (widths[0] + widths[1] + widths[2])
    begin = np.cumsum(sizes) - sizes
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    out[begin] = codes[0] | codes[1] << 2 | codes[2] << 4
    at = begin + 1
    k = np.arange(len(nums)) - firsts[owner]
    for values, width in zip(arrays, widths, strict=True):
        w = width[owner]
        pos = at[owner] + k * w
        for byte in range(8):
            wide = np.flatnonzero(w > byte)
            if not len(wide):
                break
            out[pos[wide] + byte] = (values[wide] >> (8 * byte)) & 255
        at = at + counts * width
    raw = out.tobytes()
    return [raw[b:e] for b, e in zip(begin.tolist(), (begin + sizes).tolist(), strict=True)]


#: Chunks :func:`unpack_chunks` reads one by one: fewer numpy calls than the bulk reading
#: (a term in a few namespaces, or a rare one).
FEW_CHUNKS = 8
#: Mean payload bytes from which chunks are read one by one however many: a chunk's three
#: arrays read as they lie cost about 7 µs, the bulk reading about 55 ns an entry (a common
#: word's full chunks of 4,096 entries, 13 of them: 0.4 ms against 3.1).
LARGE_CHUNK = 512


def _unpack_chunk(start: int, payload: bytes) -> tuple[Any, Any, Any, Any]:
    import numpy as np

    codes = (payload[0] & 3, payload[0] >> 2 & 3, payload[0] >> 4)
    n = (len(payload) - 1) // sum(1 << c for c in codes)
    offsets = (1, 1 + (n << codes[0]), 1 + (n << codes[0]) + (n << codes[1]))
    gaps, tf, dl = (
        np.frombuffer(payload, WIDTHS[c], n, at).astype(np.int64)
        for c, at in zip(codes, offsets, strict=True)
    )
    return np.array([n]), start + np.cumsum(gaps), tf, dl


def unpack_chunks(starts: Sequence[int], payloads: Sequence[bytes]) -> tuple[Any, Any, Any, Any]:
    """Chunks' entries end to end, ``(counts, numbers, frequencies, lengths)``: how many
    each chunk holds, then its entries (``starts``: each chunk's first number); int64."""
    import numpy as np

    if not payloads:
        none = np.zeros(0, dtype=np.int64)
        return none, none, none, none
    if len(payloads) <= FEW_CHUNKS or sum(map(len, payloads)) >= LARGE_CHUNK * len(payloads):
        # each chunk's arrays read as they lie
        parts = [_unpack_chunk(s, p) for s, p in zip(starts, payloads, strict=True)]
        if len(parts) == 1:
            return parts[0]
        counts, nums, tf, dl = (np.concatenate(column) for column in zip(*parts, strict=True))
        return counts, nums, tf, dl
    sizes = np.fromiter(map(len, payloads), np.int64, len(payloads))
    data = np.frombuffer(b"".join(payloads), np.uint8)
    begin = np.cumsum(sizes) - sizes
    head = data[begin].astype(np.int64)
    widths = [1 << (head >> shift & 3) for shift in (0, 2, 4)]
    counts = (sizes - 1) // (widths[0] + widths[1] + widths[2])
    owner = np.repeat(np.arange(len(payloads)), counts)
    firsts = np.cumsum(counts) - counts
    k = np.arange(len(owner)) - firsts[owner]
    at = begin + 1
    out = []
    for width in widths:
        w = width[owner]
        pos = at[owner] + k * w
        values = np.zeros(len(owner), dtype=np.int64)
        for byte in range(8):
            wide = np.flatnonzero(w > byte)
            if not len(wide):
                break
            values[wide] |= data[pos[wide] + byte].astype(np.int64) << (8 * byte)
        out.append(values)
        at = at + counts * width
    gaps, tf, dl = out
    total = np.cumsum(gaps)
    nums = np.asarray(starts, dtype=np.int64)[owner] + total - total[firsts][owner]
    return counts, nums, tf, dl
