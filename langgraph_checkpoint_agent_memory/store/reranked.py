"""Reranked search: the store's searches with a query, ordered again by a reranker.

A search with a query and a reranker (the store's ``reranker=``, or the one a ``search`` call
gives) reads the first ``top_n`` candidates of the fused ranking (more when ``offset +
limit`` asks for more), lets the reranker order them outside the database transaction, and
returns the page ``offset``/``limit`` asks for from that order. An item's ``score`` is then
the reranker's score, when it gives one; the fused score otherwise. Pages of the same query
stay consistent: each reads the same candidates and the reranker orders them the same way.
Searches without a query (filters, newest first) are never reranked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Literal, cast

from langgraph.store.base import Op, Result, SearchItem, SearchOp

from langgraph_checkpoint_agent_memory.rerank import Reordered, RerankerLike, Reranking
from langgraph_checkpoint_agent_memory.rerank import reranking_of as _reranking_of

#: What ``search(..., reranker=)`` accepts: a reranker, ``False`` for none, ``None`` for the
#: store's.
PerCall = RerankerLike | Literal[False] | None


class Reranks:
    """The part of :class:`~.store.AgentMemoryStore` that reranks searches: ``batch`` and
    ``search`` (and their async forms) over the store's own batch, ``_run_batch``."""

    #: The reranker of every search with a query (``reranker=`` of the store), if any.
    reranking: Reranking | None = None

    def _run_batch(self, ops: list[Op]) -> list[Result]:
        raise NotImplementedError

    async def _arun_batch(self, ops: list[Op]) -> list[Result]:
        raise NotImplementedError

    def _rerank_text(self, value: dict[str, Any]) -> str:
        """The text a reranker reads of an item's value (what the store indexes)."""
        raise NotImplementedError

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._batch_reranked(list(ops), self.reranking)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._abatch_reranked(list(ops), self.reranking)

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        reranker: PerCall = None,
    ) -> list[SearchItem]:
        """Search for items under ``namespace_prefix``, best first (LangGraph's
        ``BaseStore.search``), reranked as the module says.

        Args:
            namespace_prefix: Where to search.
            query: What to search for; without one, the newest items matching ``filter``.
            filter: Conditions on the value (``{"rating": {"$gte": 4}}``).
            limit: How many items.
            offset: How many to skip.
            refresh_ttl: Refresh the items' TTL (default the store's ``refresh_on_read``).
            reranker: This search's reranker (a callable, a LangChain
                ``BaseDocumentCompressor`` or a :class:`~..rerank.Reranking`); ``False``:
                none, even when the store has one; default the store's.

        Example:
            ```python
            def prefers_spicy(query, texts):  # e.g. a cross-encoder's predict
                return [float("spicy" in t) for t in texts]

            store.put(("users", "alice"), "a", {"food": "mild ramen"})
            store.put(("users", "alice"), "b", {"food": "spicy ramen"})
            hits = store.search(("users", "alice"), query="ramen", reranker=prefers_spicy)
            assert hits[0].key == "b" and hits[0].score == 1.0
            ```
        """
        op = SearchOp(namespace_prefix, filter, limit, offset, query, refresh_ttl)  # type: ignore[arg-type]
        [found] = self._batch_reranked([op], self._per_call(reranker))
        return found  # type: ignore[return-value]

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        reranker: PerCall = None,
    ) -> list[SearchItem]:
        """Async :meth:`search`."""
        op = SearchOp(namespace_prefix, filter, limit, offset, query, refresh_ttl)  # type: ignore[arg-type]
        [found] = await self._abatch_reranked([op], self._per_call(reranker))
        return found  # type: ignore[return-value]

    def _per_call(self, reranker: PerCall) -> Reranking | None:
        if reranker is False:
            return None
        return _reranking_of(reranker) if reranker is not None else self.reranking

    def _batch_reranked(self, ops: list[Op], reranking: Reranking | None) -> list[Result]:
        wide = widened(ops, reranking)
        if reranking is None or wide is ops:
            return self._run_batch(ops)
        results = self._run_batch(wide)
        for i, op in enumerate(ops):
            if wide[i] is not op:
                search, items = cast(SearchOp, op), cast(list[SearchItem], results[i])
                texts = [self._rerank_text(item.value) for item in items]
                results[i] = page(search, items, reranking.order(search.query or "", texts))
        return results

    async def _abatch_reranked(self, ops: list[Op], reranking: Reranking | None) -> list[Result]:
        wide = widened(ops, reranking)
        if reranking is None or wide is ops:
            return await self._arun_batch(ops)
        results = await self._arun_batch(wide)
        searches = [(i, op) for i, op in enumerate(ops) if wide[i] is not op]
        candidates = [cast(list[SearchItem], results[i]) for i, _ in searches]
        answers = await asyncio.gather(
            *(
                reranking.aorder(
                    cast(SearchOp, op).query or "", [self._rerank_text(c.value) for c in items]
                )
                for (_, op), items in zip(searches, candidates, strict=True)
            )
        )
        for (i, op), items, reordered in zip(searches, candidates, answers, strict=True):
            results[i] = page(cast(SearchOp, op), items, reordered)
        return results


def widened(ops: list[Op], reranking: Reranking | None) -> list[Op]:
    """``ops`` with each search that has a query asking for the first ``top_n`` candidates
    (or ``offset + limit``, if more) from the start; ``ops`` itself when none does."""
    if reranking is None:
        return ops
    wide: list[Op] = []
    for op in ops:
        if isinstance(op, SearchOp) and op.query:
            limit = max(reranking.top_n, op.offset + op.limit)
            op = SearchOp(op.namespace_prefix, op.filter, limit, 0, op.query, op.refresh_ttl)
        wide.append(op)
    return wide if any(a is not b for a, b in zip(wide, ops, strict=True)) else ops


def page(op: SearchOp, items: Sequence[SearchItem], reordered: Reordered) -> list[SearchItem]:
    """The page ``op`` asks for of the candidates in the reranker's order, each scored by
    the reranker when it gave a score."""
    chosen = reordered.order[op.offset : op.offset + op.limit]
    out = []
    for i in chosen:
        item = items[i]
        score = reordered.scores.get(i, item.score)
        out.append(
            SearchItem(
                item.namespace,
                item.key,
                item.value,
                item.created_at,
                item.updated_at,
                score,
            )
        )
    return out
