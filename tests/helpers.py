"""Shared test helpers: a fake clock, a sync-through-async adapter, checkpoint builders."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory import SQLSaver, TimedInMemorySaver

T = TypeVar("T")


#: The environment variables the package reads: no test sees another's, or the shell's.
PACKAGE_ENVIRONMENT = (
    "AGENT_CONFIG_FILE",
    "AGENT_MEMORY_URL",
    "VCAP_SERVICES",
    "SERVICE_BINDING_ROOT",
    "AGENT_MEMORY_MASTER_KEY",
    "AGENT_MEMORY_KEYSTORE_URL",
    "LANGGRAPH_AES_KEY",
    "LANGGRAPH_CHECKPOINTER",
    "LANGGRAPH_STORE",
)


#: The store's items as the term index sees them, a derived table of SQL that every backend
#: reads: each item's row with ``terms`` (those waiting to be listed, else its row's) and
#: ``merged`` (NULL: nothing indexed; 0: its terms wait in ``am_store_unlisted``; 1: listed),
#: and ``row_terms``, what the item's row itself keeps (``waiting_num``, ``waiting_doc_len``:
#: the number and length the terms to list carry).
INDEXED_ITEMS = (
    "(SELECT i.shard, i.prefix, i.key, i.value, i.expires_at, i.num, i.doc_len, "
    "COALESCE(u.terms, i.terms) AS terms, i.terms AS row_terms, "
    "u.num AS waiting_num, u.doc_len AS waiting_doc_len, "
    "CASE WHEN i.terms IS NULL THEN NULL WHEN u.key IS NULL THEN 1 ELSE 0 END AS merged "
    "FROM am_store_items i LEFT JOIN am_store_unlisted u "
    "ON u.shard = i.shard AND u.prefix = i.prefix AND u.key = i.key) AS index_items"
)


def row_counts(url: str) -> dict[str, int]:
    """Every table of the database at ``url`` (SQLite, or PostgreSQL's schema ``public``)
    with its row count."""
    if url.startswith("sqlite"):
        import sqlite3

        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        counts = {n: db.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
        db.close()
        return counts
    import psycopg

    from tests.pg import libpq_url

    conninfo, options = libpq_url(url)
    with psycopg.connect(conninfo, **options) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ]
        return {
            n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]  # type: ignore[index]
            for n in names
        }


def present(value: T | None) -> T:
    """``value``, which the test expects to be there: fails the test when it is ``None``."""
    assert value is not None, "expected a value, got None"
    return value


class FakeClock:
    """A monotonic clock that moves only when told to, shared safely between threads."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def sync_through_async(saver: BaseCheckpointSaver[str]) -> BaseCheckpointSaver[str]:
    """Wrap ``saver`` so its ``a*`` methods run the *sync* methods in a worker thread.

    The conformance suite only calls the async API; this makes it test the sync one.
    """
    base = type(saver)

    # the class derives from the saver's own class, which mypy cannot see statically
    class SyncDriven(base):  # type: ignore[valid-type, misc]
        def __init__(self) -> None:  # state is shared with the wrapped saver
            pass

        def __getattr__(self, name: str) -> Any:
            return getattr(saver, name)

        async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
            return await asyncio.to_thread(saver.get_tuple, config)

        async def alist(
            self,
            config: RunnableConfig | None,
            *,
            filter: dict[str, Any] | None = None,
            before: RunnableConfig | None = None,
            limit: int | None = None,
        ) -> AsyncIterator[CheckpointTuple]:
            items = await asyncio.to_thread(
                lambda: list(saver.list(config, filter=filter, before=before, limit=limit))
            )
            for item in items:
                yield item

        async def aput(
            self,
            config: RunnableConfig,
            checkpoint: Checkpoint,
            metadata: CheckpointMetadata,
            new_versions: ChannelVersions,
        ) -> RunnableConfig:
            return await asyncio.to_thread(saver.put, config, checkpoint, metadata, new_versions)

        async def aput_writes(
            self,
            config: RunnableConfig,
            writes: Sequence[tuple[str, Any]],
            task_id: str,
            task_path: str = "",
        ) -> None:
            await asyncio.to_thread(saver.put_writes, config, writes, task_id, task_path)

        async def adelete_thread(self, thread_id: str) -> None:
            await asyncio.to_thread(saver.delete_thread, thread_id)

        async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
            await asyncio.to_thread(saver.delete_for_runs, run_ids)

        async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
            await asyncio.to_thread(saver.copy_thread, source_thread_id, target_thread_id)

        async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
            await asyncio.to_thread(saver.prune, thread_ids, strategy=strategy)

    return SyncDriven()


class TimedContents(NamedTuple):
    """What a ``TimedInMemorySaver`` holds, each key led by its thread id."""

    #: threads that hold at least one checkpoint
    threads: set[str]
    #: (thread, namespace, checkpoint id) -> serialized checkpoint without its values
    checkpoints: dict[tuple[str, str, str], tuple[str, bytes]]
    #: (thread, namespace, channel, version) -> serialized value
    blobs: dict[tuple[Any, ...], tuple[str, bytes]]
    #: (thread, namespace, checkpoint id) of checkpoints with pending writes
    writes: set[tuple[str, str, str]]


def timed_contents(saver: TimedInMemorySaver) -> TimedContents:
    """Look inside a ``TimedInMemorySaver`` (a test of that class may: the layout is its own)."""
    with saver._lock:
        threads = dict(saver._threads)
        return TimedContents(
            {t for t, th in threads.items() if any(th.checkpoints.values())},
            {
                (t, ns, cid): saved.checkpoint
                for t, th in threads.items()
                for ns, ids in th.checkpoints.items()
                for cid, saved in ids.items()
            },
            {(t, *key): value for t, th in threads.items() for key, value in th.blobs.items()},
            {(t, *key) for t, th in threads.items() for key, rows in th.writes.items() if rows},
        )


def sql_checkpointer(url: str, ttl_seconds: int | None = None, **options: Any) -> SQLSaver:
    """``create_checkpointer(ttl_seconds, url=url, **options)``, which gives an ``SQLSaver``
    for a URL (its return type is LangGraph's base class, without ``close`` or ``sweep``)."""
    from langgraph_checkpoint_agent_memory import SQLSaver, create_checkpointer

    saver = create_checkpointer(ttl_seconds, url=url, **options)
    assert isinstance(saver, SQLSaver), type(saver)
    return saver


def make_checkpoint(
    values: dict[str, Any] | None = None, step: int = 0, version: int = 1
) -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=step))
    values = values or {}
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {k: version for k in values}
    return checkpoint


def config_for(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


from langchain_core.embeddings import Embeddings  # noqa: E402


class WordEmbeddings(Embeddings):
    """A deterministic embedder for tests: each word adds to a dimension picked by a stable
    hash, so texts sharing words are similar. Sync and async, like LangChain Embeddings."""

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls = 0

    def _one(self, text: str) -> list[float]:
        import hashlib
        import re

        vector = [0.0] * self.dims
        for word in re.findall(r"\w+", text.lower()):
            slot = int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dims
            vector[slot] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def outcome(call: Any) -> tuple[str, Any]:
    """What a call does, comparable across backends: ``("ok", result)``; ``("refused",
    error class name)`` for the package's errors and LangGraph's own namespace check; or
    ``("error", text)`` for anything else, which is a disagreement to report."""
    from langgraph.store.base import InvalidNamespaceError

    from langgraph_checkpoint_agent_memory import AgentMemoryError

    try:
        return ("ok", call())
    except (AgentMemoryError, InvalidNamespaceError) as exc:
        return ("refused", type(exc).__name__)
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


class Recorder:
    """The SQL texts a saver or store sends through ``db.run`` (and ``db.arun``, with
    ``also_async``) from now on, statement by statement (the plan runs unchanged); ``sent``
    has each with the parameters of its first execution, ready for the driver (none for an
    executemany of no rows)."""

    def __init__(self, owner: Any, *, also_async: bool = False) -> None:
        self.texts: list[str] = []
        self.sent: list[tuple[str, Any]] = []
        run, arun = owner.db.run, owner.db.arun
        owner.db.run = lambda plan: run(self.watched(plan))
        if also_async:

            async def arecording(plan: Any) -> Any:
                return await arun(self.watched(plan))

            owner.db.arun = arecording

    def watched(self, plan: Any) -> Any:
        """``plan``, its statements recorded as it yields them."""
        step = partial(plan.send, None)
        while True:
            try:
                batch = step()
            except StopIteration as stop:
                return stop.value
            self.texts.extend(s.sql.text for s in batch.statements)
            self.sent.extend(
                (s.sql.text, s.sql.bind(s.params[0] if s.many else s.params))
                for s in batch.statements
                if s.params or not s.many
            )
            try:
                step = partial(plan.send, (yield batch))
            except Exception as exc:  # a failed batch goes to the plan, as unwatched
                step = partial(plan.throw, exc)

    def took(self, needle: str) -> bool:
        """Whether some statement sent contains ``needle``."""
        return any(needle in text for text in self.texts)

    def count(self, *needles: str) -> int:
        """How many statements sent contain one of ``needles``."""
        return sum(any(n in text for n in needles) for text in self.texts)
