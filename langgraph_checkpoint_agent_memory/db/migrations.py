"""Versioned schema migrations, a numbered list per component, the same for every dialect.
The ledger ``am_migrations`` records component ``c``'s version ``v`` as ``c.block * 1000 + v``;
:func:`migrate_plan` serializes on a lock, so processes may start at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

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
    store_items,
    store_vectors,
)
from langgraph_checkpoint_agent_memory.db.shard import (
    DEFAULT_SHARD_DEPTH,
    checked_depth,
    rule_refused,
)
from langgraph_checkpoint_agent_memory.db.store import vector_text

CONVERT_BATCH = 500


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
    #: Run after the migrations at every setup (resumable).
    after: Callable[[Dialect], Plan[Any]] | None = None

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


def _store_after(dialect: Dialect) -> Plan[None]:
    yield from dialect.vectors_plan()
    if dialect.native_vectors:
        yield from convert_vectors_plan(dialect)


CHECKPOINT = Component("checkpoint", 1, (Step(1, "checkpointer tables", _checkpoint_v1),))
STORE = Component("store", 2, (Step(1, "store tables", _store_v1),), _store_after)
MEMORY = Component("memory", 3, (Step(1, "agent memory ledger, decay and erasures", _memory_v1),))
#: The wrapped data keys of encryption at rest (in a key store's own database if set).
KEYS = Component("keys", 4, (Step(1, "data keys of encryption at rest", _keys_v1),))
#: Every component, in the order ``agent-memory migrate`` applies them.
COMPONENTS = (CHECKPOINT, STORE, MEMORY, KEYS)


def statements_of(dialect: Dialect, components: Sequence[Component] = COMPONENTS) -> list[str]:
    """Every statement of the steps of ``components``, in the order they apply."""
    return [sql for c in components for s in c.steps for sql in s.build(dialect)]


def migrate_plan(
    dialect: Dialect,
    now: float,
    components: Sequence[Component] = COMPONENTS,
    shard_depth: int | None = None,
    encrypted: bool | None = None,
    on_progress: Callable[[int, int | None], None] | None = None,
) -> Plan[dict[str, list[int]]]:
    """Apply the migrations of ``components`` this database lacks; the versions applied by
    component. ``on_progress(done, parts)``: the schema, then each ``after``. ``encrypted``:
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
        for step in pending:
            statements += [Stmt(Sql(sql)) for sql in step.build(dialect)]
            statements.append(_recorded(dialect, component, step, now))
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
        yield from after(dialect)
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
    on_progress: Callable[[int, int | None], None] | None = None,
) -> dict[str, list[int]]:
    """:func:`migrate_plan` run on ``database``; idempotent."""
    return database.run(
        migrate_plan(database.dialect, time.time(), components, shard_depth, encrypted, on_progress)
    )
