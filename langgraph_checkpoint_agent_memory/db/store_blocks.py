"""The store's SQL of posting blocks (``am_store_blocks``): what a query of common words
reads, and what builds a block. Functions of a :class:`~.store.StoreStatements`, cached in
its dialect's statement registry like the others; ``store/blocks.py`` says how they are used.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.schema import store_blocks, store_terms
from langgraph_checkpoint_agent_memory.db.store import StoreStatements, rows_named, terms_in


def _null(type_: Any, name: str) -> Any:
    return sa.cast(sa.null(), type_).label(name)


def read(st: StoreStatements, n: int, exact: bool, scoped: bool) -> Sql:
    """In one statement (one snapshot): which blocks of ``n`` terms (``:t<j>``) lie under
    the namespace, ``(term, shard, prefix, NULL, entries, NULL, built)``, and up to ``:cap``
    postings of each term no block holds, ``(term, shard, prefix, key, tf, dl, NULL)``.
    Each term's postings are read through the index of unpacked postings, by its first
    column and in its order (see :meth:`.Dialect.fresh_postings_ddl`)."""
    b, t = store_blocks, store_terms

    lead = st.d.fresh_lead(t)
    unpacked_where = [t.c.packed.is_(None)]
    if lead is not t.c.packed:
        unpacked_where.append(lead == 0)

    def fresh(j: int) -> Any:
        term = t.c.term == sa.bindparam(f"t{j}", type_=sa.String)
        part = (
            sa.select(t.c.term, t.c.shard, t.c.prefix, t.c.key, t.c.tf, t.c.dl)
            .where(*unpacked_where, term, *st.ns_of(t, exact, scoped))
            .order_by(lead, t.c.term, t.c.shard, t.c.prefix, t.c.key)
            .limit(sa.bindparam("cap", type_=sa.Integer))
            .subquery(f"f{j}")
        )
        return sa.select(*part.c, _null(sa.BigInteger, "built"))

    def build() -> Any:
        blocks = sa.select(
            b.c.term,
            b.c.shard,
            b.c.prefix,
            _null(t.c.key.type, "key"),
            b.c.entries.label("tf"),
            _null(sa.Integer, "dl"),
            b.c.built,
        ).where(terms_in(b, n), *st.ns_of(b, exact, scoped))
        return sa.union_all(blocks, *(fresh(j) for j in range(n)))

    return st.statement(("blocks_read", n, exact, scoped), build)


def fresh_counts(st: StoreStatements, n: int, exact: bool, scoped: bool) -> Sql:
    """``(term, shard, prefix, count)`` of the namespaces under ``:ns`` where one of
    ``n`` terms has ``count``, at least ``:at``, postings no block holds."""
    t = store_terms

    def build() -> Any:
        return (
            sa.select(t.c.term, t.c.shard, t.c.prefix, sa.func.count())
            .where(terms_in(t, n), *st.ns_of(t, exact, scoped), t.c.packed.is_(None))
            .group_by(t.c.term, t.c.shard, t.c.prefix)
            .having(sa.func.count() >= sa.bindparam("at", type_=sa.Integer))
        )

    return st.statement(("blocks_fresh_counts", n, exact, scoped), build)


def payloads(st: StoreStatements, n: int) -> Sql:
    """``(term, shard, prefix, built, entries, postings, keys)`` of ``n`` blocks."""
    b = store_blocks
    return st.statement(
        ("blocks_payloads", n),
        lambda: sa.select(
            b.c.term, b.c.shard, b.c.prefix, b.c.built, b.c.entries, b.c.postings, b.c["keys"]
        ).where(rows_named(b, n, (("term", "bt"), ("shard", "bs"), ("prefix", "bp")))),
    )


def postings_in(st: StoreStatements, terms: int, keys: int) -> Sql:
    """``(prefix, key, term, tf, dl)`` of the postings of ``terms`` terms (``:t<j>``) in
    items of one namespace (``:shard``, ``:prefix``) whose keys the dialect's list of
    ``keys`` parameters names (``:k``, see :meth:`.Dialect.one_of`): the candidates' true
    scores. One part per term, so each is a range of the primary key with the keys as its
    last column (two lists in one condition leave PostgreSQL 15 filtering every posting
    of the terms by key)."""
    t = store_terms

    def part(j: int) -> Any:
        return sa.select(t.c.prefix, t.c.key, t.c.term, t.c.tf, t.c.dl).where(
            t.c.term == sa.bindparam(f"t{j}", type_=sa.String),
            t.c.shard == sa.bindparam("shard"),
            t.c.prefix == sa.bindparam("prefix"),
            st.d.one_of(t.c.key, "k", keys),
        )

    return st.statement(
        ("blocks_postings_in", terms, keys),
        lambda: sa.union_all(*(part(j) for j in range(terms))),
    )


def _one_block(t: Any) -> list[Any]:
    return [
        t.c.term == sa.bindparam("term"),
        t.c.shard == sa.bindparam("shard"),
        t.c.prefix == sa.bindparam("prefix"),
    ]


def claim(st: StoreStatements) -> Sql:
    """A build's first statement: the block's row, created empty or given the build's
    ``:built``; it holds the row's lock, so builds of one block take turns."""
    return st.statement(
        ("blocks_claim",),
        lambda: st.d.upsert(store_blocks, ["term", "shard", "prefix"], ["built"]),
    )


def mark(st: StoreStatements) -> Sql:
    """Mark the term's postings in the namespace as packed (the build reads them next).
    Where rows have locks, postings a write holds are skipped: they stay unpacked, and
    queries read them one by one, so a build never waits on a write."""
    t = store_terms

    def build() -> Any:
        where = [*_one_block(t), t.c.packed.is_(None)]
        stmt = sa.update(t).values(packed=1)
        if not st.d.row_locks:
            return stmt.where(*where)
        free = st.d.skip_locked(sa.select(t.c.key).where(*where))
        return stmt.where(*where, t.c.key.in_(free))

    return st.statement(("blocks_mark",), build)


def postings(st: StoreStatements) -> Sql:
    """``(key, tf, dl)`` of the term's packed postings in the namespace: those this build
    marked (it holds them) and earlier builds' (queries read the others one by one)."""
    t = store_terms
    return st.statement(
        ("blocks_postings",),
        lambda: sa.select(t.c.key, t.c.tf, t.c.dl).where(*_one_block(t), t.c.packed == 1),
    )


def drop(st: StoreStatements) -> Sql:
    """Delete the blocks of one namespace (``:shard``, ``:prefix``)."""
    b = store_blocks
    return st.statement(
        ("blocks_drop",),
        lambda: sa.delete(b).where(
            b.c.shard == sa.bindparam("shard"), b.c.prefix == sa.bindparam("prefix")
        ),
    )


def fill(st: StoreStatements) -> Sql:
    """A build's last statement: the block's entries and keys."""
    b = store_blocks
    return st.statement(
        ("blocks_fill",),
        lambda: (
            sa.update(b)
            .values(
                entries=sa.bindparam("entries"),
                postings=sa.bindparam("postings"),
                keys=sa.bindparam("keys"),
            )
            .where(*_one_block(b), b.c.built == sa.bindparam("built"))
        ),
    )
