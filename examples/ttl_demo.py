"""A graph whose conversations are forgotten after a short idle time.

Run it with ``make demo``. It compiles a real LangGraph graph with ``create_checkpointer``,
keeps one conversation busy and leaves another idle, then shows which one survived.
"""

from __future__ import annotations

import operator
import time
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_checkpoint_agent_memory import create_checkpointer


class State(TypedDict):
    turns: Annotated[list[str], operator.add]


def respond(state: State) -> dict:
    return {"turns": [f"reply #{len(state['turns'])}"]}


def main() -> None:
    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)

    with create_checkpointer(ttl_seconds=2, sweep_interval_seconds=0.5) as checkpointer:
        graph = builder.compile(checkpointer=checkpointer)
        busy = {"configurable": {"thread_id": "busy-user"}}
        idle = {"configurable": {"thread_id": "idle-user"}}
        graph.invoke({"turns": ["hello"]}, busy)
        graph.invoke({"turns": ["hello"]}, idle)
        print(f"{checkpointer!r}")
        print("both threads start with", len(graph.get_state(busy).values["turns"]), "turns")
        for second in range(1, 5):  # reading idle-user would count as activity: leave it be
            time.sleep(1)
            graph.invoke({"turns": [f"still here ({second}s)"]}, busy)
            turns = len(graph.get_state(busy).values["turns"])
            in_memory = sorted(checkpointer.storage)
            print(f"t={second}s  busy-user has {turns} turns; in memory: {in_memory}")
        print(
            "after 4 s: busy-user has",
            len(graph.get_state(busy).values["turns"]),
            "turns,",
            "idle-user has",
            len(graph.get_state(idle).values.get("turns", [])),
        )
        print("idle-user was forgotten after 2 s without activity; busy-user kept its history.")


if __name__ == "__main__":
    main()
