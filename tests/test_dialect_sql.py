"""Every statement of the checkpointer compiled for every dialect and checked offline:
PostgreSQL's through PostgreSQL's own parser (pglast), SAP HANA's through sqlalchemy-hana's
compiler plus HANA's rules. A live HANA run happens when AGENT_MEMORY_TEST_HANA_URL is set."""

from __future__ import annotations

import inspect
import json
import os
import re
from collections import defaultdict
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory.db import checkpoint as S
from langgraph_checkpoint_agent_memory.db.dialect import AnnConfig, Dialect, Sql
from langgraph_checkpoint_agent_memory.db.hana import HanaDialect
from langgraph_checkpoint_agent_memory.db.migrations import statements_of
from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect
from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDialect
from langgraph_checkpoint_agent_memory.db.store import HASHED_EQUALITY
from langgraph_checkpoint_agent_memory.store.store import AgentMemoryStore


def every_statement(d: Dialect) -> dict[str, Sql]:
    """Each statement builder of the checkpointer, with every variant it has."""
    out: dict[str, Sql] = {}
    members = [
        (name, fn, module)
        for module in (S,)
        for name, fn in inspect.getmembers(module, inspect.isfunction)
    ]
    for name, fn, module in members:
        if (
            fn.__module__ != module.__name__
            or name in ("bucket", "thread_is_live", "thread_takes", "takes_write")
            or name in ("pushed_filters", "retarget", "get_tuple_statement")
            or name.startswith("_")
        ):
            continue
        if name == "touch_thread" and not d.conditional_upsert:
            continue  # plans on such dialects read the row under a lock instead
        params = inspect.signature(fn).parameters
        variants: list[dict[str, Any]] = [{}]
        if "by_id" in params:
            variants = [{"by_id": True}, {"by_id": False}]
        elif "replace" in params:
            variants = [{"replace": True}, {"replace": False}]
        elif "lock" in params:
            variants = [{"lock": True}, {"lock": False}]
        elif "keep" in params:
            variants = [{"keep": True}, {"keep": False}]
        elif "order" in params:
            orders = S.THREAD_ORDERS
            variants = [dict(order=o, expired=e) for o in orders for e in (False, True)]
        elif "n" in params:
            variants = [{"n": 1}, {"n": 64}]
        elif "filters" in params:
            variants = [
                dict(thread=a, ns=a, cid=a, before=a, after=a, filters=f)
                for a in (True, False)
                for f in ((), ("source", "step"))
            ]
        for kwargs in variants:
            built = fn(d, **kwargs)
            for i, sql in enumerate(built if isinstance(built, list) else [built]):
                out[f"{name}{kwargs}#{i}"] = sql
    fast = d.fast_get_tuple(True), d.fast_get_tuple(False)
    for i, sql in enumerate(fast):
        if sql is not None:
            out[f"fast_get_tuple#{i}"] = sql
    for kind, rows in FAST_WRITE_ROWS.items():
        for touch in (True, False):
            fixed: dict[str, Any] = defaultdict(lambda: None)  # every value None
            write = d.fast_write(kind, touch, fixed, rows)
            if write is not None:
                out[f"fast_write {kind} touch={touch}"] = write.sql
                for i, (sql, _) in enumerate(write.then):
                    out[f"fast_write {kind} touch={touch} then#{i}"] = sql
    return out


def _row(**values: Any) -> dict[str, Any]:
    """A fast write's row: ``values``, and None for every other column asked for."""
    return defaultdict(lambda: None, values)


#: Rows of one fast write of each kind (their values do not matter to the SQL text).
FAST_WRITE_ROWS: dict[str, dict[str, list[Any]]] = {
    "put": {"b": [_row(channel="c", version="1"), _row(channel="d", version="2")]},
    "writes": {"f": [_row(idx=0, channel="c")], "r": [_row(idx=-1, channel="__error__")]},
}


def test_every_builder_is_covered() -> None:
    assert len(every_statement(SQLiteDialect())) > 30


def test_postgres_statements_parse_with_postgres_parser() -> None:
    pglast = pytest.importorskip("pglast")
    d = PostgresDialect()
    statements = list(every_statement(d).items())
    statements += [(f"ddl#{i}", Sql(s)) for i, s in enumerate(statements_of(d))]
    distributed = PostgresDialect()
    distributed.distributed = True  # Citus: the statements that differ there
    statements += [(f"citus {k}", v) for k, v in every_statement(distributed).items()]
    for where, sql in statements:
        text = re.sub(r"%\((\w+)\)[sb]", r"$1", sql.text)  # psycopg placeholders -> parameters
        try:
            pglast.parse_sql(text)
        except pglast.parser.ParseError as exc:  # pragma: no cover - reported
            raise AssertionError(f"{where}: {exc}\n{sql.text}") from None


HANA_FORBIDDEN = [
    "ON CONFLICT",
    "RETURNING",
    "%s",
    "%(",
    "ILIKE",
    "::",
    "SKIP LOCKED",
    "IF NOT EXISTS",
    "BOOLEAN",
    "BYTEA",
    "JSONB",
    "LATERAL",
]


def test_hana_statements_follow_hana_rules() -> None:
    d = HanaDialect()
    compiled = every_statement(d)
    ddl = statements_of(d)
    for where, sql in compiled.items():
        upper = sql.text.upper()
        for bad in HANA_FORBIDDEN:
            assert bad not in upper, f"{where} uses {bad!r}: {sql.text}"
        assert sql.names is not None and sql.text.count("?") == len(sql.names), where
        if upper.startswith("SELECT") and not re.search(r"\bFROM\b", upper):
            raise AssertionError(f"{where}: HANA needs FROM DUMMY")
        if upper.startswith("UPSERT") and " VALUES " in upper:
            assert upper.endswith("WITH PRIMARY KEY"), where
    assert "FOR UPDATE IGNORE LOCKED" in compiled["select_expired{}#0"].text
    assert all(
        "NVARCHAR" in s
        or "INDEX" in s
        or re.match(r"ALTER TABLE \w+ ADD \(", s)
        or s == "CREATE SEQUENCE am_store_item_numbers"  # the term index's item numbers
        for s in ddl
    ), ddl
    # HANA's vector column in its own form; every store and memory table keyed shard first
    assert "ALTER TABLE am_store_vectors ADD (embedding REAL_VECTOR)" in ddl
    [items] = [s for s in ddl if s.startswith("CREATE TABLE am_store_items ")]
    assert "PRIMARY KEY (shard, prefix, key)" in items
    assert "BLOB" in items and "NCLOB" in items


def test_sqlite_statements_prepare_on_a_real_database(tmp_path: Any) -> None:
    import sqlite3

    d = SQLiteDialect()
    conn = sqlite3.connect(tmp_path / "x.db")
    for statement in statements_of(d):
        conn.execute(statement)
    for where, sql in every_statement(d).items():
        try:  # EXPLAIN compiles the statement without running it
            names = re.findall(r":(\w+)", sql.text)
            params: Any = {n: None for n in names} if names else [None] * sql.text.count("?")
            conn.execute(f"EXPLAIN {sql.text}", params)
        except sqlite3.Error as exc:  # pragma: no cover - reported
            raise AssertionError(f"{where}: {exc}\n{sql.text}") from None


HANA_URL = os.environ.get("AGENT_MEMORY_TEST_HANA_URL")


@pytest.mark.skipif(
    not HANA_URL,
    reason="set AGENT_MEMORY_TEST_HANA_URL=hana://user:pass@host:port"
    "/?encrypt=true to run the checkpointer suite against SAP HANA",
)
async def test_conformance_on_hana() -> None:  # pragma: no cover - needs a HANA server
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    from langgraph_checkpoint_agent_memory import HanaSaver
    from tests.helpers import sync_through_async

    url = HANA_URL
    assert url is not None  # the test is skipped without it
    for api in ("async", "sync"):

        @checkpointer_test(name=f"hana-{api}")
        async def factory(api: str = api) -> Any:
            saver = HanaSaver(url, ttl_seconds=3600)
            yield sync_through_async(saver) if api == "sync" else saver
            saver.close()

        report = await validate(factory)
        assert report.passed_all(), {n: r.failures for n, r in report.results.items()}


def backfill_statements(
    plan: Any, row: tuple[Any, ...], label: str
) -> tuple[dict[str, Sql], list[Any]]:
    """The statements a migration's backfill runs, by driving it over one canned row, and
    the parameters of its writes."""
    from langgraph_checkpoint_agent_memory.db.database import drive

    seen: dict[str, Sql] = {}
    rows = [[row]]
    written: list[Any] = []

    def execute(batch: Any) -> list[Any]:
        for stmt in batch.statements:
            seen[f"{label}#{len(seen)}"] = stmt.sql
            if not stmt.fetch:
                written.append(stmt.params)
        fetching = batch.statements and batch.statements[0].fetch
        return [rows.pop() if rows else []] if fetching else [1] * len(batch.statements)

    assert drive(plan, execute) == 1
    return seen, written


def store_statements(d: Dialect) -> dict[str, Sql]:
    from langgraph_checkpoint_agent_memory.db.store import StoreStatements

    sql = StoreStatements(d)
    out: dict[str, Sql] = {}
    for name in (
        "get",
        "by_keys",
        "refresh",
        "upsert_item",
        "upsert_unlisted",
        "lock_item",
        "created_at",
        "delete_item",
        "insert_vector",
        "retract",
        "expired",
        "expired_stats",
        "fingerprint",
        "vectors_exact",
    ):
        built = getattr(sql, name)(8) if name == "by_keys" else getattr(sql, name)()
        for i, one in enumerate(built if isinstance(built, list) else [built]):
            out[f"store.{name}#{i}"] = one
    for one in (False, True):  # a prefix that covers the shard key, and one that does not
        for i, each in enumerate(sql.delete_under(one)):
            out[f"store.delete_under.{one}#{i}"] = each
        out[f"store.count_under.{one}"] = sql.count_under(one)
        for name in ("recent", "vectors"):
            out[f"store.{name}.{one}"] = getattr(sql, name)((), one)
        out[f"store.namespaces.{one}"] = sql.namespaces(True, one)
        out[f"store.sealed_vectors.{one}"] = sql.sealed_vectors(one)
        out[f"store.recent_after.{one}"] = sql.recent_after(one)
        # filterable fields of an encrypted store: two values' hashes, one field mark
        hashed = (("h0", (HASHED_EQUALITY, 2, 1)),)
        out[f"store.recent_hashed.{one}"] = sql.recent(hashed, one)
        out[f"store.recent_after_hashed.{one}"] = sql.recent_after(one, hashed)
        out[f"store.fingerprint_under.{one}"] = sql.fingerprint_under(one)
    for name in (  # encryption at rest
        "sealed_vectors_exact",
        "plaintext_items",
        "item_index",
        "reindex_item",
        "insert_tags",
        "item_vectors",
        "seal_item",
        "seal_vector",
        "sealed_in_shard",
        "shards_under",
    ):
        out[f"store.{name}"] = getattr(sql, name)()
    out["store.namespaces"] = sql.namespaces(False)
    filters, _ = sql.prefilter([(["n"], "$gte", 3), (["s"], "$eq", "x")])
    from langgraph_checkpoint_agent_memory.db.migrations import convert_vectors_plan

    filters_sql, _ = sql.prefilter([(["n"], "$gte", 3)])
    for name, native in (
        ("vector_search", sql.vector_search(filters_sql, 8, joined=True, scoped=True)),
        ("vector_search_fan_out", sql.vector_search(filters_sql, 8, joined=True, scoped=False)),
        ("vector_search_unjoined", sql.vector_search((), 8, joined=False, scoped=True)),
        ("fill_vector", d.fill_vector()),
    ):
        if native is not None:
            out[f"store.{name}"] = native
    out.update(vector_index_statements(d, sql, filters_sql))
    if d.native_vectors:
        vector_row = ("ns", "ns", "k", "text#0", b"\0\0\x80?")  # one float32: 1.0
        vectors, written = backfill_statements(convert_vectors_plan(d), vector_row, "vectors")
        out.update(vectors)
        assert written == [
            [{"shard": "ns", "prefix": "ns", "key": "k", "field": "text#0", "embedding": "[1.0]"}]
        ]
    out.update(term_index_statements(d, sql, filters))
    return out


def term_index_statements(d: Dialect, sql: Any, filters: Any) -> dict[str, Sql]:
    """The term index's statements (``store.index``): a query's read of its lists, of its
    candidates by number and in key order, relevance feedback's item terms, and a merge's."""
    out: dict[str, Sql] = {}
    size = d.list_size(3)
    for exact in (False, True):
        for one in (False, True):
            out[f"store.text_stats.{exact}.{one}"] = sql.text_stats(exact, one)
            for deeper in (False, True):
                lists = sql.lists(exact, one, size, deeper)
                out[f"store.lists.{exact}.{one}.{deeper}"] = lists
            for f in ((), filters):
                out[f"store.by_nums.{exact}.{one}.{bool(f)}"] = sql.by_nums(f, exact, one, size)
                out[f"store.in_key_order.{exact}.{one}.{bool(f)}"] = sql.in_key_order(f, exact, one)
    out["store.item_terms"] = sql.item_terms(4)
    for name in ("unlisted", "retracted", "drop_chunk", "insert_chunk"):
        out[f"store.{name}"] = getattr(sql, name)()
    for name in ("chunks_to_merge", "listing", "drop_unlisted", "drop_retractions"):
        out[f"store.{name}"] = getattr(sql, name)(size)
    if (lock := d.merge_lock()) is not None:
        out["store.merge_lock"] = lock
    return out


def vector_index_statements(d: Dialect, sql: Any, filters: Any) -> dict[str, Sql]:
    """The statements of the approximate index of 8-long vectors, where the dialect has one:
    its creation (driven over a database that lacks it), a search, the namespace count."""
    from langgraph_checkpoint_agent_memory.db.database import drive

    out: dict[str, Sql] = {}
    index = d.ann_index(8, AnnConfig(m=8, ef_construction=32, ef_search=50))
    if index is None:
        return out

    def execute(batch: Any) -> list[Any]:
        for stmt in batch.statements:
            out[f"store.ann_index#{len(out)}"] = stmt.sql
        return [
            [(0,)] if "COUNT(*)" in s.sql.text else [] if s.fetch else 1 for s in batch.statements
        ]

    assert drive(d.ann_index_plan(index, AnnConfig(), create=True), execute) is True
    for i, one in enumerate(sql.ann_search(index, filters, True)):
        out[f"store.ann_search#{i}"] = one
    out["store.vector_counts"] = sql.vector_counts(index, True)
    out["store.vector_counts_fan_out"] = sql.vector_counts(index, False)
    if d.native_vectors:
        out["store.insert_vector_native"] = sql.insert_vector()
    return out


def pgvector_dialect() -> PostgresDialect:
    """PostgreSQL as a store sees it once setup found pgvector's column."""
    d = PostgresDialect()
    d.native_vectors = True
    return d


def test_store_statements_on_every_dialect(tmp_path: Any) -> None:
    import sqlite3

    pglast = pytest.importorskip("pglast")
    found = {
        **store_statements(PostgresDialect()),
        **{f"pgvector.{k}": v for k, v in store_statements(pgvector_dialect()).items()},
    }
    assert any("USING hnsw" in s.text for s in found.values())
    assert any("hnsw.iterative_scan" in s.text for s in found.values())
    for where, sql in found.items():
        text = re.sub(r"%\((\w+)\)[sb]", r"$1", sql.text)
        try:
            pglast.parse_sql(text)
        except pglast.parser.ParseError as exc:  # pragma: no cover - reported
            raise AssertionError(f"{where}: {exc}\n{sql.text}") from None
    d = SQLiteDialect()
    conn = sqlite3.connect(tmp_path / "s.db")
    for statement in statements_of(d):
        conn.execute(statement)
    for where, sql in store_statements(d).items():
        try:
            names = re.findall(r":(\w+)", sql.text)
            params: Any = {n: None for n in names} if names else [None] * sql.text.count("?")
            conn.execute(f"EXPLAIN {sql.text}", params)
        except sqlite3.Error as exc:  # pragma: no cover - reported
            raise AssertionError(f"{where}: {exc}\n{sql.text}") from None
    hana = store_statements(HanaDialect())
    assert any("CREATE HNSW VECTOR INDEX" in s.text for s in hana.values())
    for where, sql in hana.items():
        upper = sql.text.upper()
        for bad in HANA_FORBIDDEN:
            assert bad not in upper, f"{where} uses {bad!r}: {sql.text}"
        assert " SUBSTR(" not in upper, where


def memory_statements(d: Dialect) -> dict[str, Sql]:
    """Every statement of agent memory, collected by driving each plan with canned results."""
    from langgraph_checkpoint_agent_memory.db import keys as K
    from langgraph_checkpoint_agent_memory.db import memory as M
    from langgraph_checkpoint_agent_memory.db import memory as MS
    from langgraph_checkpoint_agent_memory.db import memory_jobs as J
    from langgraph_checkpoint_agent_memory.db.database import drive
    from langgraph_checkpoint_agent_memory.db.store import StoreStatements

    sql = M.MemorySql(d, StoreStatements(d))
    seen: dict[str, Sql] = {}

    def execute(batch: Any) -> list[Any]:
        out: list[Any] = []
        for stmt in batch.statements:
            seen[stmt.sql.text] = stmt.sql
            text = stmt.sql.text
            if not stmt.fetch:
                out.append(1)
            elif "lease_owner, failures" in text:
                out.append([("owner", 0)])
            elif "SELECT s.shard, s.scope" in text:
                out.append([("memory.user=a", "user=a", "memory")])
            elif "am_memory_scopes.failures" in text:  # the lease just taken
                out.append([(0,)])
            elif "COUNT(*), MAX" in text or "max(am_store_items.updated_at)" in text:
                out.append([(1, 1.0)])
            elif "min(am_memory_pending.recorded_at)" in text:  # the backlog
                out.append([(0, 0, None)])
            elif text.startswith("SELECT count(*) AS count_1 \nFROM am_memory_"):  # parked, owed
                out.append([(0,)])
            elif "FROM am_keys" in text:  # the key store's count, or a key
                out.append([(0,)] if "count(*)" in text else [("k", "o", b"w", 1.0)])
            else:
                out.append([])
        return out

    claim = J.Claim("user=a", "memory", "owner", 0, ["e1"])
    item = {
        "prefix": "memory.user=a.episodes",
        "key": "e1",
        "value": "{}",
        "created_at": 1.0,
        "updated_at": 1.0,
        "ttl_minutes": None,
        "expires_at": None,
        "doc": "hi",
    }
    writes = J.Writes(
        items=[item],
        vectors=[{"prefix": "p", "key": "e1", "field": "text#0", "vector": b"\0\0\0\0"}],
        decay=[
            {
                "prefix": "p",
                "key": "e1",
                "scope": "user=a",
                "log_importance": 0.0,
                "reinforced_at": 1.0,
                "pinned": 0,
            }
        ],
    )
    reinforce = [{"prefix": "p", "key": "k", "now": 1.0}]
    plans = [
        M.record_plan(
            sql,
            scope="user=a",
            root="memory",
            item=item,
            thread_id="t",
            now=1.0,
            reinforce=reinforce,
        ),
        M.reinforce_plan(sql, reinforce),
        J.claim_plan(sql, owner="o", now=1.0, lease_seconds=1.0, limit=5),
        J.claim_plan(
            sql, owner="o", now=1.0, lease_seconds=1.0, limit=5, scope="user=a", skip=["user=b"]
        ),
        J.apply_plan(
            sql,
            claim,
            job_id="j",
            episode_keys=["e1"],
            extractor_version="v",
            facts_prefix="p",
            now=1.0,
            read_vectors=True,
            decide=lambda rows, vectors: writes,
            started_at=1.0,
        ),
        J.change_facts_plan(
            sql,
            scope="user=a",
            root="memory",
            facts_prefix="p",
            now=1.0,
            read_vectors=True,
            decide=lambda rows, vectors: J.Writes(
                items=[item], decay=writes.decay, removed=[{"prefix": "p", "key": "gone"}]
            ),
        ),
        J.fail_plan(
            sql,
            claim,
            job_id="j",
            episode_keys=["e1"],
            extractor_version="v",
            error="x",
            now=1.0,
            started_at=1.0,
            max_attempts=1,
            backoff_seconds=1.0,
        ),
        J.retry_plan(sql, None),
        J.retry_plan(sql, "user=a"),
        M.decay_plan(sql, now=1.0, log_rate_per_second=-1e-6, log_threshold=-3.0),
        M.decay_plan(sql, now=1.0, log_rate_per_second=-1e-6, log_threshold=-3.0, scope="user=a"),
        MS.known_scopes_plan(sql, "memory"),
        MS.stats_plan(sql, "memory", 1.0),
        MS.backlog_plan(sql, 1.0),
        MS.failures_plan(sql),
        J.jobs_plan(sql, ["failed", "parked"], 10),
        MS.threads_plan(sql, ["user=a"]),
        MS.erase_plan(sql, root="memory", scopes=["user=a"]),
        MS.erase_plan(
            sql,
            root="memory",
            scopes=["user=a"],
            owe=["memory.user=a"],
            owe_threads=[MS.Owed("memory.user=a", "t1")],
            now=1.0,
        ),
        MS.owed_plan(sql),
        MS.settled_plan(sql, [MS.Owed("memory.user=a", ""), MS.Owed("memory.user=a", "t1")]),
        MS.owed_count_plan(sql),
        MS.some_shards_plan(sql, 16),
        K.count_plan(d),
        K.held_plan(d, ["o", "p"]),
        K.copy_plan(d, [K.KeyRow("k", "o", b"w", 1.0)]),
        M.version_plan(sql, "p", 1.0),
        M.read_plan(sql, "p", 1.0),
        M.read_plan(sql, "p", 1.0, ["a", "b"]),
    ]
    for plan in plans:
        drive(plan, execute)
    store = StoreStatements(d)
    seen[store.fingerprint().text] = store.fingerprint()
    seen[store.vectors_exact().text] = store.vectors_exact()
    return {f"memory#{i}": s for i, s in enumerate(seen.values())}


def test_memory_statements_on_every_dialect(tmp_path: Any) -> None:
    import sqlite3

    pglast = pytest.importorskip("pglast")
    found = memory_statements(PostgresDialect())
    assert len(found) >= 35
    for where, sql in found.items():
        text = re.sub(r"%\((\w+)\)[sb]", r"$1", sql.text)
        try:
            pglast.parse_sql(text)
        except pglast.parser.ParseError as exc:  # pragma: no cover - reported
            raise AssertionError(f"{where}: {exc}\n{sql.text}") from None
    # claims are conditional writes of one row, found without locks across shards
    assert not any("SKIP LOCKED" in s.text for s in found.values())
    d = SQLiteDialect()
    conn = sqlite3.connect(tmp_path / "m.db")
    for statement in statements_of(d):
        conn.execute(statement)
    for where, sql in memory_statements(d).items():
        params = {n: None for n in re.findall(r":(\w+)", sql.text)}
        try:
            conn.execute(f"EXPLAIN {sql.text}", params)
        except sqlite3.Error as exc:  # pragma: no cover - reported
            raise AssertionError(f"{where}: {exc}\n{sql.text}") from None
    hana = memory_statements(HanaDialect())
    for where, sql in hana.items():
        upper = sql.text.upper()
        for bad in HANA_FORBIDDEN:
            assert bad not in upper, f"{where} uses {bad!r}: {sql.text}"
        assert " SUBSTR(" not in upper, where
        if upper.startswith("UPSERT") and " VALUES " in upper:
            assert upper.endswith("WITH PRIMARY KEY"), where
    claims = [s.text for s in hana.values() if "SELECT s.shard, s.scope" in s.text]
    assert claims and not any("IGNORE LOCKED" in t for t in claims)


class OfflineHana:
    """An AgentMemoryStore over the HANA dialect with no server: every statement is
    recorded, and canned rows answer the ones a search needs."""

    def __init__(self, *, typed_column: bool, vectors_under: int) -> None:
        from langgraph_checkpoint_agent_memory.db.database import Database, drive
        from tests.helpers import WordEmbeddings

        self.seen: list[tuple[str, Any]] = []

        def execute(batch: Any) -> list[Any]:
            out: list[Any] = []
            for stmt in batch.statements:
                self.seen.append((stmt.sql.text, stmt.params))
                text = stmt.sql.text
                if not stmt.fetch:
                    out.append(1)
                elif "SUM(doc_len)" in text or "sum(am_store_items.doc_len)" in text:  # one row
                    out.append([(2, 4)])
                elif "SYS.TABLE_COLUMNS" in text:
                    out.append([(int(typed_column),)])
                elif "FROM DUMMY" in text:  # the namespace's vector count, the index's
                    out.append([(vectors_under, 10 * vectors_under)])
                elif "COSINE_SIMILARITY" in text:
                    # the index answers as many rows as asked (the rest of the items are
                    # gone by the time they are read); exact search, what there is
                    more = [("h", f"z{i}", 0.0) for i in range(48)] if "_8," in text else []
                    out.append([("h", "b", 0.9), ("h", "a", 0.1), *more])
                elif "am_store_items.value" in text:
                    out.append(
                        [("h", k, '{"text": "x"}', 1.0, 1.0, None, None) for k in ("a", "b")]
                    )
                else:
                    out.append([])
            return out

        class Offline(Database[Any]):
            dialect = HanaDialect()

            def _run_sync(self, plan: Any) -> Any:
                return drive(plan, execute)

        self.embed = WordEmbeddings(8)
        self.store = AgentMemoryStore(
            Offline(),
            index={"dims": 8, "embed": self.embed, "fields": ["text"]},
            weights=(0.0, 1.0),
            auto_setup=False,
        )
        self.store.ranker.exact_max = 100

    def texts(self, needle: str) -> list[tuple[str, Any]]:
        return [(t, p) for t, p in self.seen if needle in t]


def test_hana_store_computes_similarity_in_the_database() -> None:
    """Offline: on HANA a put writes each vector's REAL_VECTOR text form too, and a query
    ranks by COSINE_SIMILARITY in SQL instead of reading every vector under the prefix."""
    hana = OfflineHana(typed_column=False, vectors_under=0)
    store, embed = hana.store, hana.embed
    store.put(("h",), "a", {"text": "alpine hiking"})
    assert store.vector_index is None  # no typed column: exact only
    [(insert, rows)] = hana.texts("INTO am_store_vectors")
    assert "TO_REAL_VECTOR(?)" in insert and "embedding_8" not in insert
    assert json.loads(rows[0]["embedding"]) == pytest.approx(embed.embed_query("alpine hiking"))
    hana.seen.clear()
    found = store.search(("h",), query="zebra")
    assert [i.key for i in found] == ["b", "a"]
    native = hana.texts("COSINE_SIMILARITY")
    assert len(native) == 1 and native[0][1]["n"] >= 10
    assert "COSINE_SIMILARITY(v.embedding," in native[0][0]
    assert json.loads(native[0][1]["query_vector"]) == pytest.approx(embed.embed_query("zebra"))
    assert not hana.texts("SELECT v.prefix, v.key, v.vector")  # no full read


@pytest.mark.parametrize("vectors_under", [50, 5000, 300_000])
def test_hana_store_searches_a_large_namespace_through_its_hnsw_index(
    vectors_under: int,
) -> None:
    """Offline: where the typed column of the store's dimension count exists (it carries
    the HNSW index), a put fills it too; a search of a namespace above the switch ranks
    through it, a small one exactly through the generic column."""
    hana = OfflineHana(typed_column=True, vectors_under=vectors_under)
    store = hana.store
    store.put(("h",), "a", {"text": "alpine hiking"})
    assert store.vector_index == "am_store_vectors_hnsw_8"
    [(insert, rows)] = hana.texts("INTO am_store_vectors")
    assert "embedding_8" in insert and rows[0]["embedding_8"] == rows[0]["embedding"]
    hana.seen.clear()
    assert [i.key for i in store.search(("h",), query="zebra")] == ["b", "a"]
    (search, params), *_ = hana.texts("COSINE_SIMILARITY")
    # the offline database reports the namespace as a tenth of the index
    approximate = store.ranker.takes_index(vectors_under, 10.0 * vectors_under, 50)
    assert approximate == (vectors_under == 300_000)  # beyond count_cap: always the index
    if approximate:
        assert "COSINE_SIMILARITY(v.embedding_8," in search and "ORDER BY sim DESC" in search
        assert params["n"] == 50  # candidates times one field
    else:
        assert "COSINE_SIMILARITY(v.embedding," in search
