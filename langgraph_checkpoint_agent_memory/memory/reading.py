"""Reading a scope's facts, their versions and its episodes, as plans that need only
:class:`Reads` of a context: the command line reads stored memory through them with a bare
database, without loading the store.
"""

from __future__ import annotations

from typing import Protocol

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.errors import InvalidValueError
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory.model import (
    EPISODE_STATUSES,
    AsOf,
    Episode,
    Fact,
    ScopeLike,
    as_timestamp,
    normalize_attribute,
)


class Reads(Protocol):
    """What the reading plans use of a :class:`~.context.MemoryContext`."""

    @property
    def sql(self) -> sqlm.MemorySql:
        """The memory statements for the database's dialect."""

    def clock(self) -> float:
        """Seconds since the epoch."""

    def prefix(self, scope: ScopeLike, kind: str) -> str:
        """Where the scope's items of ``kind`` live, as the store keeps namespaces."""


def facts_plan(
    context: Reads, scope: ScopeLike, as_of: AsOf | None, known_at: AsOf | None = None
) -> Plan[list[Fact]]:
    """The scope's current facts; with ``as_of``, those that held then; with ``known_at``,
    as the memory believed then (see :meth:`~.agent.AgentMemory.facts`)."""
    if as_of is None and known_at is None:
        prefix = context.prefix(scope, "facts")
        rows = yield from sqlm.read_plan(context.sql, prefix, context.clock())
        facts = [Fact.from_value(r.key, r.value) for r in rows]
    else:
        known = None if known_at is None else as_timestamp(known_at, "known_at")
        when = known if as_of is None else as_timestamp(as_of)
        assert when is not None
        versions = F.believed((yield from versions_plan(context, scope, None)), known)
        facts = F.held_at(versions, when)
    return sorted(facts, key=lambda f: (f.attribute, f.valid_from, f.key))


def versions_plan(
    context: Reads, scope: ScopeLike, attribute: str | None, now: float | None = None
) -> Plan[list[Fact]]:
    """Every stored version of the scope's facts (of ``attribute`` when given): the
    superseded ones and the current ones (live at ``now``, default the clock's)."""
    now = context.clock() if now is None else now
    old = yield from sqlm.read_plan(context.sql, context.prefix(scope, "history"), now)
    new = yield from sqlm.read_plan(context.sql, context.prefix(scope, "facts"), now)
    wanted = normalize_attribute(attribute) if attribute is not None else None
    return [
        Fact.from_value(r.key, r.value)
        for r in (*old, *new)
        if wanted is None or r.value.get("attribute") == wanted
    ]


def history_plan(
    context: Reads,
    scope: ScopeLike,
    attribute: str | None,
    as_of: AsOf | None = None,
    known_at: AsOf | None = None,
) -> Plan[list[Fact]]:
    """Every value of an attribute (all when ``None``), oldest first; with ``as_of``, as known
    then; with ``known_at``, as believed then (see :meth:`~.agent.AgentMemory.history`)."""
    known = None if known_at is None else as_timestamp(known_at, "known_at")
    out = F.believed((yield from versions_plan(context, scope, attribute)), known)
    if as_of is not None:
        out = F.known_at(out, as_timestamp(as_of))
    return sorted(out, key=lambda f: (f.attribute, f.valid_from, f.valid_to or float("inf")))


def episodes_plan(context: Reads, scope: ScopeLike, status: str | None) -> Plan[list[Episode]]:
    """The scope's episodes (of ``status`` when given), oldest first."""
    if status is not None and status not in EPISODE_STATUSES:
        raise InvalidValueError(
            f"status must be one of {', '.join(EPISODE_STATUSES)} (or None for all), got {status!r}"
        )
    prefix = context.prefix(scope, "episodes")
    rows = yield from sqlm.read_plan(context.sql, prefix, context.clock())
    eps = [Episode.from_value(r.key, r.value) for r in rows]
    if status is not None:
        eps = [e for e in eps if e.status == status]
    return sorted(eps, key=lambda e: (e.occurred_at, e.key))
