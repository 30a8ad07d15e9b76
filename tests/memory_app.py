"""A small memory-enabled LangGraph app, run in separate processes by the memory tests.

``python -m tests.memory_app URL COMMAND [ARGS...]`` prints one JSON object:

- ``chat USER THREAD TEXT``: one turn through ``inject_memory -> agent -> record_memory``;
  prints the context block the agent saw.
- ``consolidate RESPONSE...``: consolidate with a fake chat model extractor answering the
  given responses in turn; prints the report.
- ``work SECONDS``: consolidate with the rule-based extractor until nothing is left.
- ``die``: claim a job with an extractor that kills the process.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    AgentMemoryStore,
    create_checkpointer,
    create_store,
)
from langgraph_checkpoint_agent_memory.demo import memory_graph
from langgraph_checkpoint_agent_memory.memory import CallableExtractor


def build(
    url: str, extractor: Any = None, **settings: Any
) -> tuple[Any, AgentMemory[AgentMemoryStore], AgentMemoryStore]:
    checkpointer = create_checkpointer(url=url)
    store = create_store(url)
    memory = AgentMemory(store, extractor=extractor, checkpointer=checkpointer, **settings)
    app, seen = memory_graph(
        memory, FakeListChatModel(responses=["Noted."]), checkpointer=checkpointer
    )
    app.seen = seen
    return app, memory, store


def main(argv: list[str]) -> dict[str, Any]:
    url, command, *args = argv
    if command == "chat":
        user, thread, text = args
        app, memory, _ = build(url)
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        app.invoke({"messages": [("user", text)]}, config)
        return {"context": app.seen.get("context", "")}
    if command == "consolidate":
        model = FakeListChatModel(responses=args)
        _, memory, _ = build(url, extractor=model)
        return memory.consolidate().as_dict()
    if command == "work":
        _, memory, _ = build(url, lease_seconds=60.0)
        total: dict[str, int] = {}
        for _ in range(10_000):
            report = memory.consolidate(max_jobs=1)
            if not report.jobs:
                break
            for k, v in report.as_dict().items():
                total[k] = total.get(k, 0) + v
        return total
    if command == "die":
        _, memory, _ = build(
            url,
            extractor=CallableExtractor(lambda prompt: os._exit(9), timeout=None),
            lease_seconds=float(args[0]),
        )
        memory.consolidate(max_jobs=1)
        return {"survived": True}
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
