"""The concurrency test of the scale-out deployments (through PgBouncer, on Citus), and one
process of it.

:func:`run_users_and_check` starts the processes and checks that nothing was lost.

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

from langgraph_checkpoint_agent_memory import AgentMemory, create_store
from langgraph_checkpoint_agent_memory.demo import memory_graph
from tests.helpers import sql_checkpointer


def note(user: str, turn: int) -> dict[str, str]:
    return {"text": f"note {turn} of {user}"}


def main(url: str, name: str, turns: int) -> dict[str, Any]:
    checkpointer = sql_checkpointer(url, ttl_seconds=3600)
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
    checkpointer.close()
    users = [f"{name}-s0", f"{name}-s1", f"{name}-a0", f"{name}-a1"]
    return {"users": users, "gone": gone, "errors": errors}


def run_users_and_check(url: str, *, processes: int, turns: int) -> None:
    """Run ``processes`` processes of :func:`main` on database ``url`` at once; assert that
    none reported an error, that every user's turns, notes and episodes are all there (and
    consolidated), and that each erased user left nothing."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    create_store(url).setup()  # first use of a fresh database: its tables
    saver = sql_checkpointer(url, ttl_seconds=3600)
    saver.setup()
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.pooler_app", url, f"p{n}", str(turns)],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(processes)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    errors = [e for r in reports for e in r["errors"]]
    assert errors == []

    store = create_store(url)
    memory = AgentMemory(store, checkpointer=saver)
    for report in reports:
        for user in report["users"]:
            state = saver.get_tuple({"configurable": {"thread_id": f"{user}-thread"}})
            assert state is not None, user
            said = [m.content for m in state.checkpoint["channel_values"]["messages"]]
            assert [f"I like topic {t}" for t in range(turns)] == [
                s for s in said if str(s).startswith("I like topic")
            ]
            docs = store.search(("docs", user), limit=50)
            assert sorted(i.key for i in docs) == [f"k{t}" for t in range(turns)]
            assert len(memory.episodes(f"user={user}")) == turns
            assert memory.episodes(f"user={user}", status="pending") == []
        gone = report["gone"]
        assert saver.get_tuple({"configurable": {"thread_id": f"{gone}-thread"}}) is None
        assert memory.episodes(f"user={gone}") == []
    store.close()
    saver.close()


if __name__ == "__main__":
    url, name, turns = sys.argv[1:]
    print(json.dumps(main(url, name, int(turns))))
