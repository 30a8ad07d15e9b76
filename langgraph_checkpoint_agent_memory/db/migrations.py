"""Versioned schema migrations, the same list for every dialect.

``migrate_plan`` is idempotent and safe when several processes start at once: it serializes
on a lock (PostgreSQL advisory lock, SQLite's write lock; on HANA, whose DDL commits by itself,
a statement that finds its object already created counts as applied), reads the applied
versions and applies the missing ones, each in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateTable

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Migration, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.schema import (
    CHECKPOINT_TABLES,
    MEMORY_TABLES,
    migrations,
    store_items,
    store_terms,
    store_vectors,
)
from langgraph_checkpoint_agent_memory.db.store import StoreStatements, index_rows, vector_text

RECENT_INDEX = "CREATE INDEX am_store_items_recent ON am_store_items (updated_at)"


def _as_of(table: sa.Table, *, without: set[str]) -> sa.Table:
    """``table`` as an earlier migration created it: without the columns added later."""
    old = sa.Table(
        table.name,
        sa.MetaData(),
        *(c._copy() for c in table.columns if c.name not in without),
        **table.kwargs,
    )
    for index in table.indexes:
        if not {c.name for c in index.columns} & without:
            sa.Index(index.name, *(old.c[c.name] for c in index.columns))
    return old


def _store_v2(d: Dialect) -> list[str]:
    return d.ddl([_as_of(store_items, without={"doc_len"}), store_vectors]) + d.full_text_ddl()


def _store_terms(d: Dialect) -> list[str]:
    return [
        d.add_column(store_items, store_items.c.doc_len),
        *d.ddl([store_terms]),
        *d.drop_full_text_ddl(),
    ]


#: The version that added the lexical index (items older than it are indexed after it).
TERMS_VERSION = 5
#: The version that added native vector columns (vectors older than it are converted).
VECTORS_VERSION = 6

#: Every migration, in order. A migration's statements come from the dialect, so the same
#: version creates the right types on each database.
MIGRATIONS: list[tuple[int, str, Callable[[Dialect], list[str]]]] = [
    (1, "checkpointer tables", lambda d: d.ddl(CHECKPOINT_TABLES)),
    (2, "store tables and full-text index", _store_v2),
    (3, "agent memory ledger and decay", lambda d: d.ddl(MEMORY_TABLES)),
    # Listing newest first with a filter walks this index and stops at the first page of
    # matches, instead of reading and sorting every item under the prefix.
    (4, "store newest-first index", lambda d: [RECENT_INDEX]),
    # One lexical index and one BM25 on every database (it replaces FTS5 and tsvector: they
    # score every match of a query, and match across all namespaces before filtering).
    (TERMS_VERSION, "store lexical index", _store_terms),
    # Databases with a vector type keep each vector in it too, for similarity in SQL.
    (VECTORS_VERSION, "store native vector column", lambda d: d.vector_ddl()),
    # A put or put_writes in one statement where the database cannot chain inserts in one.
    (7, "checkpoint one-statement writes", lambda d: d.write_rows_ddl()),
]

#: Items indexed per transaction when the lexical index is filled for items older than it.
BACKFILL_BATCH = 500


def migrations_for(dialect: Dialect) -> list[Migration]:
    return [Migration(v, desc, build(dialect)) for v, desc, build in MIGRATIONS]


def migrate_plan(dialect: Dialect, now: float) -> Plan[list[int]]:
    """Apply the migrations this database lacks; return the versions applied."""
    create = dialect.sql(
        "create_migrations",
        lambda: str(
            CreateTable(migrations, if_not_exists=dialect.create_if_not_exists).compile(
                dialect=dialect.sa
            )
        ).strip(),
    )
    applied_sql = dialect.sql("applied_migrations", lambda: sa.select(migrations.c.version))
    record = dialect.sql(
        "record_migration",
        lambda: sa.insert(migrations).values(
            version=sa.bindparam("version"),
            description=sa.bindparam("description"),
            applied_at=sa.bindparam("applied_at"),
        ),
    )
    first: list[Stmt] = []
    lock = dialect.migration_lock()
    if lock:
        first.append(Stmt(Sql(lock), fetch=True))
    if dialect.create_if_not_exists:
        first.append(Stmt(create))
    else:
        yield from dialect.create_if_missing(create)
    first.append(Stmt(applied_sql, fetch=True))
    results = yield Batch(first, lock=True, hold=True)
    done = {row[0] for row in results[-1]}
    pending = [m for m in migrations_for(dialect) if m.version not in done]
    statements: list[Stmt] = []
    for m in pending:
        statements += [Stmt(Sql(sql)) for sql in m.statements]
        statements.append(
            Stmt(record, {"version": m.version, "description": m.description, "applied_at": now})
        )
    yield Batch(statements, write=True)
    applied = done | {m.version for m in pending}
    if TERMS_VERSION in applied:
        yield from _index_existing_items(dialect)
    if VECTORS_VERSION in applied and dialect.native_vectors:
        yield from _convert_existing_vectors(dialect)
    return [m.version for m in pending]


def _index_existing_items(dialect: Dialect) -> Plan[int]:
    """Index the items stored before the lexical index existed."""
    p = dialect.param
    mark = dialect.sql(
        "index_mark",
        lambda: (
            f"UPDATE am_store_items SET doc_len = {p('doc_len')} WHERE prefix = {p('prefix')} "
            f"AND key = {p('key')}"
        ),
    )

    def write(rows: list[Any]) -> list[Stmt]:
        items = [{"prefix": prefix, "key": key, "doc": doc} for prefix, key, doc in rows]
        terms = index_rows(items)  # sets each item's doc_len
        return [StoreStatements(dialect).insert_terms_stmt(terms), Stmt(mark, items, many=True)]

    pending = (
        "SELECT prefix, key, doc FROM am_store_items WHERE doc IS NOT NULL AND doc_len IS NULL"
    )
    return (yield from _backfill(dialect, "index_pending", pending, write))


def _convert_existing_vectors(dialect: Dialect) -> Plan[int]:
    """Fill the native vector column of vectors stored before it existed."""
    fill = dialect.fill_vector()
    assert fill is not None

    def write(rows: list[Any]) -> list[Stmt]:
        updates = [
            {"prefix": pr, "key": k, "field": f, "embedding": vector_text(bytes(v))}
            for pr, k, f, v in rows
        ]
        return [Stmt(fill, updates, many=True)]

    pending = "SELECT prefix, key, field, vector FROM am_store_vectors WHERE embedding IS NULL"
    return (yield from _backfill(dialect, "vectors_pending", pending, write))


def _backfill(
    dialect: Dialect, key: str, pending: str, write: Callable[[list[Any]], list[Stmt]]
) -> Plan[int]:
    """Bring rows older than a migration up to it, a batch at a time. Runs on every setup,
    so an interrupted run resumes with the rows ``pending`` still selects; the rows are
    locked (skipping ones another process holds), so processes share the work."""
    select = dialect.sql(
        key,
        lambda: f"{pending} LIMIT {dialect.param('n')}{dialect.for_update_skip_locked}",
    )
    done = 0
    while True:
        [rows] = yield Batch(
            [Stmt(select, {"n": BACKFILL_BATCH}, fetch=True)], lock=True, hold=True
        )
        if not rows:
            yield Batch([], write=True)  # end the transaction the read opened
            return done
        yield Batch(write(rows), write=True)
        done += len(rows)


_SETUP_LOCK = threading.Lock()


@fork.after_fork
def _fresh_setup_lock() -> None:
    global _SETUP_LOCK
    _SETUP_LOCK = threading.Lock()


class SchemaOnFirstUse:
    """``setup()`` / ``asetup()``, run once on first use unless ``auto_setup`` is off.

    For the objects that own a :class:`Database` (the saver and the store): they provide
    ``db``, ``dialect``, ``auto_setup`` and ``_clock``.
    """

    db: Database[Any]
    dialect: Dialect
    auto_setup: bool
    _clock: Callable[[], float]
    _setup_done: bool = False

    def setup(self) -> None:
        """Create or migrate the schema (idempotent, safe from several processes at once)."""
        self.db.run(migrate_plan(self.dialect, self._clock()))
        self._setup_done = True

    async def asetup(self) -> None:
        await self.db.arun(migrate_plan(self.dialect, self._clock()))
        self._setup_done = True

    def _ready(self) -> None:
        if not self._setup_done and self.auto_setup:
            with _SETUP_LOCK:
                if not self._setup_done:
                    self.setup()

    async def _aready(self) -> None:
        if not self._setup_done and self.auto_setup:
            await self.asetup()
