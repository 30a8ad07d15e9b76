"""One summary per episode: a consolidation job of several episodes gives each its own
summary, outcome and importance, whatever the extractor; an answer that does not cover every
episode fails the job and loses nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, create_store
from langgraph_checkpoint_agent_memory.memory import (
    ChatModelExtractor,
    Episode,
    ExtractionError,
    episode_summaries,
    parse_extraction,
)

U = {"user_id": "alice"}
TURNS = [
    "My name is Alice and I live in Berlin.",
    "I love pretzels and hiking in the Alps.",
]


def record_two(memory: AgentMemory[Any]) -> list[str]:
    """The issue's reproduction: two turns on one thread, a day apart."""
    keys = []
    for i, text in enumerate(TURNS):
        key = memory.record(
            U,
            [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}],
            thread_id="t1",
            key=f"e{i + 1}",
            occurred_at=1_700_000_000.0 + i * 86400,
        )
        assert key is not None
        keys.append(key)
    return keys


def answer(entries: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    body: dict[str, Any] = {
        "facts": [{"attribute": "city", "value": "Berlin", "statement": "Alice lives in Berlin"}]
    }
    if entries is not None:
        body["episodes"] = entries
    body.update(extra)
    return json.dumps(body)


def entry(summary: str, **naming: Any) -> dict[str, Any]:
    return {"summary": summary, "outcome": f"{summary}: done", "importance": 0.1, **naming}


def chat(responses: list[str], prompts: list[str] | None = None) -> ChatModelExtractor:
    """A scripted chat model (no structured output: its text is parsed)."""

    class Recording(FakeListChatModel):
        def invoke(self, input: Any, *args: Any, **kwargs: Any) -> Any:
            if prompts is not None:
                prompts.append(str(input))
            return super().invoke(input, *args, **kwargs)

    return ChatModelExtractor(Recording(responses=responses), structured=False, timeout=None)


# -- the rule-based extractor, on every backend --------------------------------------------


def test_each_episode_of_a_job_gets_its_own_summary(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    memory = AgentMemory(make_store())
    record_two(memory)
    report = memory.consolidate()
    assert report.completed == 1 and report.episodes == 2  # one job of both episodes
    first, second = memory.episodes(U)
    assert first.summary == f"The user said: {TURNS[0]}"
    assert second.summary == f"The user said: {TURNS[1]}"
    # importance follows what each episode said: two facts, then one
    assert (first.importance, second.importance) == pytest.approx((0.5, 0.4))
    # and each episode is found by its own words
    hits = memory.store.search(memory.namespace(U, "episodes"), query="pretzels")
    assert [h.key for h in hits] == [second.key]


def test_facts_date_from_the_episode_that_states_them(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """A move stated in the second episode of a job supersedes the city from the first one
    at the second episode's time, not both at the last."""
    memory = AgentMemory(make_store())
    t0 = 1_700_000_000.0
    for i, text in enumerate(["I live in Berlin.", "I moved to Munich."]):
        memory.record(U, [{"role": "user", "content": text}], key=f"m{i}", occurred_at=t0 + i)
    assert memory.consolidate().completed == 1
    berlin, munich = memory.history(U, "city")
    assert (berlin.value, berlin.valid_from, berlin.valid_to) == ("Berlin", t0, t0 + 1)
    assert berlin.source_episodes == ["m0"]
    assert (munich.value, munich.valid_from, munich.valid_to) == ("Munich", t0 + 1, None)
    assert munich.source_episodes == ["m1"]


# -- a scripted chat model -----------------------------------------------------------------


@pytest.mark.parametrize(
    "entries",
    [
        [entry("pretzels", episode=2), entry("intro", episode=1)],  # by number, any order
        [entry("intro", key="e1"), entry("pretzels", key="e2")],  # by key
        [entry("intro", key="e1", episode=1), entry("pretzels", episode=2)],  # both agree
        [entry("intro"), entry("pretzels")],  # unnamed: the episodes in order
    ],
    ids=["by-number", "by-key", "key-and-number", "in-order"],
)
def test_a_chat_model_answers_one_entry_per_episode(
    make_store: Callable[..., AgentMemoryStore], entries: list[dict[str, Any]]
) -> None:
    prompts: list[str] = []
    memory = AgentMemory(make_store(), extractor=chat([answer(entries)], prompts))
    record_two(memory)
    assert memory.consolidate().completed == 1
    first, second = memory.episodes(U)
    assert (first.summary, first.outcome) == ("intro", "intro: done")
    assert (second.summary, second.outcome) == ("pretzels", "pretzels: done")
    assert first.importance == second.importance == pytest.approx(0.1)
    assert [f.value for f in memory.facts(U)] == ["Berlin"]
    # the prompt numbers the episodes and asks for one entry each
    [prompt] = prompts
    assert prompt.index("Episode 1 [") < prompt.index(TURNS[0])
    assert prompt.index("Episode 2 [") < prompt.index(TURNS[1])
    assert 'one entry in "episodes" for each of the 2 episode(s)' in prompt


def test_the_single_summary_form_still_works_for_one_episode(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    old = json.dumps(
        {
            "episode": {"summary": "Alice introduced herself", "outcome": "ok", "importance": 0.7},
            "facts": [{"attribute": "name", "value": "Alice"}],
        }
    )
    memory = AgentMemory(make_store(), extractor=chat([old]))
    memory.record(U, [{"role": "user", "content": TURNS[0]}], key="e1")
    assert memory.consolidate().completed == 1
    [episode] = memory.episodes(U)
    assert (episode.summary, episode.outcome, episode.importance) == (
        "Alice introduced herself",
        "ok",
        0.7,
    )


BAD: dict[str, tuple[str, str]] = {
    "single form for two episodes": (
        answer(episode=entry("both")),
        "one summary for 2 episodes",
    ),
    "an episode missing": (answer([entry("intro", episode=1)]), "no entry for episode 2 of 2"),
    "an unnamed entry missing": (answer([entry("intro")]), "no entry for episode 2 of 2"),
    "an extra episode": (
        answer([entry("a", episode=1), entry("b", episode=2), entry("c", episode=3)]),
        "an entry for episode 3, but there are 2",
    ),
    "an extra unnamed entry": (
        answer([entry("a"), entry("b"), entry("c")]),
        "an entry for episode 3, but there are 2",
    ),
    "an unknown key": (
        answer([entry("a", key="e1"), entry("b", key="nope")]),
        "names no episode: 'nope'",
    ),
    "one episode twice": (
        answer([entry("a", episode=1), entry("b", episode=1)]),
        "two entries for episode 1",
    ),
    "named and unnamed mixed": (
        answer([entry("a", episode=1), entry("b")]),
        "some entries of 'episodes' name their episode and some do not",
    ),
    "key and number disagree": (
        answer([entry("a", key="e1", episode=2), entry("b", episode=1)]),
        "names episode 2 and the key of episode 1",
    ),
    "both forms": (
        answer([entry("a"), entry("b")], episode=entry("c")),
        "either 'episodes' (one entry per episode) or 'episode', not both",
    ),
    "no summary at all": (answer(), "no episode summary"),
    "a fact from an unknown episode": (
        answer(
            [entry("a"), entry("b")],
            facts=[{"attribute": "city", "value": "Rome", "episode": 3}],
        ),
        "the fact 'city' names episode 3, but there are 2",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_an_answer_that_does_not_cover_every_episode_fails_the_job(
    tmp_path: Path, case: str
) -> None:
    text, error = BAD[case]
    good = answer([entry("intro"), entry("pretzels")])
    store = create_store(f"sqlite:///{tmp_path / 'm.db'}")
    memory = AgentMemory(store, extractor=chat([text, good]), backoff_seconds=0.0)
    keys = record_two(memory)
    report = memory.consolidate()
    assert report.completed == 0 and report.jobs[0].status == "failed"
    assert error in (report.jobs[0].error or "")
    assert memory.facts(U) == []  # nothing applied
    assert [e.key for e in memory.episodes(U, status="pending")] == keys
    assert all(e.summary is None for e in memory.episodes(U))
    # the next answer covers both: the same two episodes are consolidated, once
    report = memory.consolidate()
    assert report.completed == 1 and report.episodes == 2
    assert [e.summary for e in memory.episodes(U)] == ["intro", "pretzels"]
    store.close()


def test_a_missing_entry_keeps_the_episodes_pending_on_every_backend(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    text, error = BAD["an episode missing"]
    memory = AgentMemory(make_store(), extractor=chat([text]))
    keys = record_two(memory)
    report = memory.consolidate()
    assert report.jobs[0].status == "failed" and error in (report.jobs[0].error or "")
    assert [e.key for e in memory.episodes(U, status="pending")] == keys
    assert memory.facts(U) == [] and memory.scopes()["user=alice"]["pending"] == 2


def test_a_structured_model_answers_the_batch_form(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """A model with ``with_structured_output`` returns an ``Extraction`` of the batch form."""
    from langchain_core.runnables import RunnableLambda

    from langgraph_checkpoint_agent_memory.memory import Extraction

    class Structured(FakeListChatModel):
        def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:
            assert schema is Extraction
            entries = [entry("pretzels", episode=2), entry("intro", episode=1)]
            return RunnableLambda(lambda prompt: Extraction.model_validate_json(answer(entries)))

    extractor = ChatModelExtractor(Structured(responses=["unused"]))
    assert extractor.structured
    memory = AgentMemory(make_store(), extractor=extractor)
    record_two(memory)
    assert memory.consolidate().completed == 1
    assert [e.summary for e in memory.episodes(U)] == ["intro", "pretzels"]


# -- the rule, without a database ----------------------------------------------------------


def test_episode_summaries_reads_each_form() -> None:
    hello = Episode("k1", [{"role": "user", "content": "hi"}], 1.0)
    moving = Episode("k2", [{"role": "user", "content": "I moved"}], 2.0)
    batch = parse_extraction(
        '{"episodes": [{"episode": 2, "summary": "moved"}, {"key": "k1", "summary": "hi"}]}'
    )
    assert [s.summary for s in episode_summaries(batch, [hello, moving])] == ["hi", "moved"]
    single = parse_extraction('{"episode": {"summary": "hi"}}')
    assert [s.summary for s in episode_summaries(single, [hello])] == ["hi"]
    with pytest.raises(ExtractionError, match="one summary for 2 episodes"):
        episode_summaries(single, [hello, moving])
    with pytest.raises(ExtractionError, match=r"does not fit the schema.*not both"):
        parse_extraction('{"episode": {"summary": "a"}, "episodes": [{"summary": "b"}]}')


def test_the_demo_shows_each_episode_with_its_own_summary(tmp_path: Path) -> None:
    import os

    from rich.console import Console

    from langgraph_checkpoint_agent_memory.demo import SESSIONS, run_demo

    with open(os.devnull, "w") as devnull:
        shown = run_demo(f"sqlite:///{tmp_path / 'demo.db'}", console=Console(file=devnull))
    said = [text for _, _, turns in SESSIONS for text in turns]
    assert [e["said"] for e in shown["episodes"]] == said
    assert [e["summary"] for e in shown["episodes"]] == [f"The user said: {t}" for t in said]
