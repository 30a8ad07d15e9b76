"""Shared benchmark payloads: a realistic conversation state."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6


def messages(n: int = 20) -> list[Any]:
    out: list[Any] = []
    for i in range(n // 2):
        out.append(
            HumanMessage(f"Question {i}: what is the status of purchase order 45000{i}? " * 3)
        )
        out.append(AIMessage(f"Purchase order 45000{i} is approved and ships on day {i}. " * 4))
    return out


class CheckpointFactory:
    """Successive checkpoints of one thread, as a graph step would write them."""

    def __init__(self, n_messages: int = 20) -> None:
        self.messages = messages(n_messages)
        self.version = 0

    def next(self) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        self.version += 1
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=self.version))
        checkpoint["channel_values"] = {"messages": self.messages, "counter": self.version}
        versions = {"messages": self.version, "counter": self.version}
        checkpoint["channel_versions"] = versions
        metadata = {"source": "loop", "step": self.version, "parents": {}}
        return checkpoint, metadata, dict(versions)
