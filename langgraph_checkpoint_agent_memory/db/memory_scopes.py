"""The SQL of agent memory's scopes as a whole: which exist, their counts, the threads they
used, and erasing them, with the erase ledger (``am_memory_erasures``) of the shard keys an
erase emptied, whose data keys an encrypting store owes the key store until it destroys
them. Plans only, as in :mod:`.memory`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.memory import MEMORY_TABLES, MemorySql, live, under_root
from langgraph_checkpoint_agent_memory.db.schema import (
    STORE_NS_TABLES,
    memory_erasures,
    memory_jobs,
    memory_pending,
    memory_scopes,
    memory_threads,
    metadata,
    store_items,
)
from langgraph_checkpoint_agent_memory.db.store import scoped


def known_scopes_plan(sql: MemorySql, root: str, shard: str | None = None) -> Plan[set[str]]:
    """Every scope with a ledger row, and every namespace under ``root`` holding items; with
    ``shard``, only those whose rows carry that shard key (one shard, not all)."""
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
            Stmt(
                prefixes,
                {"n": len(root) + 1, "root_dot": root + ".", "shard": shard},
                fetch=True,
            ),
        ]
    )
    found = {s for (s,) in a}
    for (prefix,) in b:
        labels = prefix.split(".")[1:-1]
        if labels:
            found.add(",".join(labels))
    return found


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
            Stmt(items, {"n": len(root) + 1, "root_dot": root + ".", "now": now}, fetch=True),
            Stmt(pending, fetch=True),
            Stmt(failed, fetch=True),
        ]
    )
    out: dict[str, dict[str, int]] = {}

    def entry(scope: str) -> dict[str, int]:
        return out.setdefault(
            scope,
            {"facts": 0, "history": 0, "episodes": 0, "pending": 0, "parked": 0, "failed": 0},
        )

    for prefix, count in a:
        labels = prefix.split(".")
        if len(labels) >= 3 and labels[-1] in ("facts", "history", "episodes"):
            entry(",".join(labels[1:-1]))[labels[-1]] += int(count)
    for scope, status, count in b:
        entry(scope)[status] = int(count)
    for scope, count in c:
        entry(scope)["failed"] = int(count)
    return out


@dataclass(frozen=True)
class Backlog:
    """What waits for consolidation, over every scope: read by :func:`backlog_plan`.

    Attributes:
        pending: Episodes recorded and not consolidated yet (parked ones aside).
        scopes: How many scopes hold some of them.
        oldest_at: When the oldest of them was recorded (seconds since the epoch); ``None``
            when nothing is pending.
        now: The time the figures were read at.
    """

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

    Args:
        sql: Agent memory's statements for the database's dialect.
        now: The current time (seconds since the epoch), which the age is measured from.

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

    Args:
        sql: Agent memory's statements for the database's dialect.

    Example:
        >>> memory.context.run(failures_plan(memory.context.sql))
        {'parked_episodes': 0, 'failed_jobs': 0, 'parked_jobs': 0}
    """
    q = memory_pending
    parked = sql.statement(
        "parked_count",
        lambda: sa.select(sa.func.count()).where(q.c.status == "parked"),
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
    """Core: the jobs not completed (failed or parked), counted per value of column ``by``
    of ``am_memory_jobs``."""
    j = memory_jobs
    return sa.select(by, sa.func.count()).where(j.c.status != "completed").group_by(by)


class Owed(NamedTuple):
    """A data key the erase ledger owes: the shard key's own (``thread_id`` empty), or a
    conversation thread's recorded under that shard key."""

    shard: str
    thread_id: str


def threads_plan(sql: MemorySql, scopes: Sequence[str]) -> Plan[list[Owed]]:
    """The conversation threads ``scopes`` recorded turns of, each with its shard key."""
    t = memory_threads
    query = sql.statement("threads", lambda: sa.select(t.c.thread_id).where(*_of_scope(t)))
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
    """Delete every item, vector, text entry and ledger row of ``scopes`` in one
    transaction; return the rows removed per table. The same transaction enters in the
    erase ledger each shard key of ``owe`` it leaves without any item, and the threads of
    ``owe_threads`` (their data keys are owed: see :func:`owed_plan`), so the debt commits
    with the deletes or not at all. The
    dialect's erase session (SQLite: secure delete, then a WAL checkpoint) wraps it, so the
    bytes leave the files too."""
    before, after_commit = sql.d.erase_session() if scopes else ([], [])
    for statement in before:
        yield Batch([Stmt(Sql(statement))])
    counts = yield from _erase(sql, root=root, scopes=scopes, owe=owe, threads=owe_threads, now=now)
    for statement in after_commit:
        # raw: the dialect's erase-session statements (PRAGMAs, VACUUM)
        yield Batch([Stmt(Sql(statement), fetch=statement.startswith("PRAGMA wal"))])
    return counts


def _of_scope(t: Any) -> list[Any]:
    """Core: ``t``'s rows of the scope ``:scope`` (shard key ``:shard``)."""
    return [t.c.shard == sa.bindparam("shard"), t.c.scope == sa.bindparam("scope")]


def _erase(
    sql: MemorySql,
    *,
    root: str,
    scopes: Sequence[str],
    owe: Sequence[str],
    threads: Sequence[Owed],
    now: float,
) -> Plan[dict[str, int]]:
    counts: dict[str, int] = {}
    statements: list[Stmt] = []
    labels: list[str] = []
    for scope in scopes:
        # the scope's items: on its shard when its namespace covers the shard key, else
        # (a scope of fewer labels than the key) on every shard, by prefix
        # (decay rows too: they carry their items' keys, and lie under the same namespace)
        params = sql.store.prefix_params([root, *scope.split(",")])
        by_prefix = (*STORE_NS_TABLES, "am_memory_decay")
        deletes = sql.store.delete_under(scoped(params), by_prefix)
        for table, stmt in zip(by_prefix, deletes, strict=True):
            statements.append(Stmt(stmt, params))
            labels.append(table)
        for table in (t for t in MEMORY_TABLES if t != "am_memory_decay"):
            statements.append(
                Stmt(
                    sql.statement(("erase", table), partial(_delete_scope, table)),
                    {"shard": sql.scope_shard(scope), "scope": scope},
                )
            )
            labels.append(table)
    if not statements:
        return counts
    locks = sql.lock_scopes(scopes)
    debts = [
        *[
            Stmt(_owe(sql, True), {"shard": s, "thread_id": "", "erased_at": now})
            for s in sorted(set(owe))
        ],
        *[Stmt(_owe(sql, False), {**t._asdict(), "erased_at": now}) for t in threads],
    ]
    results = yield Batch([*locks, *statements, *debts], write=True)
    deleted = results[len(locks) : len(locks) + len(statements)]
    for label, n in zip(labels, deleted, strict=True):
        counts[label] = counts.get(label, 0) + max(int(n or 0), 0)
    return counts


def _delete_scope(name: str) -> Any:
    """Core: delete table ``name``'s rows of one scope."""
    t = metadata.tables[name]
    return sa.delete(t).where(*_of_scope(t))


def shards_under_plan(sql: MemorySql, *, root: str, scopes: Sequence[str]) -> Plan[set[str]]:
    """The shard keys of the store items under ``scopes``' namespaces (their data keys are
    the ones an erase may destroy)."""
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
    """An erase ledger row for the thread ``:thread_id`` of the shard key ``:shard`` (erased
    at ``:erased_at``), unless the ledger owes that key already; ``if_emptied``: only when no
    store item carries the shard key any more (the shard key's own key, ``:thread_id``
    empty)."""
    e, i = memory_erasures, store_items

    def build() -> Any:
        cols = ["shard", "thread_id", "erased_at"]
        row = sql.d.values_select(e, cols)
        if if_emptied:
            row = row.where(~sa.exists().where(i.c.shard == sa.bindparam("shard")))
        return sql.d.insert_missing(e, cols, row, ["shard", "thread_id"])

    return sql.statement(("owe_key", if_emptied), build)


def owed_plan(sql: MemorySql) -> Plan[list[Owed]]:
    """The data keys the erase ledger owes that nothing was written with since, sorted: the
    keys to destroy now. A shard key written again since its erase, or a thread that
    recorded turns again, stays owed until a later erase empties it (destroying its key
    would make the new rows unreadable).
    """
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
        "settled_key",
        lambda: sa.delete(e).where(
            e.c.shard == sa.bindparam("shard"), e.c.thread_id == sa.bindparam("thread_id")
        ),
    )
    if owed:
        yield Batch([Stmt(delete, [o._asdict() for o in owed], many=True)], write=True)


def owed_count_plan(sql: MemorySql) -> Plan[int]:
    """How many data keys the erase ledger owes (those of shard keys written again since
    their erase included)."""
    query = sql.statement(
        "owed_count", lambda: sa.select(sa.func.count()).select_from(memory_erasures)
    )
    [[(n,)]] = yield Batch([Stmt(query, fetch=True)])
    return int(n)


def some_shards_plan(sql: MemorySql, limit: int) -> Plan[list[str]]:
    """Up to ``limit`` shard keys that store items carry (any: a sample whose data keys tell
    whether a key store is this database's)."""
    i = store_items
    query = sql.statement(
        "some_shards",
        lambda: sa.select(i.c.shard).distinct().limit(sa.bindparam("n", type_=sa.Integer)),
    )
    [rows] = yield Batch([Stmt(query, {"n": limit}, fetch=True)])
    return [str(shard) for (shard,) in rows]
