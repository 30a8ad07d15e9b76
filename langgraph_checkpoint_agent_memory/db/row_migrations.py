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
from langgraph_checkpoint_agent_memory.db.row_sealer import RowSealer
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
from langgraph_checkpoint_agent_memory.errors import KeyMissingError
from langgraph_checkpoint_agent_memory.text import dated_text, episode_text, fact_text

#: Items indexed per transaction when the lexical index is filled for items older than it.
BACKFILL_BATCH = 500
#: The namespace root memory rows are keyed under when their scope has no ledger row to
#: name its root (agent memory's default root).
DEFAULT_MEMORY_ROOT = "memory"
#: The store's tables, each of whose rows carries a shard key.
STORE_TABLES = (store_items, store_vectors, store_terms)
#: The kinds of memory namespace that hold facts (``<root>.<scope>.facts``, ``...history``).
FACT_NAMESPACES = ("facts", "history")
#: The kinds of memory namespace :func:`index_dates` indexes again.
MEMORY_NAMESPACES = (*FACT_NAMESPACES, "episodes")


def index_facts(dialect: Dialect, shard_depth: int) -> Plan[int]:
    """Re-index the facts stored before facts were indexed by attribute and value (their
    ``doc`` was the statement alone), with :func:`~..text.fact_text`: the text agent memory
    wrote then (memory 2 and 3; memory 5 adds the date). Runs inside the migration's
    transaction (see :attr:`.migrations.Step.rows`), a page of items at a time; items that
    are not facts are left alone, and so are items sealed by encryption at rest: they were
    written, or sealed by ``agent-memory encrypt``, by a version that indexes facts this way
    already (the command sets memory's schema up before it seals)."""
    return (yield from _reindex(dialect, shard_depth, FACT_NAMESPACES, _fact_doc))


def index_dates(dialect: Dialect, shard_depth: int) -> Plan[int]:
    """Re-index facts, past facts and episodes with their date (memory 5): the text agent
    memory now writes, :func:`~..text.fact_text` or :func:`~..text.episode_text` and the
    day in words (:func:`~..text.dated_text`). Runs inside the migration's transaction, a
    page of items at a time; items that are not facts or episodes are left alone. Items
    sealed by encryption at rest cannot be read without their keys: they are marked
    (``doc_len`` NULL, their ``doc`` being NULL already) for :func:`index_sealed_dates`,
    which the setups of a store with encryption on run after the migration."""
    done = yield from _reindex(dialect, shard_depth, MEMORY_NAMESPACES, _memory_doc)
    t = store_items
    sealed = dialect.sql(
        "memory_sealed",
        lambda: (
            _memory_items(sa.select(t.c.shard, t.c.prefix, t.c.key), MEMORY_NAMESPACES)
            .where(t.c.sealed.is_not(None), t.c.doc_len.is_not(None))
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    mark = dialect.sql(
        "memory_sealed_mark", lambda: sa.update(t).where(key_match(t)).values(doc_len=None)
    )
    while True:
        params = {"n": BACKFILL_BATCH}
        [rows] = yield Batch([Stmt(sealed, params, fetch=True)], hold=True)
        if rows:
            keys = [{"shard": sh, "prefix": p, "key": k} for sh, p, k in rows]
            yield Batch([Stmt(mark, keys, many=True)], hold=True)
        if len(rows) < BACKFILL_BATCH:
            return done


def _memory_items(select: sa.Select[Any], kinds: tuple[str, ...]) -> sa.Select[Any]:
    """``select`` of the items whose namespace ends with one of ``kinds``."""
    t = store_items
    return select.where(sa.or_(*(t.c.prefix.like(f"%.{kind}") for kind in kinds)))


def _reindex(
    dialect: Dialect,
    shard_depth: int,
    kinds: tuple[str, ...],
    doc_of: Callable[[str, Any], str | None],
) -> Plan[int]:
    """Index again, with the text ``doc_of(prefix, value)`` gives (``None``: not one of
    ours), the items not sealed of the memory namespaces of ``kinds`` whose text changed,
    in key order a page at a time, inside the migration's transaction."""
    t = store_items
    after_p = sa.bindparam("after_p", type_=sa.String)
    select = dialect.sql(
        ("memory_to_index", kinds),
        lambda: (
            _memory_items(sa.select(t.c.shard, t.c.prefix, t.c.key, t.c.value, t.c.doc), kinds)
            .where(
                t.c.sealed.is_(None),
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
    after: tuple[str, str] = ("", "")
    done = 0
    while True:
        params = {"after_p": after[0], "after_k": after[1], "n": BACKFILL_BATCH}
        [rows] = yield Batch([Stmt(select, params, fetch=True)], hold=True)
        items = [
            {"shard": shard, "prefix": prefix, "key": key, "doc": text}
            for shard, prefix, key, raw, doc in rows
            if (text := doc_of(prefix, raw if isinstance(raw, dict) else json.loads(raw)))
            is not None
            and text != doc
        ]
        if items:
            yield from _write_docs(dialect, shard_depth, items)
            done += len(items)
        if len(rows) < BACKFILL_BATCH:
            return done
        after = (rows[-1][1], rows[-1][2])


def index_sealed_dates(dialect: Dialect, shard_depth: int, sealer: RowSealer) -> Plan[int]:
    """Index again, with their dates, the sealed facts and episodes :func:`index_dates`
    marked: each opened with ``sealer`` (the store's), its text indexed as keyed term hashes
    under its shard key's data key, as the store's put does (its filterable fields' hashes
    too), and not stored. Resumable, run after the migration at every setup with encryption
    on: the keys are looked up first, outside any transaction that writes, then each item is
    claimed by a conditional write of its own row (``doc_len`` set where it is still NULL),
    so processes that run it at once index each item once. An item that is not a fact or
    an episode gets its length back from its postings."""
    t, p = store_items, store_terms.alias("p")
    pending = dialect.sql(
        "memory_sealed_pending",
        lambda: (
            _memory_items(
                sa.select(
                    t.c.shard,
                    t.c.prefix,
                    t.c.key,
                    t.c.value,
                    t.c.sealed,
                    sa.select(sa.func.max(p.c.dl)).where(same_item(p, t)).scalar_subquery(),
                ),
                MEMORY_NAMESPACES,
            )
            .where(t.c.sealed.is_not(None), t.c.doc_len.is_(None))
            .limit(sa.bindparam("n", type_=sa.Integer))
        ),
    )
    claim = _claim_doc_len(dialect)

    def write(rows: list[Any]) -> Plan[int]:
        items = yield from _sealed_items(rows, sealer)
        ours = [i for i in items if i["doc"] is not None]
        terms = index_rows(ours)  # sets each item's doc_len
        claims = [
            Stmt(claim, {"b_doc_len": i["doc_len"], **{f"b_{k}": i[k] for k in _KEY}})
            for i in items
        ]
        counts = yield Batch(claims, lock=True, hold=True)
        won = {_key(i) for i, n in zip(items, counts, strict=True) if n and i["doc"] is not None}
        statements = StoreStatements(dialect, shard_depth)
        _, delete_terms, _ = statements.delete_item()
        keys = [dict(zip(_KEY, k, strict=True)) for k in sorted(won)]
        mine = [r for r in terms if _key(r) in won]
        yield Batch(
            [Stmt(delete_terms, keys, many=True), statements.insert_terms_stmt(mine)]
            if won
            else [],
            write=True,
        )
        return len(won)

    return (yield from _backfill(pending, write))


#: The columns that name an item's row.
_KEY = ("shard", "prefix", "key")


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["shard"], row["prefix"], row["key"]


def _sealed_items(rows: list[Any], sealer: RowSealer) -> Plan[list[dict[str, Any]]]:
    """Rows of :func:`index_sealed_dates`'s ``pending`` as items to index, their keys looked
    up first: each opened with ``sealer``, with its text (``doc``, not stored) and how it is
    indexed (``term_of``, ``filter_terms``); one that is not a fact or an episode has no
    ``doc`` and the length its postings say (``doc_len``), and so has one sealed under a key
    the key store no longer holds (an erased scope's rows in a restored backup): unreadable
    by design, it is passed over rather than stopping every setup."""
    gone = yield from _destroyed_keys(sealer, rows)
    owners = {}
    for shard in sorted({r[0] for r in rows}):
        owners[shard] = yield from sealer.owner_key_plan(shard, create=False)
    items: list[dict[str, Any]] = []
    for shard, prefix, key, raw, sealed, dl in rows:
        item = {"shard": shard, "prefix": prefix, "key": key}
        if sealer.key_id(bytes(sealed)) in gone:
            items.append(item | {"doc": None, "doc_len": dl or 0})
            continue
        value = sealer.open_value(prefix, key, raw, bytes(sealed))
        text, data_key = _memory_doc(prefix, value), owners[shard]
        if text is None or data_key is None:
            items.append(item | {"doc": None, "doc_len": dl or 0})
            continue
        item |= {
            "doc": text,
            "term_of": sealer.term_of(data_key),
            "filter_terms": sealer.filter_terms(data_key, _json(value)),
        }
        items.append(item)
    return items


def _destroyed_keys(sealer: RowSealer, rows: list[Any]) -> Plan[set[str]]:
    """Load the keys ``rows`` are sealed under; the ids of those the key store does not
    hold (asked for one at a time only when some are missing)."""
    sealed = [bytes(r[4]) for r in rows]
    try:
        yield from sealer.ids_plan(sealed)
        return set()
    except KeyMissingError:
        pass
    gone: set[str] = set()
    for key_id in sorted({sealer.key_id(s) for s in sealed}):
        try:
            yield from sealer.ids_plan(s for s in sealed if sealer.key_id(s) == key_id)
        except KeyMissingError:
            gone.add(key_id)
    return gone


def _write_docs(dialect: Dialect, shard_depth: int, items: list[dict[str, Any]]) -> Plan[None]:
    """Set the items' ``doc`` (and ``doc_len``) and replace their postings."""
    t = store_items
    update = dialect.sql(
        "memory_doc",
        lambda: (
            sa.update(t)
            .where(key_match(t))
            .values(doc=sa.bindparam("b_doc"), doc_len=sa.bindparam("b_doc_len"))
        ),
    )
    statements = StoreStatements(dialect, shard_depth)
    _, delete_terms, _ = statements.delete_item()
    terms = index_rows(items)  # sets each item's doc_len
    keys = [{"shard": i["shard"], "prefix": i["prefix"], "key": i["key"]} for i in items]
    yield Batch(
        [
            Stmt(
                update,
                [
                    {"b_doc": i["doc"], "b_doc_len": i["doc_len"], **k}
                    for i, k in zip(items, keys, strict=True)
                ],
                many=True,
            ),
            Stmt(delete_terms, keys, many=True),
            statements.insert_terms_stmt(terms),
        ],
        hold=True,
    )


def _fact_doc(prefix: str, value: Any) -> str | None:
    """The text a fact stored under ``prefix`` was indexed by before memory 5 (no date);
    ``None`` for anything else."""
    fact = _fact_of(prefix, value)
    return None if fact is None else fact_text(*fact[:3])


def _fact_of(prefix: str, value: Any) -> tuple[str, str, str, Any] | None:
    """``(attribute, value, statement, valid_from)`` of a fact stored under ``prefix``;
    ``None`` for anything else."""
    if prefix.rsplit(".", 1)[-1] not in FACT_NAMESPACES or not isinstance(value, dict):
        return None
    attribute, said = value.get("attribute"), value.get("value")
    if value.get("kind") != "fact" or not isinstance(attribute, str) or not isinstance(said, str):
        return None
    statement = value.get("statement")
    return attribute, said, statement if isinstance(statement, str) else "", value.get("valid_from")


def _memory_doc(prefix: str, value: Any) -> str | None:
    """The text agent memory indexes a fact or an episode stored under ``prefix`` by (see
    ``memory.model.lexical_text``); ``None`` for anything else."""
    fact = _fact_of(prefix, value)
    if fact is not None:
        return dated_text(fact_text(*fact[:3]), _moment(fact[3]))
    if prefix.rsplit(".", 1)[-1] != "episodes" or not isinstance(value, dict):
        return None
    messages, summary = value.get("messages") or [], value.get("summary")
    if value.get("kind") != "episode" or not isinstance(messages, list):
        return None
    said = [m for m in messages if isinstance(m, dict)]
    text = episode_text(summary if isinstance(summary, str) else None, said)
    return dated_text(text, _moment(value.get("occurred_at")))


def _moment(value: Any) -> float | None:
    """A stored date as seconds (``None`` when it is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _json(value: Any) -> str:
    """An item's value as the store's JSON text."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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


def _claim_doc_len(dialect: Dialect) -> Sql:
    """Claim an item (``:b_shard``, ``:b_prefix``, ``:b_key``) by setting its ``doc_len``
    (``:b_doc_len``) where it is still NULL: one process indexes it."""
    t = store_items
    return dialect.sql(
        "index_claim",
        lambda: (
            sa.update(t)
            .where(key_match(t, "b_"), t.c.doc_len.is_(None))
            .values(doc_len=sa.bindparam("b_doc_len"))
        ),
    )


def index_existing_items(dialect: Dialect) -> Plan[int]:
    """Index the items stored before the lexical index existed.

    Each candidate is claimed by a conditional write of its own row (``doc_len`` set where
    it is still NULL); only the items claimed get postings, so processes that backfill at
    once never index an item twice, and no read locks rows across shards."""
    t = store_items
    claim = _claim_doc_len(dialect)
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
