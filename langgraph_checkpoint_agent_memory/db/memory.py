"""The SQL of agent memory, as plans (:mod:`.database`): facts and episodes are store items;
the ``am_memory_*`` tables add scope leases, pending episodes, finished jobs, the threads a
scope used, and ``ln(importance)`` per decaying item, so decay is plain arithmetic anywhere.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, NamedTuple

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, same_item
from langgraph_checkpoint_agent_memory.db.row_sealer import RowSealer
from langgraph_checkpoint_agent_memory.db.schema import (
    MEMORY_TABLES,
    STORE_NS_TABLES,
    STORE_ROW_TABLES,
    matching,
    memory_decay,
    memory_erasures,
    memory_jobs,
    memory_pending,
    memory_scopes,
    memory_threads,
    metadata,
    store_items,
    store_retractions,
    store_tags,
    store_unlisted,
    store_vectors,
)
from langgraph_checkpoint_agent_memory.db.shard import covers, shard_key
from langgraph_checkpoint_agent_memory.db.store import (
    SEALED_VALUE,
    SealedVectorRow,
    StoreStatements,
    item_gone,
    key_match,
    live,
    ns_text,
    scoped,
)
from langgraph_checkpoint_agent_memory.db.term_index import index_item

#: A namespace as the store keeps it.
ns = ns_text


@dataclass
class StoredRow:
    """An item with its decay state (``None`` for items that do not decay)."""

    prefix: str
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    log_importance: float | None
    reinforced_at: float | None
    pinned: bool


def new_scope_row(scope: str, root: str, now: float, shard: str) -> dict[str, Any]:
    """The ``am_memory_scopes`` row a scope starts with: no lease, no failures."""
    unset = dict.fromkeys(("lease_owner", "lease_until", "next_attempt_at", "last_error"))
    return {"shard": shard, "scope": scope, "root": root, "failures": 0, "created_at": now, **unset}


class MemorySql:
    """Statements for one dialect; a scope's ledger rows carry its namespace's shard key."""

    def __init__(
        self,
        dialect: Dialect,
        store_sql: StoreStatements,
        root: str = "memory",
        sealer: RowSealer | None = None,
    ) -> None:
        self.d = dialect
        self.store = store_sql
        self.root = root
        self.sealer = sealer

    def statement(self, key: Hashable, build: Callable[[], Any]) -> Sql:
        return self.d.sql(("memory", key), build)

    def scope_labels(self, scope: str) -> tuple[str, ...]:
        """The namespace of ``scope`` (``user=alice,agent=support``): root, then labels."""
        return (self.root, *scope.split(","))

    def scope_shard(self, scope: str) -> str:
        """The shard key of a scope's ledger rows."""
        return shard_key(self.scope_labels(scope), self.store.shard_depth)

    def lock_scopes(self, scopes: Iterable[str]) -> list[Stmt]:
        """The statements that lock ``scopes``' shard keys, sorted (none: no such lock)."""
        return self.lock_shards(self.scope_shard(s) for s in scopes)

    def lock_shards(self, keys: Iterable[str]) -> list[Stmt]:
        lock = self._scope_lock
        return [] if lock is None else [Stmt(lock, {"lock_key": k}) for k in sorted(set(keys))]

    @cached_property
    def _scope_lock(self) -> Sql | None:
        built = self.d.scope_lock()
        return None if built is None else self.d.compile(built)

    def item_writes(
        self,
        items: list[dict[str, Any]],
        vectors: list[dict[str, Any]] | None = None,
        removed: Sequence[dict[str, Any]] = (),
    ) -> list[Stmt]:
        """Upsert memory's item rows and delete ``removed``, as the store writes items."""
        for item in items:
            index_item(item)
        return self.store.writes(items, vectors, removed, native_vectors=self.sealer is None)

    def decay_stmt(self, rows: Sequence[dict[str, Any]]) -> Stmt:
        """Upsert decay rows (each with ``prefix``, ``key``, ``scope`` ...), keyed."""
        return Stmt(self.upsert_decay(), self.store.keyed(rows), many=True)

    def insert_ignore(self, table: sa.Table) -> Sql:
        """Insert one row of ``table`` unless its primary key is there (first write wins)."""
        keys = [c.name for c in table.primary_key.columns]
        return self.statement(("insert", table.name), lambda: self.d.insert_row_ignore(table, keys))

    def upsert_decay(self) -> Sql:
        update = ["scope", "log_importance", "reinforced_at", "pinned"]
        keys = ["shard", "prefix", "key"]
        return self.statement("upsert_decay", lambda: self.d.upsert(memory_decay, keys, update))

    def reinforce(self) -> Sql:
        """Mark one item (``:shard``, ``:prefix``, ``:key``) reinforced at ``:now``."""
        t = memory_decay
        now = sa.bindparam("now", type_=sa.Float)
        return self.statement(
            "reinforce",
            lambda: (
                sa.update(t).where(key_match(t), t.c.reinforced_at < now).values(reinforced_at=now)
            ),
        )

    def delete_decay(self) -> Sql:
        """Delete one item's decay row (``:shard``, ``:prefix``, ``:key``)."""
        return self.statement(
            "delete_decay", lambda: sa.delete(memory_decay).where(key_match(memory_decay))
        )

    def rows(self, with_keys: int | None = None) -> Sql:
        """A namespace's live items, decay state, and ``sealed`` with a sealer (keys: ``:k<j>``)."""
        i, d = store_items.alias("i"), memory_decay.alias("d")
        sealed = self.sealer is not None

        def build() -> Any:
            where = [*matching(i, "shard", "prefix"), live(i)]
            if with_keys:
                keys = [sa.bindparam(f"k{j}", type_=sa.String) for j in range(with_keys)]
                where.append(i.c.key.in_(keys))
            columns = (i.c.prefix, i.c.key, i.c.value, i.c.created_at, i.c.updated_at)
            decay = (d.c.log_importance, d.c.reinforced_at, d.c.pinned)
            more = (i.c.sealed,) if sealed else ()
            query = sa.select(*columns, *decay, *more)
            return query.select_from(i.outerjoin(d, same_item(d, i))).where(*where)

        return self.statement(("rows", with_keys, sealed), build)

    def vectors_of(self) -> Sql:
        """``(key, vector)`` of one namespace (with a sealer: rows for :func:`vectors_plan`)."""
        if self.sealer is not None:
            return self.store.sealed_vectors_exact()
        v = store_vectors
        return self.statement(
            "vectors_of",
            lambda: sa.select(v.c.key, v.c.vector).where(*matching(v, "shard", "prefix")),
        )

    def one_ns(self, prefix: str, **more: Any) -> dict[str, Any]:
        """Parameters naming exactly the namespace ``prefix``, with its shard key."""
        return {"shard": self.store.shard(prefix), "prefix": prefix, **more}


def under_root(sql: MemorySql, t: Any) -> Any:
    """Core: ``t.prefix`` starts with ``:root_dot`` (``:n`` characters: :func:`root_params`)."""
    head = sql.d.substring(t.c.prefix, sa.bindparam("n", type_=sa.Integer))
    return head == sa.bindparam("root_dot")


def root_params(root: str, **more: Any) -> dict[str, Any]:
    """The parameters of :func:`under_root` for the namespaces under ``root``."""
    return {"n": len(root) + 1, "root_dot": root + ".", **more}


def version_plan(sql: MemorySql, prefix: str, now: float) -> Plan[tuple[int, float]]:
    """A namespace's live item count and latest change (recall's cache fingerprint)."""
    [rows] = yield Batch([Stmt(sql.store.fingerprint(), sql.one_ns(prefix, now=now), fetch=True)])
    count, latest = rows[0]
    return int(count), float(latest or 0.0)


def decode(raw: Sequence[Any], sealer: RowSealer | None = None) -> StoredRow:
    """A row of :meth:`MemorySql.rows`, opened with ``sealer`` (its keys loaded)."""
    prefix, key, stored, created_at, updated_at, *decay, pinned = raw[:8]
    if sealer is not None:
        sealed = raw[8]
        value = sealer.open_value(prefix, key, stored, None if sealed is None else bytes(sealed))
    else:  # JSON text, or a dict where the driver decodes JSON (psycopg's JSONB)
        value = stored if isinstance(stored, dict) else json.loads(stored)
    log_importance, reinforced_at = (None if x is None else float(x) for x in decay)
    times = float(created_at), float(updated_at)
    return StoredRow(prefix, key, value, *times, log_importance, reinforced_at, bool(pinned))


def read_plan(
    sql: MemorySql, prefix: str, now: float, keys: Sequence[str] | None = None
) -> Plan[list[StoredRow]]:
    """A namespace's live items with their decay state (only ``keys`` when given)."""
    if keys is not None and not keys:
        return []
    out: list[StoredRow] = []
    chunks = [list(keys[i : i + 64]) for i in range(0, len(keys), 64)] if keys else [None]
    for chunk in chunks:
        params = sql.one_ns(prefix, now=now, **{f"k{j}": k for j, k in enumerate(chunk or ())})
        [rows] = yield Batch([Stmt(sql.rows(len(chunk) if chunk else None), params, fetch=True)])
        out += yield from open_rows_plan(sql, rows)
    return out


def open_rows_plan(sql: MemorySql, rows: Sequence[Sequence[Any]]) -> Plan[list[StoredRow]]:
    """Rows of :meth:`MemorySql.rows` decoded (with a sealer, their keys loaded first)."""
    if sql.sealer is not None and rows:
        yield from sql.sealer.ids_plan(None if r[8] is None else bytes(r[8]) for r in rows)
    return [decode(r, sql.sealer) for r in rows]


def vectors_plan(sql: MemorySql, rows: Sequence[Sequence[Any]]) -> Plan[dict[str, bytes]]:
    """Rows of :meth:`MemorySql.vectors_of` as float32 bytes by key (opened with a sealer)."""
    sealer = sql.sealer
    if sealer is None:
        return {k: bytes(v) for k, v in rows}
    found = [SealedVectorRow._make(r) for r in rows]
    yield from sealer.ids_plan(bytes(r.vector) for r in found if not r.plain)
    return {
        r.key: sealer.open_vector(r.prefix, r.key, r.field, bytes(r.vector), bool(r.plain))
        for r in found
    }


def seal_items_plan(
    sql: MemorySql, items: Sequence[dict[str, Any]], vectors: Sequence[dict[str, Any]] = ()
) -> Plan[None]:
    """Seal memory's item and vector rows in place, as the store's put seals. Key lookups
    come first, so a plan that must load keys stops before it writes."""
    sealer = sql.sealer
    if sealer is None or not (items or vectors):
        return
    shard_of = sql.store.shard
    shards = sorted({shard_of(r["prefix"]) for r in (*items, *vectors)})
    yield from sealer.preload_plan(shards)
    keys: dict[str, Any] = {}
    for shard in shards:
        keys[shard] = yield from sealer.owner_key_plan(shard, create=True)
    for item in items:
        key = keys[shard_of(item["prefix"])]
        item.update(
            sealed=sealer.seal_value(key, item["prefix"], item["key"], item["value"]),
            value=SEALED_VALUE,
            term_of=sealer.term_of(key),
            filter_terms=sealer.filter_terms(key, item["value"]),
        )
    for row in vectors:
        key = keys[shard_of(row["prefix"])]
        row["vector"] = sealer.seal_vector(
            key, row["prefix"], row["key"], row["field"], bytes(row["vector"])
        )


def ident_of(row: dict[str, Any]) -> dict[str, Any]:
    """An item row's key: its shard key, namespace and key."""
    return {"shard": row["shard"], "prefix": row["prefix"], "key": row["key"]}


def record_plan(
    sql: MemorySql,
    *,
    scope: str,
    root: str,
    item: dict[str, Any],
    thread_id: str | None,
    now: float,
    reinforce: Sequence[dict[str, Any]] = (),
) -> Plan[bool]:
    """Store and queue an episode unless recorded before; whether it was new. ``reinforce``
    rides along, so reading memory never costs a write of its own."""
    shard = sql.scope_shard(scope)
    scope_row = new_scope_row(scope, root, now, shard)
    [item] = sql.store.keyed([item])
    yield from seal_items_plan(sql, [item])
    index_item(item)  # a new episode: nothing listed to retract
    tags = [{**ident_of(item), "tag": t} for t in item.pop("tags", ())]
    terms = item.pop("unlisted")
    locks = sql.lock_scopes([scope])
    add = sql.insert_ignore
    *_, inserted, _ = yield Batch(
        [*locks, Stmt(add(store_items), item), Stmt(add(memory_scopes), scope_row)],
        lock=True,
        hold=True,
    )
    writes: list[Stmt] = []
    key = {"shard": shard, "scope": scope}
    if inserted:
        pending = {**key, "episode_key": item["key"], "recorded_at": now, "status": "pending"}
        writes.append(Stmt(add(memory_pending), pending))
        if terms is not None:
            listing = {**ident_of(item), "terms": terms}
            writes.append(Stmt(sql.store.upsert_unlisted(), listing))
        if tags:
            writes.append(Stmt(add(store_tags), tags, many=True))
    if thread_id is not None:
        writes.append(Stmt(add(memory_threads), {**key, "thread_id": thread_id, "seen_at": now}))
    if reinforce:
        writes.append(Stmt(sql.reinforce(), sql.store.keyed(reinforce), many=True))
    yield Batch(writes, write=True)
    return bool(inserted)


def reinforce_plan(sql: MemorySql, rows: Sequence[dict[str, Any]]) -> Plan[None]:
    if rows:
        keyed = sql.store.keyed(rows)
        locks = sql.lock_shards(r["shard"] for r in keyed)
        yield Batch([*locks, Stmt(sql.reinforce(), keyed, many=True)], write=True)


def decay_plan(
    sql: MemorySql,
    *,
    now: float,
    log_rate_per_second: float,
    log_threshold: float,
    scope: str | None = None,
) -> Plan[int]:
    """Delete every unpinned item whose decayed importance is under the threshold, in logs:
    ``log_importance + (now - reinforced_at) * ln(rate) / 86400 < ln(threshold)``."""
    # a scope's decay rows carry its items' shard key: one key when the scope covers it
    one = scope is not None and covers(sql.scope_labels(scope), sql.store.shard_depth)

    def decayed(d: Any) -> list[Any]:
        now, k = sa.bindparam("now", type_=sa.Float), sa.bindparam("k", type_=sa.Float)
        out = [
            d.c.pinned == 0,
            d.c.log_importance + (now - d.c.reinforced_at) * k < sa.bindparam("c", type_=sa.Float),
        ]
        if one:
            out.append(d.c.shard == sa.bindparam("shard"))
        if scope is not None:
            out.append(d.c.scope == sa.bindparam("scope"))
        return out

    def delete_from(name: str) -> Sql:
        t, d = metadata.tables[name], memory_decay.alias("d")

        def build() -> Any:
            routed = [t.c.shard == sa.bindparam("shard")] if one else []
            # the terms to list go after the items (see StoreStatements.delete_under)
            gone = [item_gone(t)] if t is store_unlisted else []
            return sa.delete(t).where(
                *routed, sa.exists().where(same_item(d, t), *decayed(d)), *gone
            )

        return sql.statement(("decay", name, scope is not None, one), build)

    def retract() -> Any:  # the listed items about to go, out of their term lists
        i, d = store_items, memory_decay.alias("d")
        routed = [i.c.shard == sa.bindparam("shard")] if one else []
        cols = ["shard", "prefix", "num", "terms"]
        found = sa.select(*(i.c[c] for c in cols)).where(
            *routed,
            i.c.terms.is_not(None),
            ~sa.exists().where(same_item(store_unlisted, i)),
            sa.exists().where(same_item(d, i), *decayed(d)),
        )
        keys = ["shard", "prefix", "num"]
        return sql.d.insert_missing(store_retractions, cols, found, keys)

    rows = sql.statement(
        ("decay_rows", scope is not None, one),
        lambda: sa.delete(memory_decay).where(*decayed(memory_decay)),
    )
    params: dict[str, Any] = {"now": now, "k": log_rate_per_second, "c": log_threshold}
    if scope is not None:
        params["scope"] = scope
        if one:
            params["shard"] = sql.scope_shard(scope)
    locks = sql.lock_scopes([scope]) if scope is not None else []
    if one:  # the shard key's merges wait: none lists an item this decay deletes unretracted
        locks += sql.store.merge_locks([params["shard"]])
    retracting = sql.statement(("decay_retract", scope is not None, one), retract)
    deletes = [Stmt(delete_from(t), params) for t in STORE_ROW_TABLES]
    found = yield Batch(
        [*locks, Stmt(retracting, params), *deletes, Stmt(rows, params)], write=True
    )
    return int(found[len(locks) + 1 + STORE_ROW_TABLES.index(store_items.name)])


def known_scopes_plan(sql: MemorySql, root: str, shard: str | None = None) -> Plan[set[str]]:
    """Every scope with a ledger row or items under ``root`` (``shard``: only on that key)."""
    s, i = memory_scopes, store_items
    one = shard is not None

    def on_shard(t: Any) -> list[Any]:
        return [t.c.shard == sa.bindparam("shard")] if one else []

    scopes = sql.statement(
        ("scopes", one),
        lambda: sa.select(s.c.scope).where(s.c.root == sa.bindparam("root"), *on_shard(s)),
    )
    prefixes = sql.statement(
        ("prefixes", one),
        lambda: sa.select(i.c.prefix).distinct().where(*on_shard(i), under_root(sql, i)),
    )
    a, b = yield Batch(
        [
            Stmt(scopes, {"root": root, "shard": shard}, fetch=True),
            Stmt(prefixes, root_params(root, shard=shard), fetch=True),
        ]
    )
    found = {",".join(labels) for (prefix,) in b if (labels := prefix.split(".")[1:-1])}
    return found | {s for (s,) in a}


def stats_plan(sql: MemorySql, root: str, now: float) -> Plan[dict[str, dict[str, int]]]:
    """Per scope: items per kind, pending and parked episodes, failed jobs."""
    i, q, j = store_items, memory_pending, memory_jobs
    items = sql.statement(
        "stats_items",
        lambda: (
            sa.select(i.c.prefix, sa.func.count())
            .where(under_root(sql, i), live(i))
            .group_by(i.c.prefix)
        ),
    )
    pending = sql.statement(
        "stats_pending",
        lambda: sa.select(q.c.scope, q.c.status, sa.func.count()).group_by(q.c.scope, q.c.status),
    )
    failed = sql.statement("stats_failed", lambda: _unfinished_jobs(j.c.scope))
    a, b, c = yield Batch(
        [
            Stmt(items, root_params(root, now=now), fetch=True),
            Stmt(pending, fetch=True),
            Stmt(failed, fetch=True),
        ]
    )
    kinds = ("facts", "history", "episodes", "pending", "parked", "failed")
    out: defaultdict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(kinds, 0))
    for prefix, count in a:
        labels = prefix.split(".")
        if len(labels) >= 3 and labels[-1] in kinds[:3]:
            out[",".join(labels[1:-1])][labels[-1]] += int(count)
    for scope, status, count in b:
        out[scope][status] = int(count)
    for scope, count in c:
        out[scope]["failed"] = int(count)
    return dict(out)


@dataclass(frozen=True)
class Backlog:
    """Consolidation's backlog over every scope (:func:`backlog_plan`): ``pending`` episodes (not
    parked), their ``scopes``, the oldest's ``oldest_at`` (``None``: none), the read's ``now``."""

    pending: int
    scopes: int
    oldest_at: float | None
    now: float

    @property
    def oldest_age(self) -> float | None:
        """Seconds the oldest pending episode has waited (``None``: nothing pending)."""
        return None if self.oldest_at is None else max(self.now - self.oldest_at, 0.0)


def backlog_plan(sql: MemorySql, now: float) -> Plan[Backlog]:
    """The consolidation backlog at ``now``: pending episodes, the scopes holding them and
    the oldest one's time, in one statement over ``am_memory_pending`` (no items read), so a
    gauge may poll it.

    Example:
        >>> _ = memory.record("user=bob", [{"role": "user", "content": "I work nights"}])
        >>> backlog = memory.context.run(backlog_plan(memory.context.sql, now=4e9))
        >>> backlog.pending, backlog.scopes, backlog.oldest_age > 0
        (1, 1, True)
    """
    q = memory_pending
    query = sql.statement(
        "backlog",
        lambda: sa.select(
            sa.func.count(), sa.func.count(sa.distinct(q.c.scope)), sa.func.min(q.c.recorded_at)
        ).where(q.c.status == "pending"),
    )
    [[(pending, scopes, oldest)]] = yield Batch([Stmt(query, fetch=True)])
    return Backlog(int(pending), int(scopes), None if oldest is None else float(oldest), now)


def failures_plan(sql: MemorySql) -> Plan[dict[str, int]]:
    """Parked episodes (``parked_episodes``) and jobs per unfinished status (``failed_jobs``,
    ``parked_jobs``), over every scope: the totals of ``scopes``' parked and failed counts.

    Example:
        >>> memory.context.run(failures_plan(memory.context.sql))
        {'parked_episodes': 0, 'failed_jobs': 0, 'parked_jobs': 0}
    """
    q = memory_pending
    parked = sql.statement(
        "parked_count", lambda: sa.select(sa.func.count()).where(q.c.status == "parked")
    )
    jobs = sql.statement("unfinished_jobs", lambda: _unfinished_jobs(memory_jobs.c.status))
    [[(episodes,)], by_status] = yield Batch([Stmt(parked, fetch=True), Stmt(jobs, fetch=True)])
    counts = {str(status): int(n) for status, n in by_status}
    return {
        "parked_episodes": int(episodes),
        "failed_jobs": counts.get("failed", 0),
        "parked_jobs": counts.get("parked", 0),
    }


def _unfinished_jobs(by: Any) -> Any:
    """Core: the jobs not completed (failed or parked), counted per value of column ``by``."""
    j = memory_jobs
    return sa.select(by, sa.func.count()).where(j.c.status != "completed").group_by(by)


class Owed(NamedTuple):
    """A data key the erase ledger owes: a shard key's own (``thread_id`` empty), or a thread's."""

    shard: str
    thread_id: str


def threads_plan(sql: MemorySql, scopes: Sequence[str]) -> Plan[list[Owed]]:
    """The conversation threads ``scopes`` recorded turns of, each with its shard key."""
    t = memory_threads
    query = sql.statement("threads", lambda: sa.select(t.c.thread_id).where(of_scope(t)))
    if not scopes:
        return []
    found = yield Batch(
        [Stmt(query, {"shard": sql.scope_shard(s), "scope": s}, fetch=True) for s in scopes]
    )
    pairs = zip(scopes, found, strict=True)
    return sorted({Owed(sql.scope_shard(s), str(t)) for s, rows in pairs for (t,) in rows})


def erase_plan(
    sql: MemorySql,
    *,
    root: str,
    scopes: Sequence[str],
    owe: Sequence[str] = (),
    owe_threads: Sequence[Owed] = (),
    now: float = 0.0,
) -> Plan[dict[str, int]]:
    """Delete every row of ``scopes`` and owe the keys of ``owe`` and ``owe_threads`` in one
    transaction; the rows removed per table. The dialect's erase session (SQLite: secure
    delete, a WAL checkpoint) makes the bytes leave the files."""
    if not scopes:
        return {}
    before, after_commit = sql.d.erase_session()
    for statement in before:
        yield Batch([Stmt(Sql(statement))])
    statements: list[Stmt] = []
    labels: list[str] = []
    # items and decay rows by prefix: on the scope's shard if it covers the key, else on every shard
    by_prefix = (*STORE_NS_TABLES, "am_memory_decay")
    by_scope = [t.name for t in MEMORY_TABLES if t is not memory_decay]
    for scope in scopes:
        params = sql.store.prefix_params([root, *scope.split(",")])
        deletes = sql.store.delete_under(scoped(params), by_prefix, bool(params.get("rest")))
        statements += [Stmt(s, params) for s in deletes]
        key = {"shard": sql.scope_shard(scope), "scope": scope}
        statements += [
            Stmt(sql.statement(("erase", t), partial(_delete_scope, t)), key) for t in by_scope
        ]
        labels += [*by_prefix, *by_scope]
    locks = sql.lock_scopes(scopes) + sql.store.merge_locks(sql.scope_shard(s) for s in scopes)
    keys = [{"shard": s, "thread_id": "", "erased_at": now} for s in sorted(set(owe))]
    debts = [Stmt(_owe(sql, True), k) for k in keys] + [
        Stmt(_owe(sql, False), {**t._asdict(), "erased_at": now}) for t in owe_threads
    ]
    counts: dict[str, int] = {}
    results = yield Batch([*locks, *statements, *debts], write=True)
    deleted = results[len(locks) : len(locks) + len(statements)]
    for label, n in zip(labels, deleted, strict=True):
        counts[label] = counts.get(label, 0) + max(int(n or 0), 0)
    for statement in after_commit:
        # raw: the dialect's erase-session statements (PRAGMAs, VACUUM)
        yield Batch([Stmt(Sql(statement), fetch=statement.startswith("PRAGMA wal"))])
    return counts


def of_scope(t: Any) -> Any:
    """Core: ``t``'s rows of the scope ``:scope`` (shard key ``:shard``)."""
    return sa.and_(*matching(t, "shard", "scope"))


def _delete_scope(name: str) -> Any:
    t = metadata.tables[name]
    return sa.delete(t).where(of_scope(t))


def shards_under_plan(sql: MemorySql, *, root: str, scopes: Sequence[str]) -> Plan[set[str]]:
    """The shard keys of the store items under ``scopes``' namespaces (an erase's keys)."""
    i = store_items
    if not scopes:
        return set()

    def build(one_shard: bool) -> Any:
        return sa.select(i.c.shard).distinct().where(*sql.store.namespace_of(i, one_shard))

    statements = []
    for scope in scopes:
        params = sql.store.prefix_params([root, *scope.split(",")])
        query = sql.statement(("shards_under", scoped(params)), partial(build, scoped(params)))
        statements.append(Stmt(query, params, fetch=True))
    found = yield Batch(statements)
    return {str(s) for rows in found for (s,) in rows} | {sql.scope_shard(s) for s in scopes}


def _owe(sql: MemorySql, if_emptied: bool) -> Sql:
    """An erase ledger row unless owed already; ``if_emptied``: once no item carries ``:shard``."""
    e, i = memory_erasures, store_items

    def build() -> Any:
        cols = ["shard", "thread_id", "erased_at"]
        row = sql.d.values_select(e, cols)
        if if_emptied:
            row = row.where(~sa.exists().where(i.c.shard == sa.bindparam("shard")))
        return sql.d.insert_missing(e, cols, row, ["shard", "thread_id"])

    return sql.statement(("owe_key", if_emptied), build)


def owed_plan(sql: MemorySql) -> Plan[list[Owed]]:
    """The owed data keys nothing was written with since, sorted: to destroy now (a key
    written again stays owed: destroying it would make the new rows unreadable)."""
    e, i, t = memory_erasures, store_items, memory_threads
    query = sql.statement(
        "owed_keys",
        lambda: (
            sa.select(e.c.shard, e.c.thread_id)
            .where(
                sa.or_(e.c.thread_id != "", ~sa.exists().where(i.c.shard == e.c.shard)),
                ~sa.exists().where(t.c.shard == e.c.shard, t.c.thread_id == e.c.thread_id),
            )
            .order_by(e.c.shard, e.c.thread_id)
        ),
    )
    [rows] = yield Batch([Stmt(query, fetch=True)])
    return [Owed(str(shard), str(thread)) for shard, thread in rows]


def settled_plan(sql: MemorySql, owed: Sequence[Owed]) -> Plan[None]:
    """Remove ``owed`` from the erase ledger: their data keys are destroyed."""
    e = memory_erasures
    delete = sql.statement(
        "settled_key", lambda: sa.delete(e).where(*matching(e, "shard", "thread_id"))
    )
    if owed:
        yield Batch([Stmt(delete, [o._asdict() for o in owed], many=True)], write=True)


def owed_count_plan(sql: MemorySql) -> Plan[int]:
    """How many data keys the erase ledger owes (shard keys written since included)."""
    query = sql.statement(
        "owed_count", lambda: sa.select(sa.func.count()).select_from(memory_erasures)
    )
    [[(n,)]] = yield Batch([Stmt(query, fetch=True)])
    return int(n)


def some_shards_plan(sql: MemorySql, limit: int) -> Plan[list[str]]:
    """Up to ``limit`` shard keys that store items carry (a sample for a key store check)."""
    i = store_items
    query = sql.statement(
        "some_shards",
        lambda: sa.select(i.c.shard).distinct().limit(sa.bindparam("n", type_=sa.Integer)),
    )
    [rows] = yield Batch([Stmt(query, {"n": limit}, fetch=True)])
    return [str(shard) for (shard,) in rows]
