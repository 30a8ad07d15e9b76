"""Pseudo-relevance feedback for the lexical ranking, no I/O: the terms the best first
matches share, added to the query with a small weight (RM3, in BM25's terms; the user guide
and ``docs/internals/store-search.md`` give the rule and its measured gains).

A term in more than half of the namespace's items is never added: no better than a stopword,
it would only append the rest of the namespace. With encryption at rest, feedback works on the
keyed hashes as they are (a hash's count is its term's under that data key).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.store.search import idf


@dataclass(frozen=True)
class Feedback:
    """How the lexical ranking expands a query (see the module).

    Args:
        docs: How many of the first matches the terms come from (a whole number >= 1).
        terms: How many terms are added, at most (a whole number >= 1).
        weight: The best added term's weight, a query term's being 1 (a number above 0).

    Example:
        >>> Feedback()
        Feedback(docs=4, terms=10, weight=0.5)
        >>> Feedback(docs=8, terms=5).weight
        0.5
    """

    docs: int = 4
    terms: int = 10
    weight: float = 0.5

    def __post_init__(self) -> None:
        for name in ("docs", "terms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"Feedback {name} must be a whole number >= 1, not {value!r}"
                )
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
            raise ConfigurationError(f"Feedback weight must be a number above 0, not {w!r}")


#: What a store's ``feedback=`` takes: ``None`` (the default: on for agent memory's recall,
#: off for ``search``), ``True`` (on for both, with :class:`Feedback`'s defaults), a
#: :class:`Feedback` (on for both, with its settings) or ``False`` (off for both).
FeedbackLike: TypeAlias = "Feedback | bool | None"


def feedback_settings(setting: FeedbackLike) -> tuple[Feedback | None, Feedback | None]:
    """``(search's, recall's)`` feedback for a store's ``feedback=`` (see
    :data:`FeedbackLike`); anything else is a ``ConfigurationError``.

    Example:
        >>> feedback_settings(None)
        (None, Feedback(docs=4, terms=10, weight=0.5))
        >>> feedback_settings(False)
        (None, None)
    """
    if setting is None:
        return None, Feedback()
    if isinstance(setting, bool):
        return (Feedback(), Feedback()) if setting else (None, None)
    if isinstance(setting, Feedback):
        return setting, setting
    raise ConfigurationError(
        f"feedback must be True, False, None or a Feedback, not {type(setting).__name__}"
    )


#: A term as feedback weighs it: the high part of its id, and ``None`` (any low part).
Term = tuple[int, "int | None"]


class Posting(NamedTuple):
    """One term of a matched item, as the index holds it (its frequency capped at 255)."""

    prefix: str
    key: str
    term: Term
    tf: int
    dl: int


def discriminates(docs: int, df: int) -> float:
    """The idf an added term weighs by: BM25's, or 0 (never added) for a term in more than
    half of the ``docs`` items.

    Example:
        >>> round(discriminates(100, 3), 2), discriminates(100, 60)
        (3.36, 0.0)
    """
    return idf(docs, df) if 2 * df <= docs else 0.0


def expansion(
    postings: Sequence[Posting],
    scores: Mapping[tuple[str, str], float],
    idf: Callable[[Term], float],
    query: Sequence[Term],
    feedback: Feedback,
) -> dict[Term, float]:
    """``{term: weight}`` of the terms to add to ``query``: of the terms in ``postings``
    (the first matches' terms), the ``feedback.terms`` best by the sum over the matches of
    ``score / best score * tf / length * idf``, weighted ``feedback.weight`` times their
    share of the best one's. ``scores``: each match's BM25 score; ``idf``: a term's.

    Example:
        >>> research, adopt, agenc = (1, None), (2, None), (3, None)
        >>> found = [Posting("ns", "a", research, 1, 2), Posting("ns", "a", adopt, 1, 2),
        ...          Posting("ns", "b", adopt, 2, 4), Posting("ns", "b", agenc, 2, 4)]
        >>> expansion(found, {("ns", "a"): 2.0, ("ns", "b"): 1.0}, lambda t: 1.0, [research],
        ...           Feedback(terms=2, weight=0.5))
        {(2, None): 0.5, (3, None): 0.16666666666666666}
    """
    asked = set(query)
    if (best := max(scores.values(), default=0.0)) <= 0:
        return {}
    weights: dict[Term, float] = {}
    for p in postings:
        share = scores.get((p.prefix, p.key), 0.0) / best
        if p.term not in asked and share > 0 and p.dl > 0:
            weights[p.term] = weights.get(p.term, 0.0) + share * p.tf / p.dl * idf(p.term)
    chosen = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[: feedback.terms]
    if not chosen or chosen[0][1] <= 0:
        return {}
    top = chosen[0][1]
    # a share too small for a float (a match scoring 5e-324 of the best) weighs nothing
    return {t: v for t, w in chosen if (v := feedback.weight * (w / top)) > 0}
