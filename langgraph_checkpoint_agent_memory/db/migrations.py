"""Versioned schema migrations, one list per component, the same lists for every dialect.

Each component (the checkpointer, the store, agent memory) has its own numbered list, so a
process that opens only a checkpointer creates only the checkpoint tables. All lists share
the ledger ``am_migrations``: component ``c``'s version ``v`` is recorded as
``c.block * 1000 + v``. Databases written before the lists were split recorded one global
list (versions 1-7); :data:`GLOBAL_VERSIONS` maps those rows to their component versions the
first time any component migrates, in the same locked transaction.

``migrate_plan`` is idempotent and safe when several processes start at once: it serializes
on a lock (PostgreSQL advisory lock, SQLite's write lock; on HANA, whose DDL commits by itself,
a statement that finds its object already created counts as applied), reads the applied
versions and applies the missing ones, each in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateTable

from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Migration, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql
from langgraph_checkpoint_agent_memory.db.distribution import distribute_plan
from langgraph_checkpoint_agent_memory.db.encryption_mark import (
    SealedRows,
    missing_table,
    settings_ddl,
    settle_plan,
)
from langgraph_checkpoint_agent_memory.db.row_migrations import (
    STORE_TABLES,
    convert_existing_vectors,
    fill_memory_shards,
    fill_store_shards,
    index_dates,
    index_existing_items,
    index_facts,
    index_sealed_dates,
)
from langgraph_checkpoint_agent_memory.db.row_sealer import RowSealer
from langgraph_checkpoint_agent_memory.db.schema import (
    CHECKPOINT_TABLES,
    MEMORY_TABLES,
    checkpoints,
    data_keys,
    memory_erasures,
    migrations,
    settings,
    store_blocks,
    store_items,
    store_terms,
    store_vectors,
    threads,
)
from langgraph_checkpoint_agent_memory.db.schema_history import as_of as _as_of
from langgraph_checkpoint_agent_memory.db.schema_history import recent_index as _recent_index
from langgraph_checkpoint_agent_memory.db.shard import (
    DEFAULT_SHARD_DEPTH,
    checked_depth,
    rule_refused,
)

#: The boundary given to tombstones older than boundaries: every write naming a checkpoint
#: stays refused, as it was when they were written, until the sweep forgets them.
UNKNOWN_BOUNDARY = "ffffffff-ffff-ffff-ffff-ffffffffffff"


def _checkpoint_v3(d: Dialect) -> list[str]:
    return [
        d.add_column(threads, threads.c.ended_after),
        d.literal(
            sa.update(threads)
            .where(threads.c.deleted_at.is_not(None))
            .values(ended_after=UNKNOWN_BOUNDARY)
        ),
        *d.live_row_ddl(),
    ]


#: Columns added by the shard-key migrations (store 6, memory 4).
SHARD = {"shard"}


def _checkpoint_v1(d: Dialect) -> list[str]:
    tables = [t for t in CHECKPOINT_TABLES if t is not threads]
    return d.ddl([*tables, _as_of(threads, without={"ended_after"})])


def _store_v2(d: Dialect) -> list[str]:
    items = _as_of(store_items, without={"doc_len", "sealed", *SHARD})
    return d.ddl([items, _as_of(store_vectors, without=SHARD)]) + d.full_text_ddl()


def _store_terms(d: Dialect) -> list[str]:
    return [
        d.add_column(store_items, store_items.c.doc_len),
        *d.ddl([_as_of(store_terms, without={*SHARD, "packed"})]),
        *d.drop_full_text_ddl(),
    ]


#: The store version that added the lexical index (items older than it are indexed after it).
TERMS_VERSION = 3
#: The store version that added native vector columns (vectors older than it are converted).
VECTORS_VERSION = 4
#: The store version that prepared approximate vector search (pgvector's column).
VECTOR_INDEX_VERSION = 5


@dataclass(frozen=True)
class Step:
    """One migration of a component: its statements come from the dialect, so the same
    version creates the right types on each database."""

    version: int
    description: str
    build: Callable[[Dialect], list[str]]
    #: Work on rows that SQL alone cannot do (text analysis, the shard-key rule): a plan
    #: run inside the migration's transaction, after its statements, with the database's
    #: ``shard_depth``, so the ledger records the step only together with it (a failure
    #: rolls both back and the next setup tries again).
    rows: Callable[[Dialect, int], Plan[int]] | None = None
    #: Statements run after :attr:`rows` (a primary key rebuilt over filled columns).
    finish: Callable[[Dialect], list[str]] | None = None

    def statements(self, dialect: Dialect) -> list[str]:
        """Every statement of the step, :attr:`rows`' aside."""
        return self.build(dialect) + (self.finish(dialect) if self.finish else [])


@dataclass(frozen=True)
class Component:
    """A component's migrations, in order, and what brings its older rows up to them."""

    name: str
    block: int  # the ledger records version v as block * 1000 + v
    steps: tuple[Step, ...]
    #: Run after every migration of the component, with the versions now applied, the shard
    #: depth and the store's sealer (``None`` without encryption at rest): resumable work on
    #: rows older than a migration (it finds nothing to do once done).
    backfill: Callable[[Dialect, set[int], int, RowSealer | None], Plan[None]] | None = None

    def ledger_id(self, version: int) -> int:
        return self.block * 1000 + version

    @property
    def latest(self) -> int:
        return self.steps[-1].version


#: The ``am_settings`` row that records that no item older than the lexical index is left
#: to index: its search reads the whole items table when it finds none (every shard, on a
#: distributed database), so it runs until it finds none, not at every setup. Every write
#: since the lexical index sets ``doc_len``.
LEXICAL_FILLED = "lexical_filled"


def _store_backfill(
    dialect: Dialect, applied: set[int], depth: int, sealer: RowSealer | None
) -> Plan[None]:
    """Items older than the lexical index indexed (until none is left, see
    :data:`LEXICAL_FILLED`), vectors older than native columns converted (sealed items are
    no concern of these)."""
    if TERMS_VERSION in applied:
        read = Stmt(_read_setting(dialect), {"b_name": LEXICAL_FILLED}, fetch=True)
        [recorded] = yield Batch([read])
        if not recorded:
            yield from index_existing_items(dialect)
            record = dialect.sql(
                "record_setting_once", lambda: dialect.insert_row_ignore(settings, ["name"])
            )
            yield Batch([Stmt(record, {"name": LEXICAL_FILLED, "value": "1"})], write=True)
    if VECTOR_INDEX_VERSION in applied:
        # what the database offers now: pgvector may have been installed since
        yield from dialect.vectors_plan()
    if VECTORS_VERSION in applied and dialect.native_vectors:
        yield from convert_existing_vectors(dialect)


#: Columns the store's tables gained after the shard key (store 6), by table.
LATER = {"am_store_items": {"sealed"}, "am_store_terms": {"packed"}}


#: The store version that gave every store row its shard key.
STORE_SHARD_VERSION = 6
#: The store version that added the sealed value of encryption at rest.
SEALED_VERSION = 7
#: The memory version that gave every memory row its shard key.
MEMORY_SHARD_VERSION = 4
#: The memory version that indexed facts and episodes with their dates.
DATES_VERSION = 5


def _memory_backfill(
    dialect: Dialect, applied: set[int], depth: int, sealer: RowSealer | None
) -> Plan[None]:
    """Sealed facts and episodes indexed with their dates, by a setup that has their keys
    (a setup without them leaves them to the next one with encryption on)."""
    if DATES_VERSION in applied and sealer is not None:
        yield from index_sealed_dates(dialect, depth, sealer)


def _add_shard(tables: Sequence[sa.Table]) -> Callable[[Dialect], list[str]]:
    """The step's DDL: a nullable ``shard`` column on each of ``tables`` (filled by its
    rows plan, made part of the key by its finish)."""

    def build(d: Dialect) -> list[str]:
        return [d.add_column(t, sa.Column("shard", t.c.shard.type)) for t in tables]

    return build


#: Indexes an earlier migration created outside :mod:`.schema`, by table: a table rebuilt
#: to change its key (SQLite) gets them again.
EXTRA_INDEXES: dict[str, Callable[[Dialect], str]] = {"am_store_items": _recent_index}


def _rekey(tables: Sequence[sa.Table]) -> Callable[[Dialect], list[str]]:
    """The step's finish: each of ``tables`` keyed as :mod:`.schema` declares it."""

    def build(d: Dialect) -> list[str]:
        extra = {name: [index(d)] for name, index in EXTRA_INDEXES.items()}
        return [sql for t in tables for sql in d.rekey_ddl(t, extra.get(t.name, []))]

    return build


#: Sealed rows of the checkpointer (metadata sealed as text) and of the store.
SEALED_CHECKPOINTS = SealedRows(checkpoints, lambda: checkpoints.c.metadata.like("!%"))
SEALED_ITEMS = SealedRows(store_items, lambda: store_items.c.sealed.is_not(None))
#: The migration of each component that marks a database encrypted before the mark existed.
MARK_STEPS = {"checkpoint": (4, SEALED_CHECKPOINTS), "store": (10, SEALED_ITEMS)}

CHECKPOINT = Component(
    "checkpoint",
    1,
    (
        Step(1, "checkpointer tables", _checkpoint_v1),
        # A put or put_writes in one statement where the database cannot chain inserts in one.
        Step(2, "checkpoint one-statement writes", lambda d: d.write_rows_ddl()),
        # Where a deleted or expired thread's history ended: later writes start it afresh.
        Step(3, "thread generation boundary", _checkpoint_v3),
        # Encryption fails closed: the database records that it holds sealed rows (see
        # encryption_mark), here for one whose checkpoints were sealed before the mark existed.
        Step(
            4,
            "encryption mark",
            lambda d: [settings_ddl(d)],
            rows=SEALED_CHECKPOINTS.mark_plan,
        ),
    ),
)
STORE = Component(
    "store",
    2,
    (
        Step(1, "store tables and full-text index", _store_v2),
        # Listing newest first with a filter walks this index and stops at the first page of
        # matches, instead of reading and sorting every item under the prefix.
        Step(2, "store newest-first index", lambda d: [_recent_index(d)]),
        # One lexical index and one BM25 on every database (it replaces FTS5 and tsvector:
        # they score every match of a query, and match across all namespaces before
        # filtering).
        Step(TERMS_VERSION, "store lexical index", _store_terms),
        # Databases with a vector type keep each vector in it too, for similarity in SQL.
        Step(VECTORS_VERSION, "store native vector column", lambda d: d.vector_ddl()),
        # PostgreSQL: pgvector's column where the extension is there or can be created (the
        # HNSW index of each dimension count comes when a store of that dimension sets up),
        # and a namespace index on vectors in byte order, for exact search in a namespace.
        Step(VECTOR_INDEX_VERSION, "store vector search index", lambda d: d.vector_index_ddl()),
        # Every row keyed by its namespace's shard key (the first shard_depth labels), first
        # in its primary key: the distribution column of a distributed database, and the
        # settings table that records the rule.
        Step(
            STORE_SHARD_VERSION,
            "store shard key",
            lambda d: [*_add_shard(STORE_TABLES)(d), settings_ddl(d)],
            rows=fill_store_shards,
            # the tables as they were then (a rebuild copies the columns they had)
            finish=_rekey(
                [_as_of(t, without=LATER[t.name]) if t.name in LATER else t for t in STORE_TABLES]
            ),
        ),
        # Encryption at rest: an item's value sealed under its shard key's data key, as
        # bytes (base64 inside the JSON column would cost a third more).
        Step(
            SEALED_VERSION,
            "store sealed values",
            lambda d: [d.add_column(store_items, store_items.c.sealed)],
        ),
        # A query of common words reads their postings packed in one row per term and
        # namespace, plus those written since (found by an index of the unpacked ones).
        Step(
            8,
            "store posting blocks",
            lambda d: [
                d.add_column(store_terms, store_terms.c.packed),
                *d.ddl([store_blocks]),
                *d.fresh_postings_ddl(),
            ],
        ),
        # Postings read from their primary key alone again (PostgreSQL: tf and dl included,
        # which the re-keying of step 6 left out), and the entries a build's marking leaves
        # dead in the index of unpacked postings cleared soon, not once a fifth of the
        # table is dead.
        Step(
            9,
            "store postings read from their key, vacuumed sooner",
            lambda d: d.postings_upkeep_ddl(),
        ),
        # Encryption fails closed: a store whose items were sealed before the mark existed.
        Step(
            10,
            "encryption mark",
            lambda d: [],
            rows=SEALED_ITEMS.mark_plan,
        ),
    ),
    _store_backfill,
)
MEMORY = Component(
    "memory",
    3,
    (
        Step(
            1,
            "agent memory ledger and decay",
            lambda d: d.ddl([_as_of(t, without=SHARD) for t in MEMORY_TABLES]),
        ),
        # Facts and their history are found by attribute and value, not by statement only.
        Step(2, "facts indexed by attribute and value", lambda d: [], rows=index_facts),
        # The same re-indexing, for facts whose statement repeats their value (indexed
        # twice by version 2, which doubled their terms' frequencies).
        Step(
            3,
            "facts indexed once when the statement repeats the value",
            lambda d: [],
            rows=index_facts,
        ),
        # Every ledger, decay and thread row keyed by its scope's shard key, which the
        # scope's items share under the default rule.
        Step(
            MEMORY_SHARD_VERSION,
            "memory shard key",
            _add_shard(MEMORY_TABLES),
            rows=fill_memory_shards,
            finish=_rekey(MEMORY_TABLES),
        ),
        # Facts and episodes found by their date too: the day in words in their lexical
        # text (items sealed by encryption at rest are indexed by the backfill, with keys).
        Step(
            DATES_VERSION,
            "facts and episodes indexed with their dates",
            lambda d: [],
            rows=index_dates,
        ),
        # What erases owe the key store: a data key to destroy, recorded with the deletes.
        Step(6, "erase ledger of data keys to destroy", lambda d: d.ddl([memory_erasures])),
    ),
    _memory_backfill,
)


#: The key store of encryption at rest: the wrapped data keys, in the data's database unless
#: a key store of its own is configured (then its tables are there, and only there).
def _keys_v1(d: Dialect) -> list[str]:
    statements = d.ddl([data_keys])
    if d.name == "postgresql":
        # raw: an index in byte order (the unique one has the database's collation), which
        # a read of the owners under a prefix walked (searches now read the items' shard keys)
        statements.append('CREATE INDEX am_keys_owner_bytes ON am_keys (owner COLLATE "C")')
    return statements


KEYS = Component("keys", 4, (Step(1, "data keys of encryption at rest", _keys_v1),))
#: Every component, in the order ``agent-memory migrate`` applies them.
COMPONENTS = (CHECKPOINT, STORE, MEMORY, KEYS)

#: The single global list written before per-component migrations: its version -> the
#: component version that holds the same statements.
GLOBAL_VERSIONS: dict[int, tuple[Component, int]] = {
    1: (CHECKPOINT, 1),
    2: (STORE, 1),
    3: (MEMORY, 1),
    4: (STORE, 2),
    5: (STORE, 3),
    6: (STORE, 4),
    7: (CHECKPOINT, 2),
}


def migrations_for(
    dialect: Dialect, components: Sequence[Component] = COMPONENTS
) -> list[Migration]:
    """The migrations of ``components`` (all by default), in the order they apply."""
    return [
        Migration(
            c.ledger_id(s.version),
            f"{c.name} {s.version}: {s.description}",
            s.statements(dialect),
        )
        for c in components
        for s in c.steps
    ]


def _description(component: Component, version: int) -> str:
    [step] = [s for s in component.steps if s.version == version]
    return step.description


def migrate_plan(
    dialect: Dialect,
    now: float,
    components: Sequence[Component] = COMPONENTS,
    shard_depth: int | None = None,
    sealer: RowSealer | None = None,
    encrypted: bool | None = None,
) -> Plan[dict[str, list[int]]]:
    """Apply the migrations of ``components`` this database lacks; return the versions
    applied, by component name.

    ``encrypted``: whether the data components opening the database encrypt at rest; the
    same transaction marks the database when they do, and refuses a marked database with
    an ``EncryptionError`` (nothing migrated) when they do not (see :mod:`.encryption_mark`;
    ``None``: neither, for the key store's own database).

    With the store among ``components``, it also checks the shard-key rule: the database
    records ``shard_depth`` at the first setup (``None``: the recorded value, else
    :data:`.shard.DEFAULT_SHARD_DEPTH`), and a different ``shard_depth`` later is refused
    with a ``ConfigurationError``, before anything is written. ``sealer``: the store's,
    when it encrypts at rest (the backfills that index sealed rows need it; run the plan
    with its ``call``, which loads the keys the plan asks for)."""
    done = yield from _ledger_plan(dialect)
    statements = _from_global_list(dialect, done, now)
    depth, to_record = shard_depth or DEFAULT_SHARD_DEPTH, None
    if STORE in components:
        depth, to_record = yield from _shard_rule(dialect, done, shard_depth)
    applied: dict[str, list[int]] = {}
    # in order, each step's statements, then its rows, then its finish; then one commit
    for component in components:
        pending = [s for s in component.steps if component.ledger_id(s.version) not in done]
        for step in pending:
            statements = yield from _step_plan(dialect, component, step, now, depth, statements)
        applied[component.name] = [s.version for s in pending]
    if to_record:
        statements.append(Stmt(_record_setting(dialect), to_record))
    # then the tables distributed where the database is (Citus), and one commit
    yield Batch(statements, hold=True)
    if encrypted is not None:
        yield from settle_plan(dialect, encrypted)
    yield from distribute_plan(dialect)
    yield Batch([], write=True)
    for component in components:
        if component.backfill is not None:
            versions = {
                s.version for s in component.steps if component.ledger_id(s.version) in done
            } | set(applied[component.name])
            yield from component.backfill(dialect, versions, depth, sealer)
    return applied


def _ledger_plan(dialect: Dialect) -> Plan[set[int]]:
    """Lock migrations (where the database can), create the schema and the ledger where
    missing, and read the versions it records; the transaction stays open."""
    create = dialect.sql(
        "create_migrations",
        lambda: dialect.unless_exists(
            migrations.name,
            str(
                CreateTable(migrations, if_not_exists=dialect.create_if_not_exists).compile(
                    dialect=dialect.sa
                )
            ).strip(),
        ),
    )
    applied_sql = dialect.sql("applied_migrations", lambda: sa.select(migrations.c.version))
    first: list[Stmt] = []
    lock = dialect.migration_lock()
    if lock:
        first.append(Stmt(Sql(lock), fetch=True))
    first += [Stmt(Sql(sql)) for sql in dialect.schema_ddl()]
    if dialect.create_if_not_exists:
        first.append(Stmt(create))
    else:
        yield from dialect.create_if_missing(create)
    first.append(Stmt(applied_sql, fetch=True))
    results = yield Batch(first, lock=True, hold=True)
    return {int(row[0]) for row in results[-1]}


def _record(dialect: Dialect) -> Sql:
    """Record one version in the ledger (``:version``, ``:description``, ``:applied_at``)."""
    return dialect.sql(
        "record_migration",
        lambda: sa.insert(migrations).values(
            version=sa.bindparam("version"),
            description=sa.bindparam("description"),
            applied_at=sa.bindparam("applied_at"),
        ),
    )


def _recorded(dialect: Dialect, component: Component, version: int, now: float) -> Stmt:
    """The ledger row of ``component``'s ``version``."""
    row = {
        "version": component.ledger_id(version),
        "applied_at": now,
        "description": _description(component, version),
    }
    return Stmt(_record(dialect), row)


def _from_global_list(dialect: Dialect, done: set[int], now: float) -> list[Stmt]:
    """Statements recording per component the versions the older global list recorded
    (``done`` is brought up to date in place)."""
    old = sorted(v for v in done if v in GLOBAL_VERSIONS)
    if not old:
        return []
    forget = dialect.sql(
        "forget_global_migrations",
        lambda: sa.delete(migrations).where(migrations.c.version < 1000),
    )
    statements = [Stmt(forget)]
    for v in old:
        component, version = GLOBAL_VERSIONS[v]
        done.add(component.ledger_id(version))
        statements.append(_recorded(dialect, component, version, now))
    done -= set(old)
    return statements


def _step_plan(
    dialect: Dialect,
    component: Component,
    step: Step,
    now: float,
    depth: int,
    statements: list[Stmt],
) -> Plan[list[Stmt]]:
    """Add ``step``'s statements and its ledger row to ``statements``; a step with rows to
    bring up to date sends them first (inside the open transaction) and runs its rows
    plan. Returns the statements still to send."""
    statements = [
        *statements,
        *(Stmt(Sql(sql)) for sql in step.build(dialect)),
        _recorded(dialect, component, step.version, now),
    ]
    if step.rows is not None:
        yield Batch(statements, hold=True)
        statements = []
        yield from step.rows(dialect, depth)
    if step.finish is not None:
        statements += [Stmt(Sql(sql)) for sql in step.finish(dialect)]
    return statements


def _record_setting(dialect: Dialect) -> Sql:
    return dialect.sql(
        "record_setting",
        lambda: sa.insert(settings).values(
            name=sa.bindparam("b_name"), value=sa.bindparam("b_value")
        ),
    )


def _read_setting(dialect: Dialect) -> Sql:
    return dialect.sql(
        "read_setting",
        lambda: sa.select(settings.c.value).where(settings.c.name == sa.bindparam("b_name")),
    )


def recorded_shard_depth_plan(dialect: Dialect) -> Plan[int]:
    """The shard depth a set-up database records (see :mod:`.shard`)."""
    [rows] = yield Batch([Stmt(_read_setting(dialect), {"b_name": "shard_depth"}, fetch=True)])
    return int(rows[0][0]) if rows else DEFAULT_SHARD_DEPTH


def _shard_rule(
    dialect: Dialect, done: set[int], asked: int | None
) -> Plan[tuple[int, dict[str, Any] | None]]:
    """The shard depth this database uses, and the settings row to record (``None`` when
    one is recorded already). Refuses an ``asked`` depth that differs from the recorded one:
    rows already carry keys computed by it."""
    if asked is not None:
        checked_depth(asked)
    recorded: int | None = None
    if STORE.ledger_id(STORE_SHARD_VERSION) in done:
        read = _read_setting(dialect)
        [rows] = yield Batch([Stmt(read, {"b_name": "shard_depth"}, fetch=True)], hold=True)
        recorded = int(rows[0][0]) if rows else None
    if recorded is not None:
        if asked is not None and asked != recorded:
            yield Batch([], write=True)  # end the migration's transaction: nothing written
            raise rule_refused(recorded, asked)
        return recorded, None
    depth = asked or DEFAULT_SHARD_DEPTH
    return depth, {"b_name": "shard_depth", "b_value": str(depth)}


def sealed_unmarked_plan(dialect: Dialect, components: Sequence[Component]) -> Plan[bool]:
    """Whether the database holds sealed rows of ``components`` that their migration which
    marks such a database (:data:`MARK_STEPS`) has not seen: a database encrypted before
    the mark, opened without setup. Reads only."""
    applied_sql = dialect.sql("applied_migrations", lambda: sa.select(migrations.c.version))
    try:
        [rows] = yield Batch([Stmt(applied_sql, fetch=True)])
    except Exception as exc:
        if missing_table(exc):  # no ledger: nothing of ours is here
            return False
        raise
    done = {int(v) for (v,) in rows}
    for component in components:
        version, sealed = MARK_STEPS.get(component.name, (0, None))
        if sealed is not None and component.ledger_id(version) not in done:
            try:
                if (yield from sealed.found_plan(dialect)):
                    return True
            except Exception as exc:
                if not missing_table(exc):  # else the component's tables are not there
                    raise
    return False


def installed_plan(dialect: Dialect) -> Plan[set[str]]:
    """The components whose tables this database holds (none for a database the package
    never set up); it reads, and creates nothing."""
    applied_sql = dialect.sql("applied_migrations", lambda: sa.select(migrations.c.version))
    try:
        [rows] = yield Batch([Stmt(applied_sql, fetch=True)])
    except Exception:  # no ledger: nothing of ours is here
        return set()
    names: set[str] = set()
    for (version,) in rows:
        if version in GLOBAL_VERSIONS:
            names.add(GLOBAL_VERSIONS[version][0].name)
        names |= {c.name for c in COMPONENTS if int(version) // 1000 == c.block}
    return names


def migrate(
    database: Database[Any],
    components: Sequence[Component] = COMPONENTS,
    shard_depth: int | None = None,
    sealer: RowSealer | None = None,
    encrypted: bool | None = None,
) -> dict[str, list[int]]:
    """Create or migrate the tables of ``components`` (all by default) in ``database``;
    return the versions applied, by component name. Idempotent. ``shard_depth``: the
    store's shard-key rule (``None``: the one recorded, else the default); ``sealer``: the
    store's, when it encrypts at rest; ``encrypted``: mark the database encrypted (``True``)
    or refuse it when it is (``False``), see :func:`migrate_plan`."""

    def plan() -> Plan[dict[str, list[int]]]:
        return migrate_plan(
            database.dialect, time.time(), components, shard_depth, sealer, encrypted
        )

    return database.run(plan()) if sealer is None else sealer.call(database.run, plan)
