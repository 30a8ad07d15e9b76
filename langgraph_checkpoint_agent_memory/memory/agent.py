"""``AgentMemory``: facts and episodes for LangGraph agents, on an ``AgentMemoryStore``.

Everything here is decided in the memory domain (``model``, ``facts``, ``recall``,
``decay``, ``consolidate``) and stored through the store's database in plans, so each
operation is written once and has a sync and an async entry point.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan
from langgraph_checkpoint_agent_memory.db.migrations import MEMORY
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.memory import consolidate as C
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory import recall as R
from langgraph_checkpoint_agent_memory.memory.backend import MemoryStore
from langgraph_checkpoint_agent_memory.memory.decay import DecayPolicy, log_importance
from langgraph_checkpoint_agent_memory.memory.extract import (
    Extractor,
    as_extractor,
    messages_as_dicts,
)
from langgraph_checkpoint_agent_memory.memory.model import (
    SCOPE_KEYS,
    AsOf,
    Episode,
    Fact,
    Scope,
    ScopeError,
    ScopeLike,
    as_timestamp,
    namespace,
    normalize_attribute,
)
from langgraph_checkpoint_agent_memory.memory.nodes import (
    GraphNodes,
    turn_key,
)
from langgraph_checkpoint_agent_memory.memory.recaller import Recaller, RecallOptions
from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings, RecordOptions
from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools
from langgraph_checkpoint_agent_memory.memory.worker import MemoryWorker

if TYPE_CHECKING:
    from typing_extensions import Unpack


#: The store an :class:`AgentMemory` keeps its facts and episodes in (``memory.store`` keeps
#: its type, e.g. ``AgentMemoryStore``, a LangGraph ``BaseStore``).
StoreT = TypeVar("StoreT", bound=MemoryStore)
T = TypeVar("T")


class AgentMemory(Generic[StoreT]):
    """Long-term memory for agents: record turns, consolidate them into facts, recall.

    Args:
        store: An :class:`AgentMemoryStore` (from :func:`create_store`): facts and episodes
            are ordinary items in it, under :meth:`namespace`.
        extractor: An :class:`Extractor`, any LangChain chat model, or a ``prompt -> text``
            callable; default the deterministic :class:`RuleBasedExtractor`.
        checkpointer: The graph's checkpointer, so :meth:`erase` also removes the scope's
            conversation threads.
        tokenizer: A LangChain model (``get_num_tokens``) or ``str -> int`` for the context
            budget; default an estimate of four characters per token.
        clock: Seconds since the epoch; injectable for tests.
        **settings: Any field of :class:`MemorySettings`.

    In a graph, :attr:`inject_node` and :attr:`record_node` do the reading and recording;
    :meth:`consolidate` (or the worker of :meth:`start`) learns facts from what was recorded.

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import AgentMemory, create_store

        memory = AgentMemory(create_store("sqlite:///memory.db"), extractor=chat_model)
        memory.record("user=alice", [{"role": "user", "content": "I moved to Berlin"}])
        memory.consolidate()
        memory.facts("user=alice")  # [Fact(attribute="city", value="Berlin", ...)]
        memory.build_context("user=alice", "where do I live?")
        ```
    """

    def __init__(
        self,
        store: StoreT,
        *,
        extractor: Extractor | Any = None,
        checkpointer: Any = None,
        tokenizer: Any = None,
        clock: Callable[[], float] = time.time,
        **settings: Any,
    ) -> None:
        if not isinstance(store, MemoryStore):
            raise ConfigurationError(
                "AgentMemory needs an AgentMemoryStore (create_store(...)): consolidation "
                f"needs its transactions and row locks; got {type(store).__name__}"
            )
        self.store = store
        store.add_schema(MEMORY)
        self.settings = MemorySettings.resolve(settings)
        self.extractor = as_extractor(extractor)
        self.checkpointer = checkpointer
        self.count_tokens = R.token_counter(tokenizer)
        self.policy = DecayPolicy(self.settings.decay_rate, self.settings.decay_threshold)
        self._clock = clock
        self._sql = sqlm.MemorySql(store.dialect, store.statements, self.settings.namespace_root)
        self._recaller = Recaller(
            store, self._sql, self.settings, self.policy, self.count_tokens, clock
        )
        self._worker: MemoryWorker | None = None
        self._nodes = GraphNodes(self)

    @property
    def inject_node(self) -> RunnableLambda[Any, dict[str, Any]]:
        """A graph node (sync and async) that puts the scope's memory into state.

        It reads the run's scope from ``config["configurable"]`` (``user_id``, ``agent_id``,
        ... as ``scope_keys`` says), recalls what is relevant to the last user message and
        writes a dated, token-budgeted block: a system message with id
        ``CONTEXT_MESSAGE_ID`` (replaced each turn, removed when empty), or the
        ``context_key`` state key when that setting is given. Episodes of the current thread
        are left out; what is recalled is reinforced.

        Example:
            ```python
            graph.add_node("inject_memory", memory.inject_node)  # before the agent node
            graph.add_edge(START, "inject_memory")
            app = graph.compile(checkpointer=checkpointer)
            config = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
            app.invoke({"messages": [("user", "where do I live?")]}, config)
            ```
        """
        return self._nodes.inject

    @property
    def record_node(self) -> RunnableLambda[Any, dict[str, Any]]:
        """A graph node (sync and async) that records the turn as a pending episode.

        The turn is the messages since the last user message; its key comes from the thread
        and the messages' ids, so a retried step records it once. The node changes no state;
        :meth:`consolidate` (or the worker of :meth:`start`) later turns episodes into facts.

        Example:
            ```python
            graph.add_node("record_memory", memory.record_node)
            graph.add_edge("agent", "record_memory")
            ```
        """
        return self._nodes.record

    def tools(
        self,
        *,
        include: Sequence[str] = ("search", "remember", "forget"),
        budget_tokens: int | None = None,
    ) -> list[BaseTool]:
        """LangChain tools (sync and async) with which an agent decides what to remember:
        ``search_memory``, ``remember_fact`` (applied as consolidation applies facts:
        confirmed, superseded into history, accumulated when multi-valued) and
        ``forget_fact`` (the fact moves to history).

        Whose memory comes from the run's config, as for :attr:`inject_node`, never from the
        model's arguments; an argument the tool does not declare (``user_id``, ...) is
        refused. See :mod:`.tools`.

        Args:
            include: Which tools: ``"search"``, ``"remember"``, ``"forget"``.
            budget_tokens: Size of ``search_memory``'s answer (default the
                ``budget_tokens`` setting).

        Returns:
            The tools, in the order of ``include``.

        Example:
            ```python
            from langgraph.prebuilt import create_react_agent

            agent = create_react_agent(model, memory.tools(), checkpointer=checkpointer)
            config = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
            agent.invoke({"messages": [("user", "I moved to Lyon")]}, config)
            ```
        """
        return MemoryTools(self, budget_tokens=budget_tokens).tools(include)

    def __repr__(self) -> str:
        return f"AgentMemory({self.store!r}, extractor={type(self.extractor).__name__})"

    # -- running plans and steps -----------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        return self.store.run_plan(plan)

    async def _arun(self, plan: Plan[T]) -> T:
        return await self.store.arun_plan(plan)

    def namespace(self, scope: ScopeLike, kind: str) -> tuple[str, ...]:
        """Where a scope's ``"facts"``, ``"history"`` or ``"episodes"`` live in the store."""
        return namespace(self.settings.namespace_root, Scope.of(scope), kind)

    def _prefix(self, scope: Scope, kind: str) -> str:
        return sqlm.ns(self.namespace(scope, kind))

    # -- reading ---------------------------------------------------------------------------

    def _facts_plan(self, scope: ScopeLike, as_of: AsOf | None) -> Plan[list[Fact]]:
        if as_of is None:
            rows = yield from sqlm.read_plan(
                self._sql, self._prefix(Scope.of(scope), "facts"), self._clock()
            )
            facts = [Fact.from_value(r.key, r.value) for r in rows]
        else:
            when = as_timestamp(as_of)
            facts = F.held_at((yield from self._versions_plan(scope, None)), when)
        return sorted(facts, key=lambda f: (f.attribute, f.valid_from, f.key))

    def facts(self, scope: ScopeLike, *, as_of: AsOf | None = None) -> list[Fact]:
        """The scope's current facts, by attribute; or, with ``as_of``, the facts that held
        at that moment.

        Args:
            scope: A :class:`Scope`, ``"user=alice"`` or ``{"user": "alice"}``.
            as_of: A moment (seconds since the epoch, or a timezone-aware ``datetime``; a
                naive one raises ``ConfigurationError``): the facts learned by then and not
                yet superseded, each as it was held then (a value superseded later is shown
                current, with ``valid_to`` unset). Times are those of the episodes that stated
                the facts. Confirmations and importance are today's; facts that decayed or
                were erased are gone.

        Example:
            ```python
            for fact in memory.facts("user=alice"):
                print(fact.attribute, fact.value)
            before = memory.facts("user=alice", as_of=datetime(2024, 1, 1, tzinfo=timezone.utc))
            ```
        """
        return self._run(self._facts_plan(scope, as_of))

    async def afacts(self, scope: ScopeLike, *, as_of: AsOf | None = None) -> list[Fact]:
        """Async :meth:`facts`."""
        return await self._arun(self._facts_plan(scope, as_of))

    def _versions_plan(self, scope: ScopeLike, attribute: str | None) -> Plan[list[Fact]]:
        """Every stored version of the scope's facts (of ``attribute`` when given): the
        superseded ones and the current ones."""
        s = Scope.of(scope)
        now = self._clock()
        old = yield from sqlm.read_plan(self._sql, self._prefix(s, "history"), now)
        new = yield from sqlm.read_plan(self._sql, self._prefix(s, "facts"), now)
        wanted = normalize_attribute(attribute) if attribute is not None else None
        return [
            Fact.from_value(r.key, r.value)
            for r in (*old, *new)
            if wanted is None or r.value.get("attribute") == wanted
        ]

    def _history_plan(
        self, scope: ScopeLike, attribute: str | None, as_of: AsOf | None
    ) -> Plan[list[Fact]]:
        when = None if as_of is None else as_timestamp(as_of)
        out = yield from self._versions_plan(scope, attribute)
        if when is not None:
            out = F.known_at(out, when)
        return sorted(out, key=lambda f: (f.attribute, f.valid_from, f.valid_to or float("inf")))

    def history(
        self, scope: ScopeLike, attribute: str | None = None, *, as_of: AsOf | None = None
    ) -> list[Fact]:
        """Every value an attribute had (all attributes when ``None``), oldest first; the
        current one last, with ``valid_to`` unset.

        Args:
            scope: Whose facts.
            attribute: One attribute (``"home city"`` and ``home_city`` are one); ``None``:
                all.
            as_of: A moment (seconds since the epoch, or a timezone-aware ``datetime``): the
                history as it was known then: values learned later are left out, and the
                value current then has ``valid_to`` unset.

        Example:
            ```python
            for version in memory.history("user=alice", "city"):
                print(version.value, version.valid_from, version.valid_to)
            ```
        """
        return self._run(self._history_plan(scope, attribute, as_of))

    async def ahistory(
        self, scope: ScopeLike, attribute: str | None = None, *, as_of: AsOf | None = None
    ) -> list[Fact]:
        """Async :meth:`history`."""
        return await self._arun(self._history_plan(scope, attribute, as_of))

    def _episodes_plan(self, scope: ScopeLike, status: str | None) -> Plan[list[Episode]]:
        rows = yield from sqlm.read_plan(
            self._sql, self._prefix(Scope.of(scope), "episodes"), self._clock()
        )
        eps = [Episode.from_value(r.key, r.value) for r in rows]
        if status is not None:
            eps = [e for e in eps if e.status == status]
        return sorted(eps, key=lambda e: (e.occurred_at, e.key))

    def episodes(self, scope: ScopeLike, *, status: str | None = None) -> list[Episode]:
        """The scope's episodes (recorded turns), oldest first.

        Args:
            scope: Whose episodes.
            status: Only ``"pending"`` (not consolidated yet), ``"done"`` or ``"parked"``
                (failed too often; see :meth:`retry`); ``None``: all.

        Example:
            ```python
            waiting = memory.episodes("user=alice", status="pending")
            ```
        """
        return self._run(self._episodes_plan(scope, status))

    async def aepisodes(self, scope: ScopeLike, *, status: str | None = None) -> list[Episode]:
        """Async :meth:`episodes`."""
        return await self._arun(self._episodes_plan(scope, status))

    # -- recall ----------------------------------------------------------------------------

    def recall(
        self, scope: ScopeLike, query: str = "", **options: Unpack[RecallOptions]
    ) -> R.Recalled:
        """The context block for ``query`` with the facts and episodes in it (see
        :mod:`.recall`).

        Args:
            scope: Whose memory: a :class:`Scope`, ``"user=alice"`` or ``{"user": "alice"}``.
            query: What the block should be relevant to (usually the last user message);
                empty: the most important facts and the most recent episodes.
            **options: See :class:`RecallOptions`: ``budget_tokens``, ``exclude_thread``,
                ``reinforce``, ``as_of`` (what the memory knew at that moment: the facts that
                held then, the episodes that had happened; a look back reinforces nothing).

        Example:
            ```python
            recalled = memory.recall("user=alice", "where do I live?", budget_tokens=200)
            print(recalled.text)
            then = memory.recall("user=alice", "where do I live?", as_of=1_700_000_000)
            ```
        """
        return C.run_steps(self._recaller.steps(scope, query, options), self.store, self._run)

    async def arecall(
        self, scope: ScopeLike, query: str = "", **options: Unpack[RecallOptions]
    ) -> R.Recalled:
        """Async :meth:`recall`."""
        steps = self._recaller.steps(scope, query, options)
        return await C.arun_steps(steps, self.store, self._arun)

    def build_context(
        self,
        scope: ScopeLike,
        query: str = "",
        *,
        budget_tokens: int | None = None,
        as_of: AsOf | None = None,
    ) -> str:
        """The dated context block ``inject_node`` would put into state for ``query``: each
        fact with the day it became true, each episode with the day it happened.

        Args:
            scope: Whose memory.
            query: What the block should be relevant to.
            budget_tokens: The block's size in tokens (default the ``budget_tokens`` setting).
            as_of: A moment (seconds since the epoch, or a timezone-aware ``datetime``): the
                block as of then: the facts that held at that moment (a value superseded
                later shows its old value; a fact learned later is not known) and only the
                episodes that had happened, ranked for recency from that moment.

        Example:
            ```python
            print(memory.build_context("user=alice", "what should I cook tonight?"))
            last_year = datetime(2024, 6, 1, tzinfo=timezone.utc)
            print(memory.build_context("user=alice", "where did I live?", as_of=last_year))
            ```
        """
        return self.recall(scope, query, budget_tokens=budget_tokens, as_of=as_of).text

    async def abuild_context(
        self,
        scope: ScopeLike,
        query: str = "",
        *,
        budget_tokens: int | None = None,
        as_of: AsOf | None = None,
    ) -> str:
        """Async :meth:`build_context`."""
        return (await self.arecall(scope, query, budget_tokens=budget_tokens, as_of=as_of)).text

    # -- recording -------------------------------------------------------------------------

    def _record_plan(
        self, scope: ScopeLike, messages: Sequence[Any], options: RecordOptions
    ) -> Plan[str | None]:
        thread_id, key = options.get("thread_id"), options.get("key")
        occurred_at = options.get("occurred_at")
        s = Scope.of(scope)
        dicts = [m for m in messages_as_dicts(messages) if m["content"] or m["role"] != "tool"]
        if not dicts:
            return None
        now = self._clock()
        when = now if occurred_at is None else float(occurred_at)
        ep_key = key or turn_key(thread_id, 0, list(messages))
        episode = Episode(ep_key, dicts, when, thread_id=thread_id)
        item = {
            "prefix": self._prefix(s, "episodes"),
            "key": ep_key,
            "value": json.dumps(episode.to_value(), ensure_ascii=False, separators=(",", ":")),
            "created_at": when,
            "updated_at": now,
            "ttl_minutes": None,
            "expires_at": None,
            "doc": episode.text(),
        }
        yield from sqlm.record_plan(
            self._sql,
            scope=s.key,
            root=self.settings.namespace_root,
            item=item,
            thread_id=thread_id,
            now=now,
            reinforce=self._recaller.take_reinforcements(),
        )
        return ep_key

    def record(
        self, scope: ScopeLike, messages: Sequence[Any], **options: Unpack[RecordOptions]
    ) -> str | None:
        """Store ``messages`` as a pending episode, for :meth:`consolidate` to learn from.

        The same key (by default, from the thread and the messages' ids) is stored once,
        however often it is recorded, so a retried graph step does not record a turn twice.

        Args:
            scope: Whose memory the episode belongs to.
            messages: LangChain messages or ``{"role", "content"}`` dicts.
            **options: See :class:`RecordOptions`: ``thread_id``, ``key``, ``occurred_at``.

        Returns:
            The episode's key, or ``None`` when no message had content.

        Example:
            ```python
            memory.record(
                "user=alice",
                [{"role": "user", "content": "I moved to Berlin"}],
                thread_id="t1",
            )
            ```
        """
        return self._run(self._record_plan(scope, messages, options))

    async def arecord(
        self, scope: ScopeLike, messages: Sequence[Any], **options: Unpack[RecordOptions]
    ) -> str | None:
        """Async :meth:`record`."""
        return await self._arun(self._record_plan(scope, messages, options))

    # -- consolidation, decay --------------------------------------------------------------

    def consolidate(
        self, scope: ScopeLike | None = None, *, max_jobs: int | None = None
    ) -> C.Report:
        """Consolidate pending episodes into facts: one extractor call per job, its result
        applied in one transaction (facts confirmed, superseded or added; episodes marked
        done). A failed job is recorded with its error and its episodes stay pending.

        Args:
            scope: Only this scope (and no other); ``None``: every scope with pending episodes.
            max_jobs: Stop after this many jobs; ``None``: until no scope has claimable work.

        Returns:
            A :class:`Report` of the jobs (``completed``, ``failed``, ``added``, ...).

        Example:
            ```python
            memory.record("user=alice", [{"role": "user", "content": "I live in Paris"}])
            report = memory.consolidate("user=alice")
            assert report.completed == 1
            ```
        """
        key = Scope.of(scope).key if scope is not None else None
        self._flush()
        steps = C.consolidate_steps(self, scope=key, max_jobs=max_jobs)
        return C.run_steps(steps, self.store, self._run)

    async def aconsolidate(
        self, scope: ScopeLike | None = None, *, max_jobs: int | None = None
    ) -> C.Report:
        """Async :meth:`consolidate` (a blocking extractor or driver runs in a thread)."""
        key = Scope.of(scope).key if scope is not None else None
        await self._aflush()
        steps = C.consolidate_steps(self, scope=key, max_jobs=max_jobs)
        return await C.arun_steps(steps, self.store, self._arun)

    def _flush(self) -> None:
        rows = self._recaller.take_reinforcements()
        if rows:
            self._run(sqlm.reinforce_plan(self._sql, rows))

    async def _aflush(self) -> None:
        rows = self._recaller.take_reinforcements()
        if rows:
            await self._arun(sqlm.reinforce_plan(self._sql, rows))

    def _decay_plan(self, scope: ScopeLike | None) -> Plan[int]:
        return sqlm.decay_plan(
            self._sql,
            now=self._clock(),
            log_rate_per_second=self.policy.log_rate_per_second,
            log_threshold=self.policy.log_threshold,
            scope=Scope.of(scope).key if scope is not None else None,
        )

    def decay(self, scope: ScopeLike | None = None) -> int:
        """Delete every unpinned fact and episode whose importance decayed under the
        ``decay_threshold`` setting (importance falls by ``decay_rate`` a day and is restored
        when an item is confirmed or recalled); in set-based statements.

        Args:
            scope: Only this scope; ``None``: all.

        Returns:
            How many items were deleted.

        Example:
            ```python
            removed = memory.decay()
            ```
        """
        self._flush()
        return self._run(self._decay_plan(scope))

    async def adecay(self, scope: ScopeLike | None = None) -> int:
        """Async :meth:`decay`."""
        await self._aflush()
        return await self._arun(self._decay_plan(scope))

    def _pin_plan(self, scope: ScopeLike, attribute: str, pinned: bool) -> Plan[int]:
        s = Scope.of(scope)
        prefix = self._prefix(s, "facts")
        rows = yield from sqlm.read_plan(self._sql, prefix, self._clock())
        name = normalize_attribute(attribute)
        hits = [r for r in rows if r.value.get("attribute") == name or r.key == attribute]
        if not hits:
            return 0
        now = self._clock()
        items, decay = [], []
        for r in hits:
            value = {**r.value, "pinned": pinned}
            items.append(
                {
                    "prefix": prefix,
                    "key": r.key,
                    "value": json.dumps(value, ensure_ascii=False, separators=(",", ":")),
                    "created_at": r.created_at,
                    "updated_at": now,
                    "ttl_minutes": None,
                    "expires_at": None,
                    "doc": Fact.from_value(r.key, value).search_text(),
                }
            )
            decay.append(
                {
                    "prefix": prefix,
                    "key": r.key,
                    "scope": s.key,
                    "log_importance": r.log_importance
                    if r.log_importance is not None
                    else log_importance(float(r.value.get("importance", 0.5))),
                    "reinforced_at": r.reinforced_at if r.reinforced_at is not None else now,
                    "pinned": int(pinned),
                }
            )
        yield Batch(
            [*self._sql.store.writes(items), self._sql.decay_stmt(decay)],
            write=True,
        )
        return len(hits)

    def pin(self, scope: ScopeLike, attribute: str, *, pinned: bool = True) -> int:
        """Pin (or unpin) a scope's current facts of ``attribute``: pinned facts never
        decay. Returns how many facts changed."""
        return self._run(self._pin_plan(scope, attribute, pinned))

    async def apin(self, scope: ScopeLike, attribute: str, *, pinned: bool = True) -> int:
        return await self._arun(self._pin_plan(scope, attribute, pinned))

    # -- operations ------------------------------------------------------------------------

    def _covered(self, scope: ScopeLike, known: set[str]) -> list[str]:
        target = Scope.of(scope)
        out = []
        for key in sorted(known):
            try:
                if target.covers(Scope.parse(key)):
                    out.append(key)
            except ScopeError:
                continue
        return out

    def _covering_shard(self, scope: ScopeLike) -> str | None:
        """The one shard key under which ``scope`` and every narrower scope it covers keep
        their rows, or ``None`` when a narrower scope may carry another (a scope without the
        leading keys the shard key is made of: under the default ``shard_depth`` of 2,
        ``agent=support`` covers ``user=bob,agent=support``, keyed ``memory.user=bob``)."""
        target = Scope.of(scope)
        leading = list(SCOPE_KEYS[: self._sql.store.shard_depth - 1])
        present = [k for k in SCOPE_KEYS if getattr(target, k) is not None]
        if present[: len(leading)] != leading:
            return None
        return self._sql.scope_shard(target.key)

    def _covered_plan(self, scope: ScopeLike) -> Plan[list[str]]:
        """``scope`` and the narrower scopes it covers that hold memory: found on their one
        shard where they share one, else across all."""
        root = self.settings.namespace_root
        shard = self._covering_shard(scope)
        known = yield from sqlm.known_scopes_plan(self._sql, root, shard)
        return self._covered(scope, known)

    def _erase_plan(self, scope: ScopeLike) -> Plan[dict[str, int]]:
        root = self.settings.namespace_root
        covered = yield from self._covered_plan(scope)
        counts = yield from sqlm.erase_plan(self._sql, root=root, scopes=covered)
        return {"scopes": len(covered), **counts}

    def _forget_local(self) -> None:
        self._recaller.forget_queued()

    def _threads_plan(self, scope: ScopeLike) -> Plan[list[str]]:
        covered = yield from self._covered_plan(scope)
        return (yield from sqlm.threads_plan(self._sql, covered))

    def erase(self, scope: ScopeLike) -> dict[str, int]:
        """Remove everything of ``scope`` and of the narrower scopes it covers (erasing
        ``user=alice`` also erases ``user=alice,agent=support``): facts, history, episodes,
        vectors, full-text entries, jobs, and, with a checkpointer, the conversation
        threads (first, so a SQLite file is compacted after both).

        Args:
            scope: The scope to forget, with every narrower scope it covers.

        Returns:
            The rows removed per table, with ``"scopes"`` and ``"threads"`` counts.

        Example:
            ```python
            counts = memory.erase("user=alice")  # a right-to-be-forgotten request
            ```
        """
        threads = self._run(self._threads_plan(scope))
        erased = self._erase_threads(threads)
        counts: dict[str, int] = self._run(self._erase_plan(scope))
        counts["threads"] = erased
        self._forget_local()
        return counts

    async def aerase(self, scope: ScopeLike) -> dict[str, int]:
        """Async :meth:`erase`."""
        threads = await self._arun(self._threads_plan(scope))
        cp = self.checkpointer
        if cp is not None and threads:
            if hasattr(cp, "aerase_threads"):
                await cp.aerase_threads(threads)
            else:
                for t in threads:
                    await cp.adelete_thread(t)
        counts: dict[str, int] = await self._arun(self._erase_plan(scope))
        counts["threads"] = len(threads) if cp is not None else 0
        self._forget_local()
        return counts

    def _erase_threads(self, threads: list[str]) -> int:
        cp = self.checkpointer
        if cp is None or not threads:
            return 0
        if hasattr(cp, "erase_threads"):
            cp.erase_threads(threads)
        else:
            for t in threads:
                cp.delete_thread(t)
        return len(threads)

    def known_scopes(self) -> set[str]:
        """Every scope with memory stored: a ledger row or items under the namespace root."""
        return self._run(sqlm.known_scopes_plan(self._sql, self.settings.namespace_root))

    def scopes(self) -> dict[str, dict[str, int]]:
        """Every scope with its counts: facts, history, episodes, pending, parked, failed.

        Example:
            ```python
            for scope, counts in memory.scopes().items():
                print(scope, counts["facts"], counts["pending"])
            ```
        """
        return self._run(sqlm.stats_plan(self._sql, self.settings.namespace_root, self._clock()))

    async def ascopes(self) -> dict[str, dict[str, int]]:
        """Async :meth:`scopes`."""
        return await self._arun(
            sqlm.stats_plan(self._sql, self.settings.namespace_root, self._clock())
        )

    def jobs(
        self, statuses: Sequence[str] = ("failed", "parked"), *, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Recent consolidation jobs, newest first.

        Args:
            statuses: Which: ``"completed"``, ``"failed"``, ``"parked"``.
            limit: At most this many.

        Example:
            ```python
            for job in memory.jobs(["failed"]):
                print(job["scope"], job["error"])
            ```
        """
        return self._run(jobsql.jobs_plan(self._sql, list(statuses), limit))

    async def ajobs(
        self, statuses: Sequence[str] = ("failed", "parked"), *, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Async :meth:`jobs`."""
        return await self._arun(jobsql.jobs_plan(self._sql, list(statuses), limit))

    def retry(self, scope: ScopeLike | None = None) -> int:
        """Queue parked episodes again and lift the scopes' back-offs, e.g. after fixing
        the extractor.

        Args:
            scope: Only this scope; ``None``: all.

        Returns:
            How many episodes are pending again.

        Example:
            ```python
            memory.retry("user=alice")
            memory.consolidate("user=alice")
            ```
        """
        key = Scope.of(scope).key if scope is not None else None
        return self._run(jobsql.retry_plan(self._sql, key))

    async def aretry(self, scope: ScopeLike | None = None) -> int:
        """Async :meth:`retry`."""
        key = Scope.of(scope).key if scope is not None else None
        return await self._arun(jobsql.retry_plan(self._sql, key))

    def sweep(self) -> int:
        """Run the TTL sweeps of the store and of the checkpointer now.

        Returns:
            How many expired items and threads were removed.

        Example:
            ```python
            removed = memory.sweep()
            ```
        """
        removed = self.store.sweep()
        sweep = getattr(self.checkpointer, "sweep", None)
        if callable(sweep):
            found = sweep()
            removed += len(found) if isinstance(found, list) else int(found or 0)
        return removed

    async def asweep(self) -> int:
        """Async :meth:`sweep`."""
        removed = await self.store.asweep()
        sweep = getattr(self.checkpointer, "asweep", None)
        if callable(sweep):
            found = await sweep()
            removed += len(found) if isinstance(found, list) else int(found or 0)
        return removed

    # -- the background worker -------------------------------------------------------------

    def worker(self) -> MemoryWorker:
        """The background worker (created once; :meth:`start` and :meth:`astart` run it)."""
        if self._worker is None:
            st = self.settings
            self._worker = MemoryWorker(
                self,
                consolidate_every=st.consolidate_every_seconds,
                decay_every=st.decay_every_seconds,
                sweep_every=st.sweep_every_seconds,
            )
        return self._worker

    def start(self) -> MemoryWorker:
        """Consolidate, decay and sweep in a daemon thread, on the settings' intervals
        (``consolidate_every_seconds``, ``decay_every_seconds``, ``sweep_every_seconds``).

        Returns:
            The running :class:`MemoryWorker`; :meth:`stop` stops it.

        Example:
            ```python
            memory.start()
            try:
                serve()
            finally:
                memory.stop()
            ```
        """
        w = self.worker()
        w.start()
        return w

    def stop(self) -> None:
        """Stop the worker of :meth:`start`."""
        if self._worker is not None:
            self._worker.stop()

    async def astart(self) -> MemoryWorker:
        """:meth:`start` as an asyncio task of the running loop; stop it with :meth:`astop`."""
        w = self.worker()
        await w.astart()
        return w

    async def astop(self) -> None:
        """Stop the task of :meth:`astart`."""
        if self._worker is not None:
            await self._worker.astop()

    def setup(self) -> None:
        """Create or migrate the store's and memory's tables (also done on first use).

        Example:
            ```python
            memory = AgentMemory(create_store("postgresql://..."))
            memory.setup()  # e.g. in a deployment step, before the first request
            ```
        """
        self.store.setup()

    async def asetup(self) -> None:
        """Async :meth:`setup`."""
        await self.store.asetup()
