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


#: Store items of a full run, and of ``--quick``: users of :data:`ITEMS_PER_USER` items each.
ITEM_SIZES = (100_000, 1_000_000)
QUICK_ITEM_SIZES = (5_000, 20_000)
ITEMS_PER_USER = 100
WORDS = ("ramen", "berlin", "invoice", "delivery", "cats", "jazz", "hiking", "tea", "chess", "oslo")


def fill_items(url: str, start: int, stop: int) -> float:
    """Copy the template user's items (their terms still unlisted: fewer than a merge waits
    for) to users ``u<start>`` .. ``u<stop - 1>`` (namespace ``("docs", "u<i>")``, so shard
    key ``docs.u<i>``), each numbered anew; seconds taken."""
    import psycopg

    began = time.perf_counter()
    template = "docs.template"
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("am_store_items",):
            cols = _columns(conn, table)
            picked = ", ".join(
                "'docs.u' || i"
                if c in ("shard", "prefix")
                else "nextval('am_store_item_numbers')"
                if c == "num"
                else f"t.{c}"
                for c in cols
            )
            for low in range(start, stop, CHUNK // 10):
                high = min(stop, low + CHUNK // 10) - 1
                conn.execute(
                    f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} "
                    f"FROM {table} t, generate_series(%s::int, %s::int) AS i "
                    "WHERE t.shard = %s",
                    (low, high, template),
                )
        conn.execute("ANALYZE")
    return time.perf_counter() - began


def store_growth(
    targets: dict[str, Callable[[], str]], *, quick: bool
) -> dict[str, dict[int, dict[str, Any]]]:
    """For each target, at each size of :data:`ITEM_SIZES`: ``ops``, the p50 and p99 (µs) of
    store ``put``, ``get``, ``search`` by query and by filter in a random user's namespace,
    and ``fill_s``."""
    from langgraph_checkpoint_agent_memory import create_store

    sizes = QUICK_ITEM_SIZES if quick else ITEM_SIZES
    calls = 60 if quick else 300
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for name, fresh in targets.items():
        url = fresh()
        store = create_store(url)
        for i in range(ITEMS_PER_USER):
            words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 4))
            store.put(("docs", "template"), f"k{i}", {"text": f"note {i}: {words}", "n": i})
        users = 0
        results[name] = {}
        for size in sizes:
            took = fill_items(url, users, size // ITEMS_PER_USER)
            users = size // ITEMS_PER_USER
            rng = random.Random(size)
            samples: dict[str, list[float]] = defaultdict(list)

            for n in range(calls):
                ns = ("docs", f"u{rng.randrange(users)}")
                key = f"k{rng.randrange(ITEMS_PER_USER)}"
                word = WORDS[rng.randrange(len(WORDS))]
                _time(samples["get"], store.get, ns, key)
                _time(samples["search"], store.search, ns, query=f"{word} note", limit=10)
                _time(samples["filter"], store.search, ns, filter={"n": 7}, limit=10)
                _time(samples["put"], store.put, ns, f"new{n}", {"text": f"new {word}", "n": n})
            ops = {
                op: {"p50_us": percentile(xs, 50) * 1e6, "p99_us": percentile(xs, 99) * 1e6}
                for op, xs in samples.items()
            }
            results[name][size] = {"ops": ops, "fill_s": took}
            print(f"  {name}: {size:,} store items filled in {took:.0f} s", flush=True)
        store.close()
    return results


def _time(out: list[float], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    began = time.perf_counter()
    fn(*args, **kwargs)
    out.append(time.perf_counter() - began)
