"""Facts are found by what they are about: their attribute (``home_city`` by "home" and
"city"), their value and their statement, lexically and by vector, on every backend."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore
from langgraph_checkpoint_agent_memory.memory import CallableExtractor, Fact, FactCandidate

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
