"""The graph side: whose memory a run is, and which messages are this turn.

A run's scope is read from ``config["configurable"]``, falling back to state keys of the
same names, restricted to the memory's ``scope_keys``; a run with none of the keys is refused
rather than guessed. A turn is the messages from the last human message on; its key comes
from the thread and the messages' ids, so recording it twice stores it once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
from langgraph_checkpoint_agent_memory.memory.extract import messages_as_dicts
from langgraph_checkpoint_agent_memory.memory.model import SCOPE_KEYS, Scope, ScopeError, digest
from langgraph_checkpoint_agent_memory.memory.traced import traced

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory import recall as R
    from langgraph_checkpoint_agent_memory.memory.agent import AgentMemory

#: The id of the system message ``inject_node`` writes, so each turn replaces the last one.
CONTEXT_MESSAGE_ID = "agent-memory-context"


def scope_from(
    config: Mapping[str, Any] | None, state: Any, keys: Sequence[str] = SCOPE_KEYS
) -> Scope:
    configurable = dict((config or {}).get("configurable") or {})
    values: dict[str, Any] = {}
    for key in keys:
        value = configurable.get(key)
        if value is None:
            value = _state_get(state, key)
        if value is not None:
            values[key] = value  # Scope takes str, int and UUID ids, as the API does
    if not values:
        raise ScopeError(
            "no memory scope for this run: pass "
            + " or ".join(f"config['configurable']['{k}']" for k in keys)
            + " (or state keys of the same names)"
        )
    return Scope(**values)


def _state_get(state: Any, key: str) -> Any:
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


def messages_of(state: Any) -> list[Any]:
    messages = _state_get(state, "messages")
    if messages is None:
        raise ScopeError("memory nodes need a 'messages' key in the graph state")
    return list(messages)


def _is_context(m: Any) -> bool:
    mid = m.get("id") if isinstance(m, dict) else getattr(m, "id", None)
    return mid == CONTEXT_MESSAGE_ID


def _role(m: Any) -> str:
    if isinstance(m, dict):
        role = str(m.get("role") or m.get("type") or "")
    else:
        role = str(getattr(m, "type", ""))
    return {"human": "user"}.get(role, role)


def current_turn(messages: Sequence[Any]) -> tuple[int, list[Any]]:
    """The index of the turn's first message and the turn's messages."""
    users = (i for i in reversed(range(len(messages))) if _role(messages[i]) == "user")
    start = next((i for i in users if not _is_context(messages[i])), None)
    if start is None:
        return len(messages), []
    turn = [m for m in messages[start:] if not _is_context(m) and _role(m) != "system"]
    return start, turn


def last_user_text(messages: Sequence[Any]) -> str:
    turn = current_turn(messages)[1]
    return messages_as_dicts(turn[:1])[0]["content"] if turn else ""


def turn_key(thread_id: str | None, start: int, turn: Sequence[Any]) -> str:
    ids = [m.get("id") if isinstance(m, dict) else getattr(m, "id", None) for m in turn]
    if all(ids):
        return "ep-" + digest(thread_id or "", *[str(i) for i in ids])
    said = [f"{d['role']}:{d['content']}" for d in messages_as_dicts(turn)]
    return "ep-" + digest(thread_id or "", str(start), *said)


def _node_scope(nodes: GraphNodes, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Scope:
    state = args[0] if args else kwargs.get("state")
    config = kwargs["config"] if "config" in kwargs else args[1] if len(args) > 1 else None
    return nodes.node_inputs(state, config)[0]


class GraphNodes:
    """The two graph nodes of one :class:`~.agent.AgentMemory` (sync and async each):
    :attr:`inject` recalls into state, :attr:`record` records the turn.

    Args:
        memory: The memory the nodes read and write.

    Example:
        >>> nodes = GraphNodes(memory)  # AgentMemory builds its own
        >>> graph.add_node("inject_memory", nodes.inject)
        <langgraph.graph.state.StateGraph object at ...>
    """

    def __init__(self, memory: AgentMemory[Any]) -> None:
        self.memory = memory
        self.inject: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._inject, afunc=self._ainject, name="inject_memory"
        )
        self.record: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._record_turn, afunc=self._arecord_turn, name="record_memory"
        )

    @property
    def context(self) -> MemoryContext:
        return self.memory.context

    def node_inputs(self, state: Any, config: RunnableConfig | None) -> tuple[Scope, Any]:
        """A node's scope and thread, from its config (and state)."""
        scope = scope_from(config, state, self.memory.settings.scope_keys)
        thread = ((config or {}).get("configurable") or {}).get("thread_id")
        return scope, thread

    def _inject_update(self, state: Any, recalled: R.Recalled) -> dict[str, Any]:
        key = self.memory.settings.context_key
        if key is not None:
            return {key: recalled.text}
        if recalled.text:
            return {"messages": [SystemMessage(content=recalled.text, id=CONTEXT_MESSAGE_ID)]}
        had = any(getattr(m, "id", None) == CONTEXT_MESSAGE_ID for m in messages_of(state))
        return {"messages": [RemoveMessage(id=CONTEXT_MESSAGE_ID)]} if had else {}

    @traced("inject", scope_of=_node_scope)
    def _inject(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        scope, thread = self.node_inputs(state, config)
        query = last_user_text(messages_of(state))
        recalled = self.memory.recall(scope, query, exclude_thread=thread, reinforce=True)
        return self._inject_update(state, recalled)

    @traced("inject", scope_of=_node_scope)
    async def _ainject(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        scope, thread = self.node_inputs(state, config)
        query = last_user_text(messages_of(state))
        recalled = await self.memory.arecall(scope, query, exclude_thread=thread, reinforce=True)
        return self._inject_update(state, recalled)

    def _record_turn(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        scope, thread = self.node_inputs(state, config)
        start, turn = current_turn(messages_of(state))
        if turn:
            self.memory.record(scope, turn, thread_id=thread, key=turn_key(thread, start, turn))
        return {}

    async def _arecord_turn(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        scope, thread = self.node_inputs(state, config)
        start, turn = current_turn(messages_of(state))
        if turn:
            key = turn_key(thread, start, turn)
            await self.memory.arecord(scope, turn, thread_id=thread, key=key)
        return {}
