"""What an agent is reminded of: current facts, then the best past episodes, within a budget.

Facts come first: they are what is true now (the most relevant to the query first when they
do not all fit). Then past episodes, ranked by

    score = w_relevance * relevance + w_recency * 0.5 ** (age_days / half_life_days)
            + w_importance * importance_now

where ``relevance`` is the hybrid-search score rescaled among the candidates. Facts and
episodes vouch for each other (:func:`linked`). Every line is dated, so "when did I move?"
is answered from the block.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory import reading
from langgraph_checkpoint_agent_memory.memory.context import (
    Call,
    Embed,
    RunPlan,
    Search,
    Steps,
    Within,
    one,
)
from langgraph_checkpoint_agent_memory.memory.model import (
    AsOf,
    Episode,
    Fact,
    Scope,
    ScopeLike,
    as_timestamp,
    check_count,
)
from langgraph_checkpoint_agent_memory.memory.settings import RecallWeights
from langgraph_checkpoint_agent_memory.memory.traced import memory_span
from langgraph_checkpoint_agent_memory.rerank import RerankerLike, Reranking, reranking_of
from langgraph_checkpoint_agent_memory.when import TimeRange, time_range

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


def render(chosen: Chosen, count: TokenCounter) -> Recalled:
    """The dated block, facts then episodes in their order, within the budget; a section stops
    after :data:`MAX_MISSES` lines in a row that do not fit, so its cost follows the budget."""
    header = f"Memory (as of {day(chosen.at)}):"
    lines, used = [header], count(header)
    kept_facts: list[Fact] = []
    kept_episodes: list[Episode] = []
    sections: list[tuple[str, Sequence[Any], Callable[[Any], str], list[Any]]] = [
        ("Known facts:", chosen.facts, fact_line, kept_facts),
        ("Relevant past conversations:", chosen.episodes, episode_line, kept_episodes),
    ]
    for title, items, line, kept in sections:
        if not items:
            continue
        section, section_used, misses = [title], count(title), 0
        if used + section_used > chosen.budget:
            break
        for item in items:
            known = chosen.lines.get(getattr(item, "key", ""))
            text, c = known if known is not None else (text := line(item), count(text))
            if used + section_used + c > chosen.budget:
                misses += 1
                if misses >= MAX_MISSES or chosen.budget - used - section_used < MIN_LINE:
                    break
                continue  # a shorter line further down may still fit
            section.append(text)
            section_used += c
            kept.append(item)
        if len(section) > 1:
            lines += section
            used += section_used
    if not kept_facts and not kept_episodes:
        return Recalled("", [], [], 0)
    return Recalled("\n".join(lines), kept_facts, kept_episodes, used)


if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.context import MemoryContext


class RecallOptions(TypedDict, total=False):
    """Keyword options of :meth:`AgentMemory.recall` and :meth:`AgentMemory.arecall`."""

    #: The block's size in tokens (default the ``budget_tokens`` setting).
    budget_tokens: int | None
    #: Leave out the episodes of this thread (its messages are already in the prompt).
    exclude_thread: str | None
    #: Count what was recalled as used, so it decays more slowly (what the inject node does).
    #: A look back (``as_of``) never counts as use.
    reinforce: bool
    #: Order the first candidates again with this reranker (a callable, a LangChain
    #: ``BaseDocumentCompressor`` or a :class:`~..rerank.Reranking`); ``False``: none, even
    #: when the memory has one; default the memory's ``reranker``.
    reranker: RerankerLike | Literal[False] | None
    #: Recall as of this moment (seconds since the epoch, or a timezone-aware ``datetime``):
    #: the facts that held then, the episodes that had happened by then.
    as_of: AsOf | None
    #: Recall what the memory believed at this moment (transaction time): the facts it had
    #: learned by then and not yet corrected, held at ``as_of`` (default this moment).
    known_at: AsOf | None


@dataclass
class Chosen:
    """What recall chose, best first, to render within ``budget`` (``ranked``: how many of the first
    facts are by relevance; ``lines``: each fact's line and tokens, by key; ``at``: the moment)."""

    facts: list[Fact]
    ranked: int
    lines: dict[str, tuple[str, int]]
    episodes: list[Episode]
    at: float
    budget: int


@dataclass
class Recaller:
    """What one :class:`~.agent.AgentMemory` recalls, and what it has recalled.

    Example:
        >>> recaller = Recaller(memory.context, memory.count_tokens)
        >>> alice = Scope.of("user=alice")
        >>> plan = recaller.candidates_plan(alice, "city", {"budget_tokens": 200}, None)
        >>> [fact.value for fact in memory.context.run(plan).facts]
        ['Berlin']
    """

    context: MemoryContext
    count_tokens: Callable[[str], int]
    #: facts prefix -> (fingerprint, current facts with their lines and token costs)
    facts_cache: OrderedDict[str, tuple[tuple[int, float], list[tuple[Fact, str, int]]]] = field(
        default_factory=OrderedDict
    )
    #: what recall used and has not yet been reinforced in the database
    _recalled: dict[tuple[str, str], float] = field(default_factory=dict)
    #: when each item was last queued, so recall does not write every step
    _reinforced: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def steps(self, scope: ScopeLike, query: str, options: RecallOptions) -> Steps[Recalled]:
        unknown = sorted(set(options) - set(RecallOptions.__annotations__))
        if unknown:  # a misspelled option would otherwise be ignored without a word
            raise TypeError(f"recall got unexpected keyword argument(s): {', '.join(unknown)}")
        s = Scope.of(scope)
        ctx = self.context
        if options.get("budget_tokens") is not None:
            check_count(options.get("budget_tokens"), "budget_tokens")
        given = options.get("reranker")
        reranking = None if given is False else reranking_of(given) or ctx.reranking
        as_of, known = options.get("as_of"), options.get("known_at")
        known_at = None if known is None else as_timestamp(known, "known_at")
        when = known_at if as_of is None else as_timestamp(as_of)  # the moment recalled
        vector = None
        if query and ctx.store.embeddings is not None:
            [vector] = yield Embed([query], query=True)
        at = ctx.clock() if when is None else when
        span = time_range(query, at) if query and ctx.settings.time_weight else None
        dated: tuple[TimeRange, list[str]] | None = None if span is None else (span, [])
        if span is not None and span.start <= at:  # what happened then is a candidate
            until = {"$lt": span.end} if span.end <= at else {"$lte": at}  # not after ``at``
            found = yield Search(
                ctx.namespace(s, "episodes"),
                "",
                ctx.settings.episode_candidates,
                filter={"occurred_at": {"$gte": span.start, **until}},
            )
            dated = (span, [item.key for item in found])
        chosen: Chosen = yield RunPlan(
            lambda: self.candidates_plan(s, query, options, vector, when, dated, known_at)
        )
        if reranking is not None and query:  # outside the transaction, as embeddings are
            chosen = yield from self._reranked(s, chosen, query, reranking)
        recalled = render(chosen, self.count_tokens)
        if options.get("reinforce", False) and when is None:
            self.queue_reinforcement(s, recalled)
        return recalled

    def _reranked(
        self, scope: Scope, chosen: Chosen, query: str, reranking: Reranking
    ) -> Steps[Chosen]:
        """``chosen`` with the first ``top_n`` of its ranked facts and of its episodes
        ordered by the reranker, in one call."""
        facts = chosen.facts[: min(chosen.ranked, reranking.top_n)]
        episodes = chosen.episodes[: reranking.top_n]
        texts = [fact_line(f)[2:] for f in facts] + [episode_line(e)[2:] for e in episodes]
        if not texts:
            return chosen
        rr = dataclasses.replace(reranking, top_n=len(texts))
        reordered = yield Within(
            lambda: memory_span(
                self.context, "rerank", scope, **{"agent_memory.rerank.candidates": len(texts)}
            ),
            one(Call(lambda: rr.order(query, texts), lambda: rr.aorder(query, texts))),
            lambda op, r: op.set("agent_memory.rerank.fallback", r.error),
        )
        n = len(facts)
        fact_order = [facts[i] for i in reordered.order if i < n]
        episode_order = [episodes[i - n] for i in reordered.order if i >= n]
        return dataclasses.replace(
            chosen,
            facts=fact_order + chosen.facts[n:],
            episodes=episode_order + chosen.episodes[len(episodes) :],
        )

    def candidates_plan(
        self,
        scope: Scope,
        query: str,
        options: RecallOptions,
        vector: list[float] | None,
        as_of: float | None = None,
        dated: tuple[TimeRange, list[str]] | None = None,
        known_at: float | None = None,
    ) -> Plan[Chosen]:
        """What recall may put in the block, in order, before it is reranked and rendered."""
        ctx = self.context
        now = ctx.clock()  # what is live is decided now, whatever moment is recalled
        at = now if as_of is None else as_of
        st = ctx.settings
        given, exclude_thread = options.get("budget_tokens"), options.get("exclude_thread")
        budget = st.budget_tokens if given is None else int(given)
        if as_of is None:
            facts = yield from self.current_facts_plan(scope, now)
        else:  # the facts that held at ``as_of`` as believed at ``known_at`` (default now)
            versions = yield from reading.versions_plan(ctx, scope, None, now)
            facts = self._lines(F.held_at(F.believed(versions, known_at), as_of))
        ordered = [entry[0] for entry in facts]
        lines = {entry[0].key: (entry[1], entry[2]) for entry in facts}
        cost = sum(entry[2] for entry in facts)
        link = st.link_weight if query else 0.0
        ranked: list[tuple[str, float]] = []
        if query and (cost > budget or link > 0):  # the first facts lend their links too
            # the facts (and history, for a look back) most relevant to ``query``, best first
            for kind in ("facts",) if as_of is None else ("facts", "history"):
                ranked += yield from ctx.store.ranker.rank_keys_plan(
                    ctx.namespace(scope, kind), query, vector, max(16, budget // 8), now
                )
            ranked.sort(key=lambda pair: -pair[1])
        rows, relevance = yield from self.episode_candidates_plan(scope, query, vector, now, as_of)
        by_key = {f.key: f for f in ordered}
        ranked = [(k, score) for k, score in ranked if k in by_key]
        if link > 0:  # the excluded thread's episodes are already in the prompt: they lend none
            shown = {
                r.key
                for r in rows
                if exclude_thread is None or r.value.get("thread_id") != exclude_thread
            }
            ranked, relevance = self._linked(ranked, relevance, by_key, link, shown)
        first: list[Fact] = []
        if cost > budget and ranked:
            # more facts than fit: the most relevant first, then the rest by importance
            first = [by_key[k] for k, _ in ranked]
            chosen = {f.key for f in first}
            ordered = first + [f for f in ordered if f.key not in chosen]
        relevance = spread(relevance)
        if dated is not None:  # the question names a time: what happened then is a candidate
            known = {r.key for r in rows}
            if more := [k for k in dated[1] if k not in known]:
                rows += yield from sqlm.read_plan(ctx.sql, ctx.prefix(scope, "episodes"), now, more)
        span = None if dated is None else dated[0]
        scored = self._scored(rows, relevance, exclude_thread, at, span)
        return Chosen(ordered, len(first), lines, [e for _, e in scored], at, budget)

    def _scored(
        self,
        rows: list[sqlm.StoredRow],
        relevance: dict[str, float],
        exclude_thread: str | None,
        at: float,
        span: TimeRange | None,
    ) -> list[tuple[float, Episode]]:
        """The candidate episodes with their scores, best first: each summary once."""
        ctx = self.context
        st = ctx.settings
        scored: list[tuple[float, Episode]] = []
        seen: set[str] = set()
        for row in rows:
            episode = Episode.from_value(row.key, row.value)
            excluded = exclude_thread is not None and episode.thread_id == exclude_thread
            if excluded or episode.summary in seen:
                continue
            if episode.summary:
                seen.add(episode.summary)
            if row.log_importance is None or row.reinforced_at is None:
                importance = float(row.value.get("importance", 0.5))
            else:
                importance = ctx.policy.importance(row.log_importance, row.reinforced_at, at)
            score = episode_score(
                relevance.get(row.key, 0.0), episode.occurred_at, importance, at, st.weights
            )
            if span is not None and episode.occurred_at in span:
                score += st.time_weight
            scored.append((score, episode))
        scored.sort(key=lambda p: -p[0])
        return scored

    def _linked(
        self,
        ranked: list[tuple[str, float]],
        relevance: dict[str, float],
        facts: dict[str, Fact],
        weight: float,
        shown: set[str],
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """``ranked`` facts raised by the first episodes (of ``shown``) they were learned
        from, and the ``relevance`` of episodes raised by the first facts learned from them,
        each from the other's ranking before either is raised."""
        k = self.context.store.ranker.rrf_k
        episodes = sorted((e for e in relevance if e in shown), key=lambda e: -relevance[e])
        learned = {key: facts[key].source_episodes for key, _ in ranked}
        firsts = [key for key, _ in ranked[:LINK_DEPTH]]
        vouched: dict[str, list[str]] = {}
        for key in firsts:
            for episode in learned[key]:
                vouched.setdefault(episode, []).append(key)
        raised = linked(dict(ranked), learned, episodes, weight, k)
        return (
            sorted(raised.items(), key=lambda pair: -pair[1]),
            linked(relevance, vouched, firsts, weight, k),
        )

    def episode_candidates_plan(
        self, scope: Scope, query: str, vector: list[float] | None, now: float, as_of: float | None
    ) -> Plan[tuple[list[sqlm.StoredRow], dict[str, float]]]:
        """The episodes recall ranks, with their search scores: the best matches of ``query``,
        else the newest; with ``as_of``, those that had happened then (asking for more)."""
        ctx = self.context
        want = ctx.settings.episode_candidates
        episodes = ctx.namespace(scope, "episodes")
        prefix = ctx.prefix(scope, "episodes")
        ranker = ctx.store.ranker
        if as_of is None:
            if not query:
                keys = yield from ctx.store.recent_keys_plan(episodes, want, now)
                return (yield from sqlm.read_plan(ctx.sql, prefix, now, keys)), {}
            ranked = yield from ranker.rank_keys_plan(episodes, query, vector, want, now)
            rows = yield from sqlm.read_plan(ctx.sql, prefix, now, [k for k, _ in ranked])
            return rows, dict(ranked)

        def happened(row: sqlm.StoredRow) -> bool:
            return float(row.value.get("occurred_at") or 0.0) <= as_of

        if not query:  # newest by when they happened, not by when they were written
            rows = [r for r in (yield from sqlm.read_plan(ctx.sql, prefix, now)) if happened(r)]
            rows.sort(key=lambda r: -float(r.value.get("occurred_at") or 0.0))
            return rows[:want], {}
        wanted = want
        while True:
            ranked = yield from ranker.rank_keys_plan(episodes, query, vector, wanted, now)
            found = yield from sqlm.read_plan(ctx.sql, prefix, now, [k for k, _ in ranked])
            kept = {r.key: r for r in found if happened(r)}
            if len(kept) >= want or len(ranked) < wanted:
                break
            wanted *= 4
        best = [(k, score) for k, score in ranked if k in kept][:want]
        return [kept[k] for k, _ in best], dict(best)

    def current_facts_plan(self, scope: Scope, now: float) -> Plan[list[tuple[Fact, str, int]]]:
        """The scope's current facts with each line's token cost, most important first;
        reused while the scope's fingerprint does not change."""
        prefix = self.context.prefix(scope, "facts")
        fingerprint = yield from sqlm.version_plan(self.context.sql, prefix, now)
        with self._lock:
            cached = self.facts_cache.get(prefix)
            if cached is not None and cached[0] == fingerprint:
                self.facts_cache.move_to_end(prefix)
                return cached[1]
        rows = yield from sqlm.read_plan(self.context.sql, prefix, now)
        entries = self._lines([Fact.from_value(r.key, r.value) for r in rows])
        with self._lock:
            self.facts_cache[prefix] = (fingerprint, entries)
            while len(self.facts_cache) > 256:
                self.facts_cache.popitem(last=False)
        return entries

    def _lines(self, facts: list[Fact]) -> list[tuple[Fact, str, int]]:
        facts.sort(key=lambda f: (-f.importance, -f.confirmations, f.attribute, f.key))
        return [(f, line, self.count_tokens(line)) for f in facts if (line := fact_line(f))]

    def queue_reinforcement(self, scope: Scope, recalled: Recalled) -> None:
        ctx = self.context
        now, every = ctx.clock(), ctx.settings.reinforce_every_seconds
        facts, episodes = ctx.prefix(scope, "facts"), ctx.prefix(scope, "episodes")
        keys = [(facts, f.key) for f in recalled.facts]
        keys += [(episodes, e.key) for e in recalled.episodes]
        with self._lock:
            for key in keys:
                if now - self._reinforced.get(key, float("-inf")) >= every:
                    self._recalled[key] = self._reinforced[key] = now

    def take_reinforcements(self) -> list[dict[str, Any]]:
        with self._lock:
            taken, self._recalled = self._recalled, {}
        return [{"prefix": p, "key": k, "now": t} for (p, k), t in taken.items()]

    def forget_queued(self) -> None:
        """Drop queued reinforcements (their items are being erased)."""
        with self._lock:
            self._recalled.clear()
