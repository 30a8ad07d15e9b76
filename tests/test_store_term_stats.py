"""The corpus statistics lexical search caches, and the document frequencies it never
caches, on memory, SQLite and PostgreSQL: a ranking from cached statistics is the ranking
from statistics read with the query (Hypothesis over random corpora and queries); the
statistics are read again once their namespace has been written a tenth of them; and each
query reads its terms' lists, whence their document frequencies, in one statement."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from langgraph_checkpoint_agent_memory.store import search as S
from langgraph_checkpoint_agent_memory.store.index import form_of
from tests.helpers import FakeClock, Recorder

Ranked = list[tuple[tuple[str, str], float]]

#: Few words, so that most of them are in many items of a corpus.
WORDS = ["munich", "tea", "printer", "refund", "warranty", "berlin", "coffee", "hotel"]
#: The corpus statistics' statement (items and their total length), as sent.
TEXT_STATS = "sum(am_store_items.doc_len)"
#: The statement reading a query's lists: chunks, unlisted items and retractions at once.
LISTS = " AS kind, "

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
def test_cached_statistics_rank_as_read_ones(
    make_store: Callable[..., AgentMemoryStore],
    corpus: list[str],
    queries: list[list[str]],
    k: int,
) -> None:
    """Two stores of the same items, one caching the corpus statistics, one reading them
    with every query (``stats_seconds`` 0): the same items with the same scores, the second
    query and after answered from the cache."""
    cached, counted = _pair(make_store)
    ns = ("t", f"c{next(_namespaces)}")
    for store in (cached, counted):  # one database, or two memory stores alike
        for i, text in enumerate(corpus):
            store.put(ns, f"k{i}", {"text": text})
    sent = Recorder(cached)
    for words in queries * 2:  # the second time from the cache
        query = " ".join(words)
        got = [(i.key, i.score) for i in cached.search(ns, query=query, limit=k)]
        want = [(i.key, i.score) for i in counted.search(ns, query=query, limit=k)]
        assert got == want
    assert sent.count(TEXT_STATS) <= 1


_namespaces = itertools.count()
_opened: dict[int, tuple[AgentMemoryStore, AgentMemoryStore]] = {}


def _pair(make_store: Callable[..., AgentMemoryStore]) -> tuple[AgentMemoryStore, AgentMemoryStore]:
    """The two stores of one test's database, opened once per test (per ``make_store``)."""
    pair = _opened.get(id(make_store))
    if pair is None:
        cached, counted = make_store(), make_store()
        counted.ranker.stats_seconds = 0.0
        pair = _opened[id(make_store)] = (cached, counted)
    return pair


def test_statistics_are_read_again_after_a_tenth_of_them_is_written(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    store.ranker.feedback = None  # the query's own statistics read (feedback reads them too)
    ns = ("u", "alice")
    for i in range(10):
        store.put(ns, f"m{i}", {"text": f"munich trip {i}"})
    sent = Recorder(store)
    store.search(ns, query="munich")
    store.search(ns, query="munich")
    assert sent.count(TEXT_STATS) == 1  # ten items: cached
    store.put(ns, "m10", {"text": "munich again"})
    store.search(ns, query="munich")
    assert sent.count(TEXT_STATS) == 1  # one write of ten: still fresh
    store.put(ns, "m11", {"text": "munich again"})
    store.search(ns, query="munich trip")  # two writes: read again
    assert sent.count(TEXT_STATS) == 2
    clock.advance(store.ranker.stats_seconds + 1)
    store.search(ns, query="munich")
    assert sent.count(TEXT_STATS) == 3  # and after stats_seconds


def test_each_query_reads_its_lists_in_one_statement_and_sees_every_write(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """Document frequencies come from the lists each query reads (one statement, whatever
    its words): an item written between two queries counts in the second at once, while
    the corpus statistics are still cached."""
    store = make_store()
    store.ranker.feedback = None  # one read of the lists (feedback reads them again)
    ns = ("u", "bob")
    for i in range(20):
        store.put(ns, f"f{i}", {"text": f"filler {i}"})
    store.put(ns, "a", {"text": "zanzibar"})
    sent = Recorder(store)
    assert [i.key for i in store.search(ns, query="zanzibar travel notes")] == ["a"]
    assert sent.count(LISTS) == 1
    [(_, alone)] = bm25(store, ns, "zanzibar")
    store.put(ns, "b", {"text": "zanzibar"})
    assert sorted(i.key for i in store.search(ns, query="zanzibar")) == ["a", "b"]
    assert sent.count(LISTS) == 3 and sent.count(TEXT_STATS) == 1
    # zanzibar in two items of 22 now: rarer no more, each match weighs less
    found = bm25(store, ns, "zanzibar")
    assert [k for k, _ in found] == [(".".join(ns), "a"), (".".join(ns), "b")]
    assert found[0][1] == found[1][1] < alone


def bm25(store: AgentMemoryStore, ns: tuple[str, ...], query: str) -> Ranked:
    """The store's BM25 list for ``query`` under ``ns`` (its scores, not the fused ones;
    with encryption, a term's forms are its keyed hashes)."""
    terms = S.terms(query)
    base = {**store.statements.prefix_params(ns), "now": time.time()}
    forms = [[t] for t in terms]
    if store.sealer is not None:
        plan = store.sealer.term_forms_plan(store.statements, terms, [base["shard"]])
        forms = store.db.run(plan)
    groups = [[form_of(f) for f in group] for group in forms]
    how = ((), base, 10, False, False)
    scored, _ = store.db.run(store.ranker._bm25_plan(groups, [1.0] * len(groups), how))
    return scored


@pytest.fixture(autouse=True)
def _forget_pairs() -> None:
    _opened.clear()
