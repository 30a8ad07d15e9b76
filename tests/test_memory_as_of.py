"""Recall as of a date: what the memory knew and held true at a moment, on every backend.

A scripted year: Alice lives in Berlin and speaks German (January), moves to Munich and
learns English (April), moves back to Berlin (July), starts at ACME (October). The clock is
injected; every moment is a day of that year."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, ConfigurationError
from langgraph_checkpoint_agent_memory.memory import Fact

U = "user=alice"
UTC = timezone.utc
START = datetime(2024, 1, 1, 9, tzinfo=UTC)
SCRIPT = [
    (START, "I live in Berlin. I speak German."),
    (datetime(2024, 4, 10, 9, tzinfo=UTC), "I moved to Munich. I speak English."),
    (datetime(2024, 7, 19, 9, tzinfo=UTC), "I moved to Berlin."),
    (datetime(2024, 10, 1, 9, tzinfo=UTC), "I work at ACME."),
]
NOW = datetime(2025, 1, 1, tzinfo=UTC).timestamp()


def day(d: str) -> datetime:
    return datetime.fromisoformat(d).replace(hour=12, tzinfo=UTC)


@pytest.fixture
def memory(make_store: Callable[..., AgentMemoryStore]) -> AgentMemory[Any]:
    """The scripted year, each turn consolidated on its own."""
    memory = AgentMemory(make_store(), clock=lambda: NOW)
    for when, text in SCRIPT:
        key = memory.record(
            U, [{"role": "user", "content": text}], key=f"{when:%m%d}", occurred_at=when.timestamp()
        )
        assert key is not None and memory.consolidate().completed == 1
    return memory


def held(facts: list[Fact]) -> set[tuple[str, str]]:
    return {(f.attribute, f.value) for f in facts}


EXPECTED = {
    "2023-12-31": set(),  # before the first word: nothing known
    "2024-01-01": {("city", "Berlin"), ("languages", "German")},
    "2024-04-09": {("city", "Berlin"), ("languages", "German")},
    "2024-04-10": {("city", "Munich"), ("languages", "German"), ("languages", "English")},
    "2024-07-18": {("city", "Munich"), ("languages", "German"), ("languages", "English")},
    "2024-09-30": {("city", "Berlin"), ("languages", "German"), ("languages", "English")},
    "2024-12-31": {
        ("city", "Berlin"),
        ("languages", "German"),
        ("languages", "English"),
        ("employer", "ACME"),
    },
}


@pytest.mark.parametrize("moment", list(EXPECTED))
def test_facts_as_of_a_day_of_the_year(memory: AgentMemory[Any], moment: str) -> None:
    facts = memory.facts(U, as_of=day(moment))
    assert held(facts) == EXPECTED[moment]
    # as they were held then: current, whatever came later
    assert all(f.valid_to is None and f.superseded_by is None for f in facts)
    assert memory.facts(U, as_of=day(moment).timestamp()) == facts  # seconds work alike


def test_a_move_and_a_move_back(memory: AgentMemory[Any]) -> None:
    berlin, munich, back = memory.history(U, "city")
    assert [v.value for v in (berlin, munich, back)] == ["Berlin", "Munich", "Berlin"]
    # in April, Munich is the city; the Berlin of January shows its old window
    [city] = [f for f in memory.facts(U, as_of=day("2024-05-01")) if f.attribute == "city"]
    assert (city.key, city.value, city.valid_from) == (munich.key, "Munich", munich.valid_from)
    # the history as known in May: Berlin ended in April, Munich had not ended yet
    known = memory.history(U, "city", as_of=day("2024-05-01"))
    assert [(v.value, v.valid_to) for v in known] == [
        ("Berlin", munich.valid_from),
        ("Munich", None),
    ]
    assert known[0].superseded_by == "Munich"
    assert memory.history(U, as_of=day("2023-06-01")) == []
    assert len(memory.history(U, as_of=day("2024-12-31"))) == 6  # every version
    # a version's window is half open: the day a move was said, the new city holds
    at_move = munich.valid_from
    assert ("city", "Munich") in held(memory.facts(U, as_of=at_move))
    assert ("city", "Berlin") in held(memory.facts(U, as_of=at_move - 1))


def test_the_context_block_as_of_a_date(memory: AgentMemory[Any]) -> None:
    block = memory.build_context(U, "where do I live, which city", as_of=day("2024-05-01"))
    assert block.startswith("Memory (as of 2024-05-01):")
    facts, episodes = block.split("Relevant past conversations:")
    assert "The user lives in Munich (since 2024-04-10)" in facts
    assert "Berlin" not in facts and "ACME" not in facts  # superseded, not yet learned
    # only the episodes that had happened: January and April, not July or October
    assert "2024-01-01: The user said: I live in Berlin." in episodes
    assert "2024-07-19" not in episodes and "2024-10-01" not in episodes
    now = memory.build_context(U, "where do I live, which city")
    assert "The user lives in Berlin (since 2024-07-19)" in now


def test_every_line_of_the_block_is_dated(memory: AgentMemory[Any]) -> None:
    """So "when did I move?" is answered from the block: each fact says since when it
    holds, each past conversation when it happened."""
    for as_of in (None, day("2024-08-01")):
        block = memory.build_context(U, "when did I move", as_of=as_of)
        lines = [ln for ln in block.splitlines() if ln.startswith("- ")]
        assert lines
        for line in lines:
            assert re.search(r"\(since \d{4}-\d\d-\d\d|^- \d{4}-\d\d-\d\d: ", line), line
    block = memory.build_context(U, "when did I move", as_of=day("2024-08-01"))
    assert "2024-07-19: The user said: I moved to Berlin." in block
    assert "lives in Berlin (since 2024-07-19)" in block


async def test_the_async_forms_answer_alike(memory: AgentMemory[Any]) -> None:
    moment = day("2024-05-01")
    assert await memory.afacts(U, as_of=moment) == memory.facts(U, as_of=moment)
    assert await memory.ahistory(U, "city", as_of=moment) == memory.history(U, "city", as_of=moment)
    recalled = await memory.arecall(U, "where do I live", as_of=moment)
    assert recalled.text == memory.recall(U, "where do I live", as_of=moment).text
    assert {e.key for e in recalled.episodes} <= {"0101", "0410"}
    assert await memory.abuild_context(U, "where do I live", as_of=moment) == recalled.text


def test_a_moment_must_say_its_time_zone(memory: AgentMemory[Any]) -> None:
    naive = datetime(2024, 5, 1)
    for call in (
        lambda: memory.facts(U, as_of=naive),
        lambda: memory.history(U, as_of=naive),
        lambda: memory.recall(U, "city", as_of=naive),
        lambda: memory.build_context(U, as_of=naive),
    ):
        with pytest.raises(ConfigurationError, match="naive datetime"):
            call()
    with pytest.raises(ConfigurationError, match="seconds since the epoch"):
        memory.facts(U, as_of="2024-05-01")  # type: ignore[arg-type]  # a bad type, on purpose
    with pytest.raises(ConfigurationError, match="finite"):
        memory.facts(U, as_of=float("nan"))
    in_ms = int(datetime(2024, 5, 1, tzinfo=timezone.utc).timestamp() * 1000)
    with pytest.raises(ConfigurationError, match="milliseconds"):
        memory.build_context(U, "city", as_of=in_ms)
    other_zone = datetime(2024, 4, 10, 11, tzinfo=timezone(timedelta(hours=2)))  # 09:00 UTC
    assert ("city", "Munich") in held(memory.facts(U, as_of=other_zone))


def test_earlier_episodes_are_found_past_many_later_matches(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """The ranking's first candidates all happened after the moment: recall asks it for more
    until it finds the episodes that had happened."""
    memory = AgentMemory(make_store(), clock=lambda: NOW, episode_candidates=2)
    memory.record(
        U, [{"role": "user", "content": "Pretzels in Berlin"}], key="early", occurred_at=100.0
    )
    for i in range(12):
        memory.record(
            U,
            [{"role": "user", "content": f"Pretzels, pretzels and pretzels again, {i}"}],
            key=f"late{i}",
            occurred_at=10_000.0 + i,
        )
    recalled = memory.recall(U, "pretzels", as_of=5000.0)
    assert [e.key for e in recalled.episodes] == ["early"]
    assert len(memory.recall(U, "pretzels").episodes) == 2  # without as_of: the best two
    assert [e.key for e in memory.recall(U, as_of=5000.0).episodes] == ["early"]  # no query


def test_a_look_back_reinforces_nothing(make_store: Callable[..., AgentMemoryStore]) -> None:
    now = [1_000_000.0]
    memory = AgentMemory(
        make_store(),
        clock=lambda: now[0],
        decay_rate=0.5,
        decay_threshold=0.1,
        reinforce_every_seconds=0,
    )
    bob = "user=bob"
    for scope in (U, bob):
        memory.record(
            scope, [{"role": "user", "content": "I like chess"}], key="e1", occurred_at=now[0]
        )
    memory.consolidate()
    now[0] += 2 * 86400
    memory.recall(U, "chess", as_of=now[0], reinforce=True)  # looked back: not a use
    memory.recall(bob, "chess", reinforce=True)  # a use
    memory.decay()
    now[0] += 2 * 86400  # 0.5 * 0.5**4 = 0.03 < 0.1: gone unless reinforced
    memory.decay()
    assert memory.facts(U) == []
    assert [f.value for f in memory.facts(bob)] == ["chess"]
