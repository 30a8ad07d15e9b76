"""Reranked search: the store's searches with a query, ordered again by a reranker.

A search with a query and a reranker (the store's ``reranker=``, or the one a ``search`` call
gives) reads the first ``top_n`` candidates of the fused ranking (more when ``offset +
limit`` asks for more), lets the reranker order them outside the database transaction, and
returns the page ``offset``/``limit`` asks for from that order. An item's ``score`` is then
the reranker's score, when it gives one; the fused score otherwise. Pages of the same query
stay consistent: each reads the same candidates and the reranker orders them the same way.
Searches without a query (filters, newest first) are never reranked. Only the items
returned have their TTL refreshed, as without a reranker, not every candidate read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.store.base import GetOp, Op, Result, SearchItem, SearchOp

from langgraph_checkpoint_agent_memory.rerank import Reordered, RerankerLike, Reranking
from langgraph_checkpoint_agent_memory.rerank import reranking_of as _reranking_of
from langgraph_checkpoint_agent_memory.store import values as V
from langgraph_checkpoint_agent_memory.store.dated import Staged, stage

#: What ``search(..., reranker=)`` accepts: a reranker, ``False`` for none, ``None`` for the
#: store's.
PerCall = RerankerLike | Literal[False] | None


@dataclass(frozen=True)
class Stages:
    """What a search does beyond the database's ranking: its reranker and what dates its
    items (see :mod:`.dated`)."""

    reranking: Reranking | None = None
    time_field: str | None = None

    @property
    def none(self) -> bool:
        return self.reranking is None and self.time_field is None


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

    def _refreshes(self, refresh_ttl: bool | None) -> bool:
        raise NotImplementedError

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.reranking is None and self.time_field is None:  # the common case, at no cost
            return self._run_batch(list(ops))
        return self._batch_staged(list(ops), Stages(self.reranking, self.time_field))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self.reranking is None and self.time_field is None:
            return await self._arun_batch(list(ops))
        return await self._abatch_staged(list(ops), Stages(self.reranking, self.time_field))

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
        time_field: str | Literal[False] | None = None,
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
            time_field: What dates the items for a query that names a time (see
                :mod:`.dated`); ``False``: nothing, even when the store dates them; default
                the store's ``time_field``.

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
        [found] = self._batch_staged([op], self._per_call(reranker, time_field))
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
        time_field: str | Literal[False] | None = None,
    ) -> list[SearchItem]:
        """Async :meth:`search`."""
        op = SearchOp(namespace_prefix, filter, limit, offset, query, refresh_ttl)  # type: ignore[arg-type]
        [found] = await self._abatch_staged([op], self._per_call(reranker, time_field))
        return found  # type: ignore[return-value]

    def _per_call(self, reranker: PerCall, time_field: str | Literal[False] | None) -> Stages:
        if reranker is False:
            reranking = None
        else:
            reranking = _reranking_of(reranker) if reranker is not None else self.reranking
        if time_field is False:
            dated = None
        else:
            dated = V.checked_time_field(time_field) if time_field is not None else self.time_field
        return Stages(reranking, dated)

    def _staged(self, ops: list[Op], stages: Stages) -> Staged | None:
        """How ``ops`` run (see :func:`~.dated.stage`), their input checked first, as the
        plain path checks it; ``None`` when none of their searches is staged."""
        if stages.none:
            return None
        V.checked_batch(ops)  # bad input refused before any search is widened
        return stage(ops, stages.reranking, stages.time_field, self._clock())

    def _batch_staged(self, ops: list[Op], stages: Stages) -> list[Result]:
        staged = self._staged(ops, stages)
        if staged is None:
            return self._run_batch(ops)
        results = self._run_batch(staged.ops)
        asked = self._asked(staged, results, stages)
        answers = [
            _unranked(items)
            if stages.reranking is None
            else stages.reranking.order(search.query or "", self._texts(items))
            for _, search, items in asked
        ]
        out, refresh = self._paged(staged, results, asked, answers)
        if refresh:
            self._run_batch(refresh)
        return out

    async def _abatch_staged(self, ops: list[Op], stages: Stages) -> list[Result]:
        staged = self._staged(ops, stages)
        if staged is None:
            return await self._arun_batch(ops)
        results = await self._arun_batch(staged.ops)
        asked = self._asked(staged, results, stages)

        async def order(search: SearchOp, items: list[SearchItem]) -> Reordered:
            if stages.reranking is None:
                return _unranked(items)
            return await stages.reranking.aorder(search.query or "", self._texts(items))

        answers = await asyncio.gather(*(order(search, items) for _, search, items in asked))
        out, refresh = self._paged(staged, results, asked, list(answers))
        if refresh:
            await self._arun_batch(refresh)
        return out

    def _asked(
        self, staged: Staged, results: list[Result], stages: Stages
    ) -> list[tuple[int, SearchOp, list[SearchItem]]]:
        """Each staged search, by its position, with its candidates (see :mod:`.dated`)."""
        field = stages.time_field or ""
        return [(i, op, staged.candidates(i, results, field)) for i, op in staged.searches.items()]

    def _texts(self, items: list[SearchItem]) -> list[str]:
        return [self._rerank_text(item.value) for item in items]

    def _paged(
        self,
        staged: Staged,
        results: list[Result],
        asked: list[tuple[int, SearchOp, list[SearchItem]]],
        answers: list[Reordered],
    ) -> tuple[list[Result], list[Op]]:
        """The batch's results (each staged search's the page it asks for of its candidates,
        in the order its answer gives) and the reads that refresh those items' TTL."""
        out = results[: staged.asked]
        for (i, search, items), reordered in zip(asked, answers, strict=True):
            out[i] = page(search, items, reordered)
        return out, self._refresh_ops(staged, out)

    def _refresh_ops(self, staged: Staged, out: list[Result]) -> list[Op]:
        """Reads that refresh the TTL of the items a staged search returned (its candidates
        were read without refreshing theirs)."""
        ops: list[Op] = []
        for i, search in staged.searches.items():
            if self._refreshes(search.refresh_ttl):
                found: list[SearchItem] = out[i]  # type: ignore[assignment]
                ops += [GetOp(tuple(item.namespace), item.key, refresh_ttl=True) for item in found]
        return ops


def _unranked(items: Sequence[SearchItem]) -> Reordered:
    """The candidates' own order (no reranker)."""
    return Reordered(list(range(len(items))))


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
