"""Reranking: a second, slower opinion on the first candidates of a search (see the user
guide's "Reranking"). A reranker never drops: a failure or a timeout keeps the fused order
(with a warning); candidates it leaves out, or past ``top_n``, follow in their fused order."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import numbers
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langgraph_checkpoint_agent_memory.errors import ConfigurationError, error_type

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: A reranking function: the query and the candidates' texts to one score per text.
RerankFunction = Callable[[str, Sequence[str]], Sequence[float] | Awaitable[Sequence[float]]]
#: The metadata key that carries a candidate's position through a document compressor.
INDEX_KEY = "agent_memory_index"


@dataclass(frozen=True)
class Reordered:
    """A reranker's answer: ``order``, every candidate's index, best first (those it did not
    see or return follow in fused order); ``scores`` of those it scored, by index; ``error``,
    the qualified type of what made it keep the fused order, else ``None``."""

    order: list[int]
    scores: dict[int, float] = field(default_factory=dict)
    error: str | None = None

    def apply(self, items: Sequence[T]) -> list[T]:
        """``items`` (the candidates, in fused order) in the new order.

        Example:
            >>> Reordered([2, 0, 1]).apply(["a", "b", "c"])
            ['c', 'a', 'b']
        """
        return [items[i] for i in self.order]


@dataclass(frozen=True)
class Reranking:
    """A reranker with its limits: what ``store.search``, ``recall`` and ``build_context``
    accept (a bare reranker is wrapped with the defaults).

    Args:
        reranker: A callable ``(query, texts) -> scores`` (sync or ``async``), or a LangChain
            ``BaseDocumentCompressor``.
        top_n: How many of the first candidates it sees.
        timeout: Seconds it may take; then the fused order is kept (a synchronous reranker
            still running finishes in its worker thread, its answer unused). ``None``: no
            limit, and a synchronous call runs in the caller's thread.

    Example:
        >>> def by_length(query, texts):
        ...     return [-len(t) for t in texts]
        >>> Reranking(by_length, top_n=3).order("q", ["ccc", "a", "bb", "dddd"]).order
        [1, 2, 0, 3]
    """

    reranker: Any
    top_n: int = 20
    timeout: float | None = 10.0

    def __post_init__(self) -> None:
        r = self.reranker
        if isinstance(r, Reranking) or not (_compresses(r) or callable(r)):
            raise ConfigurationError(
                "reranker must be a callable (query, texts) -> scores or a LangChain "
                f"BaseDocumentCompressor; got {type(r).__name__}"
            )
        if isinstance(self.top_n, bool) or not isinstance(self.top_n, int) or self.top_n < 1:
            raise ConfigurationError(f"top_n must be a positive integer; got {self.top_n!r}")
        t = self.timeout
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0
        ):
            raise ConfigurationError(f"timeout must be positive seconds or None; got {t!r}")

    def order(self, query: str, texts: Sequence[str]) -> Reordered:
        """The candidates (their texts, in fused order) ordered by the reranker: the first
        ``top_n`` reranked, the rest after them; on failure, the fused order.

        Example:
            >>> Reranking(lambda q, texts: [t.count(q) for t in texts]).order(
            ...     "a", ["b", "aa", "a"]
            ... ).order
            [1, 2, 0]
        """
        head = list(texts[: self.top_n])
        if not head:
            return Reordered([])
        try:
            if self.timeout is None:
                answer = self._ask(query, head)
            else:
                context = contextvars.copy_context()  # the caller's span, in the worker
                future = _executor().submit(context.run, self._ask, query, head)
                try:
                    answer = future.result(self.timeout)
                except futures.TimeoutError:
                    future.cancel()  # not started yet (the workers busy): never asked
                    raise
            return self._read(answer, len(head), len(texts))
        except Exception as exc:  # the reranker is a second opinion: the fused order stands
            return _fell_back(exc, len(texts))

    async def aorder(self, query: str, texts: Sequence[str]) -> Reordered:
        """Async :meth:`order`: an ``async`` reranker is awaited, a synchronous one runs in
        a worker thread, so the event loop never waits on it.

        Example:
            ```python
            async def by_words(query, texts):  # e.g. a call to a hosted rerank API
                return [len(set(query.split()) & set(t.split())) for t in texts]

            texts = ["lives in Berlin", "where she lives now", "likes ramen"]
            reordered = await Reranking(by_words).aorder("where she lives", texts)
            assert reordered.order == [1, 0, 2]
            ```
        """
        head = list(texts[: self.top_n])
        if not head:
            return Reordered([])
        try:
            answer = await asyncio.wait_for(self._aask(query, head), self.timeout)
            return self._read(answer, len(head), len(texts))
        except Exception as exc:
            return _fell_back(exc, len(texts))

    def _ask(self, query: str, texts: list[str]) -> Any:
        r = self.reranker
        if _compresses(r):
            return r.compress_documents(_documents(texts), query)
        answer = r(query, texts)  # an async one's answer is awaited in an event loop of its own
        return asyncio.run(_awaited(answer)) if inspect.isawaitable(answer) else answer

    async def _aask(self, query: str, texts: list[str]) -> Any:
        r = self.reranker
        if _compresses(r):
            return await r.acompress_documents(_documents(texts), query)
        if inspect.iscoroutinefunction(r) or inspect.iscoroutinefunction(
            getattr(r, "__call__", None)  # noqa: B004 (an object's async __call__)
        ):
            return await r(query, texts)
        answer = await asyncio.to_thread(r, query, texts)
        return await answer if inspect.isawaitable(answer) else answer

    def _read(self, answer: Any, n: int, total: int) -> Reordered:
        order, scores = (_from_documents if _compresses(self.reranker) else _from_scores)(answer, n)
        placed = set(order)
        return Reordered(order + [i for i in range(total) if i not in placed], scores)


RerankerLike = Reranking | RerankFunction | Any


def reranking_of(reranker: RerankerLike | None) -> Reranking | None:
    """``reranker`` as a :class:`Reranking` (a bare one with the defaults); ``None`` stays.

    Example:
        >>> reranking_of(lambda q, texts: [0.0] * len(texts)).top_n
        20
    """
    if reranker is None or isinstance(reranker, Reranking):
        return reranker
    return Reranking(reranker)


def _from_scores(answer: Any, n: int) -> tuple[list[int], dict[int, float]]:
    scores = list(answer)
    if len(scores) != n:
        raise ValueError(f"the reranker gave {len(scores)} scores for {n} texts")
    read: list[float] = []
    for s in scores:
        if (number := _score(s)) is None:
            raise ValueError(f"the reranker gave a score that is not a finite number: {s!r}")
        read.append(number)
    order = sorted(range(n), key=lambda i: (-read[i], i))  # ties keep the fused order
    return order, dict(enumerate(read))


def _score(s: Any) -> float | None:
    """A finite real score (NumPy's and torch's scalars too) as a float; else ``None``."""
    if not isinstance(s, numbers.Real) and callable(getattr(s, "item", None)):
        try:
            s = s.item()  # a one-element array or tensor
        except (TypeError, ValueError):
            return None
    if isinstance(s, bool) or not isinstance(s, numbers.Real):
        return None
    number = float(s)
    return number if math.isfinite(number) else None


def _from_documents(answer: Any, n: int) -> tuple[list[int], dict[int, float]]:
    order: list[int] = []
    scores: dict[int, float] = {}
    documents = list(answer)
    for doc in documents:
        metadata = getattr(doc, "metadata", None) or {}
        i = metadata.get(INDEX_KEY)
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n or i in scores:
            continue
        order.append(i)
        score = _score(metadata.get("relevance_score"))
        scores[i] = math.nan if score is None else score  # NaN: placed, not scored
    if documents and not order:
        raise ValueError(f"the reranker's documents lost their {INDEX_KEY!r} metadata")
    return order, {i: s for i, s in scores.items() if not math.isnan(s)}


def _fell_back(exc: Exception, total: int) -> Reordered:
    timed_out = isinstance(exc, TimeoutError | futures.TimeoutError | asyncio.TimeoutError)
    kind = "TimeoutError" if timed_out else error_type(exc)
    # the type only: a reranker's message may quote the candidates (a user's memory)
    logger.warning("the reranker failed (%s); the fused order is kept", kind)
    logger.debug("the reranker's failure", exc_info=exc)
    return Reordered(list(range(total)), {}, kind)


def _compresses(reranker: Any) -> bool:
    return callable(getattr(reranker, "compress_documents", None))


def _documents(texts: list[str]) -> list[Any]:
    from langchain_core.documents import Document

    return [Document(page_content=t, metadata={INDEX_KEY: i}) for i, t in enumerate(texts)]


async def _awaited(answer: Awaitable[T]) -> T:
    return await answer


_lock = threading.Lock()
_pool: list[ThreadPoolExecutor] = []


def _executor() -> ThreadPoolExecutor:
    """The threads of synchronous reranker calls with a timeout (forgotten in a fork)."""
    with _lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(8, thread_name_prefix="agent-memory-rerank"))
        return _pool[0]


def _forget_pool() -> None:
    global _lock
    _lock = threading.Lock()
    _pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
