"""Recall that knows when: a question that names a time ("last week", "in May") favours what
happened then, on every backend, sync and async.

A scripted spring: a hike in the Alps (May 6), bread baked (June 5), a cake baked for Anna
(June 12); the question is asked on Friday, June 14."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, ConfigurationError

U = "user=alice"
UTC = timezone.utc
SCRIPT = [
    (datetime(2024, 5, 6, 10, tzinfo=UTC), "We went hiking in the Alps with Tom."),
    (datetime(2024, 6, 5, 10, tzinfo=UTC), "I baked bread this morning."),
    (datetime(2024, 6, 12, 10, tzinfo=UTC), "I baked a cake for Anna."),
]
NOW = datetime(2024, 6, 14, 18, tzinfo=UTC).timestamp()


def spring(store: AgentMemoryStore, **settings: Any) -> AgentMemory[Any]:
    """The scripted spring in ``store`` (recorded and consolidated once), read through a
    memory with ``settings``."""
    memory = AgentMemory(store, clock=lambda: NOW, **settings)
    for when, text in SCRIPT:
        memory.record(U, [{"role": "user", "content": text}], occurred_at=when.timestamp())
    memory.consolidate()
    assert len(memory.episodes(U, status="done")) == len(SCRIPT)
    return memory


def days(recalled: Any) -> list[str]:
    return [datetime.fromtimestamp(e.occurred_at, UTC).strftime("%m-%d") for e in recalled.episodes]


def test_a_named_week_brings_what_happened_then_first(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    memory = spring(make_store(), time_weight=1.0)
    # without a time, the newer of two equal matches comes first
    assert days(memory.recall(U, "what did I bake?"))[0] == "06-12"
    # last week (June 3-9): the bread, though the cake is newer and matches as well
    assert days(memory.recall(U, "what did I bake last week?"))[0] == "06-05"
    block = memory.build_context(U, "what did I bake last week?")
    assert block.index("bread") < block.index("cake")


def test_a_named_month_finds_what_its_words_do_not(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    # one candidate by relevance: "bake" finds the cake; the hike only by its month (last
    # month: May; "May" itself is a word of the hike's lexical text, which keeps its date)
    memory = spring(make_store(), episode_candidates=1)
    assert "05-06" in days(memory.recall(U, "what did I bake last month?"))
    blind = spring(make_store(), episode_candidates=1, time_weight=0)
    assert "05-06" not in days(blind.recall(U, "what did I bake last month?"))
    assert "05-06" in days(blind.recall(U, "what did I bake in May?"))  # by its date's words
    # a strong weight puts what happened then first, however weak its match
    strong = spring(make_store(), time_weight=2.0)
    assert days(strong.recall(U, "what did I bake last month?"))[0] == "05-06"


def test_time_weight_zero_turns_it_off(make_store: Callable[..., AgentMemoryStore]) -> None:
    memory = spring(make_store(), time_weight=0)
    assert days(memory.recall(U, "what did I bake last week?"))[0] == "06-12"
    for bad in (-1, float("nan"), True):
        with pytest.raises(ConfigurationError, match="time_weight"):
            AgentMemory(make_store(), time_weight=bad)


async def test_async_recall_knows_when_too(make_store: Callable[..., AgentMemoryStore]) -> None:
    memory = spring(make_store(), time_weight=1.0)
    assert days(await memory.arecall(U, "what did I bake last week?"))[0] == "06-05"
    block = await memory.abuild_context(U, "anything from last week?")
    assert "bread" in block


def test_a_look_back_counts_weeks_from_its_own_date(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    memory = spring(make_store(), time_weight=1.0)
    # asked as of Sunday May 12: "last week" is April 29 - May 5, before the hike; "this
    # week" holds it; the June episodes had not happened
    as_of = datetime(2024, 5, 12, 12, tzinfo=UTC)
    assert days(memory.recall(U, "where did we go this week?", as_of=as_of)) == ["05-06"]


def test_nothing_after_the_question_is_recalled(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    memory = spring(make_store(), time_weight=1.0)
    # asked a millisecond before the bread was baked: this week holds nothing yet
    just_before = SCRIPT[1][0].timestamp() - 0.001
    assert days(memory.recall(U, "what did I bake this week?", as_of=just_before)) == []
    assert days(memory.recall(U, "what did I bake this week?", as_of=just_before + 0.001)) == [
        "06-05"
    ]


def test_an_unreadable_date_is_no_time(make_store: Callable[..., AgentMemoryStore]) -> None:
    memory = spring(make_store(), time_weight=1.0)
    recalled = memory.recall(U, "my card is valid until 9999-12-31, what did I bake?")
    assert days(recalled)[0] == "06-12"  # as without a time


def test_an_encrypted_memory_knows_when_too(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    from langgraph_checkpoint_agent_memory import generate_master_key

    memory = spring(make_store(encryption=generate_master_key()), time_weight=1.0)
    assert days(memory.recall(U, "what did I bake last week?"))[0] == "06-05"
