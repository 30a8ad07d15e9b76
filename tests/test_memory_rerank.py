"""Recall and the context block, reranked: the memory's reranker (or the store's, or one per
call) orders the first candidate facts and episodes again, outside the transaction; a
failure keeps the fused order; sync and async, on every backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, Reranking
from tests.otel import named, provider, spans

__all__ = ["provider", "spans"]  # fixtures

U = "user=alice"
UTC = timezone.utc
SCRIPT = [
    (datetime(2024, 5, 6, 10, tzinfo=UTC), "We went hiking in the Alps with Tom."),
    (datetime(2024, 6, 5, 10, tzinfo=UTC), "I baked bread this morning with Tom."),
    (datetime(2024, 6, 12, 10, tzinfo=UTC), "I baked a cake for Anna and Tom."),
]
NOW = datetime(2024, 6, 14, 18, tzinfo=UTC).timestamp()
FOODS = ["ramen", "sushi", "tacos", "paella", "pho", "curry", "pizza", "dumplings", "falafel"]


def favouring(word: str, calls: list[list[str]] | None = None) -> Callable[..., list[float]]:
    """A deterministic reranker: texts with ``word`` first."""

    def rerank(query: str, texts: Sequence[str]) -> list[float]:
        if calls is not None:
            calls.append(list(texts))
        return [float(word in t.lower()) for t in texts]

    return rerank


def tom(store: AgentMemoryStore, **options: Any) -> AgentMemory[Any]:
    """Three days with Tom, recorded and consolidated."""
    memory = AgentMemory(store, clock=lambda: NOW, **options)
    for when, text in SCRIPT:
        memory.record(U, [{"role": "user", "content": text}], occurred_at=when.timestamp())
    memory.consolidate()
    return memory


def words(recalled: Any) -> list[str]:
    return [e.summary or e.messages[0]["content"] for e in recalled.episodes]


def test_a_reranker_orders_the_episodes_recall_considers(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store()
    memory = tom(store)
    fused = words(memory.recall(U, "what did I do with Tom?"))
    assert len(fused) == 3 and "Alps" not in fused[0]
    calls: list[list[str]] = []
    reranked = words(memory.recall(U, "what did I do with Tom?", reranker=favouring("alps", calls)))
    assert "Alps" in reranked[0] and sorted(reranked) == sorted(fused)
    [texts] = calls  # each candidate as its dated line
    assert len(texts) == 3 and any(t.startswith("2024-05-06: ") for t in texts)
    block = memory.build_context(U, "what did I do with Tom?", reranker=favouring("alps"))
    assert block.index("Alps") < block.index("cake") and block.index("Alps") < block.index("bread")


def test_the_memorys_the_stores_and_none(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store(reranker=favouring("alps"))
    memory = tom(store)  # no reranker of its own: the store's
    assert "Alps" in words(memory.recall(U, "what did I do with Tom?"))[0]
    own = AgentMemory(store, clock=lambda: NOW, reranker=favouring("anna"))
    assert "Anna" in words(own.recall(U, "what did I do with Tom?"))[0]
    plain = AgentMemory(make_store(), clock=lambda: NOW)
    for when, text in SCRIPT:
        plain.record(U, [{"role": "user", "content": text}], occurred_at=when.timestamp())
    plain.consolidate()
    unreranked = words(plain.recall(U, "what did I do with Tom?"))
    assert words(memory.recall(U, "what did I do with Tom?", reranker=False)) == unreranked


def test_no_query_asks_no_reranker(make_store: Callable[..., AgentMemoryStore]) -> None:
    calls: list[list[str]] = []
    memory = tom(make_store(), reranker=favouring("alps", calls))
    memory.recall(U, "")
    memory.build_context(U)
    assert calls == []


def test_a_failing_or_slow_reranker_keeps_the_fused_block(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    import threading

    memory = tom(make_store())
    expected = memory.build_context(U, "what did I do with Tom?")

    def down(query: str, texts: Sequence[str]) -> list[float]:
        raise ConnectionError("rerank service unreachable")

    release = threading.Event()

    def stuck(query: str, texts: Sequence[str]) -> list[float]:
        release.wait()
        return [0.0] * len(texts)

    assert memory.build_context(U, "what did I do with Tom?", reranker=down) == expected
    slow = Reranking(stuck, timeout=0.05)
    assert memory.build_context(U, "what did I do with Tom?", reranker=slow) == expected
    release.set()


def test_facts_that_do_not_all_fit_are_reranked(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    memory = AgentMemory(make_store(), clock=lambda: NOW)
    for food in FOODS:
        memory.record(U, [{"role": "user", "content": f"I like {food}"}], occurred_at=NOW - 99)
    memory.consolidate()
    assert len(memory.facts(U)) == len(FOODS)
    budget = 40  # a few lines of nine
    fused = memory.recall(U, "what food do I like?", budget_tokens=budget)
    assert 0 < len(fused.facts) < len(FOODS)
    kept = {str(f.value) for f in fused.facts}
    left_out = next(food for food in FOODS if food not in kept)
    reranked = memory.recall(
        U, "what food do I like?", budget_tokens=budget, reranker=favouring(left_out)
    )
    assert str(reranked.facts[0].value) == left_out


async def test_async_recall_reranks_alike(make_store: Callable[..., AgentMemoryStore]) -> None:
    async def alps_first(query: str, texts: Sequence[str]) -> list[float]:
        return favouring("alps")(query, texts)

    memory = tom(make_store(), reranker=alps_first)
    recalled = await memory.arecall(U, "what did I do with Tom?")
    assert "Alps" in words(recalled)[0]
    block = await memory.abuild_context(U, "what did I do with Tom?", reranker=favouring("anna"))
    assert block.index("Anna") < block.index("Alps")
    assert memory.build_context(U, "what did I do with Tom?") == await memory.abuild_context(
        U, "what did I do with Tom?"
    )


def test_a_span_tells_what_the_reranker_did(
    make_store: Callable[..., AgentMemoryStore], spans: InMemorySpanExporter
) -> None:
    def down(query: str, texts: Sequence[str]) -> list[float]:
        raise ConnectionError("rerank service unreachable")

    memory = tom(make_store())
    memory.recall(U, "what did I do with Tom?", reranker=favouring("alps"))
    memory.recall(U, "what did I do with Tom?", reranker=down)
    ok, failed = named(spans, "memory.rerank")
    assert ok.attributes is not None and failed.attributes is not None
    assert ok.attributes["agent_memory.rerank.candidates"] == 3
    assert "agent_memory.rerank.fallback" not in ok.attributes
    assert failed.attributes["agent_memory.rerank.fallback"] == "ConnectionError"
    [recall] = [s for s in named(spans, "memory.recall") if s.context.span_id == ok.parent.span_id]  # type: ignore[union-attr]
    assert recall.name == "memory.recall"


def test_consolidation_searches_in_the_fused_order(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """The store's reranker and time stage are for searches asked of it: memory's own (the
    facts a consolidation job shows its extractor) neither call nor wait on it."""
    calls: list[list[str]] = []
    store = make_store(reranker=favouring("paris", calls), time_field="created_at")
    memory = AgentMemory(store, clock=lambda: NOW)
    memory.record(U, [{"role": "user", "content": "I live in Berlin"}], occurred_at=NOW)
    memory.record(U, [{"role": "user", "content": "I moved to Paris last week"}])
    assert memory.consolidate().completed >= 1
    assert calls == []
    off = AgentMemory(store, clock=lambda: NOW, reranker=False)
    off.recall(U, "where do I live?")
    assert calls == []  # False: not even the store's
    memory.recall(U, "where do I live?")
    assert len(calls) == 1  # the store's, by default
