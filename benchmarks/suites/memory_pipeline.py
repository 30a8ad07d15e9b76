"""The memory pipeline: consolidation throughput, decay at scale, and ``inject_node`` latency.

- **consolidate**: episodes/s with an instant extractor (the rule-based one), SQLite and
  PostgreSQL, 50 scopes; target >= 500 episodes/s. Consolidation and decay are repeated
  three times on fresh databases (once in ``--quick``); the median run is reported.
- **decay**: one ``decay()`` over 1M facts on PostgreSQL (100k in ``--quick``), a third of
  them under the threshold; target <= 10 s. The facts are bulk-loaded with SQL.
- **inject**: ``inject_node`` latency for a user with 1k facts and 1k episodes (p50, p99),
  lexical only and with a (cheap, deterministic) embedder, whose query-embedding time is
  measured apart and excluded; target p50 <= 10 ms. Interleaved with the peer: a hand-rolled
  node on LangGraph's ``SqliteStore`` / ``PostgresStore`` holding the same items (every fact
  and the 20 latest episodes, no ranking, no budget), with the ``SELECT 1`` floor.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import time
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage

from benchmarks.harness import bar_chart, interleave, print_table, write_results
from benchmarks.suites.savers import _round_trip_floor, postgres
from langgraph_checkpoint_agent_memory import AgentMemory, create_store


class HashEmbeddings(Embeddings):
    """64 dimensions from word hashes: deterministic and nearly free, so the figures show
    our cost, not a model's."""

    dims = 64

    def _one(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        for word in text.lower().split():
            v[int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16) % self.dims] += 1
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def _consolidate(url: str, episodes: int, scopes: int) -> dict[str, float]:
    store = create_store(url)
    memory = AgentMemory(store, max_episodes_per_job=50)
    memory.setup()
    for n in range(episodes):
        memory.record(
            {"user_id": f"u{n % scopes}"},
            [{"role": "user", "content": f"My code{n} is v{n}. I like topic{n % 7}."}],
            key=f"e{n}",
        )
    started = time.perf_counter()
    report = memory.consolidate()
    seconds = time.perf_counter() - started
    store.close()
    assert report.episodes == episodes, report.as_dict()
    return {"episodes": episodes, "seconds": seconds, "episodes_per_s": episodes / seconds}


def _decay(url: str, facts: int) -> dict[str, float]:
    import psycopg

    store = create_store(url)
    memory = AgentMemory(store)
    memory.setup()
    now = time.time()
    with psycopg.connect(url, autocommit=True) as conn:
        # a third were last reinforced 90 days ago (0.5 * 0.95**90 = 0.005 < 0.05), the rest today
        conn.execute(
            """
            INSERT INTO am_store_items (shard, prefix, key, value, created_at, updated_at, num)
            SELECT 'memory.user=u' || (g %% 1000), 'memory.user=u' || (g %% 1000) || '.facts',
                   'f' || g,
                   jsonb_build_object('attribute', 'f' || g, 'value', 'v', 'statement', 's'),
                   %(now)s, %(now)s, nextval('am_store_item_numbers')
            FROM generate_series(1, %(n)s) g
            """,
            {"now": now, "n": facts},
        )
        conn.execute(
            """
            INSERT INTO am_memory_decay
                (shard, prefix, key, scope, log_importance, reinforced_at, pinned)
            SELECT 'memory.user=u' || (g %% 1000), 'memory.user=u' || (g %% 1000) || '.facts',
                   'f' || g, 'user=u' || (g %% 1000),
                   ln(0.5), CASE WHEN g %% 3 = 0 THEN %(old)s ELSE %(now)s END, 0
            FROM generate_series(1, %(n)s) g
            """,
            {"now": now, "old": now - 90 * 86400, "n": facts},
        )
        conn.execute("ANALYZE")
    started = time.perf_counter()
    removed = memory.decay()
    seconds = time.perf_counter() - started
    store.close()
    assert removed == facts // 3, removed
    return {"facts": facts, "deleted": removed, "seconds": seconds}


def _populate(memory: AgentMemory, facts: int) -> dict[str, str]:
    scope = {"user_id": "busy"}
    for n in range(facts):
        memory.record(
            scope,
            [
                {"role": "user", "content": f"My item{n} is value{n}. Order {n} shipped late."},
                {"role": "assistant", "content": f"Sorry about order {n}."},
            ],
            key=f"e{n}",
            occurred_at=time.time() - (facts - n) * 3600,
        )
    memory.consolidate()
    return scope


def _median_run(runs: list[dict[str, float]], key: str, *, high: bool) -> dict[str, Any]:
    """The median run of a repeated measure, with every run's figure kept."""
    ordered = sorted(runs, key=lambda r: r[key], reverse=high)
    return {**ordered[len(ordered) // 2], "runs": [r[key] for r in runs]}


def _peer_store(kind: str, url: str, stack: contextlib.ExitStack) -> Any:
    """LangGraph's own store of the same backend, what a hand-rolled memory node would use."""
    if kind == "sqlite":
        import sqlite3

        from langgraph.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///") + ".lg"
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        stack.callback(conn.close)
        store: Any = SqliteStore(conn)
    else:
        from langgraph.store.postgres import PostgresStore

        store = stack.enter_context(PostgresStore.from_conn_string(url))
    store.setup()
    return store


def _hand_rolled(store: Any, facts_ns: tuple[str, ...], episodes_ns: tuple[str, ...]) -> Any:
    """The peer's inject: every fact, the latest episodes, formatted, cut at ~4 chars/token."""

    def inject(query: str) -> str:
        facts = store.search(facts_ns, limit=1000)
        episodes = store.search(episodes_ns, query=query, limit=20)
        lines = ["Known facts:"] + [f"- {i.value['statement']}" for i in facts]
        lines += ["Past conversations:"] + [f"- {i.value['summary']}" for i in episodes]
        return "\n".join(lines)[:4000]

    return inject


def _inject(
    kind: str,
    url: str,
    peer_url: str,
    facts: int,
    rounds: int,
    embed: bool,
    stack: contextlib.ExitStack,
) -> dict[str, Any]:
    from langgraph.store.base import PutOp

    index = {"dims": HashEmbeddings.dims, "embed": HashEmbeddings()} if embed else None
    store = create_store(url, index=index)
    stack.callback(store.close)
    memory = AgentMemory(store, budget_tokens=1000, max_episodes_per_job=100)
    scope = _populate(memory, facts)
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")  # what autovacuum does after a bulk load
    counts = memory.scopes()["user=busy"]
    facts_ns, episodes_ns = memory.namespace(scope, "facts"), memory.namespace(scope, "episodes")
    peer = _peer_store(kind, peer_url, stack)
    for ns in (facts_ns, episodes_ns):  # the same items, copied as they are
        items = store.search(ns, limit=10_000)
        for start in range(0, len(items), 500):
            peer.batch([PutOp(ns, i.key, i.value) for i in items[start : start + 500]])
    config = {"configurable": {"user_id": scope["user_id"], "thread_id": "bench"}}
    queries = itertools.cycle([f"what happened to order {n}?" for n in range(0, facts, 7)])
    hand_rolled = _hand_rolled(peer, facts_ns, episodes_ns)

    def ours() -> None:
        out = memory.inject_node.invoke({"messages": [HumanMessage(next(queries))]}, config)
        assert out and "Known facts" in out["messages"][0].content

    embed_cost = 0.0
    if embed:
        started = time.perf_counter()
        for _ in range(200):
            HashEmbeddings().embed_query("what happened to order 17?")
        embed_cost = (time.perf_counter() - started) / 200
    comparison = interleave(
        {"ours": ours, "langgraph-store": lambda: hand_rolled(next(queries))},
        rounds=rounds,
        per_round=10,
    )
    summary = comparison.summary()
    return {
        "facts": counts["facts"],
        "episodes": counts["episodes"],
        "p50_ms": summary["ours"]["median_us"] / 1e3 - embed_cost * 1e3,
        "p99_ms": summary["ours"]["p99_us"] / 1e3 - embed_cost * 1e3,
        "query_embedding_ms": embed_cost * 1e3,
        "peer_p50_ms": summary["langgraph-store"]["median_us"] / 1e3,
        "peer_p99_ms": summary["langgraph-store"]["p99_us"] / 1e3,
        "ratio_ours_over_peer": summary["ours"]["median_us"]
        / summary["langgraph-store"]["median_us"],
    }


def run(*, quick: bool, out: Path) -> None:
    episodes = 500 if quick else 5000
    decay_facts = 100_000 if quick else 1_000_000
    inject_size = 200 if quick else 1000
    rounds = 5 if quick else 30
    results: dict[str, Any] = {"quick": quick}
    folder = out / ".memory-pipeline"
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        fresh_pg = stack.enter_context(postgres())
        urls = {
            "sqlite": lambda name: f"sqlite:///{folder / f'{name}-{time.time_ns()}.db'}",
            "postgres": lambda name: fresh_pg(),
        }
        results["select_1_us"] = _round_trip_floor(fresh_pg(), 200 if quick else 2000)
        repeats = 1 if quick else 3
        results["consolidate"] = {
            b: _median_run(
                [_consolidate(make("consolidate"), episodes, 50) for _ in range(repeats)],
                "episodes_per_s",
                high=True,
            )
            for b, make in urls.items()
        }
        results["decay"] = {
            "postgres": _median_run(
                [_decay(fresh_pg(), decay_facts) for _ in range(repeats)], "seconds", high=False
            )
        }
        results["inject"] = {
            f"{b}{'+vectors' if embed else ''}": _inject(
                b, make("inject"), make("peer"), inject_size, rounds, embed, stack
            )
            for b, make in urls.items()
            for embed in (False, True)
        }
    for file in folder.glob("*"):
        file.unlink()
    folder.rmdir()
    rows = [
        (f"consolidate {b}", f"{r['episodes_per_s']:.0f} episodes/s", ">= 500")
        for b, r in results["consolidate"].items()
    ]
    d = results["decay"]["postgres"]
    rows.append((f"decay {d['facts']:,} facts (postgres)", f"{d['seconds']:.2f} s", "<= 10 s"))
    rows += [
        (
            f"inject {b} ({r['facts']} facts, {r['episodes']} episodes)",
            f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms",
            "p50 <= 10 ms",
        )
        for b, r in results["inject"].items()
    ]
    print_table("Memory pipeline", rows, ("measure", "ours", "target"))
    print_table(
        f"inject_node against a hand-rolled node on LangGraph's store of the same backend "
        f"(every fact, the 20 latest episodes; SELECT 1 floor {results['select_1_us']:.0f} µs)",
        [
            (
                b,
                f"{r['p50_ms']:.2f}",
                f"{r['peer_p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
                f"{r['peer_p99_ms']:.2f}",
                f"{r['ratio_ours_over_peer']:.2f}",
            )
            for b, r in results["inject"].items()
        ],
        ("backend", "ours p50 ms", "peer p50 ms", "ours p99", "peer p99", "ours/peer"),
    )
    write_results(out, "memory-pipeline", results)
    bar_chart(
        out,
        "memory-pipeline",
        {
            "inject p50 (ms)": {b: r["p50_ms"] for b, r in results["inject"].items()},
            "hand-rolled p50 (ms)": {b: r["peer_p50_ms"] for b, r in results["inject"].items()},
            "inject p99 (ms)": {b: r["p99_ms"] for b, r in results["inject"].items()},
        },
        "milliseconds",
    )
    assert all(math.isfinite(r["p50_ms"]) for r in results["inject"].values())
