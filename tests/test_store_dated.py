"""Store searches that know when (``time_field``): a query naming a span of time puts the
items dated inside it first, whatever their words, on every backend, plain and encrypted,
sync and async; without a time in the query, or without the setting, nothing changes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import AgentMemoryStore, ConfigurationError

NS = ("users", "alice")
UTC = timezone.utc


def t(day: str) -> float:
    return datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC).timestamp()


NOW = t("2024-06-14")  # a Friday; last week is June 3-9
BOUGHT = {
    "shoes": ("new running shoes, and shoes for Anna", "2024-06-12"),
    "rack": ("a shoe rack", "2024-06-05"),
    "food": ("groceries for the weekend", "2024-06-06"),
    "old": ("shoes, shoes, shoes", "2024-04-02"),
}


def filled(store: AgentMemoryStore) -> AgentMemoryStore:
    for key, (text, day) in BOUGHT.items():
        store.put(NS, key, {"text": text, "bought_at": t(day)})
    store.put(NS, "undated", {"text": "shoes shoes shoes shoes"})
    return store


def keys(items: Sequence[Any]) -> list[str]:
    return [i.key for i in items]


@pytest.fixture
def dated(make_store: Callable[..., AgentMemoryStore]) -> Callable[..., AgentMemoryStore]:
    def make(**options: Any) -> AgentMemoryStore:
        return filled(make_store(clock=lambda: NOW, **options))

    return make


def test_a_named_week_puts_what_is_dated_then_first(dated: Callable[..., AgentMemoryStore]) -> None:
    plain = dated()
    store = dated(time_field="bought_at")
    question = "which shoes did I buy last week?"
    fused = keys(plain.search(NS, query=question))
    assert fused[0] != "rack" and "food" not in fused  # by words alone
    found = keys(store.search(NS, query=question))
    # last week's purchases first: the one its words match, then the one they do not
    assert found[:2] == ["rack", "food"]
    assert found[2:] == [k for k in fused if k not in ("rack", "food")]


def test_without_a_time_in_the_query_nothing_changes(
    dated: Callable[..., AgentMemoryStore],
) -> None:
    plain, store = dated(), dated(time_field="bought_at")
    for question in ("shoes", "which shoes did I buy?", "what did I buy?"):
        assert keys(store.search(NS, query=question)) == keys(plain.search(NS, query=question))
    assert keys(store.search(NS, limit=3)) == keys(plain.search(NS, limit=3))  # no query


def test_pages_and_the_callers_own_filter(dated: Callable[..., AgentMemoryStore]) -> None:
    store = dated(time_field="bought_at")
    question = "shoes bought last week"
    whole = keys(store.search(NS, query=question, limit=10))
    pages = [keys(store.search(NS, query=question, limit=2, offset=o)) for o in (0, 2, 4)]
    assert [k for p in pages for k in p] == whole
    # a filter of the caller's on the field itself: kept, and the week still goes first
    june = {"bought_at": {"$gte": t("2024-06-01")}}
    assert keys(store.search(NS, query=question, filter=june))[0] == "rack"


def test_created_at_dates_what_the_store_wrote(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = {"now": t("2024-06-05")}
    store = make_store(time_field="created_at", clock=lambda: clock["now"])
    store.put(NS, "then", {"text": "a note about the garden"})
    clock["now"] = t("2024-06-13")
    store.put(NS, "now", {"text": "a note about the garden and the garden shed"})
    clock["now"] = NOW
    assert keys(store.search(NS, query="garden notes"))[0] == "now"
    assert keys(store.search(NS, query="my garden notes from last week"))[0] == "then"


def test_a_reranker_has_the_last_word(dated: Callable[..., AgentMemoryStore]) -> None:
    seen: list[list[str]] = []

    def groceries_first(query: str, texts: Sequence[str]) -> list[float]:
        seen.append(list(texts))
        return [float("groceries" in t) for t in texts]

    store = dated(time_field="bought_at", reranker=groceries_first)
    found = keys(store.search(NS, query="which shoes did I buy last week?"))
    assert seen[0][0].startswith("a shoe rack") and seen[0][1].startswith("groceries")
    assert found[:2] == ["food", "rack"]


async def test_async_searches_alike(dated: Callable[..., AgentMemoryStore]) -> None:
    store = dated(time_field="bought_at")
    for question in ("which shoes did I buy last week?", "shoes", "what did I buy in April?"):
        assert keys(await store.asearch(NS, query=question)) == keys(
            store.search(NS, query=question)
        )
    assert keys(await store.asearch(NS, query="what did I buy in April?"))[0] == "old"


@pytest.mark.parametrize("bad", ["", "  ", "$and", 3, True])
def test_a_bad_time_field_is_refused(make_store: Callable[..., AgentMemoryStore], bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="time_field"):
        make_store(time_field=bad)
