"""The store's own lexical index, on memory, SQLite and PostgreSQL: BM25 over stemmed terms
without stopwords, postings that follow their item through updates, deletes, expiry and
concurrent writers, statistics that stay inside a namespace, and the migration that indexes
items written before the index existed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from langgraph_checkpoint_agent_memory import text as T
from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.term_index import term_id, unlisted_terms
from langgraph_checkpoint_agent_memory.store import search as S
from tests.helpers import INDEXED_ITEMS, FakeClock, Recorder, present


def keys(items: Any) -> list[str]:
    return [i.key for i in items]


def test_analysis_stems_and_drops_stopwords() -> None:
    assert T.tokens("The user MOVED to Munich, and is moving again!") == [
        "user",
        "move",
        "munich",
        "move",
    ]
    counts, length = T.postings("cats and a cat")
    assert counts == {"cat": 2} and length == 2
    assert S.terms("what is the what") == []
    assert len(S.terms(" ".join(f"w{i}" for i in range(50)))) == 32
    assert S.idf(10, 20) >= 0  # statistics that lag the counts never go negative


def test_analysis_is_safe_from_many_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stemmer keeps state while it works: threads stemming at once must not mix words
    (a shared one raises IndexError or returns another thread's stem). The pure-Python
    stemmer, what runs without PyStemmer, is the one a thread switch can interrupt
    mid-word, so the test uses it, with thread switches as frequent as they go."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from snowballstemmer.english_stemmer import EnglishStemmer

    monkeypatch.setattr(T, "_new_stemmer", EnglishStemmer)
    monkeypatch.setattr(T, "_STEMMERS", threading.local())
    texts = [f"walking{i} jumped{i} consolidation{i} generously{i}" for i in range(500)]
    T._stem.cache_clear()
    expected = [T.tokens(t) for t in texts]
    T._stem.cache_clear()  # every thread stems for real instead of reading the cache
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(8) as pool:
            found = list(pool.map(T.tokens, texts))
    finally:
        sys.setswitchinterval(switch)
        T._stem.cache_clear()
    assert found == expected


def test_ranking_is_bm25_within_the_namespace(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    store.put(("u", "alice"), "a", {"text": "moving to munich in may"})
    store.put(("u", "alice"), "b", {"text": "munich munich munich weather report for munich"})
    store.put(("u", "alice"), "c", {"text": "tea in the morning"})
    found = store.search(("u", "alice"), query="When did she move to Munich?")
    assert keys(found) == ["a", "b"]  # two query terms beat one repeated term
    assert present(found[0].score) > present(found[1].score) > 0
    before = [i.score for i in found]
    # another user's items change neither the matches nor the scores (df and N are counted
    # under the namespace searched)
    for i in range(30):
        store.put(("u", "bob"), f"m{i}", {"text": "munich munich"})
    assert [i.score for i in store.search(("u", "alice"), query="move munich")] == before
    assert keys(store.search(("u",), query="tea")) == ["c"]


def test_corpus_statistics_are_cached_when_no_term_matches() -> None:
    """A query none of whose words the namespace holds (a vector search's text, often) reads
    the corpus statistics once, not on every call."""
    from langgraph_checkpoint_agent_memory import create_store

    store = create_store()
    store.put(("m",), "a", {"text": "moving to munich"})
    sent = Recorder(store)
    for _ in range(3):
        assert store.search(("m",), query="zanzibar") == []
    assert sent.count("sum(am_store_items.doc_len)") == 1


def test_postings_follow_their_item(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store()
    store.put(("p",), "x", {"text": "quantum chromodynamics"})
    assert keys(store.search(("p",), query="quantum")) == ["x"]
    store.put(("p",), "x", {"text": "baking sourdough bread"})
    assert store.search(("p",), query="quantum") == []
    assert keys(store.search(("p",), query="sourdough")) == ["x"]
    store.put(("p",), "x", {"text": "baking sourdough bread"}, index=False)
    assert store.search(("p",), query="sourdough") == []
    store.put(("p",), "y", {"text": "sourdough starter"})
    store.delete(("p",), "y")
    assert store.search(("p",), query="sourdough") == []
    store.put(("p",), "z", {"text": "the and of"})  # nothing but stopwords: no terms
    assert keys(store.search(("p",), query="the")) == ["z", "x"]  # no terms: newest first


def test_the_indexed_text_is_not_kept_with_the_item(
    make_store: Callable[..., AgentMemoryStore], store_backend: str
) -> None:
    """The item's row keeps its value and its terms (``db.term_index``), not the text
    indexed from it a second time, and a put writes no row of the term lists: its terms
    ride in its own row until a merge lists them (its length stays, for BM25)."""
    if store_backend == "memory":
        pytest.skip("no rows: the memory store indexes in the process")
    store = make_store()
    store.setup()
    sent = Recorder(store)
    store.put(("p",), "x", {"text": "quantum chromodynamics"})
    store.put(("p",), "y", {"text": "quantum"}, index=False)
    assert not sent.took("am_store_chunks")

    def rows() -> Any:
        sql = Sql(f"SELECT key, doc_len, terms, merged FROM {INDEXED_ITEMS} ORDER BY key")
        chunks = Sql("SELECT count(*) FROM am_store_chunks")
        found, [(listed,)] = yield Batch([Stmt(sql, fetch=True), Stmt(chunks, fetch=True)])
        return [tuple(r) for r in found], listed

    (x, y), listed = store.db.run(rows())
    assert listed == 0
    assert y == ("y", None, None, None)  # not indexed
    assert (x[0], x[1], x[3]) == ("x", 2, 0)  # two terms, not yet listed
    ids, tf = unlisted_terms(bytes(x[2]))
    if not store.encrypted:  # encryption names a term by its keyed hash
        assert sorted(ids.tolist()) == sorted(term_id(t) for t in ("quantum", "chromodynam"))
    assert tf.tolist() == [1, 1]
    assert keys(store.search(("p",), query="quantum chromodynamics")) == ["x"]


def test_expired_items_never_crowd_out_live_ones(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock, candidates=4)
    for i in range(12):  # the best matches expire
        store.put(("e",), f"hot{i}", {"text": "invoice invoice invoice"}, ttl=1.0)
    store.put(("e",), "cold", {"text": "an invoice among many other words here"}, ttl=None)
    clock.advance(120)
    assert keys(store.search(("e",), query="invoice", limit=1)) == ["cold"]
    assert keys(store.search(("e",), query="invoice", filter={"text": {"$ne": "x"}})) == ["cold"]


def test_concurrent_puts_of_one_key_leave_only_the_last_text(
    make_store: Callable[..., AgentMemoryStore], store_backend: str
) -> None:
    if store_backend == "memory":
        pytest.skip("a memory store is one process's: the threads share one connection")
    store = make_store()
    store.put(("c",), "k", {"text": "seed"})
    words = ["alpha", "bravo", "charlie", "delta"]
    errors: list[BaseException] = []

    def writer(word: str) -> None:
        other = make_store()
        try:
            for i in range(25):
                other.put(("c",), "k", {"text": f"{word} {word}{i}"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in words]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = present(store.get(("c",), "k")).value["text"]
    [last] = [w for w in words if text.startswith(w)]
    assert keys(store.search(("c",), query=last)) == ["k"]
    for word in words:
        if word != last:
            assert store.search(("c",), query=word) == [], word
    assert store.search(("c",), query="seed") == []
