"""Recall for an :class:`~.agent.AgentMemory`: the plans that choose what goes into the
context block, the cache of each scope's decoded facts, and the queue of what recall used.

The choosing itself (scores, rendering within a token budget) is in :mod:`.recall`; this
module reads through the store and the memory SQL and feeds it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory import recall as R
from langgraph_checkpoint_agent_memory.memory.model import (
    AsOf,
    Episode,
    Fact,
    Scope,
    ScopeLike,
    as_timestamp,
    check_count,
)
from langgraph_checkpoint_agent_memory.memory.steps import (
    Embed,
    Rerank,
    RunPlan,
    Search,
    Steps,
    Within,
    one,
)
from langgraph_checkpoint_agent_memory.memory.traced import memory_span
from langgraph_checkpoint_agent_memory.rerank import RerankerLike, Reranking, reranking_of
from langgraph_checkpoint_agent_memory.when import TimeRange, time_range

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.backend import MemoryStore
    from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
    from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings


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
    """What recall chose, best first, before it is rendered within the budget.

    Attributes:
        facts: The facts to show, in order.
        ranked: How many of the first facts were ordered by relevance to the query (when the
            facts do not all fit); the rest follow by importance.
        lines: Each fact's line and its token cost, by key.
        episodes: The candidate episodes, best first.
        at: The moment recalled (now, or ``as_of``).
        budget: The block's size in tokens.
    """

    facts: list[Fact]
    ranked: int
    lines: dict[str, tuple[str, int]]
    episodes: list[Episode]
    at: float
    budget: int

    def render(self, count: Callable[[str], int]) -> R.Recalled:
        """The dated block (see :func:`.recall.render`)."""
        return R.render(
            self.facts,
            self.episodes,
            now=self.at,
            budget_tokens=self.budget,
            count=count,
            rendered=self.lines,
        )


@dataclass
class Recaller:
    """What one :class:`~.agent.AgentMemory` recalls, and what it has recalled.

    Args:
        context: The memory's store (ranking and item reads), SQL, settings (budget,
            candidates, weights, namespace root), decay policy (stored decay state to
            importance) and clock.
        count_tokens: Counts a text's tokens for the budget.

    Example:
        >>> recaller = Recaller(memory.context, memory.count_tokens)
        >>> plan = recaller.candidates_plan(Scope.of("user=alice"), "city", 200, None, None)
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

    @property
    def settings(self) -> MemorySettings:
        return self.context.settings

    @property
    def store(self) -> MemoryStore:
        return self.context.store

    @property
    def sql(self) -> sqlm.MemorySql:
        return self.context.sql

    def namespace(self, scope: ScopeLike, kind: str) -> tuple[str, ...]:
        """Where a scope's ``kind`` of memory lives."""
        return self.context.namespace(scope, kind)

    def _prefix(self, scope: Scope, kind: str) -> str:
        return self.context.prefix(scope, kind)

    def steps(self, scope: ScopeLike, query: str, options: RecallOptions) -> Steps[R.Recalled]:
        s = Scope.of(scope)
        if options.get("budget_tokens") is not None:
            check_count(options.get("budget_tokens"), "budget_tokens")
        reranking = self._reranking(options.get("reranker"))
        as_of, known = options.get("as_of"), options.get("known_at")
        known_at = None if known is None else as_timestamp(known, "known_at")
        when = known_at if as_of is None else as_timestamp(as_of)  # the moment recalled
        vector = None
        if query and self.store.embeddings is not None:
            [vector] = yield Embed([query], query=True)
        dated: list[str] = []
        at = self.context.clock() if when is None else when
        span = time_range(query, at) if query and self.settings.time_weight else None
        if span is not None and span.start <= at:  # what happened then is a candidate
            until = {"$lt": span.end} if span.end <= at else {"$lte": at}  # not after ``at``
            found = yield Search(
                self.namespace(s, "episodes"),
                "",
                self.settings.episode_candidates,
                filter={"occurred_at": {"$gte": span.start, **until}},
            )
            dated = [item.key for item in found]
        chosen: Chosen = yield RunPlan(
            lambda: self.candidates_plan(
                s,
                query,
                options.get("budget_tokens"),
                options.get("exclude_thread"),
                vector,
                as_of=when,
                dated=(span, dated) if span is not None else None,
                known_at=known_at,
            )
        )
        if reranking is not None and query:  # outside the transaction, as embeddings are
            chosen = yield from self._reranked(s, chosen, query, reranking)
        recalled = chosen.render(self.count_tokens)
        if options.get("reinforce", False) and when is None:
            self.queue_reinforcement(s, recalled)
        return recalled

    def _reranking(self, given: RerankerLike | Literal[False] | None) -> Reranking | None:
        """The reranker of a call: the one given, none for ``False``, else the memory's."""
        if given is False:
            return None
        return reranking_of(given) if given is not None else self.context.reranking

    def _reranked(
        self, scope: Scope, chosen: Chosen, query: str, reranking: Reranking
    ) -> Steps[Chosen]:
        """``chosen`` with its ranked facts and its first episodes ordered by the reranker,
        in one call (the first ``top_n`` of each)."""
        facts = chosen.facts[: min(chosen.ranked, reranking.top_n)]
        episodes = chosen.episodes[: reranking.top_n]
        texts = [R.fact_line(f)[2:] for f in facts] + [R.episode_line(e)[2:] for e in episodes]
        if not texts:
            return chosen
        reordered = yield Within(
            lambda: memory_span(
                self.context, "rerank", scope, **{"agent_memory.rerank.candidates": len(texts)}
            ),
            one(Rerank(dataclasses.replace(reranking, top_n=len(texts)), query, texts)),
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
        budget_tokens: int | None,
        exclude_thread: str | None,
        vector: list[float] | None,
        *,
        as_of: float | None = None,
        dated: tuple[TimeRange, list[str]] | None = None,
        known_at: float | None = None,
    ) -> Plan[Chosen]:
        """What recall may put in the block, in order, before it is rendered (and before a
        reranker, which runs outside the transaction, orders it again)."""
        now = self.context.clock()  # what is live is decided now, whatever moment is recalled
        at = now if as_of is None else as_of
        st = self.settings
        budget = st.budget_tokens if budget_tokens is None else int(budget_tokens)
        if as_of is None:
            facts = yield from self.current_facts_plan(scope, now)
        else:
            facts = yield from self.facts_held_plan(scope, as_of, now, known_at)
        ordered = [entry[0] for entry in facts]
        lines = {entry[0].key: (entry[1], entry[2]) for entry in facts}
        cost = sum(entry[2] for entry in facts)
        link = st.link_weight if query else 0.0
        ranked: list[tuple[str, float]] = []
        if query and (cost > budget or link > 0):  # the first facts lend their links too
            ranked = yield from self._ranked_facts_plan(scope, query, vector, budget, now, as_of)
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
        relevance = R.spread(relevance)
        span = None if dated is None else dated[0]
        if dated is not None:  # the question names a time: what happened then is a candidate
            rows += yield from self._more_plan(scope, rows, dated[1], now)
        scored = self._scored(rows, relevance, exclude_thread, at, span)
        return Chosen(ordered, len(first), lines, [e for _, e in scored], at, budget)

    def _ranked_facts_plan(
        self,
        scope: Scope,
        query: str,
        vector: list[float] | None,
        budget: int,
        now: float,
        as_of: float | None,
    ) -> Plan[list[tuple[str, float]]]:
        """The facts (with their history, for a look back) most relevant to ``query``, with
        their fused scores, best first."""
        want = max(16, budget // 8)
        kinds = ("facts",) if as_of is None else ("facts", "history")
        ranked = []
        for kind in kinds:
            ranked += yield from self.store.ranker.rank_keys_plan(
                self.namespace(scope, kind), query, vector, want, now
            )
        ranked.sort(key=lambda pair: -pair[1])
        return ranked

    def _linked(
        self,
        ranked: list[tuple[str, float]],
        relevance: dict[str, float],
        facts: dict[str, Fact],
        weight: float,
        shown: set[str],
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """Facts and episode candidates that vouch for each other (:func:`.recall.linked`):
        ``ranked`` facts raised by the first episodes they were learned from (of those the
        block may show, ``shown``), and the ``relevance`` of episodes raised by the first
        facts learned from them, each from the other's ranking before either is raised."""
        k = self.store.ranker.rrf_k
        episodes = sorted((e for e in relevance if e in shown), key=lambda e: -relevance[e])
        learned = {key: facts[key].source_episodes for key, _ in ranked}
        firsts = [key for key, _ in ranked[: R.LINK_DEPTH]]
        vouched: dict[str, list[str]] = {}
        for key in firsts:
            for episode in learned[key]:
                vouched.setdefault(episode, []).append(key)
        raised = R.linked(dict(ranked), learned, episodes, weight, k)
        return (
            sorted(raised.items(), key=lambda pair: -pair[1]),
            R.linked(relevance, vouched, firsts, weight, k),
        )

    def _scored(
        self,
        rows: list[sqlm.StoredRow],
        relevance: dict[str, float],
        exclude_thread: str | None,
        at: float,
        span: TimeRange | None,
    ) -> list[tuple[float, Episode]]:
        """The candidate episodes with their scores, best first: each summary once, the
        excluded thread's left out, those inside the time a question names raised."""
        st = self.settings
        scored: list[tuple[float, Episode]] = []
        seen_summaries: set[str] = set()
        for row in rows:
            episode = Episode.from_value(row.key, row.value)
            if exclude_thread is not None and episode.thread_id == exclude_thread:
                continue
            if episode.summary:
                if episode.summary in seen_summaries:
                    continue
                seen_summaries.add(episode.summary)
            importance = self.importance(row, at)
            score = R.episode_score(
                relevance.get(row.key, 0.0), episode.occurred_at, importance, at, st.weights
            )
            if span is not None and episode.occurred_at in span:
                score += st.time_weight
            scored.append((score, episode))
        scored.sort(key=lambda p: -p[0])
        return scored

    def _more_plan(
        self, scope: Scope, rows: list[sqlm.StoredRow], keys: list[str], now: float
    ) -> Plan[list[sqlm.StoredRow]]:
        """The episodes ``keys`` names that are not among ``rows`` (the dated candidates of a
        question that names a time), read with their decay state."""
        known = {r.key for r in rows}
        more = [k for k in keys if k not in known]
        if not more:
            return []
        return (yield from sqlm.read_plan(self.sql, self._prefix(scope, "episodes"), now, more))

    def episode_candidates_plan(
        self,
        scope: Scope,
        query: str,
        vector: list[float] | None,
        now: float,
        as_of: float | None,
    ) -> Plan[tuple[list[sqlm.StoredRow], dict[str, float]]]:
        """The episodes recall ranks, with the search score of each (none without a query):
        the best ``episode_candidates`` matches of ``query``, else the newest. With
        ``as_of``, only episodes that had happened by then: the ranking is asked for more
        until enough of those are found or it has no more."""
        st = self.settings
        episodes = self.namespace(scope, "episodes")
        prefix = self._prefix(scope, "episodes")
        ranker = self.store.ranker
        if as_of is None:
            if not query:
                keys = yield from self.store.recent_keys_plan(episodes, st.episode_candidates, now)
                return (yield from sqlm.read_plan(self.sql, prefix, now, keys)), {}
            ranked = yield from ranker.rank_keys_plan(
                episodes, query, vector, st.episode_candidates, now
            )
            rows = yield from sqlm.read_plan(self.sql, prefix, now, [k for k, _ in ranked])
            return rows, dict(ranked)

        def happened(row: sqlm.StoredRow) -> bool:
            return float(row.value.get("occurred_at") or 0.0) <= as_of

        if not query:  # newest by when they happened, not by when they were written
            rows = [r for r in (yield from sqlm.read_plan(self.sql, prefix, now)) if happened(r)]
            rows.sort(key=lambda r: -float(r.value.get("occurred_at") or 0.0))
            return rows[: st.episode_candidates], {}
        want = st.episode_candidates
        while True:
            ranked = yield from ranker.rank_keys_plan(episodes, query, vector, want, now)
            found = yield from sqlm.read_plan(self.sql, prefix, now, [k for k, _ in ranked])
            kept = {r.key: r for r in found if happened(r)}
            if len(kept) >= st.episode_candidates or len(ranked) < want:
                break
            want *= 4
        best = [(k, score) for k, score in ranked if k in kept][: st.episode_candidates]
        return [kept[k] for k, _ in best], dict(best)

    def current_facts_plan(self, scope: Scope, now: float) -> Plan[list[tuple[Fact, str, int]]]:
        """The scope's current facts with each line's token cost, most important first;
        decoded once and reused while the scope's facts do not change (any process's write
        changes the fingerprint)."""
        prefix = self._prefix(scope, "facts")
        fingerprint = yield from sqlm.version_plan(self.sql, prefix, now)
        with self._lock:
            cached = self.facts_cache.get(prefix)
            if cached is not None and cached[0] == fingerprint:
                self.facts_cache.move_to_end(prefix)
                return cached[1]
        rows = yield from sqlm.read_plan(self.sql, prefix, now)
        facts = [Fact.from_value(r.key, r.value) for r in rows]
        facts.sort(key=lambda f: (-f.importance, -f.confirmations, f.attribute, f.key))
        entries = [(f, line, self.count_tokens(line)) for f in facts if (line := R.fact_line(f))]
        with self._lock:
            self.facts_cache[prefix] = (fingerprint, entries)
            while len(self.facts_cache) > 256:
                self.facts_cache.popitem(last=False)
        return entries

    def facts_held_plan(
        self, scope: Scope, as_of: float, now: float, known_at: float | None = None
    ) -> Plan[list[tuple[Fact, str, int]]]:
        """The facts that held at ``as_of`` (current ones and superseded ones, as they were
        then), as believed at ``known_at`` (default now), with each line's token cost, most
        important first."""
        versions = []
        for kind in ("history", "facts"):
            rows = yield from sqlm.read_plan(self.sql, self._prefix(scope, kind), now)
            versions += [Fact.from_value(r.key, r.value) for r in rows]
        facts = F.held_at(F.believed(versions, known_at), as_of)
        facts.sort(key=lambda f: (-f.importance, -f.confirmations, f.attribute, f.key))
        return [(f, line, self.count_tokens(line)) for f in facts if (line := R.fact_line(f))]

    def importance(self, row: sqlm.StoredRow, now: float) -> float:
        if row.log_importance is None or row.reinforced_at is None:
            return float(row.value.get("importance", 0.5))
        return self.context.policy.importance(row.log_importance, row.reinforced_at, now)

    def queue_reinforcement(self, scope: Scope, recalled: R.Recalled) -> None:
        now = self.context.clock()
        every = self.settings.reinforce_every_seconds
        facts, episodes = self._prefix(scope, "facts"), self._prefix(scope, "episodes")
        keys = [(facts, f.key) for f in recalled.facts]
        keys += [(episodes, e.key) for e in recalled.episodes]
        with self._lock:
            for key in keys:
                if now - self._reinforced.get(key, float("-inf")) >= every:
                    self._recalled[key] = now
                    self._reinforced[key] = now

    def take_reinforcements(self) -> list[dict[str, Any]]:
        with self._lock:
            taken, self._recalled = self._recalled, {}
        return [{"prefix": p, "key": k, "now": t} for (p, k), t in taken.items()]

    def forget_queued(self) -> None:
        """Drop queued reinforcements (their items are being erased)."""
        with self._lock:
            self._recalled.clear()
