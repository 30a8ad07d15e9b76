"""Scaling out: the savers' graph workload and a store/memory workload on plain PostgreSQL
and through PgBouncer in transaction mode, in one run, as ratios to plain PostgreSQL.

Targets (:data:`TARGETS`, each a function that adds one or says why it cannot):

- ``postgres``: the package's defaults on a throwaway server (statements prepared after 5
  runs, psycopg's default);
- ``postgres-unprepared``: the same server with ``?prepare_threshold=none``: what preparing
  buys on a direct connection, the figure the default is chosen from;
- ``pgbouncer``: PgBouncer (``pool_mode = transaction``) in front of the same server, with
  ``?prepare_threshold=none``, as a transaction pooler needs.

Every target's cases run interleaved (shuffled each round) so noise hits them alike. Per
target: ``put``, ``put_writes`` and ``get_tuple`` on threads with a history, a 3-node graph's
``invoke`` (sync) and ``ainvoke`` (async) on short threads, and store ``put`` (of 4 words,
and of 30 distinct words: its postings are one statement per item), ``search`` (a query
inside one user's namespace), ``AgentMemory.record`` and ``build_context``. The
ratio printed for each is throughput (or 1 / median latency) of the target over
``postgres``; the target for PgBouncer is >= 0.8 for graph invokes.

A target is added by appending a function ``(stack, fresh_plain) -> Target`` to
:data:`TARGETS` (a distributed cluster, a managed pooler): ``fresh_plain`` makes a fresh
database on the plain server, and ``stack`` closes what the target opens.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import interleave_batches, print_table, write_results
from benchmarks.suites.savers import _graph_case, _ops, chat_graph, postgres
from langgraph_checkpoint_agent_memory import AgentMemory, create_store
from langgraph_checkpoint_agent_memory import PostgresSaver as OurPostgres

#: The target every ratio is taken against.
BASELINE = "postgres"
#: Graph invokes per second over plain PostgreSQL: the goals, by target.
GOALS = {"pgbouncer": 0.8, "citus": 0.5}


@dataclass
class Target:
    """Where one column of the table runs: ``fresh()`` gives a URL of an empty database
    (as the package takes it: ``?prepare_threshold=`` included where needed), or ``skip``
    says why the target is not there."""

    name: str
    fresh: Callable[[], str] | None = None
    skip: str = ""


def plain(stack: ExitStack, fresh_plain: Callable[[], str]) -> Target:
    return Target(BASELINE, fresh_plain)


def plain_unprepared(stack: ExitStack, fresh_plain: Callable[[], str]) -> Target:
    return Target("postgres-unprepared", lambda: f"{fresh_plain()}?prepare_threshold=none")


def pgbouncer(stack: ExitStack, fresh_plain: Callable[[], str]) -> Target:
    from tests.servers import (
        NO_PGBOUNCER,
        LocalPgBouncer,
        find_pgbouncer,
    )

    if find_pgbouncer() is None:
        return Target("pgbouncer", skip=NO_PGBOUNCER)
    bouncer = LocalPgBouncer(fresh_plain(), pool_size=20)
    bouncer.start()
    stack.callback(bouncer.stop)
    return Target("pgbouncer", lambda: f"{bouncer.url_for(fresh_plain())}?prepare_threshold=none")


def citus(stack: ExitStack, fresh_plain: Callable[[], str]) -> Target:
    """A Citus cluster on this machine (a coordinator and two workers, each a throwaway
    PostgreSQL of the machine's server): the package distributes its tables at setup."""
    from tests.servers import (
        NO_CITUS,
        LocalCitus,
        citus_binaries,
    )

    if citus_binaries() is None:
        return Target("citus", skip=NO_CITUS)
    cluster = LocalCitus(fsync=True)
    cluster.start()
    stack.callback(cluster.stop)
    return Target("citus", cluster.create_database)


#: The columns of the table, in order; the first is the baseline.
TARGETS: list[Callable[[ExitStack, Callable[[], str]], Target]] = [
    plain,
    plain_unprepared,
    pgbouncer,
    citus,
]


def _store_cases(url: str, name: str, items: int) -> dict[str, Callable[[], Any]]:
    """Store put and search, memory record and build_context, on users with ``items`` items
    each, ready to be called."""
    store = create_store(url)
    store.setup()
    memory = AgentMemory(store)
    users = [f"{name}-u{i}" for i in range(4)]
    words = ["ramen", "berlin", "invoice", "delivery", "cats", "jazz", "hiking", "tea"]
    for u in users:
        for i in range(items):
            text = f"{words[i % len(words)]} note {i} " + " ".join(words[: 1 + i % 5])
            store.put(("docs", u), f"k{i}", {"text": text})
    cycle = itertools.cycle(users)
    keys = itertools.count(items)
    turns = itertools.count()

    def put() -> None:
        store.put(("docs", next(cycle)), f"k{next(keys)}", {"text": "a new note on ramen"})

    def put_long() -> None:  # 30 words, as the items of issue-sized loads: 30 postings
        n = next(keys)
        text = " ".join(f"{words[i % len(words)]}{n % 7 + i}" for i in range(30))
        store.put(("docs", next(cycle)), f"k{n}", {"text": text})

    def search() -> None:
        store.search(("docs", next(cycle)), query="ramen delivery", limit=10)

    def record() -> None:
        n = next(turns)
        memory.record(
            f"user={next(cycle)}",
            [{"role": "user", "content": f"I had ramen in Berlin, turn {n}"}],
            key=f"turn-{n}",
        )

    def context() -> None:
        memory.build_context(f"user={next(cycle)}", "where did I eat ramen?")

    return {
        "store_put": put,
        "store_put_30_words": put_long,
        "store_search": search,
        "record": record,
        "build_context": context,
    }


def run(*, quick: bool, out: Path) -> None:
    rounds, per_round, history = (3, 20, 20) if quick else (10, 50, 200)
    graph_rounds, graph_per_round = (2, 5) if quick else (8, 20)
    items = 50 if quick else 500
    loop = asyncio.new_event_loop()
    results: dict[str, Any] = {"quick": quick, "history_per_thread": history, "targets": {}}
    with ExitStack() as stack, postgres() as fresh_plain:
        targets = []
        for make in TARGETS:
            target = make(stack, fresh_plain)
            if target.fresh is None:
                print(f"  {target.name}: skipped ({target.skip})")
                results["targets"][target.name] = {"skipped": target.skip}
            else:
                targets.append(target)
        savers: dict[str, Any] = {}
        for target in targets:
            assert target.fresh is not None
            saver = OurPostgres(target.fresh())
            saver.setup()
            stack.callback(saver.close)
            savers[target.name] = saver

        per_call: dict[str, dict[str, tuple[str, Callable[[], Any]]]] = {}
        for target in targets:
            assert target.fresh is not None
            ops = _ops(savers[target.name], target.name, history)
            ops.pop("list_10")
            ops.update(_store_cases(target.fresh(), target.name, items))
            for op, fn in ops.items():
                per_call.setdefault(op, {})[target.name] = ("sync", fn)
        medians: dict[str, dict[str, float]] = {}
        for op, cases in per_call.items():
            summary = interleave_batches(cases, loop=loop, rounds=rounds, per_round=per_round)
            medians[op] = {k: v["median_us"] for k, v in summary.summary().items()}
            results.setdefault("per_call_us", {})[op] = summary.summary()

        graph: dict[str, dict[str, float]] = {}
        for api in ("sync", "async"):
            cases = {
                name: (api, _graph_case(s, f"{name}-{api}", False, aio=api == "async"))
                for name, s in savers.items()
            }
            summary = interleave_batches(
                cases, loop=loop, rounds=graph_rounds, per_round=graph_per_round
            )
            graph[api] = {k: 1e6 / v["median_us"] for k, v in summary.summary().items()}
        results["graph_invokes_per_s"] = graph
    loop.close()

    names = [t.name for t in targets]
    ratios: dict[str, dict[str, float]] = {}
    rows = []
    for api, per_second in graph.items():
        row = [f"graph invoke/s ({api})"]
        for name in names:
            ratio = per_second[name] / per_second[BASELINE]
            ratios.setdefault(f"graph_{api}", {})[name] = ratio
            row.append(f"{per_second[name]:.0f} ({ratio:.2f}x)")
        rows.append(tuple(row))
    for op, by_target in medians.items():
        row = [f"{op} µs"]
        for name in names:
            ratio = by_target[BASELINE] / by_target[name]  # as a speed: higher is better
            ratios.setdefault(op, {})[name] = ratio
            row.append(f"{by_target[name]:.0f} ({ratio:.2f}x)")
        rows.append(tuple(row))
    results["ratios_to_postgres"] = ratios
    print_table(
        f"scale: median per target (ratio to {BASELINE}, as a speed: higher is better); "
        f"{history} checkpoints per thread, {items} store items per user",
        rows,
        ("case", *names),
    )
    for name, goal in GOALS.items():
        if name not in names:
            continue
        worst = min(ratios["graph_sync"][name], ratios["graph_async"][name])
        verdict = f"{'meets' if worst >= goal else 'misses'} the {goal}x goal"
        if quick:
            verdict += " (a --quick run is too small to judge it)"
        print(f"\n{name} graph invokes: {worst:.2f}x plain PostgreSQL, {verdict}")
    results["growth"] = _growth(quick)
    write_results(out, "scale", results)


def _growth(quick: bool) -> dict[str, Any]:
    """The hot calls' latency as the database grows (:mod:`.growth`), on plain PostgreSQL
    and on Citus, in fresh servers of their own (the copies fill gigabytes)."""
    from benchmarks.suites.growth import checkpoint_growth, store_growth

    with ExitStack() as stack, postgres() as fresh_plain:
        fresh = {"postgres": fresh_plain}
        on_citus = citus(stack, fresh_plain)
        if on_citus.fresh is not None:
            fresh["citus"] = on_citus.fresh
        found = checkpoint_growth(fresh, chat_graph, quick=quick)
        items = store_growth(fresh, quick=quick)
    rows = []
    for name, sizes in found.items():
        for size, measured in sizes.items():
            ops = measured["ops"]
            cells = [
                f"{ops[op]['p50_us'] / 1000:.2f} / {ops[op]['p99_us'] / 1000:.1f}"
                for op in ("get_tuple", "put", "put_writes", "list")
            ]
            rows.append((name, f"{size:,}", *cells, f"{measured['fill_s']:.0f}"))
    print_table(
        "growth: p50 / p99 ms of each call at N threads (random threads, inside graph invokes)",
        rows,
        ("target", "threads", "get_tuple", "put", "put_writes", "list", "fill s"),
    )
    rows = []
    for name, sizes in items.items():
        for size, measured in sizes.items():
            ops = measured["ops"]
            cells = [
                f"{ops[op]['p50_us'] / 1000:.2f} / {ops[op]['p99_us'] / 1000:.1f}"
                for op in ("put", "get", "search", "filter")
            ]
            rows.append((name, f"{size:,}", *cells, f"{measured['fill_s']:.0f}"))
    print_table(
        "growth: p50 / p99 ms of each store call at N items (a random user's 100, query search "
        "and filter inside that namespace)",
        rows,
        ("target", "items", "put", "get", "search", "filter", "fill s"),
    )
    return {"threads": found, "store_items": items}
