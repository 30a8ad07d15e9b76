"""Stores side by side: ours (memory, SQLite, PostgreSQL) against LangGraph's InMemoryStore,
SqliteStore and PostgresStore on the same items: put, get, search with a filter, and search
with a query (ours ranks it; LangGraph's stores without a vector index ignore the query, so
those rows are context, not a contest).

Each item has a ``text`` of Zipf-distributed words (natural language's frequencies) and
``tags`` of 12 words from a vocabulary of 20. ``search_query`` cycles through 50 queries
typed as people do (two common words, three content words); ``search_query_flat`` asks for
three tags, each of which is in almost half the items: the worst case for any term index.

Then ``storage``: bytes per item (indexes included) and the load time of our store against
what each database's own text index costs for the same items, and ``tie``: a query whose two
words each occur once in a random half of items of equal length, so tens of thousands of
items tie on score."""

from __future__ import annotations

import itertools
import os
import random
import sqlite3
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.harness import bar_chart, interleave, print_table, write_results
from benchmarks.suites.data import ZipfText, query_text
from benchmarks.suites.savers import _round_trip_floor, postgres, sqlite_bytes
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
            pg_urls = [fresh_pg() for _ in range(3)]
            stores: dict[str, Any] = {
                "ours-memory": create_store(),
                "ours-sqlite": create_store(f"sqlite:///{folder / f'ours-{size}.db'}"),
                "ours-postgres": create_store(pg_urls[0]),
                ENCRYPTED_SQLITE: create_store(
                    f"sqlite:///{folder / f'ours-enc-{size}.db'}", encryption=_encryption()
                ),
                ENCRYPTED_POSTGRES: create_store(pg_urls[1], encryption=_encryption()),
                "lg-InMemoryStore": InMemoryStore(),
            }
            conn = sqlite3.connect(
                folder / f"lg-{size}.db", check_same_thread=False, isolation_level=None
            )
            stack.callback(conn.close)
            lg_sqlite = SqliteStore(conn)
            lg_sqlite.setup()
            stores["lg-SqliteStore"] = lg_sqlite
            lg_pg = stack.enter_context(PostgresStore.from_conn_string(pg_urls[2]))
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
            _analyze(pg_urls)
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
                    (ENCRYPTED_SQLITE, "ours-sqlite"),
                    (ENCRYPTED_POSTGRES, "ours-postgres"),
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
            results[f"storage_bytes@{size}"] = sizes_on_disk = {
                "ours-sqlite": sqlite_bytes(folder / f"ours-{size}.db"),
                ENCRYPTED_SQLITE: sqlite_bytes(folder / f"ours-enc-{size}.db"),
            }
            rows.append(
                (
                    f"bytes@{size}",
                    ENCRYPTED_SQLITE,
                    "ours-sqlite",
                    f"{sizes_on_disk[ENCRYPTED_SQLITE]:,}",
                    f"{sizes_on_disk['ours-sqlite']:,}",
                    "",
                    "",
                    f"{sizes_on_disk[ENCRYPTED_SQLITE] / sizes_on_disk['ours-sqlite']:.2f}",
                )
            )
        storage_rows = run_storage(quick=quick, fresh_pg=fresh_pg, folder=folder, results=results)
        tie_rows = run_tie(quick=quick, fresh_pg=fresh_pg, folder=folder, results=results)
    print_table(
        f"per call, µs (median, p99); PostgreSQL SELECT 1 floor {results['select_1_us']:.0f} µs",
        rows,
        ("op@items", "ours", "peer", "ours p50", "peer p50", "ours p99", "peer p99", "ours/peer"),
    )
    print_table(
        "storage: bytes per item with every index (after VACUUM), and the load's seconds",
        storage_rows,
        (
            "database",
            "ours B/item",
            "reference B/item",
            "ratio",
            "ours load s",
            "ref load s",
            "ratio",
        ),
    )
    print_table(
        "tie query (two words, each once in a random half of items of equal length), ms",
        tie_rows,
        ("store", "items", "p50", "p99", "n"),
    )
    write_results(out, "stores", results)
    bar_chart(out, "stores", chart, "median µs per call")
    run_vectors(quick=quick, out=out)


# -- storage: what an item costs against the databases' own text indexes -----------------

#: Items of the storage comparison (the suite's data) and of the tie query.
STORAGE_ITEMS = (1_000, 10_000)
TIE_ITEMS = (5_000, 100_000)


def _put_all(store: Any, items: list[tuple[str, dict[str, Any]]], ns: tuple[str, ...]) -> float:
    """Put ``items`` 500 to a batch; seconds taken."""
    from langgraph.store.base import PutOp

    started = time.perf_counter()
    for start in range(0, len(items), 500):
        store.batch([PutOp(ns, key, value) for key, value in items[start : start + 500]])
    return time.perf_counter() - started


def _fts5_reference(path: Path, items: list[tuple[str, dict[str, Any]]]) -> tuple[float, int]:
    """The items as JSON in a plain table plus a contentless FTS5 index (porter) of the text
    our store indexes for them, loaded 500 to a transaction: seconds taken, and bytes
    beyond the empty tables'."""
    import json

    from langgraph_checkpoint_agent_memory.store.search import text_leaves

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE items (prefix TEXT, key TEXT, value TEXT, PRIMARY KEY (prefix, key))"
    )
    conn.execute("CREATE VIRTUAL TABLE items_text USING fts5(text, content='', tokenize='porter')")
    empty = sqlite_bytes(path)
    started = time.perf_counter()
    for start in range(0, len(items), 500):
        conn.execute("BEGIN")
        for key, value in items[start : start + 500]:
            row = conn.execute(
                "INSERT INTO items VALUES ('bench.items', ?, ?)", (key, json.dumps(value))
            ).lastrowid
            conn.execute(
                "INSERT INTO items_text (rowid, text) VALUES (?, ?)",
                (row, "\n".join(text_leaves(value))),
            )
        conn.execute("COMMIT")
    took = time.perf_counter() - started
    conn.close()
    return took, sqlite_bytes(path) - empty


def _pg_bytes(url: str, tables: list[str], vacuum: bool = True) -> int:
    """``tables``' bytes with their indexes and TOAST, after VACUUM (``vacuum`` off: as
    they are; for the empty tables, whose statistics would otherwise say "no rows" to
    every plan of the load that follows)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if vacuum:
            conn.execute("VACUUM ANALYZE")
        return sum(
            conn.execute("SELECT pg_total_relation_size(%s)", (name,)).fetchone()[0]  # type: ignore[index]
            for name in tables
        )


def run_storage(
    *, quick: bool, fresh_pg: Any, folder: Path, results: dict[str, Any]
) -> list[tuple[str, ...]]:
    """Bytes per item (indexes included, empty tables subtracted) and load time of our store
    against the reference on each database: on SQLite the JSON in a plain table plus a
    contentless FTS5 index of its text; on PostgreSQL ``PostgresStore``'s row plus a GIN
    index of the ``tsvector`` of the same text (every string of the value).

    Ours is measured at rest: after the load and a first query, which lists what the load
    left unlisted (as ``VACUUM`` flushes the GIN index's pending list into the index); the
    bytes right after the load are kept in the results too (``<store>_bytes_loaded``)."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    from langgraph_checkpoint_agent_memory.db.schema import STORE_TABLES

    size = STORAGE_ITEMS[0] if quick else STORAGE_ITEMS[1]
    rng = random.Random(7)
    text = ZipfText()
    items = [(f"k{i}", item(i, rng, text)) for i in range(size)]
    ns = ("bench", "items")
    found: dict[str, Any] = {"items": size}

    ours = folder / "storage-ours.db"
    for key, url in (("ours-sqlite", f"sqlite:///{ours}"), ("ours-postgres", fresh_pg())):
        store = create_store(url)
        try:
            store.setup()
            if key == "ours-sqlite":
                empty = sqlite_bytes(ours)
                found[f"{key}_load_s"] = _put_all(store, items, ns)
                found[f"{key}_bytes_loaded"] = sqlite_bytes(ours) - empty
                store.search(ns, query="delivery", limit=1)  # lists the rest
                found[f"{key}_bytes"] = sqlite_bytes(ours) - empty
            else:
                tables = [t.name for t in STORE_TABLES]
                empty = _pg_bytes(url, tables, vacuum=False)
                found[f"{key}_load_s"] = _put_all(store, items, ns)
                found[f"{key}_bytes_loaded"] = _pg_bytes(url, tables) - empty
                store.search(ns, query="delivery", limit=1)
                found[f"{key}_bytes"] = _pg_bytes(url, tables) - empty
        finally:
            store.close()
    found["fts5_load_s"], found["fts5_bytes"] = _fts5_reference(folder / "fts5.db", items)
    url = fresh_pg()
    with PostgresStore.from_conn_string(url) as lg:
        lg.setup()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE INDEX store_text ON store USING gin "
                "(jsonb_to_tsvector('english', value, '[\"string\"]'))"
            )
        empty = _pg_bytes(url, ["store"], vacuum=False)
        found["gin_load_s"] = _put_all(lg, items, ns)
        found["gin_bytes"] = _pg_bytes(url, ["store"]) - empty
    results["storage"] = found
    rows = []
    for database, key, peer in (
        ("SQLite", "ours-sqlite", "fts5"),
        ("PostgreSQL", "ours-postgres", "gin"),
    ):
        mine, theirs = found[f"{key}_bytes"] / size, found[f"{peer}_bytes"] / size
        load, peer_load = found[f"{key}_load_s"], found[f"{peer}_load_s"]
        rows.append(
            (
                f"{database} ({size:,} items; reference {peer})",
                f"{mine:,.0f}",
                f"{theirs:,.0f}",
                f"{mine / theirs:.2f}",
                f"{load:.2f}",
                f"{peer_load:.2f}",
                f"{load / peer_load:.1f}",
            )
        )
    return rows


def tie_items(n: int, seed: int = 11) -> list[tuple[str, dict[str, Any]]]:
    """``n`` items of eight words each: "alpha" in a random half, "bravo" in a random
    half (each at most once), the other words drawn from a vocabulary that stems to
    neither, so every item has the same length and items tie on score by the thousand."""
    rng = random.Random(seed)
    vocab = ZipfText().vocab[40:2040]
    out = []
    for i in range(n):
        words = [rng.choice(vocab) for _ in range(8)]
        if rng.random() < 0.5:
            words[0] = "alpha"
        if rng.random() < 0.5:
            words[1] = "bravo"
        out.append((f"t{i}", {"text": " ".join(words)}))
    return out


def run_tie(
    *, quick: bool, fresh_pg: Any, folder: Path, results: dict[str, Any]
) -> list[tuple[str, ...]]:
    """p50 of ``search(query="alpha bravo", limit=10)`` over :func:`tie_items`, bulk loaded,
    on SQLite and PostgreSQL."""
    size = TIE_ITEMS[0] if quick else TIE_ITEMS[1]
    items = tie_items(size)
    ns = ("tie", "items")
    stores = {
        "ours-sqlite": create_store(f"sqlite:///{folder / 'tie.db'}"),
        "ours-postgres": create_store(fresh_pg()),
    }
    try:
        for store in stores.values():
            store.setup()
            _put_all(store, items, ns)
        summary = interleave(
            {
                name: (lambda s=store: s.search(ns, query="alpha bravo", limit=10))
                for name, store in stores.items()
            },
            rounds=3 if quick else 10,
            per_round=5 if quick else 20,
        ).summary()
    finally:
        for store in stores.values():
            store.close()
    results["tie"] = {"items": size, **summary}
    return [
        (
            name,
            f"{size:,}",
            f"{s['median_us'] / 1000:.2f}",
            f"{s['p99_us'] / 1000:.2f}",
            str(s["n"]),
        )
        for name, s in summary.items()
    ]


#: The same stores with encryption at rest on (a master key of the run, the key store a table
#: of the same database), measured against ours without it.
ENCRYPTED_SQLITE = "ours-sqlite (encrypted)"
ENCRYPTED_POSTGRES = "ours-postgres (encrypted)"


def _analyze(urls: list[str]) -> None:
    """Statistics for every PostgreSQL database loaded: without them, the plans of a table
    autovacuum has analyzed differ from those of one it has not reached yet (reading a page
    of items by key, the namespace's 1000 rows are filtered instead of each key looked up),
    and which store that favours depends on when the daemon woke."""
    import psycopg

    for url in urls:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")


def _encryption() -> Any:
    from langgraph_checkpoint_agent_memory import Encryption, generate_master_key

    # the field its filtered search asks by equality, marked as the user guide says
    return Encryption(master_keys=[generate_master_key()], filterable_fields=["owner"])


# -- vector search at scale ----------------------------------------------------------------

#: Items of the large namespace (``python -m benchmarks run stores --vectors N``).
VECTORS_ENV = "AGENT_MEMORY_BENCH_VECTORS"
DIMS = 256
#: Queries whose results are compared with exact search for recall@10.
RECALL_QUERIES = 100


def vector_sizes(quick: bool) -> tuple[int, int, list[int]]:
    """Items in the large namespace, items over user namespaces of 100 (a tenth as many),
    and the sizes of the mid namespaces that place the switch between the paths."""
    big = int(os.environ.get(VECTORS_ENV) or (20_000 if quick else 1_000_000))
    mids = [n for n in (1_000, 3_000, 10_000, 30_000, 100_000) if n <= max(3_000, big // 10)]
    return big, max(100, big // 10 // 100 * 100), mids


def _vector_store(url: str, embed: Any, kind: str, **ann: Any) -> Any:
    return create_store(
        url,
        index={
            "dims": DIMS,
            "embed": embed,
            "fields": ["id"],
            "ann_index_config": {"kind": kind, **ann},
        },
        weights=(0.0, 1.0),  # the vector ranking alone: recall is the index's
    )


def _load(store: Any, items: list[tuple[tuple[str, ...], str, dict[str, Any]]]) -> float:
    """Put ``items`` through ``store.batch``, 500 at a time from two threads (a writer per
    core); seconds taken."""
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.store.base import PutOp

    def put(start: int) -> None:
        store.batch([PutOp(ns, key, value) for ns, key, value in items[start : start + 500]])

    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(put, range(0, len(items), 500)))
    return time.perf_counter() - started


def _previous_release(store: Any) -> Any:
    """``store`` searching as the release before the namespace index on vectors did:
    numpy over the namespace's vectors, read by joining every item under the namespace
    (a prefix range no index could walk). The statement is the one that release sent."""
    statements = store.statements
    store.dialect.native_vectors = False

    def vectors(filters: Any, scoped: bool) -> Any:
        import sqlalchemy as sa

        from langgraph_checkpoint_agent_memory.db.schema import store_items, store_vectors

        v, i = store_vectors.alias("v"), store_items.alias("i")
        joined = (i.c.shard == v.c.shard) & (i.c.prefix == v.c.prefix) & (i.c.key == v.c.key)
        under = [store.dialect.under_clause(i.c.prefix)]  # on the items: no index walks it
        if scoped:
            under.insert(0, i.c.shard == sa.bindparam("shard"))
        now = sa.bindparam("now", type_=sa.Float)
        live = sa.or_(i.c.expires_at.is_(None), i.c.expires_at > now)
        return statements.statement(
            ("vectors_previous_release", filters, scoped),
            lambda: (
                sa.select(v.c.prefix, v.c.key, v.c.vector)
                .select_from(v.join(i, joined))
                .where(*under, live, *statements.filtered(i.c.value, filters))
            ),
        )

    statements.vectors = vectors
    return store


def _keys(found: list[Any]) -> list[str]:
    return [item.key for item in found]


def run_vectors(*, quick: bool, out: Path) -> None:
    """1M items with 256-dimension vectors in one namespace and 100k over 1,000 user
    namespaces (``--vectors`` scales both), on PostgreSQL with pgvector: build time, and
    search p50/p99 and recall@10 of the HNSW path against exact ranking, interleaved with
    exact search in SQL and the exact numpy path (what runs without pgvector)."""
    import psycopg

    from benchmarks.suites.data import ClusteredVectors, TableEmbeddings

    # a server sized for the data: the index stays in PostgreSQL's cache, builds in memory,
    # and writes do not checkpoint every few seconds
    settings = {
        "shared_buffers": "256MB" if quick else "2GB",
        "maintenance_work_mem": "256MB" if quick else "2GB",
        "max_wal_size": "8GB",
    }
    with ExitStack() as stack:
        try:
            fresh_pg = stack.enter_context(postgres("pgvector", settings))
        except RuntimeError as exc:  # no server with pgvector here
            print(f"\nvector search skipped: {exc}")
            return
        _run_vectors(
            quick=quick,
            out=out,
            fresh_pg=fresh_pg,
            psycopg=psycopg,
            data=(ClusteredVectors, TableEmbeddings),
            settings=settings,
        )


def _run_vectors(
    *,
    quick: bool,
    out: Path,
    fresh_pg: Any,
    psycopg: Any,
    data: tuple[Any, Any],
    settings: dict[str, str],
) -> None:
    clustered, table = data
    big, users, mids = vector_sizes(quick)
    spaces = users // 100
    rounds = 3 if quick else 10
    generator = clustered(dims=DIMS, clusters=max(50, big // 1000))
    started = time.perf_counter()
    documents = generator.points(big + users + sum(mids))
    queries = generator.points(200)
    embed = table(documents, queries)
    print(
        f"\nvectors: {big:,} + {users:,} over {spaces} user namespaces + mid {mids}, "
        f"generated in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    results: dict[str, Any] = {
        "quick": quick,
        "items": big,
        "user_items": users,
        "user_namespaces": spaces,
        "dims": DIMS,
    }
    url = fresh_pg()
    big_ns = ("bench", "big")
    items = [(big_ns, f"k{i}", {"id": f"v{i}", "tag": i % 10}) for i in range(big)]
    at = big
    for size in mids:
        items += [
            (("mid", f"n{size}"), f"k{at + j}", {"id": f"v{at + j}", "tag": j % 10})
            for j in range(size)
        ]
        at += size
    rest: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
    for u in range(spaces):
        rest += [
            (("users", f"u{u:04d}"), f"k{at + j}", {"id": f"v{at + j}", "tag": j % 10})
            for j in range(100)
        ]
        at += 100

    # build: the large and mid namespaces loaded without the index, which is then built over
    # them (faster than inserting into the graph item by item); the users put with it there
    flat = _vector_store(url, embed, "flat")
    flat.setup()
    load_s = _load(flat, items)
    started = time.perf_counter()
    hnsw = _vector_store(url, embed, "hnsw")
    hnsw.setup()
    build_s = time.perf_counter() - started
    incremental_s = _load(hnsw, rest)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = conn.execute(
            "SELECT pg_total_relation_size('am_store_vectors'), pg_relation_size(%s),"
            " pg_table_size('am_store_vectors')",
            (hnsw.vector_index,),
        ).fetchone()
        # what the server runs with (an external server, AGENT_MEMORY_BENCH_PG_URL, has its
        # own settings), and its versions
        applied = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("shared_buffers", "maintenance_work_mem", "max_wal_size")
        }
        applied["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
        applied["pgvector"] = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()[0]
    results["build"] = {
        "load_items": len(items),
        "load_s": load_s,
        "index_s": build_s,
        "put_with_index_items": len(rest),
        "put_with_index_s": incremental_s,
        "vectors_table_bytes": sizes[0],  # with its indexes
        "vectors_table_without_indexes_bytes": sizes[2],
        "hnsw_index_bytes": sizes[1],
        "server_settings": applied,
        "server_settings_asked": settings,
    }
    print(
        f"build: {len(items):,} items put in {load_s:.0f} s ({len(items) / load_s:,.0f}/s) "
        "without the "
        f"index, HNSW index built in {build_s:.0f} s, {len(rest):,} more put with it in "
        f"{incremental_s:.0f} s ({len(rest) / incremental_s:,.0f}/s); vectors table "
        f"{sizes[0] / 2**20:,.0f} MB with index {sizes[1] / 2**20:,.0f} MB",
        flush=True,
    )

    exact = flat
    numpy_path = _vector_store(url, embed, "flat")
    numpy_path.setup()
    numpy_path.dialect.native_vectors = False  # as on a server without pgvector
    previous = _vector_store(url, embed, "flat")
    previous.setup()
    _previous_release(previous)
    forced = _vector_store(url, embed, "hnsw")  # the index whatever the namespace's size
    forced.setup()
    forced.ranker.exact_max, forced.ranker.index_cost = 0, 0.0
    breadths = {}
    for ef in (40, 100):  # the default's recall against cheaper searches
        breadths[f"hnsw ef_search={ef}"] = _vector_store(url, embed, "hnsw", ef_search=ef)
        breadths[f"hnsw ef_search={ef}"].setup()
    stores = {
        **breadths,
        "hnsw": hnsw,
        "exact-sql": exact,
        "numpy": numpy_path,
        "previous-release": previous,
        "hnsw-forced": forced,
    }
    ask = itertools.cycle(range(len(queries)))
    user = itertools.cycle(range(spaces))

    def search(store: Any, ns: Any, flt: Any = None) -> Any:
        return lambda: store.search(
            ns() if callable(ns) else ns, query=query_text(next(ask)), filter=flt, limit=10
        )

    def user_ns() -> tuple[str, ...]:
        return ("users", f"u{next(user):04d}")

    slow = {"exact-sql": 2, "numpy": 1, "previous-release": 1}
    # The index alone first: the exact paths read the whole namespace, which pushes the
    # index out of PostgreSQL's cache, and searches interleaved with them pay for that.
    scenarios: list[tuple[str, Any, Any, list[str], bool]] = [
        (f"{big:,} in one namespace", big_ns, None, ["hnsw", *breadths], True),
        (
            f"{big:,} in one namespace, with the exact paths",
            big_ns,
            None,
            ["hnsw", "exact-sql", "numpy"],
            False,
        ),
        (f"{big:,}, filter keeping 10%", big_ns, {"tag": 3}, ["hnsw", "exact-sql"], True),
        (
            f"user namespace of 100 ({spaces})",
            user_ns,
            None,
            ["hnsw", "exact-sql", "numpy", "previous-release"],
            True,
        ),
    ]
    scenarios += [
        (
            f"namespace of {n:,} ({n / (big + users + sum(mids)):.1%} of the index)",
            ("mid", f"n{n}"),
            None,
            ["hnsw-forced", "exact-sql"],
            True,
        )
        for n in mids
    ]
    ef_search = hnsw.ann_config.ef_search
    rows: list[tuple[str, ...]] = []
    for title, ns, flt, names, with_recall in scenarios:
        per_round = 20
        comparison = interleave(
            {name: search(stores[name], ns, flt) for name in names},
            rounds=rounds,
            per_round=per_round,
            per_case={n: c for n, c in slow.items() if n in names and ns == big_ns},
        )
        summary = comparison.summary()
        recall = _recall(stores, names, ns, flt, quick, spaces) if with_recall else {}
        path = _path(hnsw, ns)
        results[title] = {"latency": summary, "recall_at_10": recall, "hnsw_store_path": path}
        for name in names:
            rows.append(
                (
                    title,
                    name if name != "hnsw" else f"hnsw ({path}, ef_search={ef_search})",
                    f"{summary[name]['median_us'] / 1000:.2f}",
                    f"{summary[name]['p99_us'] / 1000:.2f}",
                    str(summary[name]["n"]),
                    f"{recall[name]:.3f}" if name in recall else "",
                )
            )
        print(f"  {title}: done", flush=True)
    results["ann_fallbacks"] = {n: s.ranker.ann_fallbacks for n, s in stores.items()}
    for store in stores.values():
        store.close()
    sizes = [n for n in mids if n <= 30_000]
    rows += _switch_by_size(psycopg, fresh_pg, clustered, table, sizes, rounds, results)
    print_table(
        "vector search (store.search, limit 10), ms; recall@10 against exact ranking",
        rows,
        ("namespace", "path", "p50", "p99", "n", "recall@10"),
    )
    write_results(out, "stores-vectors", results)


def _switch_by_size(
    psycopg: Any,
    fresh_pg: Any,
    clustered: Any,
    table: Any,
    sizes: list[int],
    rounds: int,
    results: dict[str, Any],
) -> list[tuple[str, ...]]:
    """Where the index starts to pay when the namespace is the whole index: one database
    per size, the index against exact search in SQL."""
    rows: list[tuple[str, ...]] = []
    for size in sizes:
        generator = clustered(dims=DIMS, clusters=max(50, size // 1000), seed=size)
        embed = table(generator.points(size), generator.points(200))
        url = fresh_pg()
        exact = _vector_store(url, embed, "flat")
        exact.setup()
        _load(exact, [(("solo",), f"k{i}", {"id": f"v{i}"}) for i in range(size)])
        forced = _vector_store(url, embed, "hnsw")
        forced.setup()
        forced.ranker.exact_max, forced.ranker.index_cost = 0, 0.0
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")  # as autovacuum would: without statistics, joins stray
        ask = itertools.cycle(range(200))
        stores = {"hnsw-forced": forced, "exact-sql": exact}
        summary = interleave(
            {
                name: (
                    lambda s=store, a=ask: s.search(("solo",), query=query_text(next(a)), limit=10)
                )
                for name, store in stores.items()
            },
            rounds=rounds,
            per_round=20,
        ).summary()
        recall = _recall(stores, list(stores), ("solo",), None, True, 1)
        title = f"namespace of {size:,} (the whole index)"
        results[title] = {"latency": summary, "recall_at_10": recall}
        for name in stores:
            rows.append(
                (
                    title,
                    name,
                    f"{summary[name]['median_us'] / 1000:.2f}",
                    f"{summary[name]['p99_us'] / 1000:.2f}",
                    str(summary[name]["n"]),
                    f"{recall[name]:.3f}" if name in recall else "",
                )
            )
        for store in stores.values():
            store.close()
    return rows


def _recall(
    stores: dict[str, Any], names: list[str], ns: Any, flt: Any, quick: bool, spaces: int
) -> dict[str, float]:
    """Mean overlap of each path's top 10 with exact search's, over the same queries (in
    as many user namespaces as queries, for the user case)."""
    found: dict[str, float] = {}
    n = 20 if quick else RECALL_QUERIES
    for name in names:
        if not name.startswith("hnsw"):  # the exact paths rank exactly by construction
            continue
        total = 0.0
        for j in range(n):
            where = ("users", f"u{j * 7 % spaces:04d}") if callable(ns) else ns
            query = {"query": query_text(j), "filter": flt, "limit": 10}
            truth = set(_keys(stores["exact-sql"].search(where, **query)))
            got = _keys(stores[name].search(where, **query))
            total += len(truth & set(got)) / max(1, len(truth))
        found[name] = total / n
    return found


def _path(store: Any, ns: Any) -> str:
    """Which path the store's switch took for ``ns`` (its cached count decides)."""
    where = ns() if callable(ns) else ns
    store.search(where, query=query_text(0), limit=10)
    index = store.ranker.vector_index
    counts = store.ranker.vector_counts.get((".".join(where), index.name)) if index else None
    if counts is None:
        return "exact"
    takes = store.ranker.takes_index(counts[0], counts[1], store.ranker.ranking.candidates)
    return "index" if takes else "exact"
