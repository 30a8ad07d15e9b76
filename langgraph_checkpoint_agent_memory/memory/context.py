"""``MemoryContext``: what the parts of agent memory work with, and the steps they take.

What memory needs of a store is a small protocol (:class:`MemoryStore`), so memory depends
on no store's internals. An operation that needs more than the database (a search, an
embedding, an extractor call, a reranker) is a generator of *steps*;
:meth:`MemoryContext.run_steps` and its async twin drive it, so the sync and the async API
run the same code.

Example:
    ```python
    from langgraph_checkpoint_agent_memory.memory.model import Scope

    def count_facts(scope: Scope) -> Steps[int]:
        found = yield Search(memory.namespace(scope, "facts"), "city", 5)
        return len(found)

    assert memory.context.run_steps(count_facts(Scope.parse("user=alice"))) == 1
    ```
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Database, Plan, adrive, drive, retryable
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.migrations import Component
from langgraph_checkpoint_agent_memory.db.row_sealer import RowSealer
from langgraph_checkpoint_agent_memory.db.store import StoreStatements
from langgraph_checkpoint_agent_memory.memory.decay import DecayPolicy
from langgraph_checkpoint_agent_memory.memory.extract import Extractor
from langgraph_checkpoint_agent_memory.memory.model import Scope, ScopeLike, namespace
from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings
from langgraph_checkpoint_agent_memory.rerank import Reranking
from langgraph_checkpoint_agent_memory.telemetry import metrics

T = TypeVar("T")
#: A plan, or what builds one (built again once the data keys it needs are loaded: see ``run``).
PlanLike: TypeAlias = Plan[T] | Callable[[], Plan[T]]
#: How many times :meth:`MemoryContext.run_again` runs a plan at most.
ATTEMPTS = 3

# -- what memory needs of a store --------------------------------------------------------

#: An embedding.
Vector: TypeAlias = list[float]
#: Keys with their scores, best first.
Ranked: TypeAlias = list[tuple[str, float]]


class KeyRanker(Protocol):
    """Ranks the items of one namespace without reading them."""

    @property
    def rrf_k(self) -> int:
        """The constant of its reciprocal rank fusion (a fused score's units)."""

    def rank_keys_plan(
        self, namespace: Sequence[str], query: str, vector: Vector | None, want: int, now: float
    ) -> Plan[Ranked]:
        """Keys of one namespace's best matches for ``query`` (``vector``: its embedding, for
        a hybrid ranking), with fused scores, best first."""


@runtime_checkable
class MemoryStore(Protocol):
    """A store agent memory can keep facts and episodes in: its items are rows memory's
    statements join with, in one database that runs memory's plans in transactions."""

    dialect: Dialect
    #: The database of the store's items (its pools and server are what memory's telemetry reports).
    db: Database[Any]
    #: The store's statements, which memory's own SQL (``db.memory.MemorySql``) composes.
    statements: StoreStatements
    #: LangChain ``Embeddings`` (or ``None``: lexical recall only).
    embeddings: Any
    #: The data keys of encryption at rest (``crypto.Keyring``); ``None``: no encryption.
    keyring: Any

    @property
    def sealer(self) -> RowSealer | None:
        """Seals and opens the store's rows (``None`` when the store does not encrypt)."""

    def destroy_keys(self, shards: Sequence[str]) -> list[str]:
        """Destroy the data keys of the shard keys ``shards``; the ids destroyed."""

    async def adestroy_keys(self, shards: Sequence[str]) -> list[str]: ...

    def add_schema(self, component: Component) -> None:
        """Set up ``component``'s tables whenever the store sets up its own."""

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a plan in the store's database (schema created on first use)."""

    async def arun_plan(self, plan: Plan[T]) -> T: ...

    def setup(self) -> None: ...

    async def asetup(self) -> None: ...

    @property
    def ranker(self) -> KeyRanker:
        """Ranks one namespace's items for recall."""

    @property
    def reranking(self) -> Reranking | None:
        """The store's reranker, recall's too unless the memory has one of its own."""

    def recent_keys_plan(self, namespace: Sequence[str], limit: int, now: float) -> Plan[list[str]]:
        """Keys of one namespace's newest live items."""

    def search(self, *args: Any, **options: Any) -> list[Any]:
        """``BaseStore.search``."""

    async def asearch(self, *args: Any, **options: Any) -> list[Any]: ...

    def sweep(self) -> int: ...

    async def asweep(self) -> int: ...


# -- the context ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryContext:
    """The parts one :class:`~.agent.AgentMemory` is made of, shared by its modules
    (``backlog``: what the last consolidation round saw, for the gauges).

    Example:
        ```python
        from langgraph_checkpoint_agent_memory.memory import reading

        context = memory.context  # each AgentMemory has one
        facts = context.run(reading.facts_plan(context, "user=alice", None))
        ```
    """

    store: MemoryStore
    sql: sqlm.MemorySql
    settings: MemorySettings
    extractor: Extractor
    policy: DecayPolicy
    clock: Callable[[], float]
    backlog: metrics.Backlog = field(default_factory=lambda: metrics.Backlog({}))
    reranking: Reranking | None = None

    @property
    def embeds(self) -> bool:
        """Whether the store embeds (else recall and near-duplicates are lexical)."""
        return self.store.embeddings is not None

    def run(self, plan: PlanLike[T]) -> T:
        """Run a plan in the store's database; give what builds it (a function) when the
        store encrypts: a plan that needs data keys not loaded yet runs again after."""
        sealer = self.sql.sealer
        if sealer is None:
            return self.store.run_plan(plan() if callable(plan) else plan)
        return sealer.call(self.store.run_plan, _maker(plan))

    async def arun(self, plan: PlanLike[T]) -> T:
        """Async :meth:`run`."""
        sealer = self.sql.sealer
        if sealer is None:
            return await self.store.arun_plan(plan() if callable(plan) else plan)
        return await sealer.acall(self.store.arun_plan, _maker(plan))

    def run_again(self, make: Callable[[], Plan[T]]) -> T:
        """Run the plan ``make`` builds, again should the server abort it for another
        transaction's sake: set-based writes across scopes, which no scope's lock orders."""
        for _ in range(ATTEMPTS - 1):
            try:
                return self.run(make)
            except Exception as exc:
                if not retryable(exc):
                    raise
        return self.run(make)

    async def arun_again(self, make: Callable[[], Plan[T]]) -> T:
        """Async :meth:`run_again`."""
        for _ in range(ATTEMPTS - 1):
            try:
                return await self.arun(make)
            except Exception as exc:
                if not retryable(exc):
                    raise
        return await self.arun(make)

    def run_steps(self, steps: Steps[T]) -> T:
        """Drive steps (plans, searches, embeddings, extractor calls) synchronously."""

        def execute(step: Step) -> Any:
            if isinstance(step, RunPlan):
                return self.run(step.plan)
            if isinstance(step, Within):
                with step.opened() as op:
                    value = drive(step.steps, execute)
                    step.ended(op, value)
                    return value
            if isinstance(step, Call):
                return step.sync()
            if isinstance(step, Embed):
                e = self.store.embeddings
                if step.query:
                    return [e.embed_query(t) for t in step.texts]
                return e.embed_documents(step.texts) if step.texts else []
            return self.store.search(step.namespace, **_searched(step))

        return drive(steps, execute)

    async def arun_steps(self, steps: Steps[T]) -> T:
        """Async :meth:`run_steps`."""

        async def execute(step: Step) -> Any:
            if isinstance(step, RunPlan):
                return await self.arun(step.plan)
            if isinstance(step, Within):
                with step.opened() as op:
                    value = await adrive(step.steps, execute)
                    step.ended(op, value)
                    return value
            if isinstance(step, Call):
                return await step.asynchronous()
            if isinstance(step, Embed):
                e = self.store.embeddings
                if step.query:
                    return [await e.aembed_query(t) for t in step.texts]
                return await e.aembed_documents(step.texts) if step.texts else []
            return await self.store.asearch(step.namespace, **_searched(step))

        return await adrive(steps, execute)

    def namespace(self, scope: ScopeLike, kind: str) -> tuple[str, ...]:
        """Where a scope's ``"facts"``, ``"history"`` or ``"episodes"`` live in the store."""
        return namespace(self.settings.namespace_root, Scope.of(scope), kind)

    def prefix(self, scope: ScopeLike, kind: str) -> str:
        """:meth:`namespace` as the store keeps it (labels joined with ``.``)."""
        return sqlm.ns(self.namespace(scope, kind))


def scope_key(scope: ScopeLike | None) -> str | None:
    """The key of ``scope`` (``"user=alice"``), or ``None`` for every scope."""
    return Scope.of(scope).key if scope is not None else None


def _maker(plan: PlanLike[T]) -> Callable[[], Plan[T]]:
    """What builds ``plan``: itself when it is a function; a plan object is handed out once."""
    if callable(plan):
        return plan
    given: list[Generator[Any, Any, T]] = [plan]

    def once() -> Plan[T]:
        if not given:
            raise RuntimeError("this plan stopped to load data keys and cannot run again")
        return given.pop()

    return once


@dataclass
class RunPlan:
    """Run a database plan, or what builds it (see ``MemoryContext.run``)."""

    plan: Plan[Any] | Callable[[], Plan[Any]]


@dataclass
class Embed:
    """Embed texts; the step's value is their vectors, in order."""

    texts: list[str]
    query: bool = False  # embed as a search query (some models embed queries differently)


@dataclass
class Search:
    """Search one namespace of the store; the step's value is its items, best first (with
    no query, the newest written first). ``filter``: the store's filter on item values."""

    namespace: tuple[str, ...]
    query: str
    limit: int
    filter: dict[str, Any] | None = None


@dataclass
class Within:
    """Run ``steps`` inside the operation (a span) ``opened()`` returns; ``ended(op, value)``
    tells it what they returned."""

    opened: Callable[[], Any]
    steps: Generator[Any, Any, Any]
    ended: Callable[[Any, Any], None] = lambda op, value: None


@dataclass
class Call:
    """Call what lies outside the store (an extractor, a reranker, a key store of its own)."""

    sync: Callable[[], Any]
    asynchronous: Callable[[], Awaitable[Any]]


Step = RunPlan | Embed | Search | Within | Call
#: Steps that end with a value of type ``T``.
Steps = Generator[Step, Any, T]


def one(step: Step) -> Steps[Any]:
    """Steps of one step (to run a single step :class:`Within` an operation)."""
    return (yield step)


def _searched(step: Search) -> dict[str, Any]:
    """A :class:`Search`'s store options: no reranker, no time stage (recall does its own)."""
    options = {"query": step.query, "filter": step.filter, "limit": step.limit}
    return {**options, "reranker": False, "time_field": False}
