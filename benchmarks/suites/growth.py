"""Latency of the checkpointer's hot statements as the database grows, on one PostgreSQL and
on a Citus cluster: p50 and p99 of ``get_tuple``, ``put``, ``put_writes`` (timed inside real
graph invokes on threads picked at random) and ``list`` of one thread, at each size.

A size of N threads is reached by copying one real thread (a graph turn written through the
saver) N times in SQL, a chunk per transaction, so a million threads take minutes rather than
hours of graph invokes. Part of the ``scale`` suite; :func:`checkpoint_growth` is what it
calls.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.harness import percentile

#: Thread counts of a full run, and of ``--quick``.
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 5_000)
#: Threads copied per transaction while filling.
CHUNK = 50_000
TEMPLATE = "growth-template"
TABLES = ("am_threads", "am_checkpoints", "am_checkpoint_blobs", "am_checkpoint_writes")


def _columns(conn: Any, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


def fill(url: str, start: int, stop: int) -> float:
    """Copy the template thread into threads ``g<start>`` .. ``g<stop - 1>``; seconds taken."""
    import psycopg

    began = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        columns = {t: _columns(conn, t) for t in TABLES}
        for low in range(start, stop, CHUNK):
            high = min(stop, low + CHUNK) - 1
            with conn.transaction():
                for table in TABLES:
                    cols = columns[table]
                    picked = ", ".join("'g' || i" if c == "thread_id" else f"t.{c}" for c in cols)
                    conn.execute(
                        f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} "
                        f"FROM {table} t, generate_series(%s::int, %s::int) AS i "
                        "WHERE t.thread_id = %s",
                        (low, high, TEMPLATE),
                    )
        conn.execute("ANALYZE")
    return time.perf_counter() - began


def _timed(saver: Any, samples: dict[str, list[float]]) -> None:
    """Time every get_tuple/put/put_writes call LangGraph makes on ``saver``."""
    for name in ("get_tuple", "put", "put_writes"):
        method = getattr(saver, name)

        def timed(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                samples[_name].append(time.perf_counter() - began)

        setattr(saver, name, timed)


def checkpoint_growth(
    targets: dict[str, Callable[[], str]],
    graph: Callable[[Any], Any],
    *,
    quick: bool,
) -> dict[str, dict[int, dict[str, Any]]]:
    """For each target (a name and a function returning a fresh database's URL), at each
    size of :data:`SIZES`: ``ops``, the p50 and p99 (µs) of each hot operation, and
    ``fill_s``, the seconds the copies to reach that size took."""
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver

    sizes = QUICK_SIZES if quick else SIZES
    invokes = 40 if quick else 300
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for name, fresh in targets.items():
        url = fresh()
        saver = PostgresSaver(url)
        saver.setup()
        compiled = graph(saver)
        compiled.invoke({"messages": [("user", "hello")]}, _config(TEMPLATE))
        have = 0
        results[name] = {}
        for size in sizes:
            took = fill(url, have, size)
            have = size
            samples: dict[str, list[float]] = defaultdict(list)
            timed = PostgresSaver(url)
            _timed(timed, samples)
            timed_graph = graph(timed)
            rng = random.Random(size)
            for _ in range(invokes):
                thread = f"g{rng.randrange(size)}"
                timed_graph.invoke({"messages": [("user", "more")]}, _config(thread))
                began = time.perf_counter()
                list(timed.list(_config(f"g{rng.randrange(size)}"), limit=10))
                samples["list"].append(time.perf_counter() - began)
            timed.db.close()
            ops = {
                op: {"p50_us": percentile(xs, 50) * 1e6, "p99_us": percentile(xs, 99) * 1e6}
                for op, xs in samples.items()
            }
            results[name][size] = {"ops": ops, "fill_s": took}
            print(f"  {name}: {size:,} threads filled in {took:.0f} s", flush=True)
        saver.db.close()
    return results


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}
