"""The stored forms of the term index (``db/term_index.py``), Hypothesis over their inputs:
an item's terms round trip unlisted, and listed (what SQL keeps of them, the first 3 bytes a
term) give the high parts of their ids; a chunk's entries round trip at every width of its
arrays (1, 2, 4 and 8 bytes)."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import numpy as np
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory.db import term_index
from langgraph_checkpoint_agent_memory.db.term_index import (
    FEW_CHUNKS,
    LISTED_BYTES,
    LOW_BITS,
    MAX_TF,
    UNLISTED_BYTES,
    encode_terms,
    halves,
    high_parts,
    listed_form,
    pack_chunks,
    term_id,
    unlisted_terms,
    unpack_chunks,
)
from langgraph_checkpoint_agent_memory.store.index import sum_by_number

ENGINE = sa.create_engine("sqlite://")
counts = st.dictionaries(st.text(max_size=12), st.integers(1, 3 * MAX_TF), max_size=60)


@given(st.text(max_size=20))
def test_a_term_id_is_its_two_parts(term: str) -> None:
    tid = term_id(term)
    assert -(2**63) <= tid < 2**63
    hi, lo = halves(tid)
    assert -(2**23) <= hi < 2**23 and 0 <= lo < 2**LOW_BITS
    assert (hi << LOW_BITS) | lo == tid


@given(counts)
def test_an_items_terms_round_trip_unlisted_and_listed(found: dict[str, int]) -> None:
    """Unlisted: each term's id and frequency, exact up to 65,535; listed (what the item's
    row keeps, its first three bytes a term): the high parts of the ids."""
    blob = encode_terms(found)
    assert len(blob) == UNLISTED_BYTES * len(found)
    got, tf = unlisted_terms(blob)
    assert dict(zip(got.tolist(), tf.tolist(), strict=True)) == {
        term_id(t): min(f, MAX_TF) for t, f in found.items()
    }
    expected = [halves(term_id(t))[0] for t in found]
    assert high_parts(blob, listed=False).tolist() == expected
    assert len(listed_form(blob)) == LISTED_BYTES * len(found)
    assert high_parts(listed_form(blob)).tolist() == expected


WIDTHS = {1: 2**8 - 1, 2: 2**16 - 1, 4: 2**32 - 1, 8: 2**62}


@st.composite
def chunk(draw: Any) -> tuple[Any, Any, Any, tuple[int, int, int]]:
    """Entries whose gaps, frequencies and lengths each need one of the four widths."""
    widths = tuple(draw(st.sampled_from(sorted(WIDTHS))) for _ in range(3))
    n = draw(st.integers(1, 40))
    gaps = [draw(st.integers(1, WIDTHS[widths[0]] // 2)) for _ in range(n - 1)]
    if n > 1:
        gaps[draw(st.integers(0, n - 2))] = WIDTHS[widths[0]]
    start = draw(st.integers(1, 2**40))
    nums = np.cumsum([start, *gaps], dtype=np.int64)
    tf = draw(st.lists(st.integers(1, WIDTHS[widths[1]]), min_size=n, max_size=n))
    tf[draw(st.integers(0, n - 1))] = WIDTHS[widths[1]]
    dl = draw(st.lists(st.integers(0, WIDTHS[widths[2]]), min_size=n, max_size=n))
    dl[draw(st.integers(0, n - 1))] = WIDTHS[widths[2]]
    if n == 1:  # no gap: the narrowest width
        widths = (1, *widths[1:])
    return nums, np.asarray(tf, dtype=np.int64), np.asarray(dl, dtype=np.int64), widths


@given(st.lists(chunk(), min_size=1, max_size=2 * FEW_CHUNKS))
def test_chunks_round_trip_at_every_width(chunks: list[tuple[Any, Any, Any, Any]]) -> None:
    """Chunks packed together (each its own widths) read back together, entry for entry,
    a few or large ones one by one, more small ones in bulk."""
    nums, tf, dl = (np.concatenate([c[i] for c in chunks]) for i in range(3))
    firsts = np.cumsum([0, *(len(c[0]) for c in chunks)])[:-1]
    payloads = pack_chunks(firsts, nums, tf, dl)
    for payload, (n, _, _, widths) in zip(payloads, chunks, strict=True):
        codes = [payload[0] & 3, payload[0] >> 2 & 3, payload[0] >> 4]
        assert [1 << c for c in codes] == list(widths)
        assert len(payload) == 1 + len(n) * sum(widths)
    for large in (0, 10**9):  # chunks one by one however many, or in bulk past a few
        with patch.object(term_index, "LARGE_CHUNK", large):
            counts, *got = unpack_chunks([int(c[0][0]) for c in chunks], payloads)
        assert counts.tolist() == [len(c[0]) for c in chunks]
        assert [a.tolist() for a in got] == [nums.tolist(), tf.tolist(), dl.tolist()]


@given(
    st.lists(st.integers(1, 2**40), min_size=1, max_size=6).flatmap(
        lambda bases: st.lists(
            st.tuples(st.sampled_from(bases), st.integers(0, 40), st.floats(0, 10)),
            max_size=200,
        )
    )
)
def test_scores_sum_by_number_as_a_sort_would(entries: list[tuple[int, int, float]]) -> None:
    """Scores summed per item number, by the array the numbers index (close together) or by
    a sort (far apart), equal those of a sort to the last bit, numbers ascending."""
    nums = np.asarray([base + offset for base, offset, _ in entries], dtype=np.int64)
    scores = np.asarray([score for _, _, score in entries], dtype=np.float64)
    cuts = sorted({len(entries) // 3, len(entries) // 2})  # the entries of three terms
    found, sums = sum_by_number(np.split(nums, cuts), np.split(scores, cuts))
    expected, at = np.unique(nums, return_inverse=True)
    assert found.tolist() == expected.tolist()
    assert sums.tolist() == np.bincount(at, weights=scores, minlength=len(expected)).tolist()
