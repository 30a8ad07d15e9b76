"""What agent memory needs from a store: a small protocol, so memory depends on no store's
internals (and not on the ``store`` package at all).

:class:`~langgraph_checkpoint_agent_memory.store.AgentMemoryStore` implements it. Memory's own
tables are a schema component the store creates beside its own (``add_schema``), so the
first use of either sets up both in one migration, and a memory call costs no extra round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from langgraph_checkpoint_agent_memory.db.database import Database, Plan
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.migrations import Component
from langgraph_checkpoint_agent_memory.db.row_sealer import RowSealer
from langgraph_checkpoint_agent_memory.db.store import StoreStatements
from langgraph_checkpoint_agent_memory.rerank import Reranking

T = TypeVar("T")

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
    #: The database the store keeps its items in (its pools and server are what memory's
    #: spans and metrics report).
    db: Database[Any]
    #: The store's statements, which memory's own SQL (``db.memory.MemorySql``) composes:
    #: memory writes store items through them and keys its rows by their shard rule (the
    #: depth recorded at setup lives there). Read once, by ``MemoryContext.of``, and handed
    #: to the SQL layer; no memory module uses it otherwise.
    statements: StoreStatements
    #: LangChain ``Embeddings`` (or ``None``: lexical recall only).
    embeddings: Any
    #: The data keys of encryption at rest (``crypto.Keyring``), or ``None`` when the store
    #: does not encrypt.
    keyring: Any

    @property
    def sealer(self) -> RowSealer | None:
        """Seals and opens the store's rows with their shard's data key (``None`` when the
        store does not encrypt): memory's own writes and reads of store items go through
        it, so they are sealed exactly as the store's."""

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
        """``BaseStore.search``: memory's steps pass a namespace prefix, ``query``,
        ``filter``, ``limit``, and ``reranker`` and ``time_field`` off (recall ranks on its
        own)."""

    async def asearch(self, *args: Any, **options: Any) -> list[Any]: ...

    def sweep(self) -> int: ...

    async def asweep(self) -> int: ...
