"""``AgentMemory``: facts and episodes for LangGraph agents, on an ``AgentMemoryStore``.

Each operation is a plan or steps of the memory domain, written once, with a sync and an
async entry point here.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.db.migrations import MEMORY
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.memory import consolidate as C
from langgraph_checkpoint_agent_memory.memory import decay, erasing, reading, writes
from langgraph_checkpoint_agent_memory.memory import recall as R
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext, MemoryStore, scope_key
from langgraph_checkpoint_agent_memory.memory.extract import Extractor, as_extractor
from langgraph_checkpoint_agent_memory.memory.model import AsOf, Episode, Fact, ScopeLike
from langgraph_checkpoint_agent_memory.memory.nodes import GraphNodes
from langgraph_checkpoint_agent_memory.memory.recall import Recaller, RecallOptions
from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings, RecordOptions
from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools
from langgraph_checkpoint_agent_memory.memory.traced import (
    erase_counts,
    item_count,
    recalled_counts,
    report_counts,
    traced,
)
from langgraph_checkpoint_agent_memory.memory.worker import MemoryWorker
from langgraph_checkpoint_agent_memory.memory.writes import checked_messages, record_plan
from langgraph_checkpoint_agent_memory.rerank import RerankerLike, reranking_of
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import target_of

if TYPE_CHECKING:
    from typing_extensions import Unpack


#: The store of an :class:`AgentMemory` (``memory.store`` keeps its type: ``AgentMemoryStore``).
StoreT = TypeVar("StoreT", bound=MemoryStore)


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
        reranker: What orders recall's first candidates again (see :mod:`..rerank`): a
            callable ``(query, texts) -> scores``, a LangChain ``BaseDocumentCompressor``
            or a :class:`Reranking` (``top_n``, ``timeout``); default the store's
            ``reranker``, if it has one; ``False``: none, even when the store has one.
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
        reranker: RerankerLike | Literal[False] | None = None,
        **settings: Any,
    ) -> None:
        if not isinstance(store, MemoryStore):
            raise ConfigurationError(
                "AgentMemory needs an AgentMemoryStore (create_store(...)): consolidation "
                f"needs its transactions and row locks; got {type(store).__name__}"
            )
        self.store = store
        store.add_schema(MEMORY)
        self.settings = st = MemorySettings.resolve(settings)
        self.checkpointer = checkpointer
        self.count_tokens = R.token_counter(tokenizer)
        db = store.db  # its description has its password masked
        #: What the parts of memory work with: see :class:`~.context.MemoryContext`.
        self.context = MemoryContext(
            store=store,
            sql=sqlm.MemorySql(store.dialect, store.statements, st.namespace_root, store.sealer),
            settings=st,
            extractor=as_extractor(extractor),
            policy=decay.DecayPolicy(st.decay_rate, st.decay_threshold),
            clock=clock,
            backlog=metrics.backlog_of(
                {**target_of(db).attributes(), "agent_memory.database": db.describe()}
            ),
            reranking=None if reranker is False else reranking_of(reranker) or store.reranking,
        )
        self.policy = self.context.policy
        self._recaller = Recaller(self.context, self.count_tokens)
        self._nodes = GraphNodes(self)
        self._worker: MemoryWorker | None = None

    @property
    def extractor(self) -> Extractor:
        """The extractor consolidation asks; assigning one (e.g. after fixing a failing
        model) takes effect from the next job."""
        return self.context.extractor

    @extractor.setter
    def extractor(self, extractor: Extractor | Any) -> None:
        self.context = dataclasses.replace(self.context, extractor=as_extractor(extractor))

    @property
    def inject_node(self) -> RunnableLambda[Any, dict[str, Any]]:
        """A graph node (sync and async) that puts the scope's memory into state.

        It reads the run's scope from ``config["configurable"]`` (as ``scope_keys`` says),
        recalls what is relevant to the last user message and writes a dated,
        token-budgeted block: a system message with id ``CONTEXT_MESSAGE_ID`` (replaced
        each turn), or the ``context_key`` state key when that setting is given.

        Example:
            ```python
            from langgraph.graph import START

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
        model's arguments (see :mod:`.tools`).

        Args:
            include: Which tools: ``"search"``, ``"remember"``, ``"forget"``.
            budget_tokens: Size of ``search_memory``'s answer (default the
                ``budget_tokens`` setting).

        Returns:
            The tools, in the order of ``include``.

        Example:
            ```python
            # not run: needs a chat model that calls tools (an LLM)
            from langgraph.prebuilt import create_react_agent

            agent = create_react_agent(model, memory.tools(), checkpointer=checkpointer)
            config = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
            agent.invoke({"messages": [("user", "I moved to Lyon")]}, config)
            ```
        """
        return MemoryTools(self, budget_tokens=budget_tokens).tools(include)

    def facts(
        self, scope: ScopeLike, *, as_of: AsOf | None = None, known_at: AsOf | None = None
    ) -> list[Fact]:
        """The scope's current facts, by attribute; or, with ``as_of``, the facts that held
        at that moment; with ``known_at``, as the memory believed them at that moment.

        Args:
            scope: A :class:`Scope`, ``"user=alice"`` or ``{"user": "alice"}``.
            as_of: A moment (seconds since the epoch, or a timezone-aware ``datetime``): the
                facts that held then, each as it was held then. Confirmations and importance
                are today's; facts that decayed or were erased are gone.
            known_at: A moment (transaction time): what the memory believed then, before
                the corrections it learned later (``as_of`` defaults to this moment).

        Example:
            ```python
            from datetime import datetime, timezone

            for fact in memory.facts("user=alice"):
                print(fact.attribute, fact.value)
            before = memory.facts("user=alice", as_of=datetime(2024, 1, 1, tzinfo=timezone.utc))
            new_year = datetime(2024, 1, 1, tzinfo=timezone.utc)
            believed = memory.facts("user=alice", known_at=new_year)
            ```
        """
        return self.context.run(lambda: reading.facts_plan(self.context, scope, as_of, known_at))

    async def afacts(
        self, scope: ScopeLike, *, as_of: AsOf | None = None, known_at: AsOf | None = None
    ) -> list[Fact]:
        """Async :meth:`facts`."""
        return await self.context.arun(
            lambda: reading.facts_plan(self.context, scope, as_of, known_at)
        )

    def history(
        self,
        scope: ScopeLike,
        attribute: str | None = None,
        *,
        as_of: AsOf | None = None,
        known_at: AsOf | None = None,
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
            known_at: A moment (transaction time): the history as the memory recorded it
                then; default now, where a version a correction replaced is left out.

        Example:
            ```python
            for version in memory.history("user=alice", "city"):
                print(version.value, version.valid_from, version.valid_to)
            ```
        """
        return self.context.run(
            lambda: reading.history_plan(self.context, scope, attribute, as_of, known_at)
        )

    async def ahistory(
        self,
        scope: ScopeLike,
        attribute: str | None = None,
        *,
        as_of: AsOf | None = None,
        known_at: AsOf | None = None,
    ) -> list[Fact]:
        """Async :meth:`history`."""
        return await self.context.arun(
            lambda: reading.history_plan(self.context, scope, attribute, as_of, known_at)
        )

    def episodes(self, scope: ScopeLike, *, status: str | None = None) -> list[Episode]:
        """The scope's episodes (recorded turns), oldest first.

        Args:
            scope: Whose episodes.
            status: Only ``"pending"`` (not consolidated yet), ``"done"`` or ``"parked"``
                (failed too often; see :meth:`retry`); ``None``: all.

        Raises:
            InvalidValueError: ``status`` is none of these.

        Example:
            ```python
            waiting = memory.episodes("user=alice", status="pending")
            ```
        """
        return self.context.run(lambda: reading.episodes_plan(self.context, scope, status))

    async def aepisodes(self, scope: ScopeLike, *, status: str | None = None) -> list[Episode]:
        """Async :meth:`episodes`."""
        return await self.context.arun(lambda: reading.episodes_plan(self.context, scope, status))

    def __repr__(self) -> str:
        return f"AgentMemory({self.store!r}, extractor={type(self.extractor).__name__})"

    def namespace(self, scope: ScopeLike, kind: str) -> tuple[str, ...]:
        """Where a scope's ``"facts"``, ``"history"`` or ``"episodes"`` live in the store."""
        return self.context.namespace(scope, kind)

    @traced("recall", counts=recalled_counts)
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
                held then, the episodes that had happened; a look back reinforces nothing),
                ``reranker`` (this call's; ``False`` for none), ``known_at`` (what the
                memory believed at that moment).

        Example:
            ```python
            recalled = memory.recall("user=alice", "where do I live?", budget_tokens=200)
            print(recalled.text)
            then = memory.recall("user=alice", "where do I live?", as_of=1_700_000_000)
            ```
        """
        return self.context.run_steps(self._recaller.steps(scope, query, options))

    @traced("recall", counts=recalled_counts)
    async def arecall(
        self, scope: ScopeLike, query: str = "", **options: Unpack[RecallOptions]
    ) -> R.Recalled:
        """Async :meth:`recall`."""
        return await self.context.arun_steps(self._recaller.steps(scope, query, options))

    @traced("build_context")
    def build_context(
        self, scope: ScopeLike, query: str = "", **options: Unpack[RecallOptions]
    ) -> str:
        """The dated context block ``inject_node`` would put into state for ``query``: each
        fact with the day it became true, each episode with the day it happened (the text of
        :meth:`recall`).

        Args:
            scope: Whose memory.
            query: What the block should be relevant to.
            **options: :class:`RecallOptions`, as for :meth:`recall`.

        Example:
            ```python
            from datetime import datetime, timezone

            print(memory.build_context("user=alice", "what should I cook tonight?"))
            last_year = datetime(2024, 6, 1, tzinfo=timezone.utc)
            print(memory.build_context("user=alice", "where did I live?", as_of=last_year))
            ```
        """
        return self.recall(scope, query, **options).text

    @traced("build_context")
    async def abuild_context(
        self, scope: ScopeLike, query: str = "", **options: Unpack[RecallOptions]
    ) -> str:
        """Async :meth:`build_context`."""
        return (await self.arecall(scope, query, **options)).text

    def _record_plan(
        self, scope: ScopeLike, messages: Iterable[Any] | PromptValue, options: RecordOptions
    ) -> Callable[[], Plan[str | None]]:
        """What builds the plan of :meth:`record` (the reinforcements taken once)."""
        take = functools.cache(self._recaller.take_reinforcements)
        checked = checked_messages(messages)  # once: an iterator is read once
        return lambda: record_plan(self.context, scope, checked, options, reinforcements=take)

    @traced("record")
    def record(
        self,
        scope: ScopeLike,
        messages: Iterable[Any] | PromptValue,
        **options: Unpack[RecordOptions],
    ) -> str | None:
        """Store ``messages`` as a pending episode, for :meth:`consolidate` to learn from.

        The same key (by default, from the thread and the messages' ids) is stored once,
        however often it is recorded, so a retried graph step does not record a turn twice.

        Args:
            scope: Whose memory the episode belongs to.
            messages: A list of what LangChain's ``convert_to_messages`` reads: messages,
                ``(role, text)`` pairs, ``{"role", "content"}`` dicts.
            **options: See :class:`RecordOptions`: ``thread_id``, ``key``, ``occurred_at``
                (seconds since the epoch or a timezone-aware ``datetime``).

        Returns:
            The episode's key, or ``None`` when no message had content.

        Raises:
            InvalidValueError: ``messages`` is not a list of messages (a string, a dict,
                content that is not text), or ``thread_id``, ``key`` or ``occurred_at`` is
                out of bounds (``occurred_at``: finite, between the years 1 and 9999);
                nothing was written.
            TypeError: an option that is not one of :class:`RecordOptions` (a misspelled
                ``occured_at=`` would otherwise date the episode now); nothing was written.

        Example:
            ```python
            memory.record(
                "user=alice",
                [{"role": "user", "content": "I moved to Berlin"}],
                thread_id="t1",
            )
            ```
        """
        return self.context.run(self._record_plan(scope, messages, options))

    @traced("record")
    async def arecord(
        self,
        scope: ScopeLike,
        messages: Iterable[Any] | PromptValue,
        **options: Unpack[RecordOptions],
    ) -> str | None:
        """Async :meth:`record`."""
        return await self.context.arun(self._record_plan(scope, messages, options))

    @traced("consolidate", counts=report_counts)
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
        self._flush()
        steps = C.consolidate_steps(self.context, scope=scope_key(scope), max_jobs=max_jobs)
        return self.context.run_steps(steps)

    @traced("consolidate", counts=report_counts)
    async def aconsolidate(
        self, scope: ScopeLike | None = None, *, max_jobs: int | None = None
    ) -> C.Report:
        """Async :meth:`consolidate` (a blocking extractor or driver runs in a thread)."""
        await self._aflush()
        steps = C.consolidate_steps(self.context, scope=scope_key(scope), max_jobs=max_jobs)
        return await self.context.arun_steps(steps)

    def _flush(self) -> None:
        if rows := self._recaller.take_reinforcements():
            self.context.run(lambda: sqlm.reinforce_plan(self.context.sql, rows))

    async def _aflush(self) -> None:
        if rows := self._recaller.take_reinforcements():
            await self.context.arun(lambda: sqlm.reinforce_plan(self.context.sql, rows))

    @traced("decay", counts=item_count)
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
        return self.context.run_again(lambda: decay.decay_plan(self.context, scope))

    @traced("decay", counts=item_count)
    async def adecay(self, scope: ScopeLike | None = None) -> int:
        """Async :meth:`decay`."""
        await self._aflush()
        return await self.context.arun_again(lambda: decay.decay_plan(self.context, scope))

    def pin(self, scope: ScopeLike, attribute: str, *, pinned: bool = True) -> int:
        """Pin (or unpin) a scope's current facts of ``attribute``: pinned facts never
        decay. Returns how many facts changed."""
        return self.context.run(lambda: writes.pin_plan(self.context, scope, attribute, pinned))

    async def apin(self, scope: ScopeLike, attribute: str, *, pinned: bool = True) -> int:
        """Async :meth:`pin`."""
        return await self.context.arun(
            lambda: writes.pin_plan(self.context, scope, attribute, pinned)
        )

    @traced("erase", counts=erase_counts)
    def erase(
        self, scope: ScopeLike, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> dict[str, int]:
        """Remove everything of ``scope`` and of the narrower scopes it covers (erasing
        ``user=alice`` also erases ``user=alice,agent=support``): facts, history, episodes,
        vectors, full-text entries, jobs, and, with a checkpointer, the conversation
        threads (first, so a SQLite file is compacted after both).

        Args:
            scope: The scope to forget, with every narrower scope it covers.
            on_progress: Called with ``(parts done, 3)`` as each part ends: the threads,
                the rows (with the compaction of a SQLite file, which can take a while
                on a large one), the data keys; e.g. to show progress.

        When the store encrypts, the scope's data keys are destroyed too (user guide,
        "Encryption and erasure"); should the key store be down, they stay owed in the
        erase ledger until :meth:`settle_erasures` (a retry, a later erase, the worker).

        Returns:
            The rows removed per table, with ``"scopes"``, ``"threads"`` and ``"keys"``:
            the data keys destroyed (this erase's, and any an earlier erase still owed).

        Raises:
            DatabaseUnavailableError: A database is down; when it is the key store, the
                rows are erased and the keys owed (the message says so).

        Example:
            ```python
            counts = memory.erase("user=alice")  # a right-to-be-forgotten request
            ```
        """
        steps = erasing.erase_steps(self.context, scope, self.checkpointer, on_progress)
        counts = self.context.run_steps(steps)
        self._recaller.forget_queued()
        return counts

    @traced("erase", counts=erase_counts)
    async def aerase(
        self, scope: ScopeLike, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> dict[str, int]:
        """Async :meth:`erase`."""
        steps = erasing.erase_steps(self.context, scope, self.checkpointer, on_progress)
        counts = await self.context.arun_steps(steps)
        self._recaller.forget_queued()
        return counts

    def settle_erasures(self) -> int:
        """Destroy the data keys earlier erases still owe (their key store was down, or
        their process stopped before destroying them), as the worker does on its sweep
        schedule; how many were destroyed. A shard key written again since its erase keeps
        its key until a later erase empties it. Nothing when the store does not encrypt.

        Raises:
            DatabaseUnavailableError: The key store is still down (the debts stay).

        Example:
            ```python
            destroyed = memory.settle_erasures()  # e.g. once the key store is back
            ```
        """
        return erasing.settle(self.context)

    async def asettle_erasures(self) -> int:
        """Async :meth:`settle_erasures`."""
        return await erasing.asettle(self.context)

    def encrypt_plaintext(self) -> dict[str, int]:
        """Seal consolidation errors written before encryption was on (they may quote what
        the extractor was given) under their scopes' data keys; ``agent-memory encrypt``
        runs it after the store's ``encrypt_plaintext`` (facts, episodes). Idempotent.

        Returns:
            ``{"job_errors": ..., "scope_errors": ...}``: how many were sealed.

        Raises:
            ConfigurationError: The store does not encrypt.

        Example:
            ```python
            # not run: needs a store opened with Encryption(..., allow_plaintext=True)
            store.encrypt_plaintext()
            print(AgentMemory(store).encrypt_plaintext())  # {'job_errors': 2, 'scope_errors': 1}
            ```
        """
        return self.context.run(self._encrypt_errors())

    async def aencrypt_plaintext(self) -> dict[str, int]:
        """Async :meth:`encrypt_plaintext`."""
        return await self.context.arun(self._encrypt_errors())

    def _encrypt_errors(self) -> Callable[[], Plan[dict[str, int]]]:
        """What builds :meth:`encrypt_plaintext`'s plan, its counts kept should it run again."""
        if self.context.sql.sealer is None:
            raise ConfigurationError("encrypt_plaintext needs a store opened with encryption on")
        counts = {"job_errors": 0, "scope_errors": 0}
        return lambda: jobsql.encrypt_errors_plan(self.context.sql, counts)

    def known_scopes(self) -> set[str]:
        """Every scope with memory stored: a ledger row or items under the namespace root."""
        return self.context.run(
            sqlm.known_scopes_plan(self.context.sql, self.settings.namespace_root)
        )

    def scopes(self) -> dict[str, dict[str, int]]:
        """Every scope with its counts: facts, history, episodes, pending, parked, failed.

        Example:
            ```python
            for scope, counts in memory.scopes().items():
                print(scope, counts["facts"], counts["pending"])
            ```
        """
        return self.context.run(self._stats_plan())

    async def ascopes(self) -> dict[str, dict[str, int]]:
        """Async :meth:`scopes`."""
        return await self.context.arun(self._stats_plan())

    def _stats_plan(self) -> Plan[dict[str, dict[str, int]]]:
        return sqlm.stats_plan(self.context.sql, self.settings.namespace_root, self.context.clock())

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
        return self.context.run(lambda: jobsql.jobs_plan(self.context.sql, list(statuses), limit))

    async def ajobs(
        self, statuses: Sequence[str] = ("failed", "parked"), *, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Async :meth:`jobs`."""
        return await self.context.arun(
            lambda: jobsql.jobs_plan(self.context.sql, list(statuses), limit)
        )

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
        key = scope_key(scope)
        return self.context.run_again(lambda: jobsql.retry_plan(self.context.sql, key))

    async def aretry(self, scope: ScopeLike | None = None) -> int:
        """Async :meth:`retry`."""
        key = scope_key(scope)
        return await self.context.arun_again(lambda: jobsql.retry_plan(self.context.sql, key))

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

    def setup(self) -> None:
        """Create or migrate the store's and memory's tables (also done on first use).

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import AgentMemory, create_store

            memory = AgentMemory(create_store("sqlite:///memory.db"))
            memory.setup()  # e.g. in a deployment step, before the first request
            ```
        """
        self.store.setup()

    async def asetup(self) -> None:
        """Async :meth:`setup`."""
        await self.store.asetup()

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
                ...  # serve the app
            finally:
                memory.stop()
            ```
        """
        self.worker().start()
        return self.worker()

    def stop(self) -> None:
        """Stop the worker of :meth:`start`."""
        if self._worker is not None:
            self._worker.stop()

    async def astart(self) -> MemoryWorker:
        """:meth:`start` as an asyncio task of the running loop; stop it with :meth:`astop`."""
        await self.worker().astart()
        return self.worker()

    async def astop(self) -> None:
        """Stop the task of :meth:`astart`."""
        if self._worker is not None:
            await self._worker.astop()
