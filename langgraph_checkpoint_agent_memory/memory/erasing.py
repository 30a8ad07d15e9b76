"""Erasing a scope: everything of it and of the narrower scopes it covers, in the memory's
tables and, with a checkpointer, its conversation threads (see
:meth:`~.agent.AgentMemory.erase`).

When the store encrypts, the key store may be a database of its own, so the transaction
that deletes the rows enters in the erase ledger the shard keys it emptied, and their data
keys are destroyed after (:func:`settle`): a key store that is down leaves the debt in the
ledger, in the data's database, for a retry, a later erase or the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langgraph_checkpoint_agent_memory.crypto.cipher import store_owner, thread_owner
from langgraph_checkpoint_agent_memory.db import keys as sqlk
from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.errors import DatabaseUnavailableError, KeysBesideDataWarning
from langgraph_checkpoint_agent_memory.memory.context import (
    Call,
    MemoryContext,
    MemoryStore,
    RunPlan,
    Steps,
)
from langgraph_checkpoint_agent_memory.memory.model import SCOPE_KEYS, Scope, ScopeError, ScopeLike

#: Whether this process has warned that an erase does not reach backups (keys beside data).
_warned = False


def covered(scope: ScopeLike, known: set[str]) -> list[str]:
    """The scopes of ``known`` that ``scope`` covers (itself included), sorted."""
    target = Scope.of(scope)
    out = []
    for key in sorted(known):
        with contextlib.suppress(ScopeError):
            if target.covers(Scope.parse(key)):
                out.append(key)
    return out


def covering_shard(context: MemoryContext, scope: ScopeLike) -> str | None:
    """The one shard key under which ``scope`` and every narrower scope it covers keep
    their rows, or ``None`` when a narrower scope may carry another (``agent=support``
    covers ``user=bob,agent=support``, keyed ``memory.user=bob``)."""
    target = Scope.of(scope)
    leading = list(SCOPE_KEYS[: context.sql.store.shard_depth - 1])
    present = [k for k in SCOPE_KEYS if getattr(target, k) is not None]
    return context.sql.scope_shard(target.key) if present[: len(leading)] == leading else None


def covered_plan(context: MemoryContext, scope: ScopeLike) -> Plan[list[str]]:
    """``scope`` and the narrower scopes it covers that hold memory."""
    root = context.settings.namespace_root
    shard = covering_shard(context, scope)
    known = yield from sqlm.known_scopes_plan(context.sql, root, shard)
    return covered(scope, known)


def erase_plan(
    context: MemoryContext, scope: ScopeLike, threads: Sequence[sqlm.Owed] = ()
) -> Plan[dict[str, int]]:
    """Delete every row of ``scope`` and the scopes it covers; when the store encrypts, the
    same transaction enters in the erase ledger the shard keys it emptied and the
    ``threads`` whose keys it owes. The rows removed per table, with ``"scopes"``."""
    root = context.settings.namespace_root
    scopes = yield from covered_plan(context, scope)
    owe: set[str] = set()
    if context.store.keyring is not None:
        owe = yield from sqlm.shards_under_plan(context.sql, root=root, scopes=scopes)
    counts = yield from sqlm.erase_plan(
        context.sql,
        root=root,
        scopes=scopes,
        owe=sorted(owe),
        owe_threads=threads,
        now=context.clock(),
    )
    return {"scopes": len(scopes), **counts}


#: How many of the database's shard keys :func:`settle` looks up in a key store that holds
#: none of the keys owed, to tell a key store whose keys are destroyed from another's.
SAMPLE = 16


def _owner(owed: sqlm.Owed) -> str:
    return thread_owner(owed.thread_id) if owed.thread_id else store_owner(owed.shard)


def _settling(context: MemoryContext) -> Steps[int]:
    """:func:`settle` as steps. A debt is struck only once its key is destroyed, or is
    absent from a key store that holds keys of this database: a process pointed at another
    key store finds none of them and settles nothing."""
    keyring = context.store.keyring
    keystore = keyring.keystore

    def held(owners: list[str]) -> Call:
        plan = sqlk.held_plan(keystore.dialect, owners)
        return Call(lambda: keystore.run(plan), lambda: keystore.arun(plan))

    owed = yield RunPlan(sqlm.owed_plan(context.sql))
    if not owed:
        return 0
    found = set((yield held([_owner(o) for o in owed])))
    if not found:
        sample = yield RunPlan(sqlm.some_shards_plan(context.sql, SAMPLE))
        if not (yield held([store_owner(s) for s in sample])):
            return 0  # not this database's key store: the debts wait for the right one
    # read again just before destroying: a shard key or thread written since stays owed
    # (what remains is the window of a write racing this step: see recheck_seconds)
    owed = [o for o in (yield RunPlan(sqlm.owed_plan(context.sql))) if o in set(owed)]
    mine = [o for o in owed if _owner(o) in found]
    store = [o.shard for o in mine if not o.thread_id]
    threads = [thread_owner(o.thread_id) for o in mine if o.thread_id]

    async def adestroy() -> list[str]:
        return [*await context.store.adestroy_keys(store), *await keyring.adestroy(threads)]

    destroyed = yield Call(
        lambda: context.store.destroy_keys(store) + keyring.destroy(threads), adestroy
    )
    yield RunPlan(sqlm.settled_plan(context.sql, owed))
    return len(destroyed)


def settle(context: MemoryContext) -> int:
    """Destroy the data keys the erase ledger owes, then strike them from it; how many were
    destroyed. A key store that is down raises, and the debts stay in the ledger."""
    return 0 if context.store.keyring is None else context.run_steps(_settling(context))


async def asettle(context: MemoryContext) -> int:
    """Async :func:`settle`."""
    return 0 if context.store.keyring is None else await context.arun_steps(_settling(context))


def keys_beside_data(store: MemoryStore) -> bool:
    """Whether ``store`` keeps its data keys in its own database, so a backup of the data
    holds the keys, and an erase does not reach it."""
    keyring, db = store.keyring, store.db  # a private in-memory database has no backups
    return keyring is not None and keyring.keystore.db is db and not getattr(db, "memory", False)


#: This package's and asyncio's files: the frames between an application's erase and the warning.
_INNER = (str(Path(__file__).parent.parent) + os.sep, str(Path(asyncio.__file__).parent) + os.sep)


def _warn_once(context: MemoryContext) -> None:
    global _warned
    if _warned or not keys_beside_data(context.store):
        return
    _warned = True
    # the warning points at the application's line which called erase or aerase (or ran it)
    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_code.co_filename.startswith(_INNER):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"the data keys live in the data's own database ({context.store.db.describe()}): "
        "an erase destroys them there, but a backup taken before the erase still holds "
        "them, so the erased scopes stay readable in it. Keep the keys in a key store of "
        "their own (AGENT_MEMORY_KEYSTORE_URL or Encryption(keystore_url=...); user guide, "
        '"Encryption and erasure")',
        KeysBesideDataWarning,
        stacklevel=level,
    )


def threads_plan(context: MemoryContext, scope: ScopeLike) -> Plan[list[sqlm.Owed]]:
    """The conversation threads ``scope`` and the scopes it covers recorded turns of."""
    scopes = yield from covered_plan(context, scope)
    return (yield from sqlm.threads_plan(context.sql, scopes))


def owes_threads(context: MemoryContext, checkpointer: Any) -> bool:
    """Whether an erase leaves the keys of ``checkpointer``'s threads to the erase ledger
    (it seals them in the store's own key store); else it destroys them as it erases them."""
    mine, theirs = context.store.keyring, getattr(checkpointer, "keyring", None)
    if mine is None or theirs is None or not hasattr(checkpointer, "erase_threads"):
        return False
    a, b = mine.keystore.db, theirs.keystore.db
    if a is b:
        return True
    private = getattr(a, "memory", False) or getattr(b, "memory", False)
    return not private and bool(a.describe() == b.describe())


def erase_threads(checkpointer: Any, threads: list[str], owed: bool = False) -> int:
    """Delete ``threads`` from ``checkpointer`` (at once where it can; their keys kept when
    ``owed``: the erase ledger owes them); how many."""
    if checkpointer is None or not threads:
        return 0
    if owed:
        checkpointer.erase_threads(threads, keep_keys=True)
    elif hasattr(checkpointer, "erase_threads"):
        checkpointer.erase_threads(threads)
    else:
        for t in threads:
            checkpointer.delete_thread(t)
    return len(threads)


async def aerase_threads(checkpointer: Any, threads: list[str], owed: bool = False) -> int:
    """Async :func:`erase_threads`."""
    if checkpointer is None or not threads:
        return 0
    if owed:
        await checkpointer.aerase_threads(threads, keep_keys=True)
    elif hasattr(checkpointer, "aerase_threads"):
        await checkpointer.aerase_threads(threads)
    else:
        for t in threads:
            await checkpointer.adelete_thread(t)
    return len(threads)


#: The parts an erase reports progress in: threads, rows (and a SQLite file's compaction), keys.
ERASE_PARTS = 3


def erase_steps(
    context: MemoryContext,
    scope: ScopeLike,
    checkpointer: Any,
    on_progress: Callable[[int, int | None], None] | None = None,
) -> Steps[dict[str, int]]:
    """Erase ``scope`` (see :meth:`~.agent.AgentMemory.erase`): its threads first (their keys
    owed, where the store's key store holds them), then its rows (with the erase ledger's
    entries), then the data keys the ledger owes; the counts, each part told ``on_progress``."""
    report = on_progress or (lambda done, total: None)
    _warn_once(context)
    report(0, ERASE_PARTS)
    threads: list[sqlm.Owed] = yield RunPlan(threads_plan(context, scope))
    owed = owes_threads(context, checkpointer)
    names = sorted({t.thread_id for t in threads})
    erased = yield Call(
        lambda: erase_threads(checkpointer, names, owed),
        lambda: aerase_threads(checkpointer, names, owed),
    )
    report(1, ERASE_PARTS)
    counts: dict[str, int] = yield RunPlan(erase_plan(context, scope, threads if owed else ()))
    counts["threads"] = erased
    report(2, ERASE_PARTS)
    try:
        keys = 0 if context.store.keyring is None else (yield from _settling(context))
    except DatabaseUnavailableError as exc:  # the rows are gone, the data keys still owed
        raise type(exc)(
            f"the rows of {Scope.of(scope).key} are erased, but its data key could not be "
            f"destroyed ({exc}): the erase ledger keeps it owed, and a retry of this erase, any "
            "later erase or the memory worker destroys it once the key store is back"
        ) from exc
    counts["keys"] = keys
    report(3, ERASE_PARTS)
    return counts
