"""TimedInMemorySaver against InMemorySaver: put, put_writes, get_tuple (target: within 10%)."""

from __future__ import annotations

import itertools
import operator
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from benchmarks.harness import bar_chart, interleave, print_table, ratio, write_results
from benchmarks.suites.data import CheckpointFactory
from langgraph_checkpoint_agent_memory import TimedInMemorySaver

OURS, PEER = "TimedInMemorySaver", "InMemorySaver"


class State(MessagesState):
    counter: Annotated[int, operator.add]


def _cases(saver: Any, op: str, n_threads: int) -> Any:
    factory = CheckpointFactory()
    threads = itertools.cycle(range(n_threads))
    heads: dict[int, Any] = {}
    for t in range(n_threads):  # every thread starts with a few checkpoints
        parent = None
        for _ in range(5):
            cp, md, nv = factory.next()
            cfg = {"configurable": {"thread_id": f"t{t}", "checkpoint_ns": ""}}
            if parent:
                cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            parent = saver.put(cfg, cp, md, nv)
        heads[t] = parent

    def put() -> None:
        t = next(threads)
        cp, md, nv = factory.next()
        cfg = {
            "configurable": {
                "thread_id": f"t{t}",
                "checkpoint_ns": "",
                "checkpoint_id": heads[t]["configurable"]["checkpoint_id"],
            }
        }
        heads[t] = saver.put(cfg, cp, md, nv)

    tasks = itertools.count()

    def put_writes() -> None:
        t = next(threads)
        saver.put_writes(
            heads[t], [("messages", factory.messages[:2]), ("counter", 1)], f"task-{next(tasks)}"
        )

    def get_tuple() -> None:
        saver.get_tuple({"configurable": {"thread_id": f"t{next(threads)}", "checkpoint_ns": ""}})

    return {"put": put, "put_writes": put_writes, "get_tuple": get_tuple}[op]


def _graph_case(saver: Any) -> Any:
    """One invoke of a 3-node graph (messages + counter) on a growing thread."""
    builder = StateGraph(State)
    for name in ("plan", "act", "reflect"):
        builder.add_node(name, lambda s, n=name: {"messages": [AIMessage(n)], "counter": 1})
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", "reflect")
    builder.add_edge("reflect", END)
    graph = builder.compile(checkpointer=saver)
    threads = itertools.cycle(range(20))
    turns = itertools.count()

    def invoke() -> None:
        t = next(threads)
        config = {"configurable": {"thread_id": f"g{t}"}}
        if next(turns) % 200 == 199:  # keep threads short: a fresh conversation now and then
            saver.delete_thread(f"g{t}")
        graph.invoke({"messages": [("user", "hi")], "counter": 0}, config)

    return invoke


def run(*, quick: bool, out: Path) -> None:
    rounds, per_round, n_threads = (5, 100, 20) if quick else (30, 300, 200)
    results: dict[str, Any] = {}
    chart: dict[str, dict[str, float]] = {}
    rows = []
    for op in ("put", "put_writes", "get_tuple"):
        ours, peer = TimedInMemorySaver(3600), InMemorySaver()
        comparison = interleave(
            {OURS: _cases(ours, op, n_threads), PEER: _cases(peer, op, n_threads)},
            rounds=rounds,
            per_round=per_round,
        )
        ours.close()
        summary = comparison.summary()
        r = ratio(summary, OURS, PEER)
        results[op] = {**summary, "ratio_ours_over_peer": r}
        chart[op] = {k: v["median_us"] for k, v in summary.items()}
        rows.append(
            (
                op,
                f"{summary[OURS]['median_us']:.1f}",
                f"{summary[PEER]['median_us']:.1f}",
                f"{summary[OURS]['p99_us']:.1f}",
                f"{summary[PEER]['p99_us']:.1f}",
                f"{r:.3f}",
            )
        )
    ours, peer = TimedInMemorySaver(3600), InMemorySaver()
    comparison = interleave(
        {OURS: _graph_case(ours), PEER: _graph_case(peer)},
        rounds=rounds,
        per_round=max(10, per_round // 10),
    )
    ours.close()
    summary = comparison.summary()
    r = ratio(summary, OURS, PEER)
    results["graph_invoke"] = {**summary, "ratio_ours_over_peer": r}
    chart["graph_invoke"] = {k: v["median_us"] for k, v in summary.items()}
    rows.append(
        (
            "graph_invoke",
            f"{summary[OURS]['median_us']:.1f}",
            f"{summary[PEER]['median_us']:.1f}",
            f"{summary[OURS]['p99_us']:.1f}",
            f"{summary[PEER]['p99_us']:.1f}",
            f"{r:.3f}",
        )
    )
    print_table(
        "median and p99 per call (µs), 20-message state",
        rows,
        ("op", "ours p50", "peer p50", "ours p99", "peer p99", "ours/peer"),
    )
    write_results(out, "memory-savers", {"quick": quick, "results": results})
    bar_chart(out, "memory-savers", chart, "median µs per call")
