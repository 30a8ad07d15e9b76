"""Work on rows that schema migrations need and SQL alone cannot do, as plans: the shard
keys of existing rows, computed by the rule (:mod:`.shard`); facts indexed again by
attribute and value; and the backfills that bring rows older than a migration up to it
(the lexical index, native vector columns), run at every setup and resumable.

None of them locks rows across a table: a distributed database refuses multi-shard row
locks. The fills run inside their migration's transaction (the migration lock serializes
them); the backfills read candidates without locks and make each change conditional on the
row still needing it, so processes that run them at once share the work.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, same_item
from langgraph_checkpoint_agent_memory.db.schema import (
    MEMORY_TABLES,
    memory_decay,
    memory_scopes,
    store_items,
    store_terms,
    store_vectors,
)
from langgraph_checkpoint_agent_memory.db.shard import prefix_shard, shard_key
from langgraph_checkpoint_agent_memory.db.store import (
    StoreStatements,
    index_rows,
    key_match,
    vector_text,
)
from langgraph_checkpoint_agent_memory.text import fact_text

#: Items indexed per transaction when the lexical index is filled for items older than it.
BACKFILL_BATCH = 500
#: The namespace root memory rows are keyed under when their scope has no ledger row to
#: name its root (agent memory's default root).
DEFAULT_MEMORY_ROOT = "memory"
#: The store's tables, each of whose rows carries a shard key.
STORE_TABLES = (store_items, store_vectors, store_terms)
#: The kinds of memory namespace that hold facts (``<root>.<scope>.facts``, ``...history``).
FACT_NAMESPACES = ("facts", "history")


def index_facts(dialect: Dialect, shard_depth: int) -> Plan[int]:
    """Re-index the facts stored before facts were indexed by attribute and value (their
    ``doc`` was the statement alone), with :func:`~..text.fact_text`: the same text agent
    memory now writes. Runs inside the migration's transaction (see
    :attr:`.migrations.Step.rows`), a page of items at a time; items that are not facts are
    left alone, and so are items sealed by encryption at rest: their ``value`` holds ``{}``
    (the value is in ``sealed``, which this migration, older than the column, does not
    read), and they were written, or sealed by ``agent-memory encrypt``, by a version that
    indexes facts this way already (the command sets memory's schema up before it seals)."""
    t = store_items
    after_p = sa.bindparam("after_p", type_=sa.String)
    select = dialect.sql(
        "facts_to_index",
        lambda: (
            sa.select(t.c.shard, t.c.prefix, t.c.key, t.c.value, t.c.doc)
            .where(
                sa.or_(
                    t.c.prefix.like(sa.bindparam("facts")), t.c.prefix.like(sa.bindparam("history"))
                ),
                sa.or_(
                    t.c.prefix > after_p,
                    sa.and_(
                        t.c.prefix == after_p, t.c.key > sa.bindparam("after_k", type_=sa.String)
                    ),
                ),
            )
            .order_by(t.c.prefix, t.c.key)
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    update = dialect.sql(
        "fact_doc",
        lambda: (
            sa.update(t)
            .where(key_match(t))
            .values(doc=sa.bindparam("b_doc"), doc_len=sa.bindparam("b_doc_len"))
        ),
    )
    statements = StoreStatements(dialect, shard_depth)
    _, delete_terms, _ = statements.delete_item()
    after: tuple[str, str] = ("", "")
    done = 0
    while True:
        params = {
            "facts": "%.facts",
            "history": "%.history",
            "after_p": after[0],
            "after_k": after[1],
            "n": BACKFILL_BATCH,
        }
        [rows] = yield Batch([Stmt(select, params, fetch=True)], hold=True)
        items = []
        for shard, prefix, key, raw, doc in rows:
            value = raw if isinstance(raw, dict) else json.loads(raw)
            text = _fact_doc(prefix, value)
            if text is not None and text != doc:
                items.append({"shard": shard, "prefix": prefix, "key": key, "doc": text})
        if items:
            terms = index_rows(items)  # sets each item's doc_len
            keys = [{"shard": i["shard"], "prefix": i["prefix"], "key": i["key"]} for i in items]
            yield Batch(
                [
                    Stmt(
                        update,
                        [
                            {
                                "b_doc": i["doc"],
                                "b_doc_len": i["doc_len"],
                                **{k: i[k] for k in ("shard", "prefix", "key")},
                            }
                            for i in items
                        ],
                        many=True,
                    ),
                    Stmt(delete_terms, keys, many=True),
                    statements.insert_terms_stmt(terms),
                ],
                hold=True,
            )
            done += len(items)
        if len(rows) < BACKFILL_BATCH:
            return done
        after = (rows[-1][1], rows[-1][2])


def _fact_doc(prefix: str, value: Any) -> str | None:
    """The text a fact stored under ``prefix`` is indexed by; ``None`` for anything else."""
    if prefix.rsplit(".", 1)[-1] not in FACT_NAMESPACES or not isinstance(value, dict):
        return None
    attribute, said = value.get("attribute"), value.get("value")
    if value.get("kind") != "fact" or not isinstance(attribute, str) or not isinstance(said, str):
        return None
    statement = value.get("statement")
    return fact_text(attribute, said, statement if isinstance(statement, str) else "")


def _unkeyed(t: sa.Table, column: str) -> sa.Select[Any]:
    """The distinct values of ``column`` among ``t``'s rows that have no shard key yet."""
    return sa.select(t.c[column]).where(t.c.shard.is_(None)).distinct()


def _set_shard(t: sa.Table, column: str) -> sa.Update:
    """Set the shard key (``:b_shard``) of ``t``'s rows whose ``column`` is ``:b_value``."""
    return (
        sa.update(t)
        .where(t.c[column] == sa.bindparam("b_value"), t.c.shard.is_(None))
        .values(shard=sa.bindparam("b_shard"))
    )


def fill_store_shards(dialect: Dialect, shard_depth: int) -> Plan[int]:
    """Give every store row its shard key, computed from its namespace by the rule."""
    done = 0
    for t in STORE_TABLES:
        select = dialect.sql(("unkeyed", t.name), partial(_unkeyed, t, "prefix"))
        [rows] = yield Batch([Stmt(select, fetch=True)], hold=True)
        updates = [
            {"b_value": prefix, "b_shard": prefix_shard(prefix, shard_depth)} for (prefix,) in rows
        ]
        if updates:
            update = dialect.sql(("set_shard", t.name), partial(_set_shard, t, "prefix"))
            yield Batch([Stmt(update, updates, many=True)], hold=True)
        done += len(updates)
    return done


def fill_memory_shards(dialect: Dialect, shard_depth: int) -> Plan[int]:
    """Give every memory row its shard key: a decay row by its item's namespace, a scope's
    rows by the namespace ``(root, *scope labels)`` (the root from the scope's ledger row)."""
    roots_sql = dialect.sql(
        "scope_roots", lambda: sa.select(memory_scopes.c.scope, memory_scopes.c.root)
    )
    [roots] = yield Batch([Stmt(roots_sql, fetch=True)], hold=True)
    root_of = {scope: root for scope, root in roots}
    done = 0
    for t in (*(t for t in MEMORY_TABLES if t is not memory_decay), memory_decay):
        column = "prefix" if t is memory_decay else "scope"
        select = dialect.sql(("unkeyed", t.name), partial(_unkeyed, t, column))
        [rows] = yield Batch([Stmt(select, fetch=True)], hold=True)
        updates = [
            {
                "b_value": value,
                "b_shard": prefix_shard(value, shard_depth)
                if column == "prefix"
                else shard_key(
                    (root_of.get(value, DEFAULT_MEMORY_ROOT), *value.split(",")), shard_depth
                ),
            }
            for (value,) in rows
        ]
        if updates:
            update = dialect.sql(("set_shard", t.name), partial(_set_shard, t, column))
            yield Batch([Stmt(update, updates, many=True)], hold=True)
        done += len(updates)
    return done


def index_existing_items(dialect: Dialect) -> Plan[int]:
    """Index the items stored before the lexical index existed.

    Each candidate is claimed by a conditional write of its own row (``doc_len`` set where
    it is still NULL); only the items claimed get postings, so processes that backfill at
    once never index an item twice, and no read locks rows across shards."""
    t = store_items
    claim = dialect.sql(
        "index_claim",
        lambda: (
            sa.update(t)
            .where(key_match(t, "b_"), t.c.doc_len.is_(None))
            .values(doc_len=sa.bindparam("b_doc_len"))
        ),
    )
    pending = dialect.sql(
        "index_pending",
        lambda: (
            sa.select(t.c.shard, t.c.prefix, t.c.key, t.c.doc)
            .where(t.c.doc.is_not(None), t.c.doc_len.is_(None))
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )

    def write(rows: list[Any]) -> Plan[int]:
        items = [{"shard": sh, "prefix": pr, "key": k, "doc": doc} for sh, pr, k, doc in rows]
        terms = index_rows(items)  # sets each item's doc_len
        claims = [
            Stmt(
                claim,
                {
                    "b_shard": i["shard"],
                    "b_prefix": i["prefix"],
                    "b_key": i["key"],
                    "b_doc_len": i["doc_len"],
                },
            )
            for i in items
        ]
        counts = yield Batch(claims, lock=True, hold=True)
        won = {(i["shard"], i["prefix"], i["key"]) for i, n in zip(items, counts, strict=True) if n}
        mine = [r for r in terms if (r["shard"], r["prefix"], r["key"]) in won]
        yield Batch([StoreStatements(dialect).insert_terms_stmt(mine)] if mine else [], write=True)
        return len(won)

    return (yield from _backfill(pending, write))


def convert_existing_vectors(dialect: Dialect) -> Plan[int]:
    """Fill the native vector column of vectors stored before it existed (each write sets
    it only where it is still NULL, so concurrent backfills agree)."""
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

    def write(rows: list[Any]) -> Plan[int]:
        updates = [
            {"shard": sh, "prefix": pr, "key": k, "field": f, "embedding": vector_text(bytes(vec))}
            for sh, pr, k, f, vec in rows
        ]
        yield Batch([Stmt(fill, updates, many=True)], write=True)
        return len(updates)

    return (yield from _backfill(pending, write))


def _backfill(pending: Sql, write: Callable[[list[Any]], Plan[int]]) -> Plan[int]:
    """Bring rows older than a migration up to it, a batch at a time. Runs on every setup,
    so an interrupted run resumes with the rows ``pending`` still selects. Candidates are
    read without row locks (a lock across shards is refused by a distributed database);
    ``write`` makes each change conditional on the row still needing it, so processes that
    run at once share the work and each row changes once."""
    done = 0
    while True:
        [rows] = yield Batch([Stmt(pending, {"n": BACKFILL_BATCH}, fetch=True)])
        if not rows:
            return done
        done += yield from write(rows)
