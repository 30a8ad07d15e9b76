"""Facts are found by what they are about: their attribute (``home_city`` by "home" and
"city"), their value and their statement, lexically and by vector, on every backend; facts
stored before this indexing are re-indexed by a migration."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, create_store
from langgraph_checkpoint_agent_memory.memory import CallableExtractor, Fact, FactCandidate, model
from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools
from tests.test_migrations import FIXTURES, ledger, query

U = {"user_id": "alice"}
SAID = "My name is Alice. I live in Berlin and I work at ACME. My home city is Potsdam."


class ConceptEmbeddings(Embeddings):
    """A deterministic embedder that knows a few synonyms: "town" lands where "city" does,
    "workplace" where "employer" does, so a query can match a fact by vector alone, with no
    word in common for lexical search. Other words are hashed to dimensions of their own."""

    SYNONYMS = {"town": "city", "workplace": "employer", "called": "name"}

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims

    def _one(self, text: str) -> list[float]:
        vector = [0.0] * self.dims
        for word in re.findall(r"[a-z]+", text.lower()):
            word = self.SYNONYMS.get(word, word)
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dims] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def learn(memory: AgentMemory[Any]) -> tuple[str, ...]:
    memory.record(U, [{"role": "user", "content": SAID}], key="e1", occurred_at=1000.0)
    assert memory.consolidate().completed == 1
    return memory.namespace(U, "facts")


def keys(hits: list[Any]) -> list[str]:
    return [h.key for h in hits]


@pytest.mark.parametrize("index", ["lexical", "vector"])
def test_a_fact_is_found_by_its_attribute_value_and_statement(
    make_store: Callable[..., AgentMemoryStore], index: str
) -> None:
    vectors = {"dims": 64, "embed": ConceptEmbeddings()}
    store = make_store(**({"index": vectors} if index == "vector" else {}))
    memory = AgentMemory(store)
    facts = learn(memory)
    assert sorted(f.attribute for f in memory.facts(U)) == [
        "city",
        "employer",
        "home_city",
        "name",
    ]
    # by its attribute, split on "_": "city" finds both cities, "home" only the home city
    assert set(keys(store.search(facts, query="city", limit=2))) == {"city", "home_city"}
    assert keys(store.search(facts, query="home", limit=1)) == ["home_city"]
    assert keys(store.search(facts, query="employer", limit=1)) == ["employer"]
    # by its value and by its statement
    assert keys(store.search(facts, query="ACME", limit=1)) == ["employer"]
    assert keys(store.search(facts, query="works", limit=1)) == ["employer"]
    assert keys(store.search(facts, query="Potsdam", limit=1)) == ["home_city"]
    # the item itself is unchanged: the statement is what the context block shows
    [employer] = store.search(facts, query="employer", limit=1)
    assert employer.value["statement"] == "The user works at ACME"


def test_by_vector_alone_a_fact_is_found_by_what_it_is_about(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """Queries that share no word with any fact, so only the vectors can rank: each finds
    the fact whose attribute it means (with only statements embedded, no vector would tell
    the facts apart, and one order cannot put both first)."""
    store = make_store(index={"dims": 64, "embed": ConceptEmbeddings()})
    memory = AgentMemory(store)
    facts = learn(memory)
    assert keys(store.search(facts, query="workplace", limit=1)) == ["employer"]
    assert keys(store.search(facts, query="town", limit=1)) in (["city"], ["home_city"])
    assert keys(store.search(facts, query="called", limit=1)) == ["name"]


def test_history_and_pinned_facts_keep_being_found(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    answers = iter(
        [
            '{"episode": {"summary": "a"}, "facts": [{"attribute": "home_city", "value": '
            '"Berlin", "statement": "Alice lives in Berlin"}]}',
            '{"episode": {"summary": "b"}, "facts": [{"attribute": "home_city", "value": '
            '"Munich", "statement": "Alice lives in Munich"}]}',
        ]
    )
    store = make_store()
    memory = AgentMemory(store, extractor=CallableExtractor(lambda p: next(answers)))
    for i in range(2):
        memory.record(U, [{"role": "user", "content": f"turn {i}"}], key=f"e{i}")
        assert memory.consolidate().completed == 1
    [old] = store.search(memory.namespace(U, "history"), query="city")
    assert old.value["value"] == "Berlin"
    assert memory.pin(U, "home_city") == 1  # pinning rewrites the item: still found
    [now] = store.search(memory.namespace(U, "facts"), query="home")
    assert now.value["value"] == "Munich"


def test_the_indexed_text_of_a_fact() -> None:
    fact = Fact("home_city", "home_city", "Potsdam", "The user lives in Potsdam")
    assert fact.search_text() == "home city: Potsdam\nThe user lives in Potsdam"
    assert fact.text() == "The user lives in Potsdam"
    bare = FactCandidate(attribute="Favorite Color", value="green")
    assert bare.search_text() == "favorite color: green"  # no statement said twice
    near = Fact("k", "home_city", "Berlin", "Berlin.")  # the same words, as search sees them
    assert near.search_text() == "home city: Berlin"
    # a statement that is the value itself (a sentence kept as it was said) counts once
    said = Fact(
        "k", "caroline", "Caroline went to a support group", "Caroline went to a support group "
    )
    assert said.search_text() == "caroline: Caroline went to a support group"


# -- facts stored before: the migration re-indexes them -------------------------------------


def test_a_legacy_database_finds_its_facts_by_attribute_after_upgrading(tmp_path: Path) -> None:
    """The fixture was written before facts were indexed by attribute: its fact's text was
    the statement "The user lives in Munich" alone."""
    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / "legacy_global_v7.sql").read_text())
    conn.close()
    url = f"sqlite:///{path}"
    store = create_store(url)
    try:
        memory = AgentMemory(store)
        facts = memory.namespace(U, "facts")
        [found] = store.search(facts, query="city")
        assert (found.key, found.value["value"]) == ("city", "Munich")
        assert keys(store.search(facts, query="lives Munich")) == ["city"]  # and as before
        assert keys(store.search(("docs",), query="printer")) == ["a"]  # others untouched
    finally:
        store.close()
    assert 3002 in ledger(url)
    [(doc, length)] = query(
        url, "SELECT doc, doc_len FROM am_store_items WHERE prefix = 'memory.user=alice.facts'"
    )
    # memory 5 added the day the fact became true, in words
    assert doc == "city: Munich\nThe user lives in Munich\nNovember 30 30th 2026-11-30"
    assert length == 11


def test_the_migration_reindexes_facts_and_history_on_every_database(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Facts written the old way (indexed by statement alone) on SQLite and PostgreSQL are
    found by attribute once the memory migration 2 runs; an item that only looks like a fact
    namespace keeps its own text, and a second setup changes nothing."""
    answers = iter(
        [
            '{"episode": {"summary": "a"}, "facts": [{"attribute": "home_city", "value": '
            '"Berlin", "statement": "Alice lives in Berlin"}, {"attribute": "employer", '
            '"value": "ACME", "statement": "Alice works at ACME"}]}',
            '{"episode": {"summary": "b"}, "facts": [{"attribute": "home_city", "value": '
            '"Munich", "statement": "Alice lives in Munich"}]}',
        ]
    )
    store = create_store(database_url)
    memory = AgentMemory(store, extractor=CallableExtractor(lambda p: next(answers)))
    with monkeypatch.context() as old_code:  # what earlier versions indexed
        old_code.setattr(Fact, "search_text", Fact.text)
        old_code.setattr(model, "dated_text", lambda text, when: text)
        for i in range(2):
            memory.record(U, [{"role": "user", "content": f"turn {i}"}], key=f"e{i}")
            assert memory.consolidate().completed == 1
    store.put(("notes", "facts"), "n1", {"kind": "fact", "text": "a city note"})
    store.put(("notes", "facts"), "n2", {"kind": "note", "attribute": "x", "value": "y"})
    facts, history = memory.namespace(U, "facts"), memory.namespace(U, "history")
    assert store.search(facts, query="employer") == []  # the defect, as stored
    store.close()
    notes = "SELECT key, doc FROM am_store_items WHERE prefix = 'notes.facts' ORDER BY key"
    written = query(database_url, notes)
    query_rows = "SELECT COUNT(*) FROM am_migrations WHERE version = 3002"
    _forget_migration(database_url, 3002)
    assert query(database_url, query_rows) == [(0,)]

    store = create_store(database_url)
    try:
        memory = AgentMemory(store)
        memory.setup()
        assert query(database_url, query_rows) == [(1,)]
        assert keys(store.search(facts, query="employer")) == ["employer"]
        assert keys(store.search(facts, query="home city")) == ["home_city"]
        [old] = store.search(history, query="home")
        assert old.value["value"] == "Berlin"
        assert query(database_url, notes) == written  # not facts: left alone
        docs = "SELECT prefix, key, doc, updated_at FROM am_store_items ORDER BY 1, 2"
        before = query(database_url, docs)
        memory.setup()  # applied once: nothing to do again
        assert query(database_url, docs) == before
    finally:
        store.close()


def test_a_fact_indexed_with_its_value_twice_is_indexed_once_after_upgrading(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory migration 2 indexed a fact whose statement repeats its value with the sentence
    twice; migration 3 re-indexes it once, its term counts too, on SQLite and PostgreSQL."""
    sentence = "Caroline went to a support group"
    store = create_store(database_url)
    memory = AgentMemory(store)
    with monkeypatch.context() as old_code:  # what memory migration 2's text did
        old_code.setattr(model, "dated_text", lambda text, when: text)
        old_code.setattr(
            Fact,
            "search_text",
            lambda f: f"{f.attribute.replace('_', ' ')}: {f.value}\n{f.statement}",
        )
        MemoryTools(memory).remember(
            "caroline", sentence, sentence, multi=True, config={"configurable": U}
        )
    store.close()
    docs = "SELECT doc, doc_len FROM am_store_items WHERE prefix LIKE '%.facts'"
    [(doubled, length)] = query(database_url, docs)
    assert doubled == f"caroline: {sentence}\n{sentence}" and length == 9
    _forget_migration(database_url, 3003)

    store = create_store(database_url)
    try:
        AgentMemory(store).setup()
        assert query(database_url, docs) == [(f"caroline: {sentence}", 5)]
        terms = "SELECT SUM(tf) FROM am_store_terms WHERE prefix LIKE '%.facts'"
        assert query(database_url, terms) == [(5,)]
        assert 3003 in ledger(database_url)
    finally:
        store.close()


def _forget_migration(url: str, version: int) -> None:
    """Take a migration out of the ledger, as on a database from before it."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        conn.execute("DELETE FROM am_migrations WHERE version = ?", (version,))
        conn.commit()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(url) as pg:
            pg.execute("DELETE FROM am_migrations WHERE version = %s", (version,))
