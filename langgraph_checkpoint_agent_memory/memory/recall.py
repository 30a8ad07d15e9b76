"""What an agent is reminded of: current facts, then the best past episodes, within a budget.

Facts come first: they are what is true now. When they do not all fit, the most relevant to
the query (the store's hybrid search) go first. Then past episodes, ranked by

    score = w_relevance * relevance + w_recency * 0.5 ** (age_days / half_life_days)
            + w_importance * importance_now

where ``relevance`` is the episode's hybrid-search score rescaled among the candidates (the
best 1, the last 0),
``age_days`` counts from when the episode happened, and ``importance_now`` is its decayed
importance. Lines are added in that order until the token budget is spent, counted with the
model's tokenizer when one is given, else estimated at four characters per token.

Facts and episodes vouch for each other (:func:`linked`): a fact learned from one of the
first episodes the query finds ranks higher, and so does an episode that one of the first
facts was learned from (``source_episodes``).

Every line is dated: a fact by the day it became true (``since``), an episode by the day it
happened, so "when did I move?" is answered from the block. Recall as of a moment (``as_of``)
takes the facts that held then and the episodes that had happened by then, and counts ages
from that moment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from langgraph_checkpoint_agent_memory.memory.model import Episode, Fact

TokenCounter = Callable[[str], int]

#: A section stops looking for lines that fit after this many in a row did not.
MAX_MISSES = 32
#: No line is shorter than this many tokens.
MIN_LINE = 4
#: How many of the first facts and of the first episodes lend their links (:func:`linked`).
LINK_DEPTH = 5


def linked(
    scores: Mapping[str, float],
    links: Mapping[str, Iterable[str]],
    first: Sequence[str],
    weight: float,
    k: int,
) -> dict[str, float]:
    """``scores`` (fused search scores, by key) with the items linked to the first items of
    the other kind raised: each by ``weight / (k + 1 + r)``, ``r`` the rank (from 0) of the
    best of ``first[:LINK_DEPTH]`` it links to (``links``: an item's keys of the other
    kind), in the units of reciprocal rank fusion with constant ``k``. Only scored items
    are raised.

    Example:
        >>> raised = linked({"a": 0.1, "b": 0.2}, {"a": ["e1"], "c": ["e2"]}, ["e2", "e1"], 0.3, 5)
        >>> {key: round(score, 3) for key, score in raised.items()}
        {'a': 0.143, 'b': 0.2}
    """
    rank = {key: r for r, key in reversed(list(enumerate(first[:LINK_DEPTH])))}
    out = dict(scores)
    for key, targets in links.items():
        best = min((rank[t] for t in targets if t in rank), default=None)
        if key in out and best is not None:
            out[key] += weight / (k + 1 + best)
    return out


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


def token_counter(tokenizer: Any = None) -> TokenCounter:
    """A counter from a LangChain model (``get_num_tokens``), a callable, or the estimate."""
    if tokenizer is None:
        return estimate_tokens
    count = getattr(tokenizer, "get_num_tokens", None)
    if callable(count):
        return count  # type: ignore[no-any-return]
    if callable(tokenizer):
        return tokenizer  # type: ignore[no-any-return]
    raise TypeError("tokenizer must be a LangChain model or a str -> int callable")


@dataclass(frozen=True)
class RecallWeights:
    """How past episodes are ranked (see the module docstring)."""

    relevance: float = 0.6
    recency: float = 0.2
    importance: float = 0.2
    half_life_days: float = 30.0


@dataclass
class Recalled:
    """A context block and what went into it."""

    text: str
    facts: list[Fact] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    tokens: int = 0

    def __str__(self) -> str:
        return self.text


def episode_score(
    relevance: float, occurred_at: float, importance: float, now: float, w: RecallWeights
) -> float:
    age_days = max(0.0, now - occurred_at) / 86400.0
    recency = 0.5 ** (age_days / w.half_life_days) if w.half_life_days > 0 else 0.0
    return w.relevance * relevance + w.recency * recency + w.importance * importance


def spread(scores: dict[str, float]) -> dict[str, float]:
    """Fused search scores rescaled to 0..1 among the candidates (best 1, worst 0): fusion
    scores differ by a few percent between ranks, which would let recency decide alone."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high <= low:
        return dict.fromkeys(scores, 1.0)
    return {k: (v - low) / (high - low) for k, v in scores.items()}


def day(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d")


def fact_line(f: Fact) -> str:
    times = f"; confirmed {f.confirmations}x" if f.confirmations > 1 else ""
    return f"- {f.text()} (since {day(f.valid_from)}{times})"


def episode_line(e: Episode, limit: int = 300) -> str:
    body = e.summary or " / ".join(m.get("content", "") for m in e.messages if m.get("content"))
    if len(body) > limit:
        body = body[: limit - 1].rstrip() + "…"
    outcome = f" Outcome: {e.outcome}." if e.outcome else ""
    return f"- {day(e.occurred_at)}: {body}{outcome}"


def render(
    facts: Sequence[Fact],
    episodes: Sequence[Episode],
    *,
    now: float,
    budget_tokens: int,
    count: TokenCounter = estimate_tokens,
    rendered: dict[str, tuple[str, int]] | None = None,
) -> Recalled:
    """The dated block, facts then episodes, each in the given order, within the budget.

    ``rendered``: fact lines already rendered and counted, by key. The scan of a section stops
    after :data:`MAX_MISSES` lines in a row that do not fit, so its cost follows the
    budget, not the number of facts."""
    header = f"Memory (as of {day(now)}):"
    lines = [header]
    used = count(header)
    kept: dict[str, list[Any]] = {"facts": [], "episodes": []}
    sections: list[tuple[str, str, Sequence[Any], Callable[[Any], str]]] = [
        ("facts", "Known facts:", facts, fact_line),
        ("episodes", "Relevant past conversations:", episodes, episode_line),
    ]
    for name, title, items, line in sections:
        if not items:
            continue
        cost = count(title)
        if used + cost > budget_tokens:
            break
        section = [title]
        section_used = cost
        misses = 0
        for item in items:
            known = (rendered or {}).get(getattr(item, "key", ""))
            text, c = known if known is not None else (text := line(item), count(text))
            if used + section_used + c > budget_tokens:
                misses += 1
                if misses >= MAX_MISSES or budget_tokens - used - section_used < MIN_LINE:
                    break
                continue  # a shorter line further down may still fit
            section.append(text)
            section_used += c
            kept[name].append(item)
        if len(section) > 1:
            lines += section
            used += section_used
    kept_facts, kept_episodes = kept["facts"], kept["episodes"]
    if not kept_facts and not kept_episodes:
        return Recalled("", [], [], 0)
    return Recalled("\n".join(lines), kept_facts, kept_episodes, used)
