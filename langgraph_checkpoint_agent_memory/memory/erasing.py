"""Erasing a scope: everything of it and of the narrower scopes it covers, in the memory's
tables and, with a checkpointer, its conversation threads (see
:meth:`~.agent.AgentMemory.erase`)."""

from __future__ import annotations

from typing import Any

from langgraph_checkpoint_agent_memory.db import memory_scopes as sqls
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
from langgraph_checkpoint_agent_memory.memory.model import (
    SCOPE_KEYS,
    Scope,
    ScopeError,
    ScopeLike,
)


def covered(scope: ScopeLike, known: set[str]) -> list[str]:
    """The scopes of ``known`` that ``scope`` covers (itself included), sorted."""
    target = Scope.of(scope)
    out = []
    for key in sorted(known):
        try:
            if target.covers(Scope.parse(key)):
                out.append(key)
        except ScopeError:
            continue
    return out


def covering_shard(context: MemoryContext, scope: ScopeLike) -> str | None:
    """The one shard key under which ``scope`` and every narrower scope it covers keep
    their rows, or ``None`` when a narrower scope may carry another (a scope without the
    leading keys the shard key is made of: under the default ``shard_depth`` of 2,
    ``agent=support`` covers ``user=bob,agent=support``, keyed ``memory.user=bob``)."""
    target = Scope.of(scope)
    leading = list(SCOPE_KEYS[: context.sql.shard_depth - 1])
    present = [k for k in SCOPE_KEYS if getattr(target, k) is not None]
    if present[: len(leading)] != leading:
        return None
    return context.sql.scope_shard(target.key)


def covered_plan(context: MemoryContext, scope: ScopeLike) -> Plan[list[str]]:
    """``scope`` and the narrower scopes it covers that hold memory: found on their one
    shard where they share one, else across all."""
    root = context.settings.namespace_root
    shard = covering_shard(context, scope)
    known = yield from sqls.known_scopes_plan(context.sql, root, shard)
    return covered(scope, known)


def erase_plan(context: MemoryContext, scope: ScopeLike) -> Plan[tuple[dict[str, int], list[str]]]:
    """Delete every row of ``scope`` and the scopes it covers; the rows removed per table,
    with ``"scopes"``, and the shard keys the erase left without any item (whose data keys
    :func:`destroy_keys` destroys)."""
    root = context.settings.namespace_root
    scopes = yield from covered_plan(context, scope)
    shards = yield from sqls.shards_under_plan(context.sql, root=root, scopes=scopes)
    counts = yield from sqls.erase_plan(context.sql, root=root, scopes=scopes)
    emptied = yield from sqls.emptied_shards_plan(context.sql, sorted(shards))
    return {"scopes": len(scopes), **counts}, emptied


def destroy_keys(context: MemoryContext, shards: list[str]) -> int:
    """Destroy the data keys of ``shards`` (an erase emptied them) when the store encrypts:
    the erased rows can then not be read from any earlier backup either. How many."""
    if not shards or context.store.keyring is None:
        return 0
    return len(context.store.destroy_keys(shards))


async def adestroy_keys(context: MemoryContext, shards: list[str]) -> int:
    """Async :func:`destroy_keys`."""
    if not shards or context.store.keyring is None:
        return 0
    return len(await context.store.adestroy_keys(shards))


def threads_plan(context: MemoryContext, scope: ScopeLike) -> Plan[list[str]]:
    """The conversation threads ``scope`` and the scopes it covers recorded turns of."""
    scopes = yield from covered_plan(context, scope)
    return (yield from sqls.threads_plan(context.sql, scopes))


def erase_threads(checkpointer: Any, threads: list[str]) -> int:
    """Delete ``threads`` from ``checkpointer`` (at once where it can); how many."""
    if checkpointer is None or not threads:
        return 0
    if hasattr(checkpointer, "erase_threads"):
        checkpointer.erase_threads(threads)
    else:
        for t in threads:
            checkpointer.delete_thread(t)
    return len(threads)


async def aerase_threads(checkpointer: Any, threads: list[str]) -> int:
    """Async :func:`erase_threads`."""
    if checkpointer is None or not threads:
        return 0
    if hasattr(checkpointer, "aerase_threads"):
        await checkpointer.aerase_threads(threads)
    else:
        for t in threads:
            await checkpointer.adelete_thread(t)
    return len(threads)


def erase(context: MemoryContext, scope: ScopeLike, checkpointer: Any) -> dict[str, int]:
    """Erase ``scope`` (see :meth:`~.agent.AgentMemory.erase`): its threads first, then its
    rows, then the data keys of the shard keys it emptied; the counts."""
    threads = context.run(threads_plan(context, scope))
    erased = erase_threads(checkpointer, threads)
    counts, emptied = context.run(erase_plan(context, scope))
    counts["threads"] = erased
    counts["keys"] = destroy_keys(context, emptied)
    return counts


async def aerase(context: MemoryContext, scope: ScopeLike, checkpointer: Any) -> dict[str, int]:
    """Async :func:`erase`."""
    threads = await context.arun(threads_plan(context, scope))
    erased = await aerase_threads(checkpointer, threads)
    counts, emptied = await context.arun(erase_plan(context, scope))
    counts["threads"] = erased
    counts["keys"] = await adestroy_keys(context, emptied)
    return counts
