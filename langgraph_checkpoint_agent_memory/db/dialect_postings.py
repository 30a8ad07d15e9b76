"""What the store's term index asks of a database beyond plain SQL: lists of values bound
as one parameter or many, the index of postings no block holds yet (``store/blocks.py``),
and keeping the postings' reads an index's work. :class:`~.dialect.Dialect` has these
defaults; each dialect overrides what its database does otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect as SADialect
from sqlalchemy.schema import CreateIndex


class PostingsDialect:
    """The term index's part of a dialect (a base of :class:`~.dialect.Dialect`)."""

    sa: SADialect

    def list_size(self, n: int) -> int:
        """The parameters a list of ``n`` values takes in :meth:`one_of`: ``n`` rounded up
        to a multiple of 16, so a few statements serve every length (PostgreSQL: 1)."""
        return n + (-n % 16)

    def one_of(self, column: Any, param: str, size: int) -> Any:
        """Core: ``column`` equals one of the values :meth:`list_params` binds, ``size``
        (:meth:`list_size`) parameters ``:<param>0`` ... ``:<param><size-1>``."""
        return column.in_([sa.bindparam(f"{param}{j}", type_=column.type) for j in range(size)])

    def list_params(self, param: str, values: Sequence[Any]) -> dict[str, Any]:
        """The parameters of :meth:`one_of` for ``values`` (at least one), the last repeated
        up to :meth:`list_size`."""
        size = self.list_size(len(values))
        padded = [*values, *[values[-1]] * (size - len(values))]
        return {f"{param}{j}": v for j, v in enumerate(padded)}

    #: Whether queries of common terms read packed blocks of postings (``store/blocks.py``):
    #: where the database has partial indexes, which find the postings written since a
    #: block was built without reading the others.
    posting_blocks = True
    #: The columns of the index of unpacked postings after its first (the rest it includes).
    fresh_index_columns: tuple[str, ...] = ("term", "shard", "prefix", "key")

    def fresh_lead(self, t: Any) -> Any:
        """The first column of the index of unpacked postings of table ``t``, which a query
        of them names (equal to 0) and orders by: :func:`unpacked` (the ``packed IS NULL``
        of a query is left out of a partial index's conditions on PostgreSQL, being its
        predicate)."""
        return unpacked(t)

    def fresh_postings_ddl(self) -> list[str]:
        """The index of postings no block holds yet (``packed IS NULL``), with what BM25
        reads, so the read is the index's alone; none where :attr:`posting_blocks` is off.

        It leads with :meth:`fresh_lead`, which queries name: the primary key cannot serve
        that condition nor its order, so no planner takes the primary key (and every
        posting of a term) for the few unpacked ones, whatever its statistics say
        (PostgreSQL's, from before a build packed most of them, would)."""
        if not self.posting_blocks:
            return []
        names = ("term", "shard", "prefix", "key", "tf", "dl", "packed")
        terms = sa.Table("am_store_terms", sa.MetaData(), *(sa.Column(c) for c in names))
        index = sa.Index(
            "am_store_terms_fresh",
            self.fresh_lead(terms),
            *(terms.c[c] for c in self.fresh_index_columns),
            postgresql_include=["tf", "dl"],
            postgresql_where=terms.c.packed.is_(None),
            sqlite_where=terms.c.packed.is_(None),
        )
        return [str(CreateIndex(index).compile(dialect=self.sa)).strip()]

    def postings_upkeep_ddl(self) -> list[str]:
        """DDL that keeps reading postings an index's work alone where the
        database needs telling (none here; SQLite's postings are their key's rows, and an
        update leaves no dead index entry)."""
        return []


def unpacked(t: Any) -> Any:
    """Core: ``COALESCE(t.packed, 0)``, the first column of the index of unpacked postings
    (0 for every posting it holds; see :meth:`PostingsDialect.fresh_postings_ddl`)."""
    return sa.func.coalesce(t.c.packed, sa.literal_column("0", sa.Integer))
