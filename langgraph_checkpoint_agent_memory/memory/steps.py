"""Steps: what memory's operations ask of the world, so each is written once.

An operation that needs more than the database (a search through the store, an embedding,
an extractor call, a reranker) is a generator of *steps*; :func:`run_steps` drives it
synchronously and :func:`arun_steps` on the event loop, so the synchronous and the
asynchronous API run the same code (as :mod:`..db.database`'s plans do for statements).

Example:
    ```python
    from langgraph_checkpoint_agent_memory.memory.model import Scope

    def count_facts(scope: Scope) -> Steps[int]:
        found = yield Search(memory.namespace(scope, "facts"), "city", 5)
        return len(found)

    assert run_steps(count_facts(Scope.parse("user=alice")), store) == 1
    ```
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph_checkpoint_agent_memory.db.database import Plan, adrive, drive
from langgraph_checkpoint_agent_memory.rerank import Reranking

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.backend import MemoryStore
    from langgraph_checkpoint_agent_memory.memory.extract import ExtractionRequest, Extractor


@dataclass
class RunPlan:
    """Run a database plan; the step's value is the plan's. ``plan`` may be what builds
    it (a function), so it can run again after data keys were loaded (encryption with a
    key store of its own: see ``MemoryContext.run``)."""

    plan: Plan[Any] | Callable[[], Plan[Any]]


@dataclass
class Extract:
    """Ask the extractor; the step's value is its :class:`~.model.Extraction`."""

    extractor: Extractor
    request: ExtractionRequest


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
class Rerank:
    """Ask a reranker to order the first candidates again (their texts, in fused order); the
    step's value is its :class:`~..rerank.Reordered` (the fused order when it failed)."""

    reranking: Reranking
    query: str
    texts: list[str]


T = TypeVar("T")


@dataclass
class Within:
    """Run ``steps`` inside the operation ``opened()`` returns (a span: see
    :mod:`..telemetry`); ``ended(op, value)`` tells the operation what they returned. The
    step's value is the steps'."""

    opened: Callable[[], Any]
    steps: Generator[Any, Any, Any]
    ended: Callable[[Any, Any], None] = lambda op, value: None


Step = RunPlan | Extract | Embed | Search | Rerank | Within
#: Steps that end with a value of type ``T``.
Steps = Generator[Step, Any, T]


def one(step: Step) -> Steps[Any]:
    """Steps of one step (to run a single step :class:`Within` an operation)."""
    return (yield step)


def _searched(step: Search) -> dict[str, Any]:
    """The store's search options of a :class:`Search`: memory's own searches keep the
    fused order (no reranker, no time stage: recall does its own)."""
    return {
        "query": step.query,
        "filter": step.filter,
        "limit": step.limit,
        "reranker": False,
        "time_field": False,
    }


def run_steps(steps: Steps[T], store: MemoryStore, run: Callable[[Any], Any] | None = None) -> T:
    """Drive ``steps`` synchronously, with ``store``'s database, embeddings and search;
    ``run`` runs the plans (a plan or what builds one; default: ``store.run_plan``)."""

    def execute(step: Step) -> Any:
        if isinstance(step, RunPlan):
            if run is not None:
                return run(step.plan)
            return store.run_plan(step.plan() if callable(step.plan) else step.plan)
        if isinstance(step, Extract):
            return step.extractor.extract(step.request)
        if isinstance(step, Within):
            with step.opened() as op:
                value = drive(step.steps, execute)
                step.ended(op, value)
                return value
        if isinstance(step, Rerank):
            return step.reranking.order(step.query, step.texts)
        if isinstance(step, Embed):
            e = store.embeddings
            if step.query:
                return [e.embed_query(t) for t in step.texts]
            return e.embed_documents(step.texts) if step.texts else []
        return store.search(step.namespace, **_searched(step))

    return drive(steps, execute)


async def arun_steps(
    steps: Steps[T], store: MemoryStore, run: Callable[[Any], Awaitable[Any]] | None = None
) -> T:
    """Drive ``steps`` on the event loop (blocking drivers move to threads); ``run``: as
    :func:`run_steps`'s, awaited."""

    async def execute(step: Step) -> Any:
        if isinstance(step, RunPlan):
            if run is not None:
                return await run(step.plan)
            return await store.arun_plan(step.plan() if callable(step.plan) else step.plan)
        if isinstance(step, Extract):
            return await step.extractor.aextract(step.request)
        if isinstance(step, Within):
            with step.opened() as op:
                value = await adrive(step.steps, execute)
                step.ended(op, value)
                return value
        if isinstance(step, Rerank):
            return await step.reranking.aorder(step.query, step.texts)
        if isinstance(step, Embed):
            e = store.embeddings
            if step.query:
                return [await e.aembed_query(t) for t in step.texts]
            return await e.aembed_documents(step.texts) if step.texts else []
        return await store.asearch(step.namespace, **_searched(step))

    return await adrive(steps, execute)
