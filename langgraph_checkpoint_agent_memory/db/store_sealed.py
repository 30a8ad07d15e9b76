"""The store's SQL of encryption at rest: statements over :mod:`.schema`'s store tables for
reading sealed vectors, finding the shard keys a search spans, and sealing rows written
before encryption was on. Functions of a :class:`~.store.StoreStatements` (cached in its
dialect's statement registry like the others)."""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.dialect import Sql, same_item
from langgraph_checkpoint_agent_memory.db.schema import (
    items_i,
    store_items,
    store_terms,
    store_vectors,
    vectors_v,
)
from langgraph_checkpoint_agent_memory.db.store import (
    ITEM_FIELDS,
    Prefilter,
    StoreStatements,
    key_match,
    live,
)


class SealedVectorRow(NamedTuple):
    """A row of :meth:`StoreStatements.sealed_vectors`: one embedded field of an item, its
    vector sealed unless ``plain`` (its item was written without encryption)."""

    prefix: str
    key: str
    field: str
    vector: bytes
    plain: bool


class PlainItem(NamedTuple):
    """A row of :meth:`StoreStatements.plaintext_items`."""

    shard: str
    prefix: str
    key: str
    value: Any


class PostingRow(NamedTuple):
    """A row of :meth:`StoreStatements.item_postings`."""

    term: str
    tf: int
    dl: int


class FieldVectorRow(NamedTuple):
    """A row of :meth:`StoreStatements.item_vectors`."""

    field: str
    vector: bytes


def sealed_vectors(st: StoreStatements, scoped: bool) -> Sql:
    """``(prefix, key, field, vector, plain)`` of the live vectors under the namespace
    (exact search over vectors decrypted in the store); ``plain``: the item was written
    without encryption."""
    v, i = vectors_v, items_i
    return st.statement(
        ("sealed_vectors", scoped),
        lambda: (
            sa.select(v.c.prefix, v.c.key, v.c.field, v.c.vector, i.c.sealed.is_(None))
            .select_from(v.join(i, same_item(i, v)))
            .where(*st.vector_where((), scoped))
        ),
    )


def sealed_vectors_exact(st: StoreStatements) -> Sql:
    """:meth:`sealed_vectors` of exactly the namespace ``:prefix`` (``:shard``)."""
    v, i = store_vectors.alias("v"), store_items.alias("i")
    return st.statement(
        "sealed_vectors_exact",
        lambda: (
            sa.select(v.c.prefix, v.c.key, v.c.field, v.c.vector, i.c.sealed.is_(None))
            .select_from(v.join(i, same_item(v, i)))
            .where(
                v.c.shard == sa.bindparam("shard"),
                v.c.prefix == sa.bindparam("prefix"),
                live(i),
            )
        ),
    )


def shards_under(st: StoreStatements) -> Sql:
    """The distinct shard keys of the items under the namespace ``:ns``, shorter than the
    shard key (whose data keys a query's terms are hashed with; items expired but not yet
    swept count). Such a namespace's items are those whose shard key lies under it, so
    this reads the primary key's range of those shard keys alone (:meth:`Dialect.under_range`),
    not every item's namespace and expiry."""
    t = store_items
    return st.statement(
        "shards_under",
        lambda: sa.select(t.c.shard).distinct().where(st.d.under_range(t.c.shard)),
    )


def sealed_in_shard(st: StoreStatements) -> Sql:
    """One sealed value of an item of the shard key ``:shard`` (it names the data key the
    shard's items were sealed with: a search asks when the shard has none)."""
    t = store_items
    return st.statement(
        "sealed_in_shard",
        lambda: (
            sa.select(t.c.sealed)
            .where(t.c.shard == sa.bindparam("shard"), t.c.sealed.is_not(None))
            .limit(1)
        ),
    )


def recent_after(st: StoreStatements, scoped: bool, filters: Prefilter = ()) -> Sql:
    """Live items under the namespace passing the pre-filter, newest first (the order of
    :meth:`StoreStatements.recent`), ``:n`` of them after the item ``(:a_updated, :a_prefix,
    :a_key)``: the next page of a filter decided on decrypted values, read on from the last
    row where an offset would sort and skip every earlier row again."""
    t = store_items

    def build() -> Any:
        updated = sa.bindparam("a_updated", type_=t.c.updated_at.type)
        prefix = sa.bindparam("a_prefix", type_=t.c.prefix.type)
        key = sa.bindparam("a_key", type_=t.c.key.type)
        after = sa.or_(
            t.c.updated_at < updated,
            sa.and_(
                t.c.updated_at == updated,
                sa.or_(t.c.prefix > prefix, sa.and_(t.c.prefix == prefix, t.c.key > key)),
            ),
        )
        return (
            sa.select(*(t.c[f] for f in ITEM_FIELDS))
            .where(*st.namespace_of(t, scoped), live(t), after, *st.filtered(t.c.value, filters))
            .order_by(t.c.updated_at.desc(), t.c.prefix, t.c.key)
            .limit(sa.bindparam("n", type_=sa.Integer))
        )

    return st.statement(("recent_after", scoped, filters), build)


def plaintext_items(st: StoreStatements) -> Sql:
    """Up to ``:n`` items not sealed, after ``(:a_shard, :a_prefix, :a_key)`` in key
    order: ``(shard, prefix, key, value)``, read without locks across shards."""
    t = store_items
    after: tuple[Any, ...] = (
        sa.bindparam("a_shard"),
        sa.bindparam("a_prefix"),
        sa.bindparam("a_key"),
    )

    def build() -> Any:
        later = sa.or_(
            t.c.shard > after[0],
            sa.and_(t.c.shard == after[0], t.c.prefix > after[1]),
            sa.and_(t.c.shard == after[0], t.c.prefix == after[1], t.c.key > after[2]),
        )
        return (
            sa.select(t.c.shard, t.c.prefix, t.c.key, t.c.value)
            .where(t.c.sealed.is_(None), later)
            .order_by(t.c.shard, t.c.prefix, t.c.key)
            .limit(sa.bindparam("n", type_=sa.Integer))
        )

    return st.statement("plaintext_items", build)


def item_postings(st: StoreStatements) -> Sql:
    """``(term, tf, dl)`` of one item's postings."""
    t = store_terms
    return st.statement(
        "item_postings", lambda: sa.select(t.c.term, t.c.tf, t.c.dl).where(key_match(t))
    )


def item_vectors(st: StoreStatements) -> Sql:
    """``(field, vector)`` of one item's vectors."""
    t = store_vectors
    return st.statement(
        "item_vectors", lambda: sa.select(t.c.field, t.c.vector).where(key_match(t))
    )


def seal_item(st: StoreStatements) -> Sql:
    """Seal one item (``:shard``, ``:prefix``, ``:key``) still unsealed: ``:sealed``
    in, ``value`` emptied, ``doc`` dropped."""
    t = store_items
    return st.statement(
        "seal_item",
        lambda: (
            sa.update(t)
            .where(key_match(t), t.c.sealed.is_(None))
            .values(
                sealed=sa.bindparam("sealed", type_=sa.LargeBinary),
                value=sa.bindparam("value", type_=t.c.value.type),
                doc=None,
            )
        ),
    )


def seal_vector(st: StoreStatements) -> Sql:
    """Replace one vector (``:shard``, ``:prefix``, ``:key``, ``:field``) by
    ``:vector``, its native columns emptied."""
    t = store_vectors
    columns = {c: None for c in st.d.vector_columns()} if st.d.native_vectors else {}

    def build() -> Any:
        table = st.d.native_vectors_table(list(columns)) if columns else t
        return (
            sa.update(table)
            .where(*(table.c[n] == sa.bindparam(n) for n in ("shard", "prefix", "key", "field")))
            .values(vector=sa.bindparam("vector", type_=sa.LargeBinary), **columns)
        )

    return st.statement(("seal_vector", tuple(columns)), build)


def fingerprint_under(st: StoreStatements, scoped: bool) -> Sql:
    """Live item count and latest update under the namespace ``:ns``: any write below it
    changes them (the cache key of its decrypted vectors)."""
    t = store_items
    return st.statement(
        ("fingerprint_under", scoped),
        lambda: sa.select(sa.func.count(), sa.func.max(t.c.updated_at)).where(
            *st.namespace_of(t, scoped), live(t)
        ),
    )
