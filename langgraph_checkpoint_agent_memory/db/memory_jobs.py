"""The SQL of consolidation jobs: a lease is a row of ``am_memory_scopes`` claimed by a
conditional write, and a job's writes count only while it holds. A failed job's error may
quote what the extractor was given, so an encrypting store seals it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.memory import (
    MemorySql,
    StoredRow,
    new_scope_row,
    of_scope,
    open_rows_plan,
    seal_items_plan,
    vectors_plan,
)
from langgraph_checkpoint_agent_memory.db.schema import (
    matching,
    memory_jobs,
    memory_pending,
    memory_scopes,
)


@dataclass
class Claim:
    """A scope leased to one job, and the episodes the job is to process."""

    scope: str
    root: str
    owner: str
    failures: int
    episode_keys: list[str]


@dataclass
class Writes:
    """Everything one consolidation job writes, in one transaction."""

    items: list[dict[str, Any]] = field(default_factory=list)  # store item rows
    vectors: list[dict[str, Any]] = field(default_factory=list)  # store vector rows
    decay: list[dict[str, Any]] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)
    #: ``{"prefix", "key"}`` of items to delete, with their vectors, text and decay rows
    removed: list[dict[str, Any]] = field(default_factory=list)


#: What :func:`apply_plan` returns when the scope was erased while the job ran: nothing to retry.
ERASED = Writes(outcome={"skipped": "scope erased"})


def claim_plan(
    sql: MemorySql,
    *,
    owner: str,
    now: float,
    lease_seconds: float,
    limit: int,
    scope: str | None = None,
    skip: Sequence[str] = (),
) -> Plan[Claim | None]:
    """Lease one scope with pending episodes, not leased, backing off nor in ``skip``.
    Candidates are found without row locks (Citus refuses them across shards); a conditional
    write of its ledger row claims each, so exactly one of several workers gets it."""
    find = _find(sql, now=now, n=CLAIM_CANDIDATES, scope=scope, skip=skip)
    while True:
        [candidates] = yield Batch([find])
        if not candidates:
            return None
        take, held_by, episodes = _lease_statements(sql)
        for shard, name, root in candidates:
            key = {"shard": shard, "scope": name}
            locks = sql.lock_scopes([name])
            lease = {**key, "owner": owner, "until": now + lease_seconds, "now": now}
            results = yield Batch(
                [
                    *locks,
                    Stmt(take, lease),
                    Stmt(held_by, {**key, "owner": owner}, fetch=True),
                    Stmt(episodes, {**key, "n": limit}, fetch=True),
                ],
                lock=True,
                write=True,
            )
            taken, held, keys = results[len(locks) :]
            if taken == 1 and held:
                return Claim(name, root, owner, int(held[0][0]), [k for (k,) in keys])
        # others took every candidate meanwhile (their leases now exclude them): look again


def scopes_plan(sql: MemorySql, *, now: float, skip: Sequence[str] = ()) -> Plan[list[str]]:
    """Up to :data:`ROUND_SCOPES` scopes with work, in order: one cross-shard search a round."""
    [rows] = yield Batch([_find(sql, now=now, n=ROUND_SCOPES, skip=skip)])
    return [name for _, name, _ in rows]


def _find(
    sql: MemorySql, *, now: float, n: int, scope: str | None = None, skip: Sequence[str] = ()
) -> Stmt:
    find = sql.statement(
        ("claim", scope is not None, len(skip)), partial(_candidates, scope, len(skip))
    )
    params: dict[str, Any] = {"now": now, "n": n, **{f"x{i}": x for i, x in enumerate(skip)}}
    if scope is not None:
        params.update(scope=scope, shard=sql.scope_shard(scope))
    return Stmt(find, params, fetch=True)


def _candidates(scope: str | None, skip: int) -> Any:
    """Core: up to ``:n`` scopes with pending episodes, neither leased nor backing off."""
    s, q = memory_scopes.alias("s"), memory_pending.alias("q")
    now = sa.bindparam("now", type_=sa.Float)
    pending = sa.exists().where(
        q.c.shard == s.c.shard, q.c.scope == s.c.scope, q.c.status == "pending"
    )
    where = [*_claimable(s, now), pending]
    if scope is not None:
        where += [s.c.shard == sa.bindparam("shard"), s.c.scope == sa.bindparam("scope")]
    if skip:
        where.append(
            s.c.scope.not_in([sa.bindparam(f"x{i}", type_=sa.String) for i in range(skip)])
        )
    return (
        sa.select(s.c.shard, s.c.scope, s.c.root)
        .where(*where)
        .order_by(s.c.scope)
        .limit(sa.bindparam("n", type_=sa.Integer))
    )


#: Scopes a claim considers at once: should others take the first, it tries the next.
CLAIM_CANDIDATES = 8
#: Scopes a consolidation round finds at once (:func:`scopes_plan`), again after a full list.
ROUND_SCOPES = 1000


def _claimable(t: Any, now: Any) -> list[Any]:
    """Core: scope row ``t`` is neither leased nor backing off at ``now``."""
    return [
        sa.or_(t.c.lease_until.is_(None), t.c.lease_until < now),
        sa.or_(t.c.next_attempt_at.is_(None), t.c.next_attempt_at <= now),
    ]


def _lease_statements(sql: MemorySql) -> tuple[Sql, Sql, Sql]:
    """Lease a free scope to ``:owner`` (rowcount 1: claimed); the failures of a scope
    ``:owner`` holds (no row: not held); up to ``:n`` of its pending episodes, oldest first."""
    t, q = memory_scopes, memory_pending
    now, owner = sa.bindparam("now", type_=sa.Float), sa.bindparam("owner", type_=sa.String)
    until = sa.bindparam("until", type_=sa.Float)
    take = sql.statement(
        "take_lease",
        lambda: (
            sa.update(t)
            .where(of_scope(t), *_claimable(t, now))
            .values(lease_owner=owner, lease_until=until)
        ),
    )
    held = sql.statement(
        "held_by", lambda: sa.select(t.c.failures).where(of_scope(t), t.c.lease_owner == owner)
    )
    episodes = sql.statement(
        "claim_episodes",
        lambda: (
            sa.select(q.c.episode_key)
            .where(of_scope(q), q.c.status == "pending")
            .order_by(q.c.recorded_at, q.c.episode_key)
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    return take, held, episodes


def _lease_check(sql: MemorySql) -> Sql:
    """A scope's lease owner and failures, its one row locked."""
    t = memory_scopes
    return sql.statement(
        "lease_check",
        lambda: sa.select(t.c.lease_owner, t.c.failures).where(of_scope(t)).with_for_update(),
    )


def _release(sql: MemorySql) -> Sql:
    t = memory_scopes
    return sql.statement(
        "release",
        lambda: (
            sa.update(t)
            .where(of_scope(t), t.c.lease_owner == sa.bindparam("owner", type_=sa.String))
            .values(
                lease_owner=None,
                lease_until=None,
                failures=sa.bindparam("b_failures", type_=sa.Integer),
                next_attempt_at=sa.bindparam("next", type_=sa.Float),
                last_error=sa.bindparam("error", type_=sa.Text),
            )
        ),
    )


def _episode() -> Any:
    """Core: the pending episode ``:episode_key`` of one scope."""
    q = memory_pending
    return sa.and_(of_scope(q), q.c.episode_key == sa.bindparam("episode_key", type_=sa.String))


def apply_plan(
    sql: MemorySql,
    claim: Claim,
    *,
    job_id: str,
    episode_keys: Sequence[str],
    extractor_version: str,
    facts_prefix: str,
    now: float,
    read_vectors: bool,
    decide: Callable[[list[StoredRow], dict[str, bytes]], Writes],
    started_at: float,
) -> Plan[Writes | None]:
    """Apply a job's result in one transaction, if it still holds its lease (``decide`` gets
    the facts read inside it); ``None``: the lease was lost, :data:`ERASED`: the scope was."""
    jobs = memory_jobs
    job_done = sql.statement(
        "job_done", lambda: sa.select(jobs.c.status).where(*matching(jobs, "shard", "job_id"))
    )
    key = {"shard": sql.scope_shard(claim.scope), "scope": claim.scope}
    check = Stmt(_lease_check(sql), key, fetch=True)
    done_check = Stmt(job_done, {"shard": key["shard"], "job_id": job_id}, fetch=True)
    results = yield from _read_locked(
        sql, claim.scope, facts_prefix, now, read_vectors, check, done_check
    )
    lease, done = results[0], results[1]
    if not lease or lease[0][0] != claim.owner:
        yield Batch([], write=True)
        return None if lease else ERASED
    already = bool(done) and done[0][0] == "completed"
    writes = Writes(outcome={"skipped": "already applied"}) if already else None
    if writes is None:
        writes = decide(*(yield from _facts_read(sql, results[2:])))
    statements = yield from _facts_writes(sql, writes)
    drop = sql.statement("done_pending", lambda: sa.delete(memory_pending).where(_episode()))
    episodes = [{**key, "episode_key": k} for k in episode_keys]
    statements.append(Stmt(drop, episodes, many=True))
    if not already:
        job = _Job(job_id, claim.scope, episode_keys, extractor_version, started_at, now)
        outcome = json.dumps(writes.outcome)
        statements.append(job.insert(sql, "completed", claim.failures + 1, None, outcome))
    released = {**key, "owner": claim.owner, "b_failures": 0, "next": None, "error": None}
    statements.append(Stmt(_release(sql), released))
    yield Batch(statements, write=True)
    return writes


def change_facts_plan(
    sql: MemorySql,
    *,
    scope: str,
    root: str,
    facts_prefix: str,
    now: float,
    read_vectors: bool,
    decide: Callable[[list[StoredRow], dict[str, bytes]], Writes],
) -> Plan[Writes]:
    """Change a scope's facts outside a job, its ledger row held against :func:`apply_plan`."""
    shard = sql.scope_shard(scope)
    ensure = Stmt(sql.insert_ignore(memory_scopes), new_scope_row(scope, root, now, shard))
    check = Stmt(_lease_check(sql), {"shard": shard, "scope": scope}, fetch=True)  # locks it
    results = yield from _read_locked(sql, scope, facts_prefix, now, read_vectors, ensure, check)
    writes = decide(*(yield from _facts_read(sql, results[2:])))
    yield Batch((yield from _facts_writes(sql, writes)), write=True)
    return writes


def _read_locked(
    sql: MemorySql, scope: str, facts_prefix: str, now: float, vectors: bool, *first: Stmt
) -> Plan[list[Any]]:
    """With ``scope`` locked, in a transaction held open: ``first``, then the facts (and
    vectors); data keys are loaded before it begins (creating a key commits)."""
    if sql.sealer is not None:
        base = facts_prefix.rsplit(".", 1)[0]
        kinds = (facts_prefix, f"{base}.history", f"{base}.episodes")
        yield from sql.sealer.preload_plan(sorted({sql.store.shard(p) for p in kinds}))
    locks = sql.lock_scopes([scope])
    reads = [*locks, *first, Stmt(sql.rows(), sql.one_ns(facts_prefix, now=now), fetch=True)]
    if vectors:
        params = sql.one_ns(facts_prefix, now=now) if sql.sealer else sql.one_ns(facts_prefix)
        reads.append(Stmt(sql.vectors_of(), params, fetch=True))
    return (yield Batch(reads, lock=True, hold=True))[len(locks) :]


def _facts_read(
    sql: MemorySql, results: Sequence[Any]
) -> Plan[tuple[list[StoredRow], dict[str, bytes]]]:
    vectors = (yield from vectors_plan(sql, results[1])) if len(results) > 1 else {}
    rows = yield from open_rows_plan(sql, results[0])
    return rows, vectors


def _facts_writes(sql: MemorySql, writes: Writes) -> Plan[list[Stmt]]:
    statements: list[Stmt] = []
    if writes.items or writes.removed:
        yield from seal_items_plan(sql, writes.items, writes.vectors)
        statements += sql.item_writes(writes.items, writes.vectors, writes.removed)
    if writes.decay:
        statements.append(sql.decay_stmt(writes.decay))
    if writes.removed:
        statements.append(Stmt(sql.delete_decay(), sql.store.keyed(writes.removed), many=True))
    return statements


def fail_plan(
    sql: MemorySql,
    claim: Claim,
    *,
    job_id: str,
    episode_keys: Sequence[str],
    extractor_version: str,
    error: str,
    now: float,
    started_at: float,
    max_attempts: int,
    backoff_seconds: float,
) -> Plan[str]:
    """Record a failed job, release the scope with a back-off, park its episodes after
    ``max_attempts`` in a row (so newer ones are not held up); ``"retry"``, ``"parked"``,
    ``"lost"`` (no lease) or ``"erased"``."""
    key = {"shard": sql.scope_shard(claim.scope), "scope": claim.scope}
    job_key = f"{job_id}:{claim.owner}"
    error = error[:4000]
    job_error = yield from seal_error_plan(sql, key["shard"], JOB_ERROR, job_key, error)
    scope_error = yield from seal_error_plan(sql, key["shard"], SCOPE_ERROR, claim.scope, error)
    locks = sql.lock_scopes([claim.scope])
    *_, lease = yield Batch(
        [*locks, Stmt(_lease_check(sql), key, fetch=True)], lock=True, hold=True
    )
    if not lease or lease[0][0] != claim.owner:
        yield Batch([], write=True)
        return "lost" if lease else "erased"
    failures = int(lease[0][1]) + 1
    park = failures >= max_attempts
    job = _Job(job_key, claim.scope, episode_keys, extractor_version, started_at, now)
    backoff = None if park else now + backoff_seconds * 2 ** (failures - 1)
    released = {"owner": claim.owner, "b_failures": 0 if park else failures, "next": backoff}
    statements = [
        job.insert(sql, "parked" if park else "failed", failures, job_error, None),
        Stmt(_release(sql), {**key, **released, "error": scope_error}),
    ]
    if park:
        park_sql = sql.statement(
            "park", lambda: sa.update(memory_pending).where(_episode()).values(status="parked")
        )
        episodes = [{**key, "episode_key": k} for k in episode_keys]
        statements.append(Stmt(park_sql, episodes, many=True))
    yield Batch(statements, write=True)
    return "parked" if park else "retry"


class _Job(NamedTuple):
    """A finished job's row of ``am_memory_jobs``, but its status and result."""

    job_id: str
    scope: str
    episode_keys: Sequence[str]
    extractor_version: str
    started_at: float
    finished_at: float

    def insert(
        self, sql: MemorySql, status: str, attempt: int, error: str | None, outcome: str | None
    ) -> Stmt:
        row = dict(self._asdict(), status=status, attempt=attempt, error=error, outcome=outcome)
        del row["episode_keys"]
        row.update(shard=sql.scope_shard(self.scope), episodes=json.dumps(list(self.episode_keys)))
        return Stmt(sql.insert_ignore(memory_jobs), row)


def retry_plan(sql: MemorySql, scope: str | None) -> Plan[int]:
    """Queue parked episodes again and clear back-offs (of one scope, or all)."""
    q, t = memory_pending, memory_scopes
    unpark = sql.statement(
        ("unpark", scope is not None),
        lambda: (
            sa.update(q)
            .where(q.c.status == "parked", *([of_scope(q)] if scope is not None else []))
            .values(status="pending")
        ),
    )
    clear = sql.statement(
        ("clear_backoff", scope is not None),
        lambda: (
            sa.update(t)
            .where(*([of_scope(t)] if scope is not None else []))
            .values(failures=0, next_attempt_at=None)
        ),
    )
    params = {"shard": sql.scope_shard(scope), "scope": scope} if scope is not None else {}
    locks = sql.lock_scopes([scope]) if scope is not None else []
    *_, count, _ = yield Batch([*locks, Stmt(unpark, params), Stmt(clear, params)], write=True)
    return int(count)


def jobs_plan(sql: MemorySql, statuses: Sequence[str], limit: int) -> Plan[list[dict[str, Any]]]:
    j = memory_jobs
    marks = [sa.bindparam(f"s{i}", type_=sa.String) for i in range(len(statuses))]
    query = sql.statement(
        ("jobs", len(statuses)),
        lambda: (
            sa.select(*(j.c[n] for n in JOB_FIELDS))
            .where(j.c.status.in_(marks))
            .order_by(j.c.finished_at.desc())
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    params: dict[str, Any] = {"n": limit, **{f"s{i}": s for i, s in enumerate(statuses)}}
    [rows] = yield Batch([Stmt(query, params, fetch=True)])
    out = [dict(zip(JOB_FIELDS, r, strict=True)) for r in rows]
    sealer = sql.sealer
    if sealer is not None:
        yield from sealer.text_ids_plan(job["error"] for job in out)
    for job in out:
        job["episodes"] = json.loads(job["episodes"])
        job["outcome"] = json.loads(job["outcome"]) if job["outcome"] else None
        if sealer is not None and job["error"] is not None:
            shard = sql.scope_shard(job["scope"])
            job["error"] = sealer.open_text(job["error"], JOB_ERROR, shard, job["job_id"])
    return out


#: Associated-data kinds of sealed job errors: a job's, a scope's last one.
JOB_ERROR, SCOPE_ERROR = "memory_job_error", "memory_scope_error"


def seal_error_plan(sql: MemorySql, shard: str, kind: str, ident: str, error: str) -> Plan[str]:
    """``error`` as stored: sealed under ``shard``'s data key when the store encrypts."""
    sealer = sql.sealer
    if sealer is None:
        return error
    key = yield from sealer.owner_key_plan(shard, create=True)
    return sealer.seal_text(key, error, kind, shard, ident)


def encrypt_errors_plan(
    sql: MemorySql, counts: dict[str, int] | None = None, batch_size: int = 200
) -> Plan[dict[str, int]]:
    """Seal every job and scope error written before encryption, a page at a time, each row
    claimed by its old text so runs may overlap; ``counts`` is added to across restarts."""
    if counts is None:
        counts = {"job_errors": 0, "scope_errors": 0}
    j, t = memory_jobs, memory_scopes
    parts = (
        (JOB_ERROR, j.c.job_id, j.c.error, "job_errors"),
        (SCOPE_ERROR, t.c.scope, t.c.last_error, "scope_errors"),
    )
    for kind, ident, error, counted in parts:
        name = ident.name
        find, seal = _plain_errors(sql, kind, ident, error)
        while True:
            [rows] = yield Batch([Stmt(find, {"n": batch_size}, fetch=True)])
            updates = []
            for shard, row_id, text in rows:
                sealed = yield from seal_error_plan(sql, shard, kind, row_id, text)
                updates.append({"shard": shard, name: row_id, "old": text, "sealed": sealed})
            sealed_now = 0
            if updates:
                done = yield Batch([Stmt(seal, u) for u in updates], write=True)
                sealed_now = sum(max(int(n or 0), 0) for n in done)
                counts[counted] += sealed_now
            if len(rows) < batch_size or not sealed_now:  # the last page, or no progress
                break
    return counts


def _plain_errors(sql: MemorySql, kind: str, ident: Any, error: Any) -> tuple[Sql, Sql]:
    """Up to ``:n`` unsealed ``(shard, ident, error)``; and sealing one still ``:old``."""
    t = ident.table
    find = sql.statement(
        ("plain_errors", kind),
        lambda: (
            sa.select(t.c.shard, ident, error)
            .where(error.is_not(None), sa.not_(error.startswith("!", autoescape=True)))
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    seal = sql.statement(
        ("seal_error", kind),
        lambda: (
            sa.update(t)
            .where(*matching(t, "shard", ident.name), error == sa.bindparam("old", type_=sa.Text))
            .values({error.name: sa.bindparam("sealed", type_=sa.Text)})
        ),
    )
    return find, seal


#: The columns of a finished job, as :func:`jobs_plan` returns them.
JOB_FIELDS = tuple(c.name for c in memory_jobs.columns if c.name != "shard")
