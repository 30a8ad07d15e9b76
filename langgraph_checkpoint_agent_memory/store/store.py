"""``AgentMemoryStore``: a LangGraph ``BaseStore`` on SQLite, PostgreSQL, SAP HANA or memory
(SQLite in memory), one implementation over the ``db`` layer. Batches are plans: ``batch`` and
``abatch`` share all but the embedding calls, made before the plan runs, outside any transaction.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, Union

import numpy as np
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from langgraph_checkpoint_agent_memory.background import ClosesOnExit, Sweeper
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, store_owner
from langgraph_checkpoint_agent_memory.crypto.config import Encryption, EncryptionLike, resolve
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring
from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import AnnConfig
from langgraph_checkpoint_agent_memory.db.first_use import SchemaOnFirstUse
from langgraph_checkpoint_agent_memory.db.migrations import (
    KEYS,
    STORE,
    Component,
    recorded_shard_depth_plan,
)
from langgraph_checkpoint_agent_memory.db.shard import DEFAULT_SHARD_DEPTH, rule_refused
from langgraph_checkpoint_agent_memory.db.store import (
    SEALED_VALUE,
    ItemKey,
    ItemRow,
    StoreStatements,
    in_lock_order,
    item_keys,
    ns_text,
    scoped,
)
from langgraph_checkpoint_agent_memory.db.term_index import index_item
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError, ConfigurationError
from langgraph_checkpoint_agent_memory.rerank import Reordered, RerankerLike, reranking_of
from langgraph_checkpoint_agent_memory.store import search as S
from langgraph_checkpoint_agent_memory.store import values as V
from langgraph_checkpoint_agent_memory.store.embed import ann_config, resolve_index
from langgraph_checkpoint_agent_memory.store.feedback import FeedbackLike, feedback_settings
from langgraph_checkpoint_agent_memory.store.ranking import Ranker
from langgraph_checkpoint_agent_memory.store.sealing import Sealer, encrypt_plaintext_plan
from langgraph_checkpoint_agent_memory.store.search import Searcher, item_fields, sealed_of
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import db_operation, live, target_of

T = TypeVar("T")
#: A batch's puts, by namespace and key (the last of each).
Puts = dict[tuple[str, str], PutOp]

#: What ``index`` accepts: LangGraph's ``IndexConfig``, with ``PostgresIndexConfig``'s
#: ``ann_index_config`` (plus ``ef_search``), or ``"default"`` for the offline embedder.
IndexSettings = Union[IndexConfig, Mapping[str, Any], Literal["default"]]  # noqa: UP007


class AgentMemoryStore(SchemaOnFirstUse, ClosesOnExit, BaseStore):
    """Long-term memory as a LangGraph ``BaseStore``.

    Args:
        database: Where items live (see :func:`create_store` for URLs and memory).
        index: LangGraph ``IndexConfig`` (``dims``, ``embed``: LangChain ``Embeddings``, a
            callable or an async callable, ``fields``: JSON paths to embed, default the whole
            value, ``ann_index_config``: the approximate index, as LangGraph's
            ``PostgresIndexConfig`` has it: ``kind`` ``"hnsw"`` or ``"flat"``, ``vector_type``,
            ``m``, ``ef_construction``, plus ``ef_search``), or ``"default"`` for the offline
            embedder (all-MiniLM-L6-v2, int8, the ``embed`` extra). Without it, search is
            lexical only.
        ttl: LangGraph ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
            ``sweep_interval_minutes``).
        weights: ``(lexical, vector)`` weights of reciprocal rank fusion. The default leans
            on BM25, which retrieves conversation turns better than small embedders, and gives
            the vector list a little over half its say; with a strong embedding model, raise
            the vector weight (e.g. ``(1.0, 1.0)``).
        rrf_k: The fusion constant: larger values flatten the difference between ranks. The
            default 5 trusts each list's first places: past the top ten, neither list's order
            tells much. Defaults measured on LoCoMo with the default embedder (``benchmarks``,
            suite ``locomo``), and stable across its conversations.
        candidates: How many lexical and vector candidates a query fuses, at least (a
            query ranked by its words alone reads only its page's).
        auto_setup: Create or migrate the schema on first use.
        clock: Seconds since the epoch; injectable for tests.
        shard_depth: How many leading namespace labels form a row's shard key (2:
            ``("users", "alice", ...)`` -> ``"users.alice"``), fixed for a database at its
            first setup. ``None``: the database's rule, 2 for a new one; another value than
            the recorded one gets a ``ConfigurationError``. Searches under a shorter prefix
            read every shard (see the user guide, "The shard key").
        encryption: Encryption at rest with a data key per shard key (see the user guide,
            "Encryption and erasure"): ``None`` (default) follows ``AGENT_MEMORY_MASTER_KEY``
            and ``AGENT_MEMORY_KEYSTORE_URL``; ``False`` is off; a base64 master key, a
            ``KeyProvider`` or an :class:`Encryption`. Values, vectors and the term index
            are sealed; the key store is a table of this database unless the setting names
            another. Vectors are then ranked exactly, decrypted in the store: pgvector's and
            SAP HANA's vector columns and HNSW index are not used (a warning says so when
            ``ann_index_config`` asks for one); filters are decided on decrypted values.
        reranker: What orders the first candidates of every search with a query again (a
            callable ``(query, texts) -> scores``, a LangChain ``BaseDocumentCompressor``
            or a :class:`~..rerank.Reranking`; see :mod:`.search`); ``search`` also takes
            one per call. Default none.
        time_field: What dates an item for questions about time (see :mod:`.search`):
            ``"created_at"``, ``"updated_at"`` or a field of the value holding seconds
            since the epoch. A search whose query names a span ("last week", "in May
            2023") then puts the items dated inside it first. Default none (off).
        feedback: Pseudo-relevance feedback of the lexical ranking (see :mod:`.feedback`):
            ``None`` (default) on for agent memory's recall only, ``True`` or a
            :class:`~.feedback.Feedback` on for ``search`` too, ``False`` off.

    Besides LangGraph's ``BaseStore`` API (``put``, ``get``, ``search``, ``delete``,
    ``list_namespaces``, ``batch`` and their ``a``-prefixed async forms), it offers
    :meth:`delete_namespace`, :meth:`sweep`, ``setup()`` (create or migrate the tables,
    otherwise done on first use) and :meth:`close`.

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import create_store

        with create_store("sqlite:///memory.db", index="default") as store:
            store.setup()
            store.put(("users", "alice"), "prefs", {"food": "spicy ramen", "rating": 5})
            item = store.get(("users", "alice"), "prefs")
            hits = store.search(
                ("users",), query="what does alice like to eat?", filter={"rating": {"$gte": 4}}
            )
            store.put(("users", "alice"), "mood", {"today": "tired"}, ttl=60)  # minutes
            store.delete_namespace(("users", "alice"))
        ```
    """

    supports_ttl = True
    #: The tables this store sets up (:meth:`add_schema` adds a component's).
    components: tuple[Component, ...] = (STORE,)

    def __init__(
        self,
        database: Database[Any],
        *,
        index: IndexSettings | None = None,
        ttl: TTLConfig | None = None,
        weights: tuple[float, float] = (1.0, 0.6),
        rrf_k: int = 5,
        candidates: int = 50,
        auto_setup: bool = True,
        clock: Callable[[], float] = time.time,
        shard_depth: int | None = None,
        encryption: EncryptionLike = None,
        reranker: RerankerLike | None = None,
        time_field: str | None = None,
        feedback: FeedbackLike = None,
    ) -> None:
        self.db = database
        self.reranking = reranking_of(reranker)
        self.time_field = V.checked_time_field(time_field)
        self.dialect = database.dialect
        depth = DEFAULT_SHARD_DEPTH if shard_depth is None else shard_depth
        self.statements = StoreStatements(self.dialect, depth)
        #: The rule asked for (``None``: the database's); the rule in use is
        #: ``statements.shard_depth``, the recorded one once set up.
        self.shard_depth = None if shard_depth is None else self.statements.shard_depth
        self.ttl_config = V.checked_ttl_config(ttl)
        self.auto_setup = auto_setup
        self._clock = clock
        self._sweeper: Sweeper | None = None
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Any = None
        self.ann_config = AnnConfig()
        config = resolve_index(index)  # checked
        if config is not None:
            self.index_config = {
                "dims": int(config["dims"]),
                "fields": _paths(config.get("fields") or ["$"]),
            }
            self.embeddings = ensure_embeddings(config["embed"])
            self.ann_config = ann_config(config)
        ranking = S.Ranking(*V.checked_ranking(weights, rrf_k, candidates))
        self.ranker: Ranker = Ranker(self.statements, ranking, clock=clock)
        self.ranker.feedback, self.ranker.recall_feedback = feedback_settings(feedback)
        if self.index_config is not None:
            self.ranker.fields = max(1, len(self.index_config["fields"]))
            self.ranker.dims = self.index_config["dims"]
        self.searcher = Searcher(self.statements, self.ranker)
        #: The data keys of encryption at rest (``None``: off).
        self.keyring: Keyring | None = None
        self.sealer: Sealer | None = None
        setting = encryption if isinstance(encryption, Encryption) else resolve(encryption)
        if setting is not None:
            self.keyring = setting.open_keyring(self.db)
            local = self.keyring.keystore.db is self.db
            if local:  # the key table is set up with the store's, the master key checked
                self.add_schema(KEYS)
                self.key_check = self.keyring.provider_check_plan
            shard, fields = self.statements.shard, setting.filterable_fields
            self.sealer = Sealer(self.keyring, local=local, shard=shard, filterable=fields)
            self.ranker.sealer = self.searcher.sealer = self.sealer
            if isinstance(index, Mapping) and index.get("ann_index_config"):
                warnings.warn(
                    "encryption is on: vectors are sealed, so no approximate (HNSW) index "
                    "serves this store; vector search is exact over each searched namespace's "
                    "vectors, decrypted in the store",
                    stacklevel=2,
                )
        self.encrypted = self.keyring is not None
        self._vectors_known = False  # the database's vector support, found at setup or first use
        fork.register(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.db.describe()}, index={self.index_config is not None})"

    def after_fork(self) -> None:
        """A forked child's next put starts its own sweeper (the database resets itself)."""
        self._sweeper = None
        self.ranker.after_fork()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Delete expired items every ``sweep_interval_minutes`` in a daemon thread.

        Args:
            sweep_interval_minutes: How often; default the ``ttl`` config's
                ``sweep_interval_minutes``, else every minute.

        Example:
            ```python
            store.start_ttl_sweeper(5)
            ...
            store.stop_ttl_sweeper()
            ```
        """
        minutes = (
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 1
        )
        if self._sweeper is None or not self._sweeper.alive:
            self._sweeper = Sweeper(
                self, "sweep", float(minutes) * 60, name=f"AgentMemoryStore-sweeper-{id(self):x}"
            )
            self._sweeper.start()

    def stop_ttl_sweeper(self) -> None:
        """Stop the thread of :meth:`start_ttl_sweeper`, if one runs."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop()

    def close(self) -> None:
        """Stop the TTL sweeper and close the connections this store opened (never a
        connection or pool the caller passed in). ``with store:`` calls it on exit.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import create_store

            store = create_store("sqlite:///memory.db")
            try:
                store.put(("docs",), "a", {"text": "hello"})
            finally:
                store.close()
            ```
        """
        self.stop_ttl_sweeper()
        if self.keyring is not None:
            self.keyring.close()
        self.db.close()

    async def aclose(self) -> None:
        """Async :meth:`close` (``async with store:``), joining the sweeper off the event loop."""
        await asyncio.to_thread(self.stop_ttl_sweeper)
        if self.keyring is not None:
            await asyncio.to_thread(self.keyring.close)
        await self.db.aclose()

    @property
    def sweeper_running(self) -> bool:
        """Whether the TTL sweeper thread of :meth:`start_ttl_sweeper` is alive."""
        return self._sweeper is not None and self._sweeper.alive

    def _probe_plan(self) -> Plan[Any]:
        """Without setup: the database's kind, and the shard-key rule it records."""
        yield from super()._probe_plan()
        try:
            recorded = yield from recorded_shard_depth_plan(self.dialect)
        except AgentMemoryError:
            raise
        except Exception:  # no settings table: a database never set up, which the caller's
            return  # statements will say; commands that only read must not create it
        if self.shard_depth is not None and self.shard_depth != recorded:
            raise rule_refused(recorded, self.shard_depth)
        self.statements.shard_depth = recorded

    def _setup_plan(self) -> Plan[Any]:
        applied = yield from super()._setup_plan()
        # the rule this database records (what was asked for, or what an earlier setup set)
        self.statements.shard_depth = yield from recorded_shard_depth_plan(self.dialect)
        yield from self._vector_index_plan(create=True)
        return applied

    def _vector_index_plan(self, *, create: bool) -> Plan[None]:
        """Find (with ``create``: build) the approximate index of this store's vectors."""
        self.ranker.vector_index = None
        if self.index_config is not None and self.sealer is None:
            if not create:  # setup found this out already; a store without setup asks now
                yield from self.dialect.vectors_plan(create=False)
            index = self.dialect.ann_index(self.index_config["dims"], self.ann_config)
            if index is not None:
                usable = yield from self.dialect.ann_index_plan(
                    index, self.ann_config, create=create
                )
                self.ranker.vector_index = index if usable else None
        self._vectors_known = True

    @property
    def vector_index(self) -> str | None:
        """The name of the approximate (HNSW) index this store's vector search uses, or ``None``
        (exact search only: no index on this database, ``kind="flat"``, or not set up yet)."""
        index = self.ranker.vector_index
        return None if index is None else index.name

    def add_schema(self, component: Component) -> None:
        """Also create or migrate ``component``'s tables whenever this store sets up its own
        (on first use, or ``setup()``): for a component that keeps tables beside the store's."""
        if component not in self.components:
            self.components = (*self.components, component)
            self._setup_done = False

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a plan against this store's database, creating the schema on first use."""
        return self._run(plan)

    async def arun_plan(self, plan: Plan[T]) -> T:
        """Async :meth:`run_plan`."""
        return await self._arun(plan)

    def recent_keys_plan(self, namespace: Sequence[str], limit: int, now: float) -> Plan[list[str]]:
        """Keys of one namespace's newest live items, newest first."""
        op = SearchOp(tuple(namespace), limit=limit)
        found = yield from self.searcher.ranked_plan(op, now, None)
        return [item.key for item, _ in found]

    def destroy_keys(self, shards: Sequence[str]) -> list[str]:
        """Destroy the data keys of ``shards`` (store shard keys, e.g. ``"users.alice"``):
        whatever they sealed, in this database and in every copy or backup of it, can no
        longer be read (reads raise :class:`KeyMissingError`). The rows themselves stay
        until deleted (agent memory's erase deletes them too). With encryption off there
        is nothing to destroy.

        Args:
            shards: Shard keys, as :meth:`AgentMemoryStore.statements.shard` gives them for
                a namespace (its first ``shard_depth`` labels joined by dots).

        Returns:
            The ids of the data keys destroyed.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import create_store, generate_master_key

            with create_store("sqlite:///memory.db", encryption=generate_master_key()) as store:
                store.put(("users", "alice"), "prefs", {"food": "ramen"})
                store.destroy_keys(["users.alice"])  # alice's items are unreadable now
            ```
        """
        if self.keyring is None:
            return []
        self._ready()
        return self._forget_plaintext(self.keyring.destroy([store_owner(s) for s in shards]))

    async def adestroy_keys(self, shards: Sequence[str]) -> list[str]:
        """Async :meth:`destroy_keys`."""
        if self.keyring is None:
            return []
        await self._aready()
        return self._forget_plaintext(await self.keyring.adestroy([store_owner(s) for s in shards]))

    def _forget_plaintext(self, destroyed: list[str]) -> list[str]:
        """Drop what this process remembers decrypted (a destroyed key must serve nothing)."""
        if self.sealer is not None:
            self.sealer.forget()
        with self.ranker.lock:
            self.ranker.matrices.clear()
            self.ranker.opened.clear()
        return destroyed

    def encrypt_plaintext(
        self, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> dict[str, int]:
        """Seal every item written before encryption was on (values, vectors; terms
        re-hashed): what ``agent-memory encrypt`` runs. Idempotent: a second run finds
        nothing; safe while the store is in use.

        Args:
            on_progress: Called after each item sealed with ``(items sealed so far, None)``
                (the total is not counted beforehand), e.g. to show progress.

        Returns:
            ``{"items": ..., "vectors": ..., "terms": ...}``: how many were sealed.

        Raises:
            ConfigurationError: Encryption is off for this store.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import (
                Encryption,
                create_store,
                generate_master_key,
            )

            key = generate_master_key()  # in production: the deployment's master key
            with create_store("sqlite:///memory.db", encryption=False) as store:
                store.put(("users", "alice"), "prefs", {"food": "ramen"})  # before encryption
            setting = Encryption(master_keys=[key], allow_plaintext=True)
            with create_store("sqlite:///memory.db", encryption=setting) as store:
                print(store.encrypt_plaintext())  # {'items': 1, 'vectors': 0, 'terms': 1}
            ```
        """
        sealer, make = self._encrypt_plaintext(on_progress)
        self._ready()
        return sealer.call(self.run_plan, make)

    async def aencrypt_plaintext(
        self, *, on_progress: Callable[[int, int | None], None] | None = None
    ) -> dict[str, int]:
        """Async :meth:`encrypt_plaintext`."""
        sealer, make = self._encrypt_plaintext(on_progress)
        await self._aready()
        return await sealer.acall(self.arun_plan, make)

    def _encrypt_plaintext(
        self, on_progress: Callable[[int, int | None], None] | None
    ) -> tuple[Sealer, Callable[[], Plan[dict[str, int]]]]:
        if (sealer := self.sealer) is None:
            raise ConfigurationError("encrypt_plaintext needs a store opened with encryption on")
        counts = {"items": 0, "vectors": 0, "terms": 0}  # kept if the plan runs again
        return sealer, lambda: encrypt_plaintext_plan(self.statements, sealer, counts, on_progress)

    def _owners(self, puts: Puts) -> list[str]:
        shards = {self.statements.shard(p) for (p, _), op in puts.items() if op.value is not None}
        return [store_owner(s) for s in sorted(shards)]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.reranking is None and self.time_field is None:  # the common case, at no cost
            return self._run_batch(list(ops))
        return self._batch_staged(list(ops), S.Stages(self.reranking, self.time_field))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self.reranking is None and self.time_field is None:
            return await self._arun_batch(list(ops))
        return await self._abatch_staged(list(ops), S.Stages(self.reranking, self.time_field))

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        reranker: S.PerCall = None,
        time_field: str | Literal[False] | None = None,
    ) -> list[SearchItem]:
        """Search for items under ``namespace_prefix``, best first (LangGraph's
        ``BaseStore.search``), then reranked and dated (see :mod:`.search`).

        Args:
            namespace_prefix: Where to search.
            query: What to search for; without one, the newest items matching ``filter``.
            filter: Conditions on the value (``{"rating": {"$gte": 4}}``).
            limit: How many items.
            offset: How many to skip.
            refresh_ttl: Refresh the items' TTL (default the store's ``refresh_on_read``).
            reranker: This search's reranker (a callable, a LangChain
                ``BaseDocumentCompressor`` or a :class:`~..rerank.Reranking`); ``False``:
                none, even when the store has one; default the store's.
            time_field: What dates the items for a query that names a time (see
                :mod:`.search`); ``False``: nothing, even when the store dates them; default
                the store's ``time_field``.

        Example:
            ```python
            def prefers_spicy(query, texts):  # e.g. a cross-encoder's predict
                return [float("spicy" in t) for t in texts]

            store.put(("users", "alice"), "a", {"food": "mild ramen"})
            store.put(("users", "alice"), "b", {"food": "spicy ramen"})
            hits = store.search(("users", "alice"), query="ramen", reranker=prefers_spicy)
            assert hits[0].key == "b" and hits[0].score == 1.0
            ```
        """
        op = SearchOp(namespace_prefix, filter, limit, offset, query, refresh_ttl)  # type: ignore[arg-type]
        stages = self._per_call(reranker, time_field)
        return self._batch_staged([op], stages)[0]  # type: ignore[return-value]

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        reranker: S.PerCall = None,
        time_field: str | Literal[False] | None = None,
    ) -> list[SearchItem]:
        """Async :meth:`search`, with its arguments."""
        op = SearchOp(namespace_prefix, filter, limit, offset, query, refresh_ttl)  # type: ignore[arg-type]
        stages = self._per_call(reranker, time_field)
        return (await self._abatch_staged([op], stages))[0]  # type: ignore[return-value]

    def _per_call(self, reranker: S.PerCall, time_field: str | Literal[False] | None) -> S.Stages:
        reranking = None if reranker is False else reranking_of(reranker) or self.reranking
        dated = None if time_field is False else V.checked_time_field(time_field) or self.time_field
        return S.Stages(reranking, dated)

    def _staged(self, ops: list[Op], stages: S.Stages) -> S.Staged | None:
        """How ``ops`` run (see :func:`~.search.stage`); ``None`` when none is staged."""
        if stages.reranking is None and stages.time_field is None:
            return None
        V.checked_batch(ops)  # bad input refused before any search is widened
        return S.stage(ops, stages.reranking, stages.time_field, self._clock())

    def _batch_staged(self, ops: list[Op], stages: S.Stages) -> list[Result]:
        staged = self._staged(ops, stages)
        if staged is None:
            return self._run_batch(ops)
        results = self._run_batch(staged.ops)
        searched = staged.searched(results, stages.time_field)
        answers = [
            Reordered(list(range(len(items))))  # their own order
            if stages.reranking is None
            else stages.reranking.order(search.query or "", self._texts(items))
            for _, search, items in searched
        ]
        out = staged.paged(results, searched, answers)
        if refresh := self._refresh_ops(staged, out):
            self._run_batch(refresh)
        return out

    async def _abatch_staged(self, ops: list[Op], stages: S.Stages) -> list[Result]:
        staged = self._staged(ops, stages)
        if staged is None:
            return await self._arun_batch(ops)
        results = await self._arun_batch(staged.ops)
        searched = staged.searched(results, stages.time_field)

        async def order(search: SearchOp, items: list[SearchItem]) -> Reordered:
            if stages.reranking is None:
                return Reordered(list(range(len(items))))
            return await stages.reranking.aorder(search.query or "", self._texts(items))

        answers = await asyncio.gather(*(order(search, items) for _, search, items in searched))
        out = staged.paged(results, searched, answers)
        if refresh := self._refresh_ops(staged, out):
            await self._arun_batch(refresh)
        return out

    def _texts(self, items: list[SearchItem]) -> list[str]:
        """What a reranker reads of the items: what the store indexes."""
        return [self._doc(PutOp((), "", item.value)) or "" for item in items]

    def _refresh_ops(self, staged: S.Staged, out: list[Result]) -> list[Op]:
        """Reads that refresh the TTL of the items staged searches returned."""
        ops: list[Op] = []
        for i, search in staged.searches.items():
            if self._refreshes(search.refresh_ttl):
                found: list[SearchItem] = out[i]  # type: ignore[assignment]
                ops += [GetOp(tuple(item.namespace), item.key, refresh_ttl=True) for item in found]
        return ops

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """LangGraph's ``put``, whose namespace check raises the package's error
        (:class:`InvalidNamespaceValueError`, also LangGraph's ``InvalidNamespaceError``).

        Args:
            namespace: Where the item lives, e.g. ``("users", "alice")``.
            key: The item's key in the namespace.
            value: A dict of JSON values (see the user guide, "Limits").
            index: Fields to index for search; ``False``: none.
            ttl: Minutes to keep the item (default the ``ttl`` config's ``default_ttl``).

        Example:
            ```python
            store.put(("users", "alice"), "prefs", {"food": "ramen"}, ttl=60)
            ```
        """
        if not isinstance(namespace, tuple) or not isinstance(key, str):  # LangGraph's str(key)
            V.check_namespace_type(namespace)
            V.check_key(key)
        with V.namespace_errors():
            super().put(namespace, key, value, index, ttl=ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Async :meth:`put`, with its arguments."""
        if not isinstance(namespace, tuple) or not isinstance(key, str):
            V.check_namespace_type(namespace)
            V.check_key(key)
        with V.namespace_errors():
            await super().aput(namespace, key, value, index, ttl=ttl)

    def get(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        """LangGraph's ``get``, refusing a key that is not a string (LangGraph would read the
        item keyed by its ``str()``, ``"None"`` for ``None``)."""
        if not isinstance(key, str):
            V.check_key(key)
        return super().get(namespace, key, refresh_ttl=refresh_ttl)

    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        """Async :meth:`get`, with its arguments."""
        if not isinstance(key, str):
            V.check_key(key)
        return await super().aget(namespace, key, refresh_ttl=refresh_ttl)

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        """LangGraph's ``delete``, refusing a key that is not a string (LangGraph would delete
        the item keyed by its ``str()``, ``"None"`` for ``None``)."""
        if not isinstance(key, str):
            V.check_key(key)
        super().delete(namespace, key)

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        """Async :meth:`delete`, with its arguments."""
        if not isinstance(key, str):
            V.check_key(key)
        await super().adelete(namespace, key)

    def _run_batch(self, ops: list[Op]) -> list[Result]:
        if not live():  # the common case, without even an idle span's cost
            result, puts = self._batch(*V.checked_batch(ops))
        else:
            with batch_span(self.db, ops, sealed=self.sealer is not None) as op:
                result, puts = self._batch(*V.checked_batch(ops))  # refused: an error span
                told(op, ops, result)
        self._after_write(puts)
        return result

    def _batch(self, ops: list[Op], puts: Puts) -> tuple[list[Result], Puts]:
        texts, queries = self._embedding_work(ops, puts)
        vectors = self.embeddings.embed_documents(texts) if texts else []
        by_text = {q: self.embeddings.embed_query(q) for q in queries}
        if self.sealer is None:
            return self.run_plan(self._batch_plan(ops, puts, vectors, by_text)), puts
        self._ready()
        plan = functools.partial(self._batch_plan, ops, puts, vectors, by_text)
        return self.sealer.call(self.run_plan, plan, self._owners(puts)), puts

    async def _arun_batch(self, ops: list[Op]) -> list[Result]:
        if not live():
            result, puts = await self._abatch(*V.checked_batch(ops))
        else:
            with batch_span(self.db, ops, sealed=self.sealer is not None) as op:
                result, puts = await self._abatch(*V.checked_batch(ops))
                told(op, ops, result)
        self._after_write(puts)
        return result

    async def _abatch(self, ops: list[Op], puts: Puts) -> tuple[list[Result], Puts]:
        texts, queries = self._embedding_work(ops, puts)
        vectors = await self.embeddings.aembed_documents(texts) if texts else []
        found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
        by_text = dict(zip(queries, found, strict=True))
        if self.sealer is None:
            return await self.arun_plan(self._batch_plan(ops, puts, vectors, by_text)), puts
        await self._aready()
        plan = functools.partial(self._batch_plan, ops, puts, vectors, by_text)
        return await self.sealer.acall(self.arun_plan, plan, self._owners(puts)), puts

    def _after_write(self, puts: Puts) -> None:
        minutes = (self.ttl_config or {}).get("sweep_interval_minutes")
        if puts and minutes and self._sweeper is None:
            self.start_ttl_sweeper(minutes)

    def _index_texts(self, op: PutOp) -> list[tuple[str, str]]:
        """``(field, text)`` pairs an item is embedded from."""
        if self.index_config is None or op.value is None or op.index is False:
            return []
        fields = _paths(op.index) if isinstance(op.index, list) else self.index_config["fields"]
        return [
            (f"{name}#{i}", text)
            for name, path in fields
            for i, text in enumerate(get_text_at_path(op.value, path))
        ]

    def _doc(self, op: PutOp) -> str | None:
        if op.value is None or op.index is False:
            return None
        if self.index_config is not None:
            return "\n".join(text for _, text in self._index_texts(op)) or None
        return "\n".join(S.text_leaves(op.value)) or None

    def _embedding_work(self, ops: list[Op], puts: Puts) -> tuple[list[str], list[str]]:
        """The texts of ``puts`` to embed, and the distinct queries (each embedded once)."""
        if self.embeddings is None:
            return [], []
        texts = [text for op in puts.values() for _, text in self._index_texts(op)]
        queries = [op.query for op in ops if isinstance(op, SearchOp) and op.query]
        return texts, list(dict.fromkeys(queries))

    def _batch_plan(
        self,
        ops: list[Op],
        puts: Puts,
        vectors: list[list[float]],
        query_vectors: dict[str, list[float]],
    ) -> Plan[list[Result]]:
        now = self._clock()
        results: list[Result] = [None] * len(ops)
        refresh: list[dict[str, Any]] = []
        if self.embeddings is not None and not self._vectors_known:
            yield from self._vector_index_plan(create=False)
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                row = yield from self._get_plan(op, now)
                results[i] = Item(**item_fields(row, self.sealer)) if row else None
                if row and row.ttl_minutes is not None and self._refreshes(op.refresh_ttl):
                    refresh.append({"prefix": row.prefix, "key": row.key, "now": now})
            elif isinstance(op, SearchOp):
                vector = query_vectors.get(op.query or "")
                found = yield from self.searcher.ranked_plan(op, now, vector)
                results[i] = [item for item, _ in found]
                if self._refreshes(op.refresh_ttl):  # the items that have a TTL
                    refresh += [
                        {"prefix": ns_text(item.namespace), "key": item.key, "now": now}
                        for item, ttl in found
                        if ttl is not None
                    ]
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from namespaces_plan(self.statements, op, now)
        statements = yield from self._put_statements(puts, vectors, now)
        if refresh:  # only items that have a TTL: reads of the others stay reads
            refresh = in_lock_order(self.statements.keyed(refresh))
            statements.append(Stmt(self.statements.refresh(), refresh, many=True))
        if statements:
            yield Batch(statements, write=True)
        yield from self.ranker.written_plan(prefix for prefix, _ in puts)
        return results

    def _get_plan(self, op: GetOp, now: float) -> Plan[ItemRow | None]:
        """One live item's row (its data key loaded when sealed)."""
        prefix = ns_text(op.namespace)
        params = {"shard": self.statements.shard(prefix), "prefix": prefix, "key": op.key}
        [rows] = yield Batch([Stmt(self.statements.get(), {**params, "now": now}, fetch=True)])
        row = ItemRow(*rows[0]) if rows else None
        if row is not None and self.sealer is not None:
            yield from self.sealer.ids_plan(sealed_of([row]))
        return row

    def _refreshes(self, refresh_ttl: bool | None) -> bool:
        if refresh_ttl is not None:
            return refresh_ttl
        return (self.ttl_config or {}).get("refresh_on_read", True)

    def _put_statements(
        self, puts: Puts, vectors: list[list[float]], now: float
    ) -> Plan[list[Stmt]]:
        if not puts:
            return []
        items: list[dict[str, Any]] = []
        removed: list[dict[str, Any]] = []
        vector_rows: list[dict[str, Any]] = []
        at = 0
        for (prefix, key), op in puts.items():
            if op.value is None:
                removed.append({"prefix": prefix, "key": key})
                continue
            row, data_key = yield from self._item_row(prefix, key, op, now)
            items.append(row)
            for field, _ in self._index_texts(op):
                vector = np.asarray(vectors[at], dtype="<f4")
                at += 1
                if vector.shape != (self.index_config["dims"],):  # type: ignore[index]
                    raise ConfigurationError(
                        f"the embedder returned {vector.shape[0]} dimensions, index says "
                        f"{self.index_config['dims']}"  # type: ignore[index]
                    )
                blob = vector.tobytes()
                if self.sealer is not None and data_key is not None:
                    blob = self.sealer.seal_vector(data_key, prefix, key, field, blob)
                vector_rows.append({"prefix": prefix, "key": key, "field": field, "vector": blob})
        if not self.dialect.conditional_upsert and items:
            # UPSERT replaces every column: carry created_at over explicitly
            keys = self.statements.keyed({"prefix": r["prefix"], "key": r["key"]} for r in items)
            sql = self.statements.created_at()
            found = yield Batch([Stmt(sql, k, fetch=True) for k in keys], lock=True, hold=True)
            for row, rows in zip(items, found, strict=True):
                if rows:
                    (row["created_at"],) = rows[0]  # the one column, created_at
        return (
            yield from self.statements.put_plan(
                items, vector_rows, removed, native_vectors=self.sealer is None
            )
        )

    def _item_row(
        self, prefix: str, key: str, op: PutOp, now: float
    ) -> Plan[tuple[dict[str, Any], DataKey | None]]:
        """The item row a put writes, and its data key when sealed (for its vectors)."""
        assert op.value is not None
        ttl = V.put_ttl(op, self.ttl_config)
        text = V.encode_value(op.value)
        row: dict[str, Any] = {
            "prefix": prefix,
            "key": key,
            "value": text,
            "created_at": now,
            "updated_at": now,
            "ttl_minutes": ttl,
            "expires_at": now + ttl * 60 if ttl is not None else None,
            "doc": self._doc(op),
        }
        if self.sealer is None:
            index_item(row)
            return row, None
        data_key = yield from self.sealer.owner_key_plan(self.statements.shard(prefix), create=True)
        assert data_key is not None
        row.update(
            sealed=self.sealer.seal_value(data_key, prefix, key, text),
            value=SEALED_VALUE,
            term_of=self.sealer.term_of(data_key),
            filter_terms=self.sealer.filter_terms(data_key, text),
        )
        index_item(row)
        return row, data_key

    def _delete_namespace_plan(self, namespace: Sequence[str]) -> Plan[int]:
        if not namespace:
            raise ConfigurationError("delete_namespace needs a namespace prefix")
        params = self.statements.prefix_params(namespace)
        one = scoped(params)  # the prefix covers the shard key; else it spans shards
        counting = Stmt(self.statements.count_under(one), params, fetch=True)
        if one:
            shards = [params["shard"]]
        else:  # every shard key under the prefix: its merges wait
            reading = Stmt(self.statements.shards_under(), params, fetch=True)
            [rows] = yield Batch([reading], lock=True, hold=True)
            shards = [r[0] for r in rows]
        locks = self.statements.merge_locks(shards)
        *_, [(count,)] = yield Batch([*locks, counting], lock=True, hold=True)
        deletes = self.statements.delete_under(one, deeper=bool(params.get("rest")))
        yield Batch([Stmt(sql, params) for sql in deletes], write=True)
        return int(count)

    def delete_namespace(self, namespace: tuple[str, ...]) -> int:
        """Delete every item (with its vectors and text index) at or below ``namespace``,
        in one transaction.

        Args:
            namespace: A non-empty namespace prefix: ``("users", "alice")`` also deletes
                ``("users", "alice", "notes")``, not ``("users", "alice2")``.

        Returns:
            How many items were deleted.

        Raises:
            ConfigurationError: ``namespace`` is empty (that would delete everything).

        Example:
            ```python
            removed = store.delete_namespace(("users", "alice"))
            ```
        """
        return self.run_plan(self._delete_namespace_plan(namespace))

    async def adelete_namespace(self, namespace: tuple[str, ...]) -> int:
        """Async :meth:`delete_namespace`."""
        return await self.arun_plan(self._delete_namespace_plan(namespace))

    def sweep(self, *, on_progress: Callable[[int, int | None], None] | None = None) -> int:
        """Delete expired items now (expired items are invisible at once; this reclaims
        their rows), with their vectors and text index.

        Args:
            on_progress: Called after each batch deleted with ``(items deleted so far,
                None)``, e.g. to show progress.

        Returns:
            How many items were deleted.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import create_store

            with create_store("sqlite:///memory.db", ttl={"default_ttl": 60}) as store:
                store.sweep()
            ```
        """
        with db_operation("store.sweep", target_of(self.db), "am_store_items") as op:
            plan = sweep_plan(self.statements, self._clock, on_progress=on_progress)
            return self._swept(op, self.run_plan(plan))

    async def asweep(self, *, on_progress: Callable[[int, int | None], None] | None = None) -> int:
        """Async :meth:`sweep`."""
        with db_operation("store.sweep", target_of(self.db), "am_store_items") as op:
            plan = sweep_plan(self.statements, self._clock, on_progress=on_progress)
            return self._swept(op, await self.arun_plan(plan))

    def _swept(self, op: Any, removed: int) -> int:
        """``removed``, counted on the span and in ``agent_memory.store.items_swept``."""
        op.set("agent_memory.item_count", removed)
        metrics.add("items_swept", removed, {"db.system.name": target_of(self.db).system})
        return removed


def sweep_plan(
    statements: StoreStatements,
    clock: Callable[[], float],
    batch_size: int = 1000,
    on_progress: Callable[[int, int | None], None] | None = None,
) -> Plan[int]:
    """Delete expired items, ``batch_size`` a transaction; how many were deleted. Candidates
    are read without row locks (they span shards); each delete names its item's shard key (one
    shard on Citus); deleting an item twice is a no-op."""
    removed = 0
    while True:
        expired = Stmt(statements.expired(), {"now": clock(), "n": batch_size}, fetch=True)
        [rows] = yield Batch([expired], lock=True, hold=True)
        if not rows:
            yield Batch([], write=True)
            return removed
        keys = item_keys([ItemKey._make(r)._asdict() for r in rows])
        # the retraction first, planned for each item (see StoreStatements.writes)
        deletes = statements.delete_item()
        yield Batch(
            [Stmt(s, keys, many=True, prepare=s is not deletes[0]) for s in deletes], write=True
        )
        removed += len(rows)
        if on_progress is not None:
            on_progress(removed, None)
        if len(rows) < batch_size:
            return removed


def namespaces_plan(
    statements: StoreStatements, op: ListNamespacesOp, now: float
) -> Plan[list[tuple[str, ...]]]:
    # one shard when the literal labels cover the shard key; otherwise every shard
    conditions = op.match_conditions or ()
    first = next((c.path for c in conditions if c.match_type == "prefix"), ())
    literal = list(itertools.takewhile(lambda label: label != "*", first))
    params: dict[str, Any] = {"now": now, **(statements.prefix_params(literal) if literal else {})}
    query = statements.namespaces(bool(literal), scoped(params))
    [rows] = yield Batch([Stmt(query, params, fetch=True)])
    spaces = (tuple(prefix.split(".")) for (prefix,) in rows)
    found = {ns[: op.max_depth] for ns in spaces if all(_matches(ns, c) for c in conditions)}
    return sorted(found)[op.offset : op.offset + op.limit]


def _matches(ns: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if condition.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


#: A batch's span is named after what it does (``search``, ``put``, ``delete``, ...); a batch
#: of several is ``BATCH put``, or ``BATCH`` when it mixes them, as the conventions name them.
KINDS = {SearchOp: "search", GetOp: "get", ListNamespacesOp: "list_namespaces"}


def _kind(op: Op) -> str:
    if isinstance(op, PutOp):
        return "put" if op.value is not None else "delete"
    return KINDS.get(type(op), "batch")


def batch_span(database: Database[Any], ops: Sequence[Op], *, sealed: bool) -> Any:
    """The span of a batch of ``ops``; without the namespace and an exception's message when
    the store is ``sealed`` (namespaces may name users); called only while tracing is live."""
    kinds = {_kind(op) for op in ops}
    kind = kinds.pop() if len(kinds) == 1 else ""
    single = len(ops) == 1
    name = kind if single else f"BATCH {kind}".strip()
    spaces = {getattr(op, "namespace_prefix", getattr(op, "namespace", None)) for op in ops}
    spaces.discard(None)
    namespace = None if sealed or len(spaces) != 1 else ".".join(spaces.pop() or ())
    size = None if single else len(ops)  # the conventions' size of a batch
    attrs = {"agent_memory.namespace": namespace, "db.operation.batch.size": size}
    return db_operation(
        f"store.{name}", target_of(database), "am_store_items", attrs, sealed=sealed
    )


def told(op: Any, ops: Sequence[Op], results: Sequence[Any]) -> None:
    """Tell a batch's span how many items its reads returned (``db.response.returned_rows``)."""
    if op.recording:
        reads = [r for q, r in zip(ops, results, strict=False) if not isinstance(q, PutOp)]
        found = sum(len(r) if isinstance(r, list) else r is not None for r in reads)
        op.set("db.response.returned_rows", found)


def _paths(fields: Iterable[str]) -> list[tuple[str, Any]]:
    """Each field to embed with its path, tokenized (``"$"``: the whole value)."""
    return [(f, tokenize_path(f) if f != "$" else f) for f in fields]
