"""Recording a turn: its messages stored as a pending episode of a scope, for consolidation
to learn from (see :meth:`~.agent.AgentMemory.record`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
from langgraph_checkpoint_agent_memory.memory.extract import messages_as_dicts
from langgraph_checkpoint_agent_memory.memory.model import (
    MAX_EPISODE_KEY,
    MAX_THREAD_ID,
    Episode,
    Scope,
    ScopeLike,
    checked_identifier,
    lexical_text,
)
from langgraph_checkpoint_agent_memory.memory.nodes import turn_key
from langgraph_checkpoint_agent_memory.memory.settings import RecordOptions
from langgraph_checkpoint_agent_memory.memory.writes import item_row


def record_plan(
    context: MemoryContext,
    scope: ScopeLike,
    messages: Sequence[Any],
    options: RecordOptions,
    *,
    reinforcements: Callable[[], Sequence[dict[str, Any]]] = list,
) -> Plan[str | None]:
    """Store ``messages`` as a pending episode of ``scope`` (once per key), in one
    transaction with the reinforcements recall queued (taken from ``reinforcements`` only
    when there is an episode to write).

    Returns:
        The episode's key, or ``None`` when no message had content (nothing is written).
    """
    thread_id, key = options.get("thread_id"), options.get("key")
    if thread_id is not None:
        thread_id = checked_identifier(thread_id, "thread_id", MAX_THREAD_ID)
    if key is not None:
        key = checked_identifier(key, "key", MAX_EPISODE_KEY)
    occurred_at = options.get("occurred_at")
    s = Scope.of(scope)
    context.namespace(s, "episodes")  # refuses a scope too long to store
    dicts = [m for m in messages_as_dicts(messages) if m["content"] or m["role"] != "tool"]
    if not dicts:
        return None
    now = context.clock()
    when = now if occurred_at is None else float(occurred_at)
    ep_key = key or turn_key(thread_id, 0, list(messages))
    episode = Episode(ep_key, dicts, when, thread_id=thread_id)
    prefix = context.prefix(s, "episodes")
    item = item_row(
        prefix, ep_key, episode.to_value(), created=when, updated=now, doc=lexical_text(episode)
    )
    yield from sqlm.record_plan(
        context.sql,
        scope=s.key,
        root=context.settings.namespace_root,
        item=item,
        thread_id=thread_id,
        now=now,
        reinforce=list(reinforcements()),
    )
    return ep_key
