"""What we knew when (bi-temporal facts): each version of a fact records when it held (valid
time: ``as_of``) and when the memory learned it (transaction time: ``known_at``); a
correction of a fact's start keeps what was believed before. On every backend, sync and
async.

Scripted years, the clock moving with them: Alice says she lives in Paris (January 2022) and
speaks French; she says she moved to Berlin (March 2023); in September 2023 she corrects the
date: she has lived in Berlin since November 2022. Her Spanish, spoken since 2021, is told
only in 2024."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, ConfigurationError
from langgraph_checkpoint_agent_memory.memory import Fact
from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools

U = "user=alice"
ALICE: RunnableConfig = {"configurable": {"user_id": "alice"}}
UTC = timezone.utc


def t(date: str) -> float:
    return datetime.fromisoformat(date).replace(hour=12, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, date: str) -> None:
        self.now = t(date)

    def __call__(self) -> float:
        return self.now


def say(memory: AgentMemory[Any], clock: Clock, date: str, text: str) -> None:
    clock.now = t(date)
    memory.record(U, [{"role": "user", "content": text}], occurred_at=clock.now)
    assert memory.consolidate().completed == 1


@pytest.fixture
def years(make_store: Callable[..., AgentMemoryStore]) -> tuple[AgentMemory[Any], Clock]:
    clock = Clock("2022-01-10")
    memory = AgentMemory(make_store(), clock=clock)
    say(memory, clock, "2022-01-10", "I live in Paris. I speak French.")
    say(memory, clock, "2023-03-01", "I moved to Berlin.")
    clock.now = t("2023-09-01")
    said = MemoryTools(memory).remember("city", "Berlin", since="2022-11-01", config=ALICE)
    assert said == "Corrected: city = Berlin since 2022-11-01."
    clock.now = t("2024-02-01")  # Spanish, spoken since 2021, told only now
    MemoryTools(memory).remember(
        "languages", "Spanish", multi=True, since="2021-06-01", config=ALICE
    )
    clock.now = t("2025-01-01")
    return memory, clock


def held(facts: list[Fact]) -> set[tuple[str, str]]:
    return {(f.attribute, f.value) for f in facts}


def day(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


#: (as_of, known_at) -> the facts; None: the default
EXPECTED: dict[tuple[str | None, str | None], set[tuple[str, str]]] = {
    # today's belief about each moment
    (None, None): {("city", "Berlin"), ("languages", "French"), ("languages", "Spanish")},
    ("2021-12-01", None): {("languages", "Spanish")},
    ("2022-12-01", None): {("city", "Berlin"), ("languages", "French"), ("languages", "Spanish")},
    # what the memory believed then, about then
    (None, "2022-06-01"): {("city", "Paris"), ("languages", "French")},
    (None, "2023-06-01"): {("city", "Berlin"), ("languages", "French")},
    # what it believed in June 2023 about December 2022: still Paris (the move was in March)
    ("2022-12-01", "2023-06-01"): {("city", "Paris"), ("languages", "French")},
    # ... and after the correction: Berlin since November
    ("2022-12-01", "2023-10-01"): {("city", "Berlin"), ("languages", "French")},
    # before anything was said, nothing was believed, whenever asked about
    ("2021-12-01", "2021-12-31"): set(),
    ("2022-12-01", "2021-12-31"): set(),
}


@pytest.mark.parametrize(("as_of", "known_at"), list(EXPECTED))
def test_what_held_and_what_was_believed(
    years: tuple[AgentMemory[Any], Clock], as_of: str | None, known_at: str | None
) -> None:
    memory, _ = years
    facts = memory.facts(
        U,
        as_of=None if as_of is None else t(as_of),
        known_at=None if known_at is None else t(known_at),
    )
    assert held(facts) == EXPECTED[(as_of, known_at)]


def test_a_correction_keeps_the_belief_it_replaced(years: tuple[AgentMemory[Any], Clock]) -> None:
    memory, _ = years
    [berlin] = [f for f in memory.facts(U) if f.attribute == "city"]
    assert day(berlin.valid_from) == "2022-11-01" and day(berlin.learned_at) == "2023-09-01"
    # today's history: Paris, then Berlin from its corrected start; the retracted belief is
    # not part of it
    now = [(f.value, day(f.valid_from), day(f.valid_to)) for f in memory.history(U, "city")]
    assert now == [("Paris", "2022-01-10", "2023-03-01"), ("Berlin", "2022-11-01", None)]
    # the history as recorded in June 2023: Berlin from March, as believed then
    then = memory.history(U, "city", known_at=t("2023-06-01"))
    assert [(f.value, day(f.valid_from), day(f.valid_to)) for f in then] == [
        ("Paris", "2022-01-10", "2023-03-01"),
        ("Berlin", "2023-03-01", None),
    ]
    assert day(then[1].retracted_at) == "2023-09-01"
    # in February 2023 the move was not known: Paris was current
    before = memory.history(U, "city", known_at=t("2023-02-01"))
    assert [(f.value, f.valid_to) for f in before] == [("Paris", None)]


def test_the_block_as_believed_then(years: tuple[AgentMemory[Any], Clock]) -> None:
    memory, _ = years
    then = memory.build_context(
        U, "where do I live?", as_of=t("2022-12-01"), known_at=t("2023-06-01")
    )
    assert "lives in Paris" in then and "Berlin" not in then and "Spanish" not in then
    now = memory.build_context(U, "where do I live?", as_of=t("2022-12-01"))
    assert (
        "lives in Berlin (since 2022-11-01" in now and "Paris" not in now.split("conversations")[0]
    )
    recalled = memory.recall(U, "languages", known_at=t("2023-06-01"))
    assert {f.value for f in recalled.facts} == {"Berlin", "French"}
    # episodes: only those that had happened by the moment recalled
    assert all(e.occurred_at <= t("2023-06-01") for e in recalled.episodes)


async def test_the_async_forms_answer_alike(years: tuple[AgentMemory[Any], Clock]) -> None:
    memory, _ = years
    for as_of, known_at in EXPECTED:
        kwargs = {
            "as_of": None if as_of is None else t(as_of),
            "known_at": None if known_at is None else t(known_at),
        }
        assert held(await memory.afacts(U, **kwargs)) == EXPECTED[(as_of, known_at)]
    known = t("2023-06-01")
    assert await memory.ahistory(U, "city", known_at=known) == memory.history(
        U, "city", known_at=known
    )
    assert await memory.abuild_context(U, "city", known_at=known) == memory.build_context(
        U, "city", known_at=known
    )


def test_a_fact_learned_late_held_before_it_was_known(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = Clock("2024-06-01")  # consolidated in June what was said in January
    memory = AgentMemory(make_store(), clock=clock)
    memory.record(U, [{"role": "user", "content": "I work at ACME."}], occurred_at=t("2024-01-15"))
    memory.consolidate()
    assert held(memory.facts(U, as_of=t("2024-03-01"))) == {("employer", "ACME")}
    assert held(memory.facts(U, known_at=t("2024-03-01"))) == set()
    assert held(memory.facts(U, as_of=t("2024-03-01"), known_at=t("2024-06-02"))) == {
        ("employer", "ACME")
    }


def test_an_extractor_may_date_a_fact_and_correct_it(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    from langgraph_checkpoint_agent_memory.memory import CallableExtractor

    since: dict[str, str | None] = {"value": None}

    def extract(prompt: str) -> str:
        import json

        fact = {"attribute": "city", "value": "Lyon", "statement": "Alice lives in Lyon"}
        if since["value"]:
            fact["since"] = since["value"]
        return json.dumps({"episodes": [{"episode": 1, "summary": "city"}], "facts": [fact]})

    clock = Clock("2024-05-01")
    memory = AgentMemory(make_store(), clock=clock, extractor=CallableExtractor(extract))
    say(memory, clock, "2024-05-01", "I live in Lyon")
    since["value"] = "2020-09-01"
    say(memory, clock, "2024-08-01", "I have lived in Lyon since September 2020")
    [lyon] = memory.facts(U)
    assert day(lyon.valid_from) == "2020-09-01" and lyon.confirmations == 2
    assert held(memory.facts(U, as_of=t("2021-01-01"))) == {("city", "Lyon")}
    assert held(memory.facts(U, as_of=t("2021-01-01"), known_at=t("2024-06-01"))) == set()


def test_rows_written_before_transaction_time_read_as_learned_when_true(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    memory = AgentMemory(make_store(), clock=Clock("2025-01-01"))
    value = Fact(
        "city", "city", "Oslo", "Alice lives in Oslo", valid_from=t("2023-01-01")
    ).to_value()
    for field in ("learned_at", "ended_at", "retracted_at"):
        del value[field]  # as a row of an earlier version holds it
    memory.store.put(memory.namespace(U, "facts"), "city", value)
    assert held(memory.facts(U, known_at=t("2023-06-01"))) == {("city", "Oslo")}
    assert held(memory.facts(U, known_at=t("2022-06-01"))) == set()


def test_bad_moments_and_dates_are_refused(years: tuple[AgentMemory[Any], Clock]) -> None:
    memory, _ = years
    with pytest.raises(ConfigurationError, match=r"known_at=.*naive"):
        memory.facts(U, known_at=datetime(2023, 1, 1))
    with pytest.raises(ConfigurationError, match="known_at"):
        memory.history(U, known_at=float("nan"))
    with pytest.raises(ConfigurationError, match="known_at"):
        memory.build_context(U, "x", known_at="2023")  # type: ignore[arg-type]
    with pytest.raises(ToolException, match="not a date"):
        MemoryTools(memory).remember("city", "Rome", since="last spring", config=ALICE)
    assert held(memory.facts(U)) == EXPECTED[(None, None)]  # nothing written


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.sampled_from(["Paris", "Berlin", "Rome"])),
        st.tuples(st.just("like"), st.sampled_from(["tea", "jazz", "chess"])),
        st.tuples(st.just("correct"), st.integers(0, 40)),
        st.tuples(st.just("forget"), st.just("")),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=STEPS)
def test_known_at_answers_what_the_memory_answered_then(steps: list[tuple[str, Any]]) -> None:
    """Whatever happens, asking later "what did you believe at T" gives what the memory
    answered at T (facts and history, by attribute, value and valid time)."""
    from langgraph_checkpoint_agent_memory import create_store

    clock = Clock("2024-01-01")
    memory = AgentMemory(create_store(), clock=clock)
    tools = MemoryTools(memory)
    snapshots = []
    for i, (kind, arg) in enumerate(steps):
        clock.now = t("2024-01-01") + (i + 1) * 86400 * 10
        if kind == "say":
            memory.record(
                U, [{"role": "user", "content": f"I live in {arg}"}], occurred_at=clock.now
            )
            memory.consolidate()
        elif kind == "like":
            memory.record(U, [{"role": "user", "content": f"I like {arg}"}], occurred_at=clock.now)
            memory.consolidate()
        elif kind == "correct":
            current = [f for f in memory.facts(U) if f.attribute == "city"]
            if current:
                since = datetime.fromtimestamp(clock.now - arg * 86400, UTC).strftime("%Y-%m-%d")
                tools.remember("city", current[0].value, since=since, config=ALICE)
        else:
            tools.forget("city", config=ALICE)
        clock.now += 3600
        snapshots.append((clock.now, shape(memory.facts(U)), shape(memory.history(U))))
    clock.now += 86400 * 400
    for at, facts, history in snapshots:
        assert shape(memory.facts(U, known_at=at)) == facts
        assert shape(memory.history(U, known_at=at)) == history


def shape(facts: list[Fact]) -> list[tuple[str, str, float, float | None]]:
    return sorted((f.attribute, f.value, f.valid_from, f.valid_to) for f in facts)


@pytest.mark.parametrize(
    ("since", "dated"),
    [
        ("2021-03", "2021-03-01"),  # a month: its first day
        ("2021", "2021-01-01"),
        ("sometime in March", "2024-05-01"),  # no date: when it was said
        ("unknown", "2024-05-01"),
        (2021, "2021-01-01"),
        ("2099-01-01", "2024-05-01"),  # to come: no start, when it was said
    ],
)
def test_an_extractors_loose_date_never_costs_the_extraction(
    make_store: Callable[..., AgentMemoryStore], since: Any, dated: str
) -> None:
    import json

    from langgraph_checkpoint_agent_memory.memory import CallableExtractor

    def extract(prompt: str) -> str:
        facts = [
            {"attribute": "city", "value": "Lyon", "since": since},
            {"attribute": "employer", "value": "ACME"},
        ]
        return json.dumps({"episodes": [{"episode": 1, "summary": "moved"}], "facts": facts})

    clock = Clock("2024-05-01")
    memory = AgentMemory(make_store(), clock=clock, extractor=CallableExtractor(extract))
    say(memory, clock, "2024-05-01", "I live in Lyon and work at ACME")
    found = {f.attribute: day(f.valid_from) for f in memory.facts(U)}
    assert found == {"city": dated, "employer": "2024-05-01"}


def test_the_tool_refuses_a_date_to_come(years: tuple[AgentMemory[Any], Clock]) -> None:
    memory, _ = years
    with pytest.raises(ToolException, match="in the future"):
        MemoryTools(memory).remember("city", "Berlin", since="2030-01-01", config=ALICE)
    assert held(memory.facts(U)) == EXPECTED[(None, None)]
    assert [day(f.valid_from) for f in memory.facts(U) if f.attribute == "city"] == ["2022-11-01"]
