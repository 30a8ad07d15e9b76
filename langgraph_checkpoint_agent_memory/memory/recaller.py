"""Recall for an :class:`~.agent.AgentMemory`: the plans that choose what goes into the
context block, the cache of each scope's decoded facts, and the queue of what recall used.

The choosing itself (scores, rendering within a token budget) is in :mod:`.recall`; this
module reads through the store and the memory SQL and feeds it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.memory import consolidate as C
from langgraph_checkpoint_agent_memory.memory import recall as R
from langgraph_checkpoint_agent_memory.memory.backend import MemoryStore
from langgraph_checkpoint_agent_memory.memory.decay import DecayPolicy
from langgraph_checkpoint_agent_memory.memory.model import (
    Episode,
    Fact,
    Scope,
    ScopeLike,
    namespace,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings


class RecallOptions(TypedDict, total=False):
    """Keyword options of :meth:`AgentMemory.recall` and :meth:`AgentMemory.arecall`."""

    #: The block's size in tokens (default the ``budget_tokens`` setting).
    budget_tokens: int | None
    #: Leave out the episodes of this thread (its messages are already in the prompt).
    exclude_thread: str | None
    #: Count what was recalled as used, so it decays more slowly (what the inject node does).
    reinforce: bool


@dataclass
class Recaller:
    """What one :class:`~.agent.AgentMemory` recalls, and what it has recalled.

    Args:
        store: The memory's store (ranking and item reads).
        sql: The memory SQL for the store's dialect.
        settings: The memory's settings (budget, candidates, weights, namespace root).
        policy: The decay policy that turns stored decay state into importance.
        count_tokens: Counts a text's tokens for the budget.
        clock: Seconds since the epoch.

    Example:
        >>> recaller = memory._recaller  # each AgentMemory has one  # doctest: +SKIP
        >>> memory.store.run_plan(recaller.plan(Scope.of("user=a"), "city", 200, None, None))
        ...  # doctest: +SKIP
        Recalled(text='...', facts=[...], episodes=[...])
    """

    store: MemoryStore
    sql: sqlm.MemorySql
    settings: MemorySettings
    policy: DecayPolicy
    count_tokens: Callable[[str], int]
    clock: Callable[[], float]
    #: facts prefix -> (fingerprint, current facts with their lines and token costs)
    facts_cache: OrderedDict[str, tuple[tuple[int, float], list[tuple[Fact, str, int]]]] = field(
        default_factory=OrderedDict
    )
    #: what recall used and has not yet been reinforced in the database
    _recalled: dict[tuple[str, str], float] = field(default_factory=dict)
    #: when each item was last queued, so recall does not write every step
    _reinforced: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def namespace(self, scope: ScopeLike, kind: str) -> tuple[str, ...]:
        """Where a scope's ``kind`` of memory lives."""
        return namespace(self.settings.namespace_root, Scope.of(scope), kind)

    def _prefix(self, scope: Scope, kind: str) -> str:
        return sqlm.ns(self.namespace(scope, kind))

    def steps(self, scope: ScopeLike, query: str, options: RecallOptions) -> C.Steps[R.Recalled]:
        s = Scope.of(scope)
        vector = None
        if query and self.store.embeddings is not None:
            [vector] = yield C.Embed([query], query=True)
        recalled: R.Recalled = yield C.RunPlan(
            self.plan(s, query, options.get("budget_tokens"), options.get("exclude_thread"), vector)
        )
        if options.get("reinforce", False):
            self.queue_reinforcement(s, recalled)
        return recalled

    def plan(
        self,
        scope: Scope,
        query: str,
        budget_tokens: int | None,
        exclude_thread: str | None,
        vector: list[float] | None,
    ) -> Plan[R.Recalled]:
        now = self.clock()
        st = self.settings
        budget = st.budget_tokens if budget_tokens is None else int(budget_tokens)
        facts = yield from self.current_facts_plan(scope, now)
        ordered = [entry[0] for entry in facts]
        lines = {entry[0].key: (entry[1], entry[2]) for entry in facts}
        cost = sum(entry[2] for entry in facts)
        if cost > budget and query:
            # more facts than fit: the most relevant first, then the rest by importance
            want = max(16, budget // 8)
            ranked = yield from self.store.ranker.rank_keys_plan(
                self.namespace(scope, "facts"), query, vector, want, now
            )
            by_key = {f.key: f for f in ordered}
            first = [by_key[k] for k, _ in ranked if k in by_key]
            chosen = {f.key for f in first}
            ordered = first + [f for f in ordered if f.key not in chosen]
        episodes_prefix = self._prefix(scope, "episodes")
        rows: list[sqlm.StoredRow]
        if query:
            ranked = yield from self.store.ranker.rank_keys_plan(
                self.namespace(scope, "episodes"), query, vector, st.episode_candidates, now
            )
            relevance = dict(ranked)
            rows = yield from sqlm.read_plan(self.sql, episodes_prefix, now, list(relevance))
        else:
            relevance = {}
            keys = yield from self.store.recent_keys_plan(
                self.namespace(scope, "episodes"), st.episode_candidates, now
            )
            rows = yield from sqlm.read_plan(self.sql, episodes_prefix, now, keys)
        relevance = R.spread(relevance)
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
            importance = self.importance(row, now)
            score = R.episode_score(
                relevance.get(row.key, 0.0), episode.occurred_at, importance, now, st.weights
            )
            scored.append((score, episode))
        scored.sort(key=lambda p: -p[0])
        return R.render(
            ordered,
            [e for _, e in scored],
            now=now,
            budget_tokens=budget,
            count=self.count_tokens,
            rendered=lines,
        )

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

    def importance(self, row: sqlm.StoredRow, now: float) -> float:
        if row.log_importance is None or row.reinforced_at is None:
            return float(row.value.get("importance", 0.5))
        return self.policy.importance(row.log_importance, row.reinforced_at, now)

    def queue_reinforcement(self, scope: Scope, recalled: R.Recalled) -> None:
        now = self.clock()
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
