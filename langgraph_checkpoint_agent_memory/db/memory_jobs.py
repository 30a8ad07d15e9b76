"""The SQL of consolidation jobs: claim a scope's lease and its pending episodes, apply a
job's writes and release the lease in one transaction, record a failure with back-off, retry
parked episodes, and list finished jobs.

A lease is a row of ``am_memory_scopes`` (claimed with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, ``IGNORE LOCKED`` on HANA, the database write lock on SQLite); a job's writes
count only while its lease holds, so a job that outlived its lease writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.memory import MemorySql, StoredRow, decode, new_scope_row


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
    """Lease one scope that has pending episodes and is not leased or backing off (nor in
    ``skip``: scopes that already failed in this round)."""
    p, d = sql.p, sql.d
    only = f" AND s.scope = {p('scope')}" if scope is not None else ""
    if skip:
        only += " AND s.scope NOT IN (" + ", ".join(p(f"x{i}") for i in range(len(skip))) + ")"
    find = sql._text(
        ("claim", scope is not None, len(skip)),
        lambda: (
            "SELECT s.scope, s.root, s.failures FROM am_memory_scopes s WHERE "
            f"(s.lease_until IS NULL OR s.lease_until < {p('now')}) AND "
            f"(s.next_attempt_at IS NULL OR s.next_attempt_at <= {p('now')}) AND EXISTS "
            "(SELECT 1 FROM am_memory_pending q WHERE q.scope = s.scope AND "
            f"q.status = 'pending'){only} ORDER BY s.scope LIMIT 1{d.for_update_skip_locked}"
        ),
    )
    lease = sql._text(
        "lease",
        lambda: (
            f"UPDATE am_memory_scopes SET lease_owner = {p('owner')}, lease_until = "
            f"{p('until')} WHERE scope = {p('scope')}"
        ),
    )
    episodes = sql._text(
        "claim_episodes",
        lambda: (
            "SELECT episode_key FROM am_memory_pending WHERE scope = "
            f"{p('scope')} AND status = 'pending' ORDER BY recorded_at, episode_key "
            f"LIMIT {p('n')}"
        ),
    )
    params: dict[str, Any] = {"now": now, **{f"x{i}": x for i, x in enumerate(skip)}}
    if scope is not None:
        params["scope"] = scope
    [rows] = yield Batch([Stmt(find, params, fetch=True)], lock=True, hold=True)
    if not rows:
        yield Batch([], write=True)
        return None
    name, root, failures = rows[0]
    _, keys = yield Batch(
        [
            Stmt(lease, {"owner": owner, "until": now + lease_seconds, "scope": name}),
            Stmt(episodes, {"scope": name, "n": limit}, fetch=True),
        ],
        write=True,
    )
    return Claim(name, root, owner, int(failures), [k for (k,) in keys])


def _cached(build: Callable[[MemorySql], str]) -> Callable[[MemorySql], Sql]:
    """``build(sql)``'s text as a statement of ``sql``'s dialect, built once per dialect
    (named after the function)."""
    name = build.__name__.lstrip("_")
    return lambda sql: sql._text(name, partial(build, sql))


@_cached
def _lease_check(sql: MemorySql) -> str:
    where = f"WHERE scope = {sql.p('scope')}{sql.d.for_update}"
    return f"SELECT lease_owner, failures FROM am_memory_scopes {where}"


@_cached
def _release(sql: MemorySql) -> str:
    p = sql.p
    return (
        "UPDATE am_memory_scopes SET lease_owner = NULL, lease_until = NULL, failures = "
        f"{p('failures')}, next_attempt_at = {p('next')}, last_error = {p('error')} "
        f"WHERE scope = {p('scope')} AND lease_owner = {p('owner')}"
    )


@_cached
def _done_pending(sql: MemorySql) -> str:
    where = f"scope = {sql.p('scope')} AND episode_key = {sql.p('episode_key')}"
    return f"DELETE FROM am_memory_pending WHERE {where}"


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
    """Apply a job's result in one transaction, if the job still holds its lease.

    ``decide`` gets the scope's current facts (read inside the transaction, so nothing can
    change them in between) and returns the rows to write. Returns ``None`` when the lease
    was lost (the job took too long and another worker took over): nothing is written.
    """
    p = sql.p
    job_done = sql._text(
        "job_done",
        lambda: f"SELECT status FROM am_memory_jobs WHERE job_id = {p('job_id')}",
    )
    reads = [
        Stmt(_lease_check(sql), {"scope": claim.scope}, fetch=True),
        Stmt(job_done, {"job_id": job_id}, fetch=True),
        Stmt(sql.rows(), {"prefix": facts_prefix, "now": now}, fetch=True),
    ]
    if read_vectors:
        reads.append(Stmt(sql.vectors_of(), {"prefix": facts_prefix}, fetch=True))
    results = yield Batch(reads, lock=True, hold=True)
    lease, done, fact_rows = results[0], results[1], results[2]
    if not lease or lease[0][0] != claim.owner:
        yield Batch([], write=True)
        return None
    vectors = {k: bytes(v) for k, v in results[3]} if read_vectors else {}
    already = bool(done) and done[0][0] == "completed"
    writes = Writes(outcome={"skipped": "already applied"}) if already else None
    if writes is None:
        writes = decide([decode(r) for r in fact_rows], vectors)
    statements: list[Stmt] = []
    if writes.items:
        statements += sql.store.writes(writes.items, writes.vectors)
    if writes.decay:
        statements.append(Stmt(sql.upsert_decay(), writes.decay, many=True))
    statements.append(
        Stmt(
            _done_pending(sql),
            [{"scope": claim.scope, "episode_key": k} for k in episode_keys],
            many=True,
        )
    )
    if not already:
        statements.append(
            Stmt(
                sql.insert_job(),
                {
                    "job_id": job_id,
                    "scope": claim.scope,
                    "episodes": json.dumps(list(episode_keys)),
                    "extractor_version": extractor_version,
                    "status": "completed",
                    "attempt": claim.failures + 1,
                    "error": None,
                    "started_at": started_at,
                    "finished_at": now,
                    "outcome": json.dumps(writes.outcome),
                },
            )
        )
    statements.append(
        Stmt(
            _release(sql),
            {
                "scope": claim.scope,
                "owner": claim.owner,
                "failures": 0,
                "next": None,
                "error": None,
            },
        )
    )
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
    """Change a scope's facts outside a consolidation job (an agent's memory tools), in one
    transaction that holds the scope's ledger row, so it and a job's :func:`apply_plan`
    never interleave: each reads the facts the other wrote.

    ``decide`` gets the scope's current facts and their vectors, read inside the
    transaction, and returns the rows to write and the items to remove.
    """
    scope_row = new_scope_row(scope, root, now)
    reads = [
        Stmt(sql.ensure_scope(), scope_row),
        Stmt(_lease_check(sql), {"scope": scope}, fetch=True),  # locks the ledger row
        Stmt(sql.rows(), {"prefix": facts_prefix, "now": now}, fetch=True),
    ]
    if read_vectors:
        reads.append(Stmt(sql.vectors_of(), {"prefix": facts_prefix}, fetch=True))
    results = yield Batch(reads, lock=True, hold=True)
    vectors = {k: bytes(v) for k, v in results[3]} if read_vectors else {}
    writes = decide([decode(r) for r in results[2]], vectors)
    statements: list[Stmt] = []
    if writes.items or writes.removed:
        statements += sql.store.writes(writes.items, writes.vectors, writes.removed)
    if writes.decay:
        statements.append(Stmt(sql.upsert_decay(), writes.decay, many=True))
    if writes.removed:
        statements.append(Stmt(sql.delete_decay(), writes.removed, many=True))
    yield Batch(statements, write=True)
    return writes


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
    """Record a failed job and release the scope with a back-off; after ``max_attempts``
    failures in a row, park the job's episodes (kept, visible, retried on request) so newer
    episodes are not held up. Returns ``"retry"``, ``"parked"`` or ``"lost"``."""
    p = sql.p
    [lease] = yield Batch(
        [Stmt(_lease_check(sql), {"scope": claim.scope}, fetch=True)], lock=True, hold=True
    )
    if not lease or lease[0][0] != claim.owner:
        yield Batch([], write=True)
        return "lost"
    failures = int(lease[0][1]) + 1
    park = failures >= max_attempts
    park_sql = sql._text(
        "park",
        lambda: (
            f"UPDATE am_memory_pending SET status = 'parked' WHERE scope = {p('scope')} "
            f"AND episode_key = {p('episode_key')}"
        ),
    )
    statements = [
        Stmt(
            sql.insert_job(),
            {
                "job_id": f"{job_id}:{claim.owner}",
                "scope": claim.scope,
                "episodes": json.dumps(list(episode_keys)),
                "extractor_version": extractor_version,
                "status": "parked" if park else "failed",
                "attempt": failures,
                "error": error[:4000],
                "started_at": started_at,
                "finished_at": now,
                "outcome": None,
            },
        ),
        Stmt(
            _release(sql),
            {
                "scope": claim.scope,
                "owner": claim.owner,
                "failures": 0 if park else failures,
                "next": None if park else now + backoff_seconds * 2 ** (failures - 1),
                "error": error[:4000],
            },
        ),
    ]
    if park:
        statements.append(
            Stmt(
                park_sql,
                [{"scope": claim.scope, "episode_key": k} for k in episode_keys],
                many=True,
            )
        )
    yield Batch(statements, write=True)
    return "parked" if park else "retry"


def retry_plan(sql: MemorySql, scope: str | None) -> Plan[int]:
    """Queue parked episodes again and clear back-offs (of one scope, or all)."""
    p = sql.p
    where = f" AND scope = {p('scope')}" if scope is not None else ""
    swhere = f" WHERE scope = {p('scope')}" if scope is not None else ""
    unpark = sql._text(
        ("unpark", scope is not None),
        lambda: f"UPDATE am_memory_pending SET status = 'pending' WHERE status = 'parked'{where}",
    )
    clear = sql._text(
        ("clear_backoff", scope is not None),
        lambda: f"UPDATE am_memory_scopes SET failures = 0, next_attempt_at = NULL{swhere}",
    )
    params = {"scope": scope} if scope is not None else {}
    count, _ = yield Batch([Stmt(unpark, params), Stmt(clear, params)], write=True)
    return int(count)


def jobs_plan(sql: MemorySql, statuses: Sequence[str], limit: int) -> Plan[list[dict[str, Any]]]:
    p = sql.p
    marks = ", ".join(p(f"s{i}") for i in range(len(statuses)))
    query = sql._text(
        ("jobs", len(statuses)),
        lambda: (
            "SELECT job_id, scope, episodes, extractor_version, status, attempt, error, "
            f"started_at, finished_at, outcome FROM am_memory_jobs WHERE status IN ({marks}) "
            f"ORDER BY finished_at DESC LIMIT {p('n')}"
        ),
    )
    params: dict[str, Any] = {f"s{i}": s for i, s in enumerate(statuses)}
    params["n"] = limit
    [rows] = yield Batch([Stmt(query, params, fetch=True)])
    names = (
        "job_id",
        "scope",
        "episodes",
        "extractor_version",
        "status",
        "attempt",
        "error",
        "started_at",
        "finished_at",
        "outcome",
    )
    out = [dict(zip(names, r, strict=True)) for r in rows]
    for job in out:
        job["episodes"] = json.loads(job["episodes"])
        job["outcome"] = json.loads(job["outcome"]) if job["outcome"] else None
    return out
