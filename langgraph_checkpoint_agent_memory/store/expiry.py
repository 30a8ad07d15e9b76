"""The store's TTL sweep: expired items deleted in batches, a span and a count per sweep."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import ItemKey, StoreStatements
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import db_operation, target_of


def sweep_plan(
    statements: StoreStatements, clock: Callable[[], float], batch_size: int = 1000
) -> Plan[int]:
    """Delete expired items, ``batch_size`` at a time; how many were deleted.

    Args:
        statements: The store's statements.
        clock: Seconds since the epoch (what "expired" is measured against).
        batch_size: Items read and deleted per transaction.

    Candidates are read without row locks (they span shards); each delete names its item's
    shard key, and deleting an item another sweep deleted first is a no-op."""
    removed = 0
    while True:
        [rows] = yield Batch(
            [Stmt(statements.expired(), {"now": clock(), "n": batch_size}, fetch=True)],
            lock=True,
            hold=True,
        )
        if not rows:
            yield Batch([], write=True)
            return removed
        keys = [ItemKey._make(r)._asdict() for r in rows]
        yield Batch([Stmt(sql, keys, many=True) for sql in statements.delete_item()], write=True)
        removed += len(rows)
        if len(rows) < batch_size:
            return removed


def _span(database: Database[Any]) -> Any:
    return db_operation("store.sweep", target_of(database), "am_store_items")  # no namespace


def _counted(database: Database[Any], op: Any, removed: int) -> int:
    op.set("agent_memory.item_count", removed)
    metrics.add("items_swept", removed, {"db.system.name": target_of(database).system})
    return removed


def sweep(run: Callable[[Plan[int]], int], database: Database[Any], plan: Plan[int]) -> int:
    """Run the sweep ``plan`` with ``run`` in a ``store.sweep`` span, counting what it
    removed in ``agent_memory.store.items_swept``.

    Args:
        run: Runs a plan in the store's database (``store.run_plan``).
        database: The store's database (its span's target).
        plan: The sweep (:func:`sweep_plan`).

    Example:
        >>> sweep(store.run_plan, store.db, sweep_plan(store.statements, lambda: 4e9))
        0
    """
    with _span(database) as op:
        return _counted(database, op, run(plan))


async def asweep(
    run: Callable[[Plan[int]], Awaitable[int]], database: Database[Any], plan: Plan[int]
) -> int:
    """Async :func:`sweep`.

    Example:
        ```python
        import time

        plan = sweep_plan(store.statements, time.time)
        removed = await asweep(store.arun_plan, store.db, plan)
        ```
    """
    with _span(database) as op:
        return _counted(database, op, await run(plan))
