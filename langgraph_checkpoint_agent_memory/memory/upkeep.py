"""Keeping memory small: set-based decay of what lost its importance, and pinning the
facts that must never decay (see :meth:`~.agent.AgentMemory.decay` and
:meth:`~.agent.AgentMemory.pin`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext, scope_key
from langgraph_checkpoint_agent_memory.memory.decay import log_importance
from langgraph_checkpoint_agent_memory.memory.model import (
    Fact,
    Scope,
    ScopeLike,
    lexical_text,
    normalize_attribute,
)
from langgraph_checkpoint_agent_memory.memory.writes import item_row


def decay_plan(context: MemoryContext, scope: ScopeLike | None) -> Plan[int]:
    """Delete the unpinned facts and episodes (of ``scope``, or all) whose importance
    decayed under the policy's threshold; returns how many."""
    return sqlm.decay_plan(
        context.sql,
        now=context.clock(),
        log_rate_per_second=context.policy.log_rate_per_second,
        log_threshold=context.policy.log_threshold,
        scope=scope_key(scope),
    )


def pin_plan(context: MemoryContext, scope: ScopeLike, attribute: str, pinned: bool) -> Plan[int]:
    """Pin (or unpin) the scope's current facts of ``attribute`` (or of that key); returns
    how many facts changed."""
    s = Scope.of(scope)
    prefix = context.prefix(s, "facts")
    rows = yield from sqlm.read_plan(context.sql, prefix, context.clock())
    name = normalize_attribute(attribute)
    hits = [r for r in rows if r.value.get("attribute") == name or r.key == attribute]
    if not hits:
        return 0
    now = context.clock()
    items, decay = [], []
    for r in hits:
        value = {**r.value, "pinned": pinned}
        doc = lexical_text(Fact.from_value(r.key, value))
        items.append(item_row(prefix, r.key, value, created=r.created_at, updated=now, doc=doc))
        decay.append(_pinned_decay_row(r, s, pinned, now))
    yield from sqlm.seal_items_plan(context.sql, items)
    locks = context.sql.lock_scopes([s.key])
    yield Batch(
        [*locks, *context.sql.item_writes(items), context.sql.decay_stmt(decay)], write=True
    )
    return len(hits)


def _pinned_decay_row(
    row: sqlm.StoredRow, scope: Scope, pinned: bool, now: float
) -> dict[str, Any]:
    """A fact's decay row with its pin: its importance and reinforcement kept (from its
    value when it has no decay row yet)."""
    return {
        "prefix": row.prefix,
        "key": row.key,
        "scope": scope.key,
        "log_importance": row.log_importance
        if row.log_importance is not None
        else log_importance(float(row.value.get("importance", 0.5))),
        "reinforced_at": row.reinforced_at if row.reinforced_at is not None else now,
        "pinned": int(pinned),
    }


def encrypt_errors(context: MemoryContext) -> Callable[[], Plan[dict[str, int]]]:
    """What builds the plan of :meth:`~.agent.AgentMemory.encrypt_plaintext` (run it with
    ``context.run``), its counts kept should the plan run again for keys.

    Raises:
        ConfigurationError: The store does not encrypt.
    """
    if context.sql.sealer is None:
        raise ConfigurationError("encrypt_plaintext needs a store opened with encryption on")
    counts = {"job_errors": 0, "scope_errors": 0}
    return lambda: jobsql.encrypt_errors_plan(context.sql, counts)
