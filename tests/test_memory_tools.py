"""Memory tools for agents, on every store backend: a prebuilt ReAct agent driven by a
scripted tool-calling model searches, remembers and forgets facts in the scope of its run's
config, through the same rules as consolidation; a model that names another user gets an
error back and that user's memory stays exactly as it was."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore
from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
from langgraph_checkpoint_agent_memory.memory import ScopeError
from tests.helpers import FakeClock, WordEmbeddings

#: LangGraph 1.x points to ``langchain.agents.create_agent``; its prebuilt agent still works
#: and is what most LangGraph code uses.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


class ScriptedModel(GenericFakeChatModel):
    """A chat model that answers with the given messages in turn and takes any tools."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def calls(*steps: tuple[str, dict[str, Any]] | str) -> Iterator[AIMessage]:
    """One AI message per step: a tool call ``(name, args)``, or a final text answer."""
    for i, step in enumerate(steps):
        if isinstance(step, str):
            yield AIMessage(step)
        else:
            name, args = step
            yield AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{i}"}])


def agent(memory: AgentMemory[Any], *steps: tuple[str, dict[str, Any]] | str) -> Any:
    return create_react_agent(ScriptedModel(messages=calls(*steps)), memory.tools())


def tool_results(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def run(user: str, thread: str = "t") -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "user_id": user}}


def everything(memory: AgentMemory[Any], user: str) -> Any:
    """All a user's memory: current facts, history, episodes, as stored."""
    scope = {"user_id": user}
    return memory.facts(scope), memory.history(scope), memory.episodes(scope)


@pytest.fixture
def memory(make_store: Callable[..., AgentMemoryStore]) -> AgentMemory[Any]:
    return AgentMemory(make_store(), clock=FakeClock(start=1_800_000_000.0))


def test_an_agent_remembers_searches_and_forgets_in_its_scope(memory: AgentMemory[Any]) -> None:
    bob = agent(
        memory,
        ("remember_fact", {"attribute": "city", "value": "Oslo", "statement": "Bob lives in Oslo"}),
        "Noted.",
    )
    bob.invoke({"messages": [("user", "I live in Oslo")]}, run("bob"))
    bob_before = everything(memory, "bob")

    alice = agent(
        memory,
        ("remember_fact", {"attribute": "city", "value": "Berlin", "statement": "I'm in Berlin"}),
        ("remember_fact", {"attribute": "City", "value": " berlin "}),  # a restatement
        ("remember_fact", {"attribute": "language", "value": "French", "multi": True}),
        ("remember_fact", {"attribute": "language", "value": "German", "multi": True}),
        ("remember_fact", {"attribute": "city", "value": "Lyon", "statement": "I live in Lyon"}),
        ("forget_fact", {"attribute": "language", "value": "french"}),
        ("search_memory", {"query": "where do I live"}),
        "You live in Lyon.",
    )
    state = alice.invoke({"messages": [("user", "Remember me")]}, run("alice"))
    said = [m.content for m in tool_results(state)]
    assert said[:6] == [
        "Remembered: city = Berlin.",
        "Already remembered, now confirmed 2 times: city = Berlin.",
        "Remembered: language = French.",
        "Remembered: language = German.",
        "Updated city: Lyon (was Berlin).",
        "Forgot language = French.",
    ]
    found = said[6]
    assert "city = Lyon: I live in Lyon" in found and "language (one of several) = German" in found
    assert "Oslo" not in found and "French" not in found
    assert state["messages"][-1].content == "You live in Lyon."

    facts = {f.attribute: f for f in memory.facts({"user_id": "alice"})}
    assert (facts["city"].value, facts["language"].value) == ("Lyon", "German")
    assert facts["city"].source_episodes == ["tool:t"]
    past = [(f.attribute, f.value, f.superseded_by) for f in memory.history({"user_id": "alice"})]
    assert ("city", "Berlin", "Lyon") in past and ("language", "French", None) in past
    berlin = next(f for f in memory.history({"user_id": "alice"}) if f.value == "Berlin")
    assert berlin.confirmations == 2 and berlin.valid_to is not None
    assert everything(memory, "bob") == bob_before


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_model_naming_another_user_is_refused_and_changes_nothing(
    memory: AgentMemory[Any], how: str
) -> None:
    tools = {t.name: t for t in memory.tools()}
    tools["remember_fact"].invoke({"attribute": "city", "value": "Oslo"}, run("bob"))
    tools["remember_fact"].invoke({"attribute": "likes", "value": "skiing"}, run("bob"))
    bob_before = everything(memory, "bob")
    bob_config = {"configurable": {"user_id": "bob", "thread_id": "b"}}
    alice = agent(
        memory,
        ("remember_fact", {"attribute": "city", "value": "Mars", "user_id": "bob"}),
        ("forget_fact", {"attribute": "city", "config": bob_config}),
        ("forget_fact", {"attribute": "likes", "scope": "user=bob"}),
        ("search_memory", {"query": "city", "user_id": "bob"}),
        ("search_memory", {"query": "city skiing Oslo"}),
        ("forget_fact", {"attribute": "likes"}),
        "I only know what you told me.",
    )
    state = (
        alice.invoke({"messages": [("user", "hi")]}, run("alice"))
        if how == "sync"
        else asyncio.run(alice.ainvoke({"messages": [("user", "hi")]}, run("alice")))
    )
    results = tool_results(state)
    for refused in results[:4]:
        assert refused.status == "error"
        assert "Extra inputs are not permitted" in refused.content, refused.content
    assert results[4].content == "Nothing remembered yet."  # alice's own, empty memory
    assert results[5].content == "Nothing remembered about likes."
    assert everything(memory, "bob") == bob_before
    assert everything(memory, "alice") == ([], [], [])


def arguments(tool: BaseTool) -> set[str]:
    """The arguments a model sees in ``tool``'s schema (a pydantic model, for these tools)."""
    schema = tool.tool_call_schema
    assert isinstance(schema, type) and issubclass(schema, BaseModel)
    return set(schema.model_json_schema()["properties"])


def test_the_model_sees_only_the_declared_arguments(memory: AgentMemory[Any]) -> None:
    schemas = {t.name: arguments(t) for t in memory.tools()}
    assert schemas == {
        "search_memory": {"query"},
        "remember_fact": {"attribute", "value", "statement", "multi", "importance", "since"},
        "forget_fact": {"attribute", "value"},
    }
    assert [t.name for t in memory.tools(include=["search"])] == ["search_memory"]
    with pytest.raises(ValueError, match="include"):
        memory.tools(include=["delete_everything"])


def test_scope_comes_from_the_config_as_the_memory_isolates(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    per_user = AgentMemory(make_store(), scope_keys=("user_id",))
    [remember] = per_user.tools(include=["remember"])
    config: RunnableConfig = {
        "configurable": {"user_id": "alice", "agent_id": "support", "thread_id": "x"}
    }
    remember.invoke({"attribute": "city", "value": "Rome"}, config)
    assert [f.value for f in per_user.facts("user=alice")] == ["Rome"]
    assert per_user.facts("user=alice,agent=support") == []
    with pytest.raises(ScopeError, match="user_id"):  # the app's mistake: raised, not told
        remember.invoke({"attribute": "city", "value": "Rome"}, {"configurable": {}})
    unscoped = agent(per_user, ("remember_fact", {"attribute": "x", "value": "y"}), "done")
    with pytest.raises(ScopeError):
        unscoped.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "x"}})
    assert per_user.known_scopes() == {"user=alice"}


def test_a_bad_fact_goes_back_to_the_model(memory: AgentMemory[Any]) -> None:
    state = agent(
        memory,
        ("remember_fact", {"attribute": "!!", "value": "x"}),
        ("remember_fact", {"attribute": "city", "value": "   "}),
        ("remember_fact", {"attribute": "city", "value": "Rome", "importance": 7}),
        ("forget_fact", {"attribute": "??"}),
        "Sorry.",
    ).invoke({"messages": [("user", "hi")]}, run("alice"))
    results = tool_results(state)
    assert [r.status for r in results] == ["error"] * 4
    assert "letters or digits" in results[0].content
    assert "must not be empty" in results[1].content
    assert "importance" in results[2].content
    assert memory.facts("user=alice") == []


def test_tool_facts_and_consolidation_share_one_set_of_rules(memory: AgentMemory[Any]) -> None:
    [remember] = memory.tools(include=["remember"])
    remember.invoke({"attribute": "city", "value": "Berlin"}, run("alice"))
    memory.record("user=alice", [{"role": "user", "content": "I live in Berlin."}])
    memory.consolidate()  # the rule-based extractor restates it: confirmed, not duplicated
    [city] = memory.facts("user=alice")
    assert (city.value, city.confirmations) == ("Berlin", 2)
    memory.record("user=alice", [{"role": "user", "content": "I moved to Munich."}])
    memory.consolidate()
    assert [f.value for f in memory.facts("user=alice")] == ["Munich"]
    assert remember.invoke({"attribute": "city", "value": "munich"}, run("alice")) == (
        "Already remembered, now confirmed 2 times: city = Munich."
    )
    history = memory.history("user=alice", "city")
    assert [(f.value, f.superseded_by) for f in history] == [("Berlin", "Munich"), ("Munich", None)]


def test_near_duplicates_merge_with_an_embedder(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(index={"dims": 64, "embed": WordEmbeddings(64), "fields": ["text"]})
    memory = AgentMemory(store, near_duplicate_threshold=0.9)  # the setting consolidation uses
    [remember] = memory.tools(include=["remember"])
    statement = "The user works at ACME Corporation in Berlin"
    remember.invoke({"attribute": "employer", "value": "ACME", "statement": statement}, run("a"))
    said = remember.invoke(
        {"attribute": "company", "value": "ACME", "statement": statement}, run("a")
    )
    assert said == "Already remembered, now confirmed 2 times: employer = ACME."
    assert [f.attribute for f in memory.facts("user=a")] == ["employer"]


async def test_async_tools_on_the_event_loop(memory: AgentMemory[Any]) -> None:
    tools = {t.name: t for t in memory.tools()}
    said = await tools["remember_fact"].ainvoke({"attribute": "pet", "value": "cat"}, run("al"))
    assert said == "Remembered: pet = cat."
    assert "pet = cat" in await tools["search_memory"].ainvoke({"query": "pet"}, run("al"))
    assert await tools["forget_fact"].ainvoke({"attribute": "pet"}, run("al")) == (
        "Forgot pet = cat."
    )
    assert await memory.afacts("user=al") == []


def test_concurrent_remembers_keep_one_current_value(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """Eight threads state eight cities at once: one stays current, the seven others are in
    history once each (no update lost between reading the facts and writing them)."""
    memory = AgentMemory(make_store())
    [remember] = memory.tools(include=["remember"])
    start = threading.Barrier(8)

    def say(i: int) -> None:
        start.wait()
        remember.invoke({"attribute": "city", "value": f"City {i}"}, run("alice", f"t{i}"))

    workers = [threading.Thread(target=say, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    [current] = memory.facts("user=alice")
    history = memory.history("user=alice", "city")
    assert sorted(f.value for f in history) == sorted(f"City {i}" for i in range(8))
    assert [f for f in history if f.valid_to is None] == [current]
    assert sum(1 for f in history if f.superseded_by is not None) == 7


def test_a_fact_without_a_statement_is_stored_with_its_vector(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(index={"dims": 64, "embed": WordEmbeddings(64), "fields": ["text"]})
    memory = AgentMemory(store)
    [remember] = memory.tools(include=["remember"])
    remember.invoke({"attribute": "favourite_food", "value": "ramen"}, run("a"))
    [fact] = memory.facts("user=a")
    assert fact.statement == "favourite food: ramen"

    def vectors() -> Any:
        prefix = ".".join(memory.namespace("user=a", "facts"))
        params = memory.context.sql.one_ns(prefix)
        [rows] = yield Batch([Stmt(memory.context.sql.vectors_of(), params, fetch=True)])
        return [key for key, _ in rows]

    assert store.run_plan(vectors()) == [fact.key]


def test_a_forgotten_fact_is_still_known_as_of_before(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    clock = FakeClock(start=1_800_000_000.0)
    memory = AgentMemory(make_store(), clock=clock)
    _, remember, forget = memory.tools()
    remember.invoke({"attribute": "pet", "value": "cat"}, run("a"))
    clock.advance(100)
    assert forget.invoke({"attribute": "pet"}, run("a")) == "Forgot pet = cat."
    assert memory.facts("user=a") == []
    assert [f.value for f in memory.facts("user=a", as_of=1_800_000_050.0)] == ["cat"]
    [gone] = memory.history("user=a", "pet")
    assert (gone.valid_to, gone.superseded_by) == (1_800_000_100.0, None)
