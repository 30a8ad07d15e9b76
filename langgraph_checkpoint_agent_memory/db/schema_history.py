"""Tables as earlier migrations created them: a migration's DDL must not change when
:mod:`.schema` declares more (a column, an index added by a later step)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateIndex

from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.schema import TIME, store_items


def recent_index(d: Dialect) -> str:
    """The items' newest-first index (store step 2), declared apart from :mod:`.schema`'s
    tables, which an earlier step created without it."""
    items = sa.Table(store_items.name, sa.MetaData(), sa.Column("updated_at", TIME))
    index = sa.Index("am_store_items_recent", items.c.updated_at)
    return str(CreateIndex(index).compile(dialect=d.sa)).strip()


def column_like(column: sa.Column[Any]) -> sa.Column[Any]:
    """A new column declared as ``column`` is (the tables of :mod:`.schema` set no
    defaults), but for the primary key, which :func:`as_of` declares as a constraint."""
    return sa.Column(
        column.name,
        column.type,
        nullable=column.nullable,
        autoincrement=column.autoincrement,
    )


def as_of(table: sa.Table, *, without: set[str]) -> sa.Table:
    """``table`` as an earlier migration created it: without the columns added later (and
    without them in its primary key)."""
    old = sa.Table(
        table.name,
        sa.MetaData(),
        *(column_like(c) for c in table.columns if c.name not in without),
        **table.kwargs,
    )
    # the key in its own order, with its options (PostgreSQL's INCLUDE) but the columns left out
    key = [c.name for c in table.primary_key.columns if c.name not in without]
    options = dict(table.primary_key.dialect_kwargs)
    if "postgresql_include" in options:
        options["postgresql_include"] = [
            c for c in options["postgresql_include"] if c not in without
        ]
    old.append_constraint(sa.PrimaryKeyConstraint(*key, **options))
    for index in table.indexes:
        if not {c.name for c in index.columns} & without:
            sa.Index(index.name, *(old.c[c.name] for c in index.columns))
    return old
