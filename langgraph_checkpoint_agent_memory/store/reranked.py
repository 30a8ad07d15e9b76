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
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from langgraph.store.base import Op, Result, SearchItem, SearchOp

from langgraph_checkpoint_agent_memory.rerank import Reordered, RerankerLike, Reranking
from langgraph_checkpoint_agent_memory.rerank import reranking_of as _reranking_of
from langgraph_checkpoint_agent_memory.store.dated import stage

#: What ``search(..., reranker=)`` accepts: a reranker, ``False`` for none, ``None`` for the
#: store's.
PerCall = RerankerLike | Literal[False] | None


class Reranks:
    """The part of :class:`~.store.AgentMemoryStore` that reranks searches and puts what a
    query's time names first (:mod:`.dated`): ``batch`` and ``search`` (and their async
    forms) over the store's own batch, ``_run_batch``."""

    #: The reranker of every search with a query (``reranker=`` of the store), if any.
    reranking: Reranking | None = None
    #: What dates an item for questions about time (``time_field=`` of the store), if any.
    time_field: str | None = None
    _clock: Callable[[], float]

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
        staged = stage(ops, reranking, self.time_field, self._clock())
        if staged is None:
            return self._run_batch(ops)
        results = self._run_batch(staged.ops)
        out = results[: len(ops)]
        for i, search in staged.searches.items():
            items = staged.candidates(i, results, self.time_field or "")
            if reranking is None:
                reordered = Reordered(list(range(len(items))))
            else:
                texts = [self._rerank_text(item.value) for item in items]
                reordered = reranking.order(search.query or "", texts)
            out[i] = page(search, items, reordered)
        return out

    async def _abatch_reranked(self, ops: list[Op], reranking: Reranking | None) -> list[Result]:
        staged = stage(ops, reranking, self.time_field, self._clock())
        if staged is None:
            return await self._arun_batch(ops)
        results = await self._arun_batch(staged.ops)
        out = results[: len(ops)]
        searches = list(staged.searches.items())
        candidates = [staged.candidates(i, results, self.time_field or "") for i, _ in searches]

        async def order(search: SearchOp, items: list[SearchItem]) -> Reordered:
            if reranking is None:
                return Reordered(list(range(len(items))))
            texts = [self._rerank_text(item.value) for item in items]
            return await reranking.aorder(search.query or "", texts)

        answers = await asyncio.gather(
            *(order(op, items) for (_, op), items in zip(searches, candidates, strict=True))
        )
        for (i, op), items, reordered in zip(searches, candidates, answers, strict=True):
            out[i] = page(op, items, reordered)
        return out


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
