"""Similarity over vectors read from the database: exact cosine ranking of candidate rows
and the best distinct items of an approximate index's rows, for :mod:`.ranking`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from langgraph_checkpoint_agent_memory.db.store import ScoredRow, VectorRow


def as_matrix(vectors: Iterable[bytes]) -> Any:
    """Float32 little-endian vectors of one length as the rows of a matrix."""
    blobs = [bytes(v) for v in vectors]
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)


def nearest(rows: Sequence[Sequence[Any]], query: list[float], want: int) -> list[tuple[str, str]]:
    """Exact cosine similarity over every candidate vector; an item's best field wins."""
    size = 4 * len(query)  # float32: other stores' vectors of other lengths are skipped
    vectors = [v for v in map(VectorRow._make, rows) if len(v.vector) == size]
    if not vectors:
        return []
    matrix = as_matrix(v.vector for v in vectors)
    q = np.asarray(query, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(q) or 1.0)
    sims = (matrix @ q) / np.where(norms == 0, 1.0, norms)
    best: dict[tuple[str, str], float] = {}
    for row, sim in zip(vectors, sims.tolist(), strict=True):
        key = (row.prefix, row.key)
        if sim > best.get(key, -2.0):
            best[key] = sim
    return sorted(best, key=lambda k: -best[k])[:want]


def best_items(rows: Sequence[ScoredRow], want: int) -> list[tuple[str, str]]:
    """The ``want`` best distinct items of approximate rows (an item once per embedded
    field, in the index's relaxed order), by similarity."""

    def order(row: ScoredRow) -> float:
        score = row.score
        return 2.0 if score is None or score != score else -float(score)  # NaN, None last

    ordered = sorted(rows, key=order)
    best: dict[tuple[str, str], None] = {}
    for row in ordered:
        best.setdefault((row.prefix, row.key), None)
        if len(best) == want:
            break
    return list(best)
