"""The store's searches, reranked: the store's reranker and one per call, sync and async,
pages, scores, the text the reranker reads, and the fused order when it fails; on every
backend, plain and encrypted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import AgentMemoryStore, Reranking

NS = ("users", "alice")
FOODS = {
    "a": "ramen with a mild broth",
    "b": "spicy ramen, extra chili",
    "c": "ramen for breakfast",
    "d": "spicy curry",
    "e": "salad",
}


def spicy_first(query: str, texts: Sequence[str]) -> list[float]:
    """A deterministic reranker: spicy first, then shorter texts."""
    return [float("spicy" in t) - len(t) / 1000 for t in texts]


class Recorder:
    """A reranker that keeps what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        return spicy_first(query, texts)


def filled(store: AgentMemoryStore) -> AgentMemoryStore:
    for key, food in FOODS.items():
        store.put(NS, key, {"food": food, "rating": len(key)})
    return store


def keys(items: Sequence[Any]) -> list[str]:
    return [item.key for item in items]


def test_the_stores_reranker_orders_searches_with_a_query(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    plain = filled(make_store())
    fused = keys(plain.search(NS, query="ramen"))
    assert set(fused) == {"a", "b", "c"}
    recorder = Recorder()
    store = filled(make_store(reranker=recorder))
    hits = store.search(NS, query="ramen")
    assert keys(hits) == ["b", "c", "a"]  # spicy first, then the shorter
    [(query, texts)] = recorder.calls  # each value's text: the food, then the rating
    assert query == "ramen" and sorted(texts) == sorted(f"{FOODS[k]}\n{len(k)}" for k in fused)
    assert [h.score for h in hits] == sorted(spicy_first(query, texts), reverse=True)


def test_a_search_without_a_query_is_not_reranked(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    recorder = Recorder()
    store = filled(make_store(reranker=recorder))
    plain = filled(make_store())
    assert keys(store.search(NS, filter={"rating": 1})) == keys(
        plain.search(NS, filter={"rating": 1})
    )
    assert keys(store.search(NS, limit=3)) == keys(plain.search(NS, limit=3))
    assert recorder.calls == []


def test_pages_of_a_reranked_search_are_consistent(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = filled(make_store(reranker=Reranking(spicy_first, top_n=2)))
    whole = keys(store.search(NS, query="spicy ramen", limit=10))
    pages = [keys(store.search(NS, query="spicy ramen", limit=2, offset=o)) for o in (0, 2, 4)]
    assert [k for p in pages for k in p] == whole
    # a page past top_n asks for more candidates than top_n, and they keep the fused order
    plain = keys(store.search(NS, query="spicy ramen", limit=10, reranker=False))
    assert whole[2:] == [k for k in plain if k not in whole[:2]]


def test_a_reranker_per_call_overrides_the_stores(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    def longest_first(query: str, texts: Sequence[str]) -> list[float]:
        return [float(len(t)) for t in texts]

    store = filled(make_store(reranker=spicy_first))
    assert keys(store.search(NS, query="ramen", reranker=longest_first)) == ["b", "a", "c"]
    plain = filled(make_store())
    assert keys(store.search(NS, query="ramen", reranker=False)) == keys(
        plain.search(NS, query="ramen")
    )
    per_call = keys(plain.search(NS, query="ramen", reranker=spicy_first))
    assert per_call == keys(store.search(NS, query="ramen"))


def test_a_failing_reranker_leaves_the_fused_order(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    def down(query: str, texts: Sequence[str]) -> list[float]:
        raise ConnectionError("rerank service unreachable")

    plain = filled(make_store())
    store = filled(make_store(reranker=down))
    expected = plain.search(NS, query="ramen", limit=2, offset=1)
    got = store.search(NS, query="ramen", limit=2, offset=1)
    assert keys(got) == keys(expected)
    assert [h.score for h in got] == pytest.approx([h.score for h in expected])


def test_the_reranker_reads_the_indexed_fields(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    recorder = Recorder()
    index = {"dims": 4, "embed": lambda texts: [[1.0, 0.0, 0.0, 0.0] for _ in texts]}
    store = make_store(reranker=recorder, index={**index, "fields": ["food"]})
    store.put(NS, "a", {"food": "spicy ramen", "note": "not this"})
    store.search(NS, query="ramen")
    assert recorder.calls == [("ramen", ["spicy ramen"])]


def test_batches_rerank_each_search_with_a_query(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    from langgraph.store.base import GetOp, SearchOp

    recorder = Recorder()
    store = filled(make_store(reranker=recorder))
    got, searched, listed = store.batch(
        [
            GetOp(NS, "a"),
            SearchOp(NS, None, 2, 0, "ramen"),
            SearchOp(NS, {"rating": 1}, 10, 0, None),
        ]
    )
    assert got is not None and got.key == "a"  # type: ignore[union-attr]
    assert keys(searched) == ["b", "c"]  # type: ignore[arg-type]
    assert len(listed) == 5  # type: ignore[arg-type]
    assert len(recorder.calls) == 1


async def test_async_searches_are_reranked_alike(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    async def aspicy(query: str, texts: Sequence[str]) -> list[float]:
        return spicy_first(query, texts)

    store = filled(make_store(reranker=aspicy))
    assert keys(await store.asearch(NS, query="ramen")) == ["b", "c", "a"]
    plain = filled(make_store())
    assert keys(await plain.asearch(NS, query="ramen", reranker=spicy_first)) == ["b", "c", "a"]
    from langgraph.store.base import SearchOp

    both = await store.abatch(
        [SearchOp(NS, None, 1, 0, "ramen"), SearchOp(NS, None, 1, 0, "curry")]
    )
    assert [keys(r) for r in both] == [["b"], ["d"]]  # type: ignore[arg-type]


@pytest.mark.parametrize("staged", ["reranker", "time_field"])
def test_only_the_items_returned_have_their_ttl_refreshed(
    make_store: Callable[..., AgentMemoryStore], staged: str
) -> None:
    from tests.helpers import FakeClock

    clock = FakeClock(start=1_800_000_000)
    options: dict[str, Any] = {"ttl": {"default_ttl": 1.0}, "clock": clock}  # one minute
    options.update(
        {"reranker": spicy_first} if staged == "reranker" else {"time_field": "created_at"}
    )
    store = make_store(**options)
    for key in "abcde":
        store.put(NS, key, {"food": f"ramen number {key}"})
    clock.advance(50)
    query = "ramen" if staged == "reranker" else "ramen from today"
    [hit] = store.search(NS, query=query, limit=1)
    clock.advance(20)  # 70 s: what the search did not return has expired
    assert keys(store.search(NS, refresh_ttl=False)) == [hit.key]
    assert store.search(NS, query=query, limit=1, refresh_ttl=False)[0].key == hit.key
    clock.advance(50)
    assert store.search(NS, refresh_ttl=False) == []


@pytest.mark.parametrize(("limit", "offset"), [(-1, 0), (2, -2), ("3", 0), (None, 0), (True, 0)])
def test_bad_pages_get_the_answer_they_get_without_a_reranker(
    make_store: Callable[..., AgentMemoryStore], limit: Any, offset: Any
) -> None:
    plain, store = filled(make_store()), filled(make_store(reranker=spicy_first))

    def outcome(s: AgentMemoryStore) -> Any:
        try:
            return len(s.search(NS, query="ramen", limit=limit, offset=offset))
        except Exception as exc:
            return type(exc), str(exc)

    assert outcome(store) == outcome(plain)


def test_a_query_searched_twice_in_a_batch_is_embedded_once(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    asked: list[str] = []

    from langchain_core.embeddings import Embeddings

    class Counting(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, float(len(t)), 0.0] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            asked.append(text)
            return [1.0, float(len(text)), 0.0]

    store = make_store(index={"dims": 3, "embed": Counting()}, time_field="created_at")
    store.put(NS, "a", {"food": "ramen"})
    store.search(NS, query="ramen today")
    from langgraph.store.base import SearchOp

    store.batch([SearchOp(NS, None, 3, 0, "ramen"), SearchOp(NS, None, 5, 0, "ramen")])
    assert asked == ["ramen today", "ramen"]
