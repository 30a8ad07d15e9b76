"""The store's term index as the tables keep it (``store.index`` ranks and merges with it).

A term is named by a 64-bit hash (:func:`term_id`) of the term as stored: the word, or its
keyed hash with encryption on. An item's row carries its terms. Until a merge lists them,
``terms`` holds, for its ``n`` distinct terms, the hashes' high halves (``<i4``), their
frequencies capped at 255 (``u1``), the low halves (``<i4``) and the exact frequencies up to
65,535 (``<u2``): 11 bytes a term. Once listed it keeps the first 5 bytes a term (the high
halves and capped frequencies): what a retraction needs to find the lists holding the item,
and what relevance feedback weighs.

The lists: a chunk holds one term's entries in one namespace, item numbers ascending from
``start`` to ``last``: a header of three widths, then the gaps between the numbers, the
frequencies and the items' lengths, each array of one fixed width, so numpy reads them.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory.text import postings

#: The most entries a chunk holds.
CHUNK = 4096
#: Bytes a term takes in an item's ``terms``, before and after it is listed.
UNLISTED_BYTES, LISTED_BYTES = 11, 5
MAX_TF = 65535
#: Unsigned little-endian widths of a chunk's arrays, by code.
_WIDTHS = ("<u1", "<u2", "<u4", "<u8")


def term_id(term: str) -> int:
    """The signed 64-bit hash naming ``term`` in the index.

    Example:
        >>> term_id("berlin") == term_id("berlin") != term_id("paris")
        True
    """
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def halves(term: int) -> tuple[int, int]:
    """A term id's high and low halves, each a signed 32-bit integer (the chunks' key)."""
    low = term & 0xFFFFFFFF
    return term >> 32, low - (1 << 32) if low >= 1 << 31 else low


def encode_terms(counts: dict[int, int]) -> bytes:
    """An item's unlisted ``terms`` of ``{term id: frequency}``.

    Example:
        >>> len(encode_terms({term_id("a"): 1, term_id("b"): 300}))
        22
    """
    n = len(counts)
    parts = [halves(t) for t in counts]
    tf = [min(f, MAX_TF) for f in counts.values()]
    return struct.pack(
        f"<{n}i{n}B{n}i{n}H",
        *(h for h, _ in parts),
        *(min(f, 255) for f in tf),
        *(lo for _, lo in parts),
        *tf,
    )


def index_item(item: dict[str, Any]) -> None:
    """Give an item row its term columns from its ``doc`` (taken out): keyed by its
    ``term_of`` (encryption, taken out); its ``filter_terms`` become its ``tags``."""
    doc = item.pop("doc", None)
    term_of: Callable[[str], str] | None = item.pop("term_of", None)
    if "filter_terms" in item:
        item["tags"] = item.pop("filter_terms")
    if doc is None:
        item.update(doc_len=None, terms=None, merged=None)
        return
    found, length = postings(doc)
    counts: Counter[int] = Counter()
    for term, n in found.items():
        counts[term_id(term_of(term) if term_of is not None else term)] += n
    item.update(doc_len=length, terms=encode_terms(counts), merged=0)


def unlisted_terms(blob: bytes) -> tuple[Any, Any]:
    """The term ids and exact frequencies of an unlisted ``terms``."""
    import numpy as np

    n = len(blob) // UNLISTED_BYTES
    hi = np.frombuffer(blob, "<i4", n).astype(np.int64)
    lo = np.frombuffer(blob, "<u4", n, 5 * n).astype(np.int64)
    return (hi << 32) | lo, np.frombuffer(blob, "<u2", n, 9 * n).astype(np.int64)


def listed_terms(blob: bytes, listed: bool = True) -> tuple[Any, Any]:
    """The high halves and capped frequencies of ``terms``, listed or not."""
    import numpy as np

    n = len(blob) // (LISTED_BYTES if listed else UNLISTED_BYTES)
    return np.frombuffer(blob, "<i4", n), np.frombuffer(blob, "u1", n, 4 * n)


def _code(largest: int) -> int:
    return 0 if largest < 1 << 8 else 1 if largest < 1 << 16 else 2 if largest < 1 << 32 else 3


def pack_chunk(nums: Any, tf: Any, dl: Any) -> bytes:
    """A chunk's payload of its entries (numbers ascending).

    Example:
        >>> import numpy as np
        >>> payload = pack_chunk(np.array([5, 9, 400]), np.array([1, 2, 1]), np.array([3, 4, 70]))
        >>> [a.tolist() for a in unpack_chunk(5, 3, payload)]
        [[5, 9, 400], [1, 2, 1], [3, 4, 70]]
    """
    import numpy as np

    gaps = np.diff(nums, prepend=nums[:1])
    arrays = (gaps, tf, dl)
    codes = [_code(int(a.max())) for a in arrays]
    return bytes(codes) + b"".join(
        a.astype(_WIDTHS[c]).tobytes() for a, c in zip(arrays, codes, strict=True)
    )


def unpack_chunk(start: int, entries: int, payload: bytes) -> tuple[Any, Any, Any]:
    """A chunk's ``(numbers, frequencies, lengths)``, each an int64 array."""
    import numpy as np

    out = []
    at = 3
    for code in payload[:3]:
        width = _WIDTHS[code]
        out.append(np.frombuffer(payload, width, entries, at).astype(np.int64))
        at += entries * int(width[-1])
    gaps, tf, dl = out
    return start + np.cumsum(gaps), tf, dl
