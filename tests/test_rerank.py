"""Rerankers: callables and LangChain document compressors, sync and async, their limits
(``top_n``, ``timeout``) and the fallback to the fused order on whatever goes wrong."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from langgraph_checkpoint_agent_memory import ConfigurationError, Reranking
from langgraph_checkpoint_agent_memory.rerank import INDEX_KEY, Reordered, reranking_of

TEXTS = ["the cat sat", "a dog barked at the cat", "rain all day", "the cat and the dog"]


def overlap(query: str, texts: Sequence[str]) -> list[float]:
    """Words shared with the query: a deterministic relevance."""
    words = set(query.split())
    return [float(len(words & set(t.split()))) for t in texts]


class OverlapCompressor(BaseDocumentCompressor):
    """A compressor as LangChain's rerankers are: the best ``top_n`` documents, scored in
    ``relevance_score`` when ``scores`` is on."""

    top_n: int = 2
    scores: bool = True

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        scored = overlap(query, [d.page_content for d in documents])
        best = sorted(range(len(documents)), key=lambda i: -scored[i])[: self.top_n]
        out = []
        for i in best:
            extra = {"relevance_score": scored[i] / 10} if self.scores else {}
            out.append(
                Document(documents[i].page_content, metadata={**documents[i].metadata, **extra})
            )
        return out


class ForgetfulCompressor(BaseDocumentCompressor):
    """A compressor that loses its documents' metadata: nothing can be mapped back."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return [Document(d.page_content) for d in reversed(documents)]


def test_a_callable_orders_the_candidates_by_its_scores() -> None:
    reordered = Reranking(overlap).order("the dog", TEXTS)
    # "the cat and the dog" and "a dog barked at the cat" share two words; ties keep the
    # fused order; "rain all day" shares none
    assert reordered.order == [1, 3, 0, 2]
    assert reordered.scores == {0: 1.0, 1: 2.0, 2: 0.0, 3: 2.0}
    assert reordered.error is None
    assert reordered.apply(TEXTS)[0] == "a dog barked at the cat"


def test_only_the_first_top_n_are_reranked_and_the_rest_keep_their_places() -> None:
    seen: list[list[str]] = []

    def record(query: str, texts: Sequence[str]) -> list[float]:
        seen.append(list(texts))
        return [float(i) for i in range(len(texts))]  # the reverse of the fused order

    reordered = Reranking(record, top_n=2).order("q", TEXTS)
    assert seen == [TEXTS[:2]]
    assert reordered.order == [1, 0, 2, 3]
    assert set(reordered.scores) == {0, 1}


def test_nothing_to_rerank_asks_nothing() -> None:
    def refuse(query: str, texts: Sequence[str]) -> list[float]:
        raise AssertionError("called")

    assert Reranking(refuse).order("q", []).order == []


def test_a_compressor_places_what_it_returns_first_and_keeps_the_rest() -> None:
    reordered = Reranking(OverlapCompressor(top_n=2)).order("the dog", TEXTS)
    assert reordered.order == [1, 3, 0, 2]  # its two, then the others in fused order
    assert reordered.scores == {1: 0.2, 3: 0.2}
    unscored = Reranking(OverlapCompressor(top_n=2, scores=False)).order("the dog", TEXTS)
    assert unscored.order == [1, 3, 0, 2] and unscored.scores == {}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ([1.0, 2.0], "gave 2 scores for 4 texts"),
        ([1.0, math.nan, 0.0, 0.0], "not a finite number"),
        ([1.0, math.inf, 0.0, 0.0], "not a finite number"),
        ([True, False, True, False], "not a finite number"),
        (["1", "2", "3", "4"], "not a finite number"),
        (None, "NoneType"),
    ],
)
def test_an_answer_that_cannot_be_read_keeps_the_fused_order(
    answer: Any, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, "langgraph_checkpoint_agent_memory.rerank"):
        reordered = Reranking(lambda q, t: answer).order("q", TEXTS)
    assert reordered == Reordered([0, 1, 2, 3], {}, reordered.error)
    assert reordered.error in {"ValueError", "TypeError"}
    assert "the fused order is kept" in caplog.text
    assert why in caplog.text  # the details, at debug level


def test_a_failing_reranker_keeps_the_fused_order(caplog: pytest.LogCaptureFixture) -> None:
    class RerankServiceDown(Exception):
        pass

    def down(query: str, texts: Sequence[str]) -> list[float]:
        raise RerankServiceDown(f"503 while ranking {texts[0]!r}")

    with caplog.at_level(logging.WARNING, "langgraph_checkpoint_agent_memory.rerank"):
        reordered = Reranking(down).order("q", TEXTS)
    assert reordered.order == [0, 1, 2, 3]
    assert reordered.error is not None and reordered.error.endswith("RerankServiceDown")
    assert "RerankServiceDown" in caplog.text
    assert "the cat sat" not in caplog.text  # a warning names the type, not what it quoted


def test_numpy_scores_are_numbers() -> None:
    import numpy as np

    def predict(query: str, texts: Sequence[str]) -> Any:  # a cross-encoder's answer
        return np.asarray(overlap(query, texts), dtype=np.float32)

    reordered = Reranking(predict).order("the dog", TEXTS)
    assert reordered.order == [1, 3, 0, 2] and reordered.error is None
    assert all(type(v) is float for v in reordered.scores.values())
    column = Reranking(lambda q, t: np.asarray(overlap(q, t)).reshape(-1, 1)).order(
        "the dog", TEXTS
    )
    assert column.order == [1, 3, 0, 2]  # one score per row
    assert Reranking(lambda q, t: [np.nan] * len(t)).order("q", TEXTS).error == "ValueError"

    class NumpyScores(OverlapCompressor):
        def compress_documents(
            self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
        ) -> Sequence[Document]:
            out = super().compress_documents(documents, query, callbacks)
            for d in out:
                d.metadata["relevance_score"] = np.float32(d.metadata["relevance_score"])
            return out

    assert Reranking(NumpyScores()).order("the dog", TEXTS).scores == {
        1: pytest.approx(0.2),
        3: pytest.approx(0.2),
    }


def test_a_compressor_that_loses_the_metadata_keeps_the_fused_order() -> None:
    reordered = Reranking(ForgetfulCompressor()).order("q", TEXTS)
    assert reordered.order == [0, 1, 2, 3] and reordered.error == "ValueError"


def test_a_slow_reranker_times_out_to_the_fused_order() -> None:
    release = threading.Event()
    finished = threading.Event()

    def stuck(query: str, texts: Sequence[str]) -> list[float]:
        release.wait()  # returns only once the caller has given up on it
        finished.set()
        return [1.0] * len(texts)

    reordered = Reranking(stuck, timeout=0.05).order("q", TEXTS)
    assert reordered.order == [0, 1, 2, 3] and reordered.error == "TimeoutError"
    release.set()
    assert finished.wait(10)


def test_without_a_timeout_it_runs_in_the_callers_thread() -> None:
    threads: list[threading.Thread] = []

    def where(query: str, texts: Sequence[str]) -> list[float]:
        threads.append(threading.current_thread())
        return [0.0] * len(texts)

    Reranking(where, timeout=None).order("q", TEXTS)
    Reranking(where).order("q", TEXTS)
    assert threads[0] is threading.current_thread()
    assert threads[1] is not threading.current_thread()


def test_an_async_reranker_serves_synchronous_code() -> None:
    async def aoverlap(query: str, texts: Sequence[str]) -> list[float]:
        await asyncio.sleep(0)
        return overlap(query, texts)

    assert Reranking(aoverlap).order("the dog", TEXTS).order == [1, 3, 0, 2]


async def test_async_order_awaits_an_async_reranker_and_threads_a_sync_one() -> None:
    loop_thread = threading.current_thread()
    threads: list[threading.Thread] = []

    async def aoverlap(query: str, texts: Sequence[str]) -> list[float]:
        threads.append(threading.current_thread())
        return overlap(query, texts)

    def soverlap(query: str, texts: Sequence[str]) -> list[float]:
        threads.append(threading.current_thread())
        return overlap(query, texts)

    assert (await Reranking(aoverlap).aorder("the dog", TEXTS)).order == [1, 3, 0, 2]
    assert (await Reranking(soverlap).aorder("the dog", TEXTS)).order == [1, 3, 0, 2]
    assert threads[0] is loop_thread and threads[1] is not loop_thread
    compressed = await Reranking(OverlapCompressor()).aorder("the dog", TEXTS)
    assert compressed.order == [1, 3, 0, 2]


async def test_async_order_falls_back_on_a_timeout_and_on_an_error() -> None:
    async def never(query: str, texts: Sequence[str]) -> list[float]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def broken(query: str, texts: Sequence[str]) -> list[float]:
        raise KeyError("model")

    timed_out = await Reranking(never, timeout=0.05).aorder("q", TEXTS)
    assert timed_out.order == [0, 1, 2, 3] and timed_out.error == "TimeoutError"
    failed = await Reranking(broken).aorder("q", TEXTS)
    assert failed.order == [0, 1, 2, 3] and failed.error == "KeyError"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reranker": "cohere"},
        {"reranker": 3},
        {"reranker": Reranking(overlap)},
        {"reranker": overlap, "top_n": 0},
        {"reranker": overlap, "top_n": True},
        {"reranker": overlap, "top_n": 2.5},
        {"reranker": overlap, "timeout": 0},
        {"reranker": overlap, "timeout": -1},
        {"reranker": overlap, "timeout": math.nan},
        {"reranker": overlap, "timeout": True},
        {"reranker": overlap, "timeout": "5"},
    ],
)
def test_bad_settings_are_refused_with_a_clear_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=r"reranker|top_n|timeout"):
        Reranking(**kwargs)


def test_a_bare_reranker_gets_the_defaults() -> None:
    assert reranking_of(None) is None
    wrapped = reranking_of(overlap)
    assert wrapped is not None and (wrapped.top_n, wrapped.timeout) == (20, 10.0)
    given_one = Reranking(overlap, top_n=3)
    assert reranking_of(given_one) is given_one


@given(
    scores=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=30),
    top_n=st.integers(1, 40),
)
def test_the_order_is_a_permutation_best_first_within_top_n(
    scores: list[float], top_n: int
) -> None:
    texts = [f"t{i}" for i in range(len(scores))]
    n = min(top_n, len(texts))
    reordered = Reranking(lambda q, t: scores[: len(t)], top_n=top_n, timeout=None).order(
        "q", texts
    )
    assert sorted(reordered.order) == list(range(len(texts)))
    head = reordered.order[:n]
    assert [scores[i] for i in head] == sorted(scores[:n], reverse=True)
    assert reordered.order[n:] == list(range(n, len(texts)))


def test_the_index_key_is_what_the_documents_carry() -> None:
    got: list[dict[str, Any]] = []

    class Peek(BaseDocumentCompressor):
        def compress_documents(
            self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
        ) -> Sequence[Document]:
            got.extend(d.metadata for d in documents)
            return list(documents)

    Reranking(Peek()).order("q", TEXTS[:2])
    assert got == [{INDEX_KEY: 0}, {INDEX_KEY: 1}]
