"""Recording a turn: its messages stored as a pending episode of a scope, for consolidation
to learn from (see :meth:`~.agent.AgentMemory.record`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.errors import InvalidValueError
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
from langgraph_checkpoint_agent_memory.memory.extract import messages_as_dicts
from langgraph_checkpoint_agent_memory.memory.model import (
    MAX_EPISODE_KEY,
    MAX_THREAD_ID,
    Episode,
    Scope,
    ScopeLike,
    as_timestamp,
    checked_identifier,
    lexical_text,
)
from langgraph_checkpoint_agent_memory.memory.nodes import turn_key
from langgraph_checkpoint_agent_memory.memory.settings import RecordOptions
from langgraph_checkpoint_agent_memory.memory.writes import item_row


def checked_messages(messages: Any) -> list[BaseMessage]:
    """``messages`` as LangChain messages: a list (or other iterable) of what LangChain's
    ``convert_to_messages`` reads (messages, ``(role, content)`` pairs, ``{"role",
    "content"}`` dicts, strings as user messages), or a ``PromptValue``.

    Raises:
        InvalidValueError: ``messages`` is a string, a dict or one message rather than a
            list of them, or an item is not a message LangChain can read (naming it).
    """
    if isinstance(messages, PromptValue):
        return messages.to_messages()
    if isinstance(messages, (str, bytes, Mapping, BaseMessage)) or not isinstance(
        messages, Iterable
    ):
        raise InvalidValueError(
            f"messages must be a list of messages, got {type(messages).__name__} "
            f"{str(messages)[:40]!r}: wrap one message in a list, e.g. [('user', text)]"
        )
    out: list[BaseMessage] = []
    for i, message in enumerate(messages):
        try:
            out.extend(convert_to_messages([message]))
        except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidValueError(
                f"messages[{i}] is not a message LangChain can read ({why}); give a "
                "message, a (role, text) pair or a {'role', 'content'} dict with text content"
            ) from None
    return out


def record_plan(
    context: MemoryContext,
    scope: ScopeLike,
    messages: Sequence[BaseMessage],
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
    if occurred_at is not None:
        occurred_at = as_timestamp(occurred_at, "occurred_at", InvalidValueError)
    s = Scope.of(scope)
    context.namespace(s, "episodes")  # refuses a scope too long to store
    dicts = [m for m in messages_as_dicts(messages) if m["content"] or m["role"] != "tool"]
    if not dicts:
        return None
    now = context.clock()
    when = now if occurred_at is None else occurred_at
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
