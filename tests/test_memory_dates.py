"""A fact's date (the day it became true) and an episode's (the day it happened) are in
their lexical text, as words a question says, and not in the text their vectors are
embedded from."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    AgentMemoryStore,
)
from langgraph_checkpoint_agent_memory.memory import (
    CallableExtractor,
    Episode,
    Fact,
    MemoryTools,
    lexical_text,
)
from tests.test_memory_fact_search import ConceptEmbeddings

U = {"user_id": "alice"}
NOV_20 = 1668945600.0  # 2022-11-20 12:00 UTC
MAY_7 = 1683460800.0  # 2023-05-07 12:00 UTC
DATE_WORDS = ("2022", "2023", "November", "May", "7th", "20th")
ANSWERS = [
    '{"episode": {"summary": "Alice talked about her work"}, "facts": ['
    '{"attribute": "employer", "value": "ACME", "statement": "Alice works at ACME"}, '
    '{"attribute": "home_city", "value": "Berlin", "statement": "Alice lives in Berlin"}]}',
    '{"episode": {"summary": "Alice got a cat"}, "facts": ['
    '{"attribute": "pet", "value": "cat", "statement": "Alice has a cat"}, '
    '{"attribute": "home_city", "value": "Lyon", "statement": "Alice lives in Lyon"}]}',
]


class RecordingEmbeddings(ConceptEmbeddings):
    """:class:`ConceptEmbeddings` that keeps every document text it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.documents: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += texts
        return super().embed_documents(texts)


def learn(memory: AgentMemory[Any]) -> None:
    """Work and Berlin said on 2022-11-20; a cat and Lyon on 2023-05-07 (Berlin is history)."""
    answers = iter(ANSWERS)
    memory.extractor = CallableExtractor(lambda prompt: next(answers))
    for key, when, said in (("e1", NOV_20, "I work at ACME"), ("e2", MAY_7, "I got a cat")):
        memory.record(U, [{"role": "user", "content": said}], key=key, occurred_at=when)
        assert memory.consolidate().completed == 1


def keys(store: AgentMemoryStore, namespace: tuple[str, ...], question: str) -> set[str]:
    return {re.split("[#@]", i.key)[0] for i in store.search(namespace, query=question)}


def assert_found_by_date(store: AgentMemoryStore, memory: AgentMemory[Any]) -> None:
    """Questions naming a month, a day or a year find what became true or happened then."""
    facts, history = memory.namespace(U, "facts"), memory.namespace(U, "history")
    episodes = memory.namespace(U, "episodes")
    assert keys(store, facts, "what changed in May 2023?") == {"pet", "home_city"}
    assert keys(store, facts, "November 2022") == {"employer"}
    assert keys(store, history, "where in 2022") == {"home_city"}  # Berlin, true from then
    assert keys(store, episodes, "what happened on 7 May") == {"e2"}
    assert keys(store, episodes, "May 7th") == {"e2"}
    assert keys(store, episodes, "2022-11-20") == {"e1"}


def test_a_question_naming_the_date_finds_facts_and_episodes_lexically(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store()  # lexical only: no embedder
    memory = AgentMemory(store)
    learn(memory)
    assert_found_by_date(store, memory)
    [berlin] = memory.history(U, "home_city")[:1]
    assert (berlin.value, berlin.valid_from) == ("Berlin", NOV_20)


def test_vectors_are_embedded_from_the_text_without_its_date(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    embed = RecordingEmbeddings()
    store = make_store(index={"dims": 64, "embed": embed})
    memory = AgentMemory(store, clock=lambda: MAY_7)
    learn(memory)
    tools = MemoryTools(memory)
    tools.remember("hobby", "chess", "Alice plays chess", config={"configurable": U})
    facts = memory.facts(U)
    episodes = memory.episodes(U)
    expected = {f.search_text() for f in facts} | {e.text() for e in episodes}
    assert expected <= set(embed.documents)
    assert not [t for t in embed.documents if any(w in t for w in DATE_WORDS)]
    # the lexical text has the date the vector's lacks
    assert all(lexical_text(f).startswith(f.search_text() + "\n") for f in facts)
    assert keys(store, memory.namespace(U, "facts"), "May 2023") >= {"pet", "hobby"}


def test_the_lexical_text_of_an_episode_and_of_an_undated_fact() -> None:
    episode = Episode(
        "e2", [{"role": "user", "content": "I got a cat"}], MAY_7, summary="Alice got a cat"
    )
    assert lexical_text(episode) == "Alice got a cat\nuser: I got a cat\nMay 7 7th 2023-05-07"
    undated = Fact("city", "city", "Lyon", "")
    assert lexical_text(undated) == undated.search_text() == "city: Lyon"
