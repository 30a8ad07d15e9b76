"""One process of the concurrency test through a connection pooler (tests/test_pgbouncer.py).

``python -m tests.pooler_app URL NAME TURNS`` runs, at once: two threads on the sync API and
one event loop with two tasks on the async API, each a user of its own (``NAME-s0``,
``NAME-s1``, ``NAME-a0``, ``NAME-a1``). Each user, ``TURNS`` times: a graph turn
(``inject_memory -> agent -> record_memory`` on the checkpointer), a store put and a store
search in a namespace of its own; then consolidates its scope and sweeps. A fifth user
(``NAME-gone``) chats once and is erased. Prints one JSON object: the users, and every error
as text (the test expects none).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import traceback
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langgraph_checkpoint_agent_memory import AgentMemory, create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.demo import memory_graph


def note(user: str, turn: int) -> dict[str, str]:
    return {"text": f"note {turn} of {user}"}


def main(url: str, name: str, turns: int) -> dict[str, Any]:
    checkpointer = create_checkpointer(url=url, ttl_seconds=3600)
    store = create_store(url)
    memory = AgentMemory(store, checkpointer=checkpointer)
    app, _ = memory_graph(
        memory, FakeListChatModel(responses=["Noted."]), checkpointer=checkpointer
    )
    errors: list[str] = []

    def config(user: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"{user}-thread", "user_id": user}}

    def sync_user(user: str) -> None:
        try:
            for turn in range(turns):
                app.invoke({"messages": [("user", f"I like topic {turn}")]}, config(user))
                store.put(("docs", user), f"k{turn}", note(user, turn))
                store.search(("docs", user), query="note")
            memory.consolidate(f"user={user}")
            memory.sweep()
        except Exception:
            errors.append(f"{user}: {traceback.format_exc()}")

    async def async_user(user: str) -> None:
        try:
            for turn in range(turns):
                await app.ainvoke({"messages": [("user", f"I like topic {turn}")]}, config(user))
                await store.aput(("docs", user), f"k{turn}", note(user, turn))
                await store.asearch(("docs", user), query="note")
            await memory.aconsolidate(f"user={user}")
            await memory.asweep()
        except Exception:
            errors.append(f"{user}: {traceback.format_exc()}")

    async def async_users() -> None:
        await asyncio.gather(async_user(f"{name}-a0"), async_user(f"{name}-a1"))

    threads = [threading.Thread(target=sync_user, args=(f"{name}-s{i}",)) for i in range(2)]
    threads.append(threading.Thread(target=lambda: asyncio.run(async_users())))
    for t in threads:
        t.start()
    gone = f"{name}-gone"
    try:
        app.invoke({"messages": [("user", "forget me")]}, config(gone))
        memory.erase(f"user={gone}")
    except Exception:
        errors.append(f"{gone}: {traceback.format_exc()}")
    for t in threads:
        t.join()
    store.close()
    checkpointer.close()  # type: ignore[attr-defined]
    users = [f"{name}-s0", f"{name}-s1", f"{name}-a0", f"{name}-a1"]
    return {"users": users, "gone": gone, "errors": errors}


if __name__ == "__main__":
    url, name, turns = sys.argv[1:]
    print(json.dumps(main(url, name, int(turns))))
