"""The store's SQL of pseudo-relevance feedback: the postings of the first lexical matches,
from which the ranker picks the terms to add to a query (``store.feedback``). A function of
a :class:`~.store.StoreStatements`, cached in its dialect's statement registry like the
others."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.schema import store_terms
from langgraph_checkpoint_agent_memory.db.store import StoreStatements, items_named


def postings_of(st: StoreStatements, n: int) -> Sql:
    """``(prefix, key, term, tf, dl)`` of every posting of ``n`` items (``:s<j>``,
    ``:p<j>``, ``:k<j>``), each read through the index by item."""
    t = store_terms

    def build() -> sa.Select[Any]:
        return sa.select(t.c.prefix, t.c.key, t.c.term, t.c.tf, t.c.dl).where(items_named(t, n))

    return st.statement(("feedback_postings", n), build)
