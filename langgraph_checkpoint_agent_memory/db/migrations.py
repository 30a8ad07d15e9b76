"""Versioned schema migrations, a numbered list per component, the same for every dialect.
The ledger ``am_migrations`` records component ``c``'s version ``v`` as ``c.block * 1000 + v``;
:func:`migrate_plan` serializes on a lock, so processes may start at once.

A component's first step is its baseline: it creates the current schema, so a new database
runs it alone and records every version of the component as applied; a later step alters a
database made before it (the store's step 2: the term index of ``store.index`` in place of
the postings of ``am_store_terms``, whose items :func:`convert_terms_plan` then converts)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateColumn, CreateIndex

from langgraph_checkpoint_agent_memory.db.database import Batch, Database, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, same_item
from langgraph_checkpoint_agent_memory.db.distribution import distribute_plan
from langgraph_checkpoint_agent_memory.db.marks import (
    SHARD_DEPTH,
    read_setting,
    record_setting,
    settle_plan,
)
from langgraph_checkpoint_agent_memory.db.schema import (
    CHECKPOINT_TABLES,
    MEMORY_TABLES,
    STORE_TABLES,
    data_keys,
    memory_erasures,
    migrations,
    settings,
    store_chunks,
    store_items,
    store_retractions,
    store_tags,
    store_unlisted,
    store_vectors,
)
from langgraph_checkpoint_agent_memory.db.shard import (
    DEFAULT_SHARD_DEPTH,
    checked_depth,
    rule_refused,
)
from langgraph_checkpoint_agent_memory.db.store import StoreStatements, key_match, vector_text
from langgraph_checkpoint_agent_memory.db.term_index import encode_terms, listed_form

CONVERT_BATCH = 500
#: ``on_progress(done, total)``: units done so far, and the total when known.
Progress = Callable[[int, int | None], None]
#: The settings row of a store whose items still have the old index's postings to convert.
CONVERTING = "store_terms_pending"
#: The old index: a row per posting (an item's term, with BM25's ``tf`` and ``dl``; ``tf`` 0:
#: encryption's keyed hash of a filterable field), and the packed blocks of common terms.
old_terms = sa.table(
    "am_store_terms",
    sa.column("term", sa.String),
    sa.column("shard", sa.String),
    sa.column("prefix", sa.String),
    sa.column("key", sa.String),
    sa.column("tf", sa.Integer),
    sa.column("dl", sa.Integer),
)
OLD_STORE_TABLES = ("am_store_terms", "am_store_blocks")


@dataclass(frozen=True)
class Step:
    """One migration of a component, its statements built for the dialect."""

    version: int
    description: str
    build: Callable[[Dialect], list[str]]


@dataclass(frozen=True)
class Component:
    """A component's migrations, in order, and the work its every setup runs after them."""

    name: str
    block: int
    steps: tuple[Step, ...]
    #: Run after the migrations at every setup (resumable), given a progress callback.
    after: Callable[[Dialect, Progress | None], Plan[Any]] | None = None

    def ledger_id(self, version: int) -> int:
        return self.block * 1000 + version

    @property
    def latest(self) -> int:
        return self.steps[-1].version


def _checkpoint_v1(d: Dialect) -> list[str]:
    return [*d.ddl(CHECKPOINT_TABLES), d.create_unless_exists(settings), *d.write_rows_ddl()]


def _store_v1(d: Dialect) -> list[str]:
    return [
        *d.ddl(STORE_TABLES),
        *d.vector_ddl(),
        *d.vector_index_ddl(),
        d.create_unless_exists(settings),
        *d.num_ddl(),
    ]


#: The columns and indexes of ``am_store_items`` the store's step 2 adds.
NEW_COLUMNS = ("num", "terms")
NEW_INDEXES = ("am_store_items_num",)


def _store_v2(d: Dialect) -> list[str]:
    """The old term index's layout altered into the new one; what it held the conversion
    moves (:func:`convert_terms_plan`), then drops."""
    items = store_items.name
    new = sorted(
        (i for i in store_items.indexes if i.name in NEW_INDEXES), key=lambda i: str(i.name)
    )
    added = [str(CreateColumn(store_items.c[c]).compile(dialect=d.sa)) for c in NEW_COLUMNS]
    # raw: Core has no ALTER TABLE; HANA alters a table's columns in parentheses
    if d.name == "hana":
        alter = [f"ALTER TABLE {items} ADD ({', '.join(added)})", f"ALTER TABLE {items} DROP (doc)"]
    else:
        alter = [f"ALTER TABLE {items} ADD COLUMN {c}" for c in added]
        alter.append(f"ALTER TABLE {items} DROP COLUMN doc")
    pending = sa.insert(settings).values(name=CONVERTING, value="1")
    return [
        *alter,
        *(str(CreateIndex(i).compile(dialect=d.sa)) for i in new),
        *d.num_ddl(),
        *d.ddl([store_chunks, store_unlisted, store_retractions, store_tags]),
        str(pending.compile(dialect=d.sa, compile_kwargs={"literal_binds": True})),
    ]


def _memory_v1(d: Dialect) -> list[str]:
    return d.ddl([*MEMORY_TABLES, memory_erasures])


def _keys_v1(d: Dialect) -> list[str]:
    statements = d.ddl([data_keys])
    if d.name == "postgresql":
        # raw: an index in byte order (the unique one has the database's collation)
        statements.append('CREATE INDEX am_keys_owner_bytes ON am_keys (owner COLLATE "C")')
    return statements


def convert_vectors_plan(dialect: Dialect) -> Plan[int]:
    """Fill the native vector column of vectors stored before the database had one, a batch
    at a time, only where still NULL (no row locks: Citus refuses them), so processes agree."""
    fill = dialect.fill_vector()
    assert fill is not None
    v, i = store_vectors, store_items.alias("i")
    pending = dialect.sql(
        "vectors_pending",
        lambda: (
            sa.select(v.c.shard, v.c.prefix, v.c.key, v.c.field, v.c.vector)
            .where(
                sa.column("embedding").is_(None),
                # sealed vectors (encryption at rest) keep their native columns empty
                ~sa.exists().where(same_item(i, v), i.c.sealed.is_not(None)),
            )
            .select_from(v)
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    done = 0
    while True:
        [rows] = yield Batch([Stmt(pending, {"n": CONVERT_BATCH}, fetch=True)])
        if not rows:
            return done
        updates = [
            {"shard": sh, "prefix": pr, "key": k, "field": f, "embedding": vector_text(bytes(vec))}
            for sh, pr, k, f, vec in rows
        ]
        yield Batch([Stmt(fill, updates, many=True)], write=True)
        done += len(updates)


def convert_terms_plan(dialect: Dialect, on_progress: Progress | None = None) -> Plan[int]:
    """Give the items the old term index wrote (``num`` NULL) their term columns from their
    postings in ``am_store_terms``, then drop the old tables; how many items it converted.

    A batch of :data:`CONVERT_BATCH` items in key order is one transaction: each item's
    number from :meth:`~.dialect.Dialect.new_num` (never one a new item has), its ``terms``
    from its postings (``tf`` 0: a filterable field's keyed hash, which becomes a tag), to be
    listed (a row of ``am_store_unlisted``), its length its ``doc_len`` (else its postings'
    ``dl``).
    It reads only items whose ``num`` is NULL and writes ``WHERE num IS NULL``, so processes
    converting at once (they take turns, a batch each, under the migrations' lock), or one
    resuming after a crash, lose and double nothing. The store lists the converted items as
    its queries find them (a query merges a namespace holding ``store.index.MERGE_AT``
    unlisted items); until then its queries read them unlisted.

    Once no item is left, ``am_store_terms`` and ``am_store_blocks`` are dropped (SQLite then
    runs ``VACUUM`` to give their space back; PostgreSQL gives a dropped table's space back
    at once, and the items' old row versions to autovacuum's ``VACUUM``).
    ``on_progress(done, total)`` counts the items converted (called only when there are)."""
    [rows] = yield Batch([Stmt(read_setting(dialect), {"b_name": CONVERTING}, fetch=True)])
    if not rows:
        return 0
    i = store_items
    sqlite = dialect.name == "sqlite"
    if dialect.name == "postgresql":  # num's statistics: all NULL (raw: no Core form)
        yield Batch([Stmt(Sql(f"ANALYZE {i.name}"))])

    def batch(after: bool) -> Any:
        """The next items to convert in key order (``after``: past ``:last_*``): the planner
        walks the key from there, not the NULL entries of num's index sorted again at every
        batch (SQLite: kept off them by ``num + 0``; PostgreSQL: by the statistics)."""
        num = i.c.num + sa.literal_column("0", sa.BigInteger) if sqlite else i.c.num
        unnumbered = num.is_(None)
        where = [unnumbered, _past(dialect, i)] if after else [unnumbered]
        n = sa.bindparam("n", type_=sa.Integer)
        return (
            sa.select(i.c.shard, i.c.prefix, i.c.key, i.c.doc_len)
            .where(*where)
            .order_by(i.c.shard, i.c.prefix, i.c.key)
            .limit(n)
        )

    def postings(after: bool) -> Any:
        t, b = old_terms, batch(after).subquery("b")
        columns = (t.c.shard, t.c.prefix, t.c.key, t.c.term, t.c.tf, t.c.dl)
        return sa.select(*columns).join_from(t, b, same_item(t, b))

    items_sql = [dialect.sql(("convert_items", a), partial(batch, a)) for a in (False, True)]
    postings_sql = [
        dialect.sql(("convert_postings", a), partial(postings, a)) for a in (False, True)
    ]
    count_sql = dialect.sql(
        "convert_count", lambda: sa.select(sa.func.count()).where(i.c.num.is_(None))
    )
    # PostgreSQL takes the numbers first: Citus runs no volatile function in an UPDATE
    ahead = dialect.name == "postgresql"
    numbers = sa.func.generate_series(1, sa.bindparam("n", type_=sa.Integer))
    numbers_sql = dialect.sql(
        "convert_numbers", lambda: sa.select(dialect.new_num()).select_from(numbers)
    )
    u: Any = store_items.alias("u")  # the SQLite number's max(num) reads the table unaliased
    write_sql = dialect.sql(
        ("convert_item", ahead),
        lambda: (
            sa.update(u)
            .where(key_match(u), u.c.num.is_(None))
            .values(
                num=sa.bindparam("b_num", type_=sa.BigInteger) if ahead else dialect.new_num(),
                **{c: sa.bindparam(f"b_{c}", type_=u.c[c].type) for c in ("doc_len", "terms")},
            )
        ),
    )
    tag_sql = dialect.sql(
        "convert_tag",
        lambda: dialect.insert_row_ignore(store_tags, ["shard", "prefix", "key", "tag"]),
    )

    unlisted_sql = StoreStatements(dialect).upsert_unlisted()  # as a put writes them
    [[(total,)]] = yield Batch([Stmt(count_sql, fetch=True)])
    report = on_progress if on_progress is not None and total else lambda done, total: None
    done = 0
    report(done, int(total))
    lock = dialect.migration_lock()
    turn = [Stmt(Sql(lock), fetch=True)] if lock else []
    last: dict[str, Any] = {}
    while True:
        # converters take turns, a batch each (the last drops the postings the others read)
        params = {"n": CONVERT_BATCH, **last}
        after = bool(last)
        *_, items = yield Batch(
            [*turn, Stmt(items_sql[after], params, fetch=True)], lock=True, hold=True
        )
        if not items:
            break
        [found] = yield Batch([Stmt(postings_sql[after], params, fetch=True)], hold=True)
        last = dict(zip(("last_shard", "last_prefix", "last_key"), items[-1][:3], strict=True))
        writes, tags, unlisted = _converted(items, found)
        if ahead:
            [taken] = yield Batch([Stmt(numbers_sql, {"n": len(writes)}, fetch=True)], hold=True)
            for row, (num,) in zip(writes, taken, strict=True):
                row["b_num"] = num
        yield Batch(
            [
                Stmt(write_sql, writes, many=True),
                Stmt(tag_sql, tags, many=True),
                Stmt(unlisted_sql, unlisted, many=True),
            ],
            write=True,
        )
        done += len(writes)
        report(done, max(int(total), done))
    forget = dialect.sql(
        "forget_setting",
        lambda: sa.delete(settings).where(settings.c.name == sa.bindparam("b_name")),
    )
    drops = [Stmt(Sql(_drop_if_exists(dialect, name))) for name in OLD_STORE_TABLES]
    *_, forgotten = yield Batch([*drops, Stmt(forget, {"b_name": CONVERTING})], write=True)
    # (in the transaction that found no item left, under the turn it took)
    if sqlite and forgotten:  # the process that dropped them
        yield Batch([Stmt(Sql("VACUUM"))])  # raw: no Core form; outside a transaction
    return done


def _drop_if_exists(dialect: Dialect, table: str) -> str:
    """``DROP TABLE`` of ``table`` unless another process dropped it."""
    # raw: Core has no DROP IF EXISTS; HANA has none at all, its SQLScript block tests it
    if dialect.name != "hana":
        return f"DROP TABLE IF EXISTS {table}"
    return (
        "DO BEGIN DECLARE found INTEGER; SELECT COUNT(*) INTO found FROM TABLES "
        f"WHERE SCHEMA_NAME = CURRENT_SCHEMA AND TABLE_NAME = '{table.upper()}'; "
        f"IF :found > 0 THEN EXEC 'DROP TABLE {table}'; END IF; END"
    )


def _past(dialect: Dialect, t: Any) -> Any:
    """Core: ``t``'s row comes after ``(:last_shard, :last_prefix, :last_key)`` in key order
    (a row value, a range of the key's index; spelled out on HANA, which has none)."""
    shard, prefix, key = (
        sa.bindparam(f"last_{c}", type_=t.c[c].type) for c in ("shard", "prefix", "key")
    )
    if dialect.name != "hana":
        return sa.tuple_(t.c.shard, t.c.prefix, t.c.key) > sa.tuple_(shard, prefix, key)
    return sa.or_(
        t.c.shard > shard,
        sa.and_(t.c.shard == shard, t.c.prefix > prefix),
        sa.and_(t.c.shard == shard, t.c.prefix == prefix, t.c.key > key),
    )


def _converted(
    items: list[Any], postings: list[Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The updates of a batch of items, the tags and the terms to list to insert, from their
    postings."""
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    lengths: dict[tuple[str, str, str], int] = {}
    tags = []
    for shard, prefix, key, term, tf, dl in postings:
        if tf == 0:
            tags.append({"shard": shard, "prefix": prefix, "key": key, "tag": term})
            continue
        found = counts.setdefault((shard, prefix, key), {})
        found[term] = found.get(term, 0) + int(tf)
        lengths[(shard, prefix, key)] = int(dl)
    writes, unlisted = [], []
    for shard, prefix, key, doc_len in items:
        item = (shard, prefix, key)
        length = doc_len if doc_len is not None else lengths.get(item)
        terms = counts.get(item)  # none: nothing indexed, or no term in its text
        blob = encode_terms(terms) if terms else None
        ident = {"shard": shard, "prefix": prefix, "key": key}
        writes.append(
            {**ident, "b_doc_len": length, "b_terms": listed_form(blob) if blob else None}
        )
        if blob:
            unlisted.append({**ident, "terms": blob})
    return writes, tags, unlisted


def _store_after(dialect: Dialect, on_converted: Progress | None = None) -> Plan[None]:
    yield from dialect.vectors_plan()
    if dialect.native_vectors:
        yield from convert_vectors_plan(dialect)
    yield from convert_terms_plan(dialect, on_converted)


CHECKPOINT = Component("checkpoint", 1, (Step(1, "checkpointer tables", _checkpoint_v1),))
STORE = Component(
    "store",
    2,
    (
        Step(1, "store tables", _store_v1),
        Step(2, "term index carried by the items, listed in chunks", _store_v2),
    ),
    _store_after,
)
MEMORY = Component("memory", 3, (Step(1, "agent memory ledger, decay and erasures", _memory_v1),))
#: The wrapped data keys of encryption at rest (in a key store's own database if set).
KEYS = Component("keys", 4, (Step(1, "data keys of encryption at rest", _keys_v1),))
#: Every component, in the order ``agent-memory migrate`` applies them.
COMPONENTS = (CHECKPOINT, STORE, MEMORY, KEYS)


def statements_of(dialect: Dialect, components: Sequence[Component] = COMPONENTS) -> list[str]:
    """Every statement a new database runs for ``components`` (their baselines), in order."""
    return [sql for c in components for sql in c.steps[0].build(dialect)]


def upgrade_statements(dialect: Dialect, components: Sequence[Component] = COMPONENTS) -> list[str]:
    """Every statement of the steps after the baselines of ``components``, in order."""
    return [sql for c in components for s in c.steps[1:] for sql in s.build(dialect)]


def migrate_plan(
    dialect: Dialect,
    now: float,
    components: Sequence[Component] = COMPONENTS,
    shard_depth: int | None = None,
    encrypted: bool | None = None,
    on_progress: Callable[[int, int | None], None] | None = None,
    on_converted: Callable[[int, int | None], None] | None = None,
) -> Plan[dict[str, list[int]]]:
    """Apply the migrations of ``components`` this database lacks; the versions applied by
    component. ``on_progress(done, parts)``: the schema, then each ``after``;
    ``on_converted(done, total)``: the items the store's ``after`` converts to the current
    term index (:func:`convert_terms_plan`), called only when some are. ``encrypted``:
    mark the database, or refuse a marked one (``EncryptionError``); another ``shard_depth``
    than recorded is refused (``ConfigurationError``)."""
    afters = [c.after for c in components if c.after is not None]
    parts = 1 + len(afters)
    report = on_progress or (lambda done, total: None)
    report(0, parts)
    done = yield from _ledger_plan(dialect)
    to_record = None
    if STORE in components:
        to_record = yield from _shard_rule(dialect, done, shard_depth)
    statements: list[Stmt] = []
    applied: dict[str, list[int]] = {}
    for component in components:
        pending = [s for s in component.steps if component.ledger_id(s.version) not in done]
        # a new database: the baseline makes the current schema, every version is applied
        run = pending[:1] if pending == list(component.steps) else pending
        statements += [Stmt(Sql(sql)) for step in run for sql in step.build(dialect)]
        statements += [_recorded(dialect, component, step, now) for step in pending]
        applied[component.name] = [s.version for s in pending]
    if to_record:
        statements.append(Stmt(record_setting(dialect), to_record))
    yield Batch(statements, hold=True)
    if encrypted is not None:
        yield from settle_plan(dialect, encrypted)
    yield from distribute_plan(dialect)
    yield Batch([], write=True)
    report(1, parts)
    for finished, after in enumerate(afters, 2):
        yield from after(dialect, on_converted)
        report(finished, parts)
    return applied


def _applied_sql(dialect: Dialect) -> Sql:
    return dialect.sql("applied_migrations", lambda: sa.select(migrations.c.version))


def _ledger_plan(dialect: Dialect) -> Plan[set[int]]:
    """Lock, create the schema and ledger where missing, read it; the transaction stays open."""
    create = dialect.sql("create_migrations", lambda: dialect.create_unless_exists(migrations))
    first: list[Stmt] = []
    lock = dialect.migration_lock()
    if lock:
        first.append(Stmt(Sql(lock), fetch=True))
    first += [Stmt(Sql(sql)) for sql in dialect.schema_ddl()]
    if dialect.create_if_not_exists:
        first.append(Stmt(create))
    else:
        yield from dialect.create_if_missing(create)
    first.append(Stmt(_applied_sql(dialect), fetch=True))
    results = yield Batch(first, lock=True, hold=True)
    return {int(row[0]) for row in results[-1]}


def _recorded(dialect: Dialect, component: Component, step: Step, now: float) -> Stmt:
    record = dialect.sql(
        "record_migration",
        lambda: sa.insert(migrations).values(
            {n: sa.bindparam(n) for n in ("version", "description", "applied_at")}
        ),
    )
    version = component.ledger_id(step.version)
    return Stmt(record, {"version": version, "applied_at": now, "description": step.description})


def recorded_shard_depth_plan(dialect: Dialect) -> Plan[int]:
    """The shard depth a set-up database records (see :mod:`.shard`)."""
    read = Stmt(read_setting(dialect), {"b_name": SHARD_DEPTH}, fetch=True)
    [rows] = yield Batch([read])
    return int(rows[0][0]) if rows else DEFAULT_SHARD_DEPTH


def _shard_rule(dialect: Dialect, done: set[int], asked: int | None) -> Plan[dict[str, Any] | None]:
    """The shard depth's settings row to record (``None``: recorded); refuses another one."""
    if asked is not None:
        checked_depth(asked)
    recorded: int | None = None
    if STORE.ledger_id(1) in done:
        read = Stmt(read_setting(dialect), {"b_name": SHARD_DEPTH}, fetch=True)
        [rows] = yield Batch([read], hold=True)
        recorded = int(rows[0][0]) if rows else None
    if recorded is not None:
        if asked is not None and asked != recorded:
            yield Batch([], write=True)  # end the migration's transaction: nothing written
            raise rule_refused(recorded, asked)
        return None
    return {"b_name": SHARD_DEPTH, "b_value": str(asked or DEFAULT_SHARD_DEPTH)}


def installed_plan(dialect: Dialect) -> Plan[set[str]]:
    """The components whose tables this database holds; it creates nothing."""
    try:
        [rows] = yield Batch([Stmt(_applied_sql(dialect), fetch=True)])
    except Exception:  # no ledger: nothing of ours is here
        return set()
    blocks = {int(version) // 1000 for (version,) in rows}
    return {c.name for c in COMPONENTS if c.block in blocks}


def migrate(
    database: Database[Any],
    components: Sequence[Component] = COMPONENTS,
    shard_depth: int | None = None,
    encrypted: bool | None = None,
    on_progress: Progress | None = None,
    on_converted: Progress | None = None,
) -> dict[str, list[int]]:
    """:func:`migrate_plan` run on ``database``; idempotent."""
    return database.run(
        migrate_plan(
            database.dialect,
            time.time(),
            components,
            shard_depth,
            encrypted,
            on_progress,
            on_converted,
        )
    )
