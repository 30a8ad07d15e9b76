"""Stores side by side: ours (memory, SQLite, PostgreSQL) against LangGraph's InMemoryStore,
SqliteStore and PostgresStore on the same items: put, get, search with a filter, and search
with a query (ours ranks it; LangGraph's stores without a vector index ignore the query, so
those rows are context, not a contest).

Each item has a ``text`` of Zipf-distributed words (natural language's frequencies) and
``tags`` of 12 words from a vocabulary of 20. ``search_query`` cycles through 50 queries
typed as people do (two common words, three content words); ``search_query_flat`` asks for
three tags, each of which is in almost half the items: the worst case for any term index."""

from __future__ import annotations

import itertools
import random
import sqlite3
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.harness import bar_chart, interleave, print_table, write_results
from benchmarks.suites.data import ZipfText
from benchmarks.suites.savers import _round_trip_floor, postgres
from langgraph_checkpoint_agent_memory import create_store

WORDS = [
    "order",
    "invoice",
    "delivery",
    "supplier",
    "berlin",
    "munich",
    "paris",
    "tea",
    "coffee",
    "laptop",
    "printer",
    "meeting",
    "budget",
    "contract",
    "approval",
    "travel",
    "hotel",
    "flight",
    "refund",
    "warranty",
]


def item(i: int, rng: random.Random, text: ZipfText) -> dict[str, Any]:
    return {
        "text": text.sentence(),
        "tags": " ".join(rng.choice(WORDS) for _ in range(12)) + f" #{i}",
        "priority": rng.randint(0, 9),
        "owner": f"user{i % 20}",
    }


def _ops(
    store: Any, data: list[dict[str, Any]], keys: Any, fresh: Any, queries: list[str]
) -> dict[str, Any]:
    asked = itertools.cycle(queries)
    return {
        "put": lambda: store.put(("bench", "new"), f"n{next(fresh)}", data[next(keys)]),
        "get": lambda: store.get(("bench", "items"), f"k{next(keys)}"),
        "search_filter": lambda: store.search(
            ("bench",), filter={"priority": {"$gte": 8}, "owner": "user3"}, limit=10
        ),
        "search_query": lambda: store.search(("bench",), query=next(asked), limit=10),
        "search_query_flat": lambda: store.search(
            ("bench",), query="refund for the printer warranty", limit=10
        ),
    }


def run(*, quick: bool, out: Path) -> None:
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.sqlite import SqliteStore

    sizes = [1000] if quick else [1000, 10000, 100000]
    rounds, per_round = (3, 30) if quick else (10, 100)
    results: dict[str, Any] = {"quick": quick}
    rows = []
    chart: dict[str, dict[str, float]] = {}
    with (
        ExitStack() as stack,
        postgres() as fresh_pg,
        tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp,
    ):
        folder = Path(tmp)
        results["select_1_us"] = _round_trip_floor(fresh_pg(), 200 if quick else 2000)
        for size in sizes:
            stores: dict[str, Any] = {
                "ours-memory": create_store(),
                "ours-sqlite": create_store(f"sqlite:///{folder / f'ours-{size}.db'}"),
                "ours-postgres": create_store(fresh_pg()),
                "lg-InMemoryStore": InMemoryStore(),
            }
            conn = sqlite3.connect(
                folder / f"lg-{size}.db", check_same_thread=False, isolation_level=None
            )
            stack.callback(conn.close)
            lg_sqlite = SqliteStore(conn)
            lg_sqlite.setup()
            stores["lg-SqliteStore"] = lg_sqlite
            lg_pg = stack.enter_context(PostgresStore.from_conn_string(fresh_pg()))
            lg_pg.setup()
            stores["lg-PostgresStore"] = lg_pg
            for name, store in stores.items():
                if name.startswith("ours"):
                    stack.callback(store.close)
            rng = random.Random(7)
            text = ZipfText()
            data = [item(i, rng, text) for i in range(size)]
            queries = [text.query() for _ in range(50)]
            from langgraph.store.base import PutOp

            for store in stores.values():
                for start in range(0, size, 500):
                    store.batch(
                        [
                            PutOp(("bench", "items"), f"k{i}", data[i])
                            for i in range(start, min(size, start + 500))
                        ]
                    )
            keys = itertools.cycle(range(size))
            counters = {name: itertools.count(size) for name in stores}

            table = {
                name: _ops(store, data, keys, counters[name], queries)
                for name, store in stores.items()
            }
            for op in ("put", "get", "search_filter", "search_query", "search_query_flat"):
                comparison = interleave(
                    {n: t[op] for n, t in table.items()}, rounds=rounds, per_round=per_round
                )
                summary = comparison.summary()
                results[f"{op}@{size}"] = summary
                chart[f"{op}@{size}"] = {k: v["median_us"] for k, v in summary.items()}
                for ours, peer in (
                    ("ours-memory", "lg-InMemoryStore"),
                    ("ours-sqlite", "lg-SqliteStore"),
                    ("ours-postgres", "lg-PostgresStore"),
                ):
                    r = summary[ours]["median_us"] / summary[peer]["median_us"]
                    rows.append(
                        (
                            f"{op}@{size}",
                            ours,
                            peer,
                            f"{summary[ours]['median_us']:.0f}",
                            f"{summary[peer]['median_us']:.0f}",
                            f"{summary[ours]['p99_us']:.0f}",
                            f"{summary[peer]['p99_us']:.0f}",
                            f"{r:.2f}",
                        )
                    )
    print_table(
        f"per call, µs (median, p99); PostgreSQL SELECT 1 floor {results['select_1_us']:.0f} µs",
        rows,
        ("op@items", "ours", "peer", "ours p50", "peer p50", "ours p99", "peer p99", "ours/peer"),
    )
    write_results(out, "stores", results)
    bar_chart(out, "stores", chart, "median µs per call")
