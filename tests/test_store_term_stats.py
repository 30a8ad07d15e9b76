"""The document frequencies lexical search caches for common terms, on memory, SQLite and
PostgreSQL: a ranking from cached counts is the ranking from counts read with the query
(Hypothesis over random corpora and queries), and a count is read again once its namespace
has been written a tenth of it."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from tests.helpers import FakeClock, Recorder

#: Few words, so that most of them are in many items of a corpus (the common terms cached).
WORDS = ["munich", "tea", "printer", "refund", "warranty", "berlin", "coffee", "hotel"]
#: The term counts' statement (its GROUP BY), as sent.
TERM_COUNTS = "GROUP BY am_store_terms.term"

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    corpus=st.lists(texts, min_size=1, max_size=30),
    queries=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1),
    k=st.integers(1, 12),
)
def test_cached_counts_rank_as_counted_ones(
    make_store: Callable[..., AgentMemoryStore],
    corpus: list[str],
    queries: list[list[str]],
    k: int,
) -> None:
    """Two stores of the same items, one caching every term's count (``common_df`` 1), one
    counting with every query: the same items with the same scores, the second query and
    after answered from the cache."""
    cached, counted = _pair(make_store)
    ns = ("t", f"c{next(_namespaces)}")
    for store in (cached, counted):  # one database, or two memory stores alike
        for i, text in enumerate(corpus):
            store.put(ns, f"k{i}", {"text": text})
    for words in queries * 2:  # the second time from the cache
        query = " ".join(words)
        got = [(i.key, i.score) for i in cached.search(ns, query=query, limit=k)]
        want = [(i.key, i.score) for i in counted.search(ns, query=query, limit=k)]
        assert got == want


_namespaces = itertools.count()
_opened: dict[int, tuple[AgentMemoryStore, AgentMemoryStore]] = {}


def _pair(make_store: Callable[..., AgentMemoryStore]) -> tuple[AgentMemoryStore, AgentMemoryStore]:
    """The two stores of one test's database, opened once per test (per ``make_store``)."""
    pair = _opened.get(id(make_store))
    if pair is None:
        cached, counted = make_store(), make_store()
        cached.ranker.common_df = 1
        counted.ranker.common_df = None
        pair = _opened[id(make_store)] = (cached, counted)
    return pair


def test_a_count_is_read_again_after_a_tenth_of_it_is_written(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    store.ranker.common_df = 10
    store.ranker.feedback = None  # the query's own terms counted (feedback counts its own)
    ns = ("u", "alice")
    for i in range(10):
        store.put(ns, f"m{i}", {"text": f"munich trip {i}"})
    sent = Recorder(store)
    store.search(ns, query="munich")
    store.search(ns, query="munich")
    assert sent.count(TERM_COUNTS) == 1  # ten items: cached
    store.put(ns, "m10", {"text": "munich again"})
    store.search(ns, query="munich")
    assert sent.count(TERM_COUNTS) == 1  # one write of ten: still fresh
    store.put(ns, "m11", {"text": "munich again"})
    store.search(ns, query="munich trip")  # two writes: munich counted again, with trip
    assert sent.count(TERM_COUNTS) == 2
    clock.advance(store.ranker.stats_seconds + 1)
    store.search(ns, query="munich")
    assert sent.count(TERM_COUNTS) == 3  # and after stats_seconds


def test_rare_terms_are_counted_with_every_query(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store()
    store.ranker.feedback = None  # the query's own terms counted (feedback counts its own)
    ns = ("u", "bob")
    store.put(ns, "a", {"text": "zanzibar"})
    sent = Recorder(store)
    for _ in range(3):
        assert [i.key for i in store.search(ns, query="zanzibar")] == ["a"]
    assert sent.count(TERM_COUNTS) == 3
    assert not store.ranker.term_stats


@pytest.fixture(autouse=True)
def _forget_pairs() -> None:
    _opened.clear()
