"""Memory tools for agents: the model decides what to look up, remember and forget.

Whose memory comes from the run's config, never from the model: the model's arguments
cannot name a scope, and an argument the schema does not declare is refused, so one user's
agent can neither read nor write another user's memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory import recall as R
from langgraph_checkpoint_agent_memory.memory import writes as W
from langgraph_checkpoint_agent_memory.memory.context import Embed, MemoryContext, RunPlan, Steps
from langgraph_checkpoint_agent_memory.memory.model import (
    Fact,
    FactCandidate,
    Scope,
    check_count,
    default_statement,
    normalize_attribute,
    since_timestamp,
)
from langgraph_checkpoint_agent_memory.memory.nodes import scope_from
from langgraph_checkpoint_agent_memory.memory.traced import traced

#: The tools :meth:`AgentMemory.tools` can return, by the name ``include`` takes.
TOOL_NAMES = {"search": "search_memory", "remember": "remember_fact", "forget": "forget_fact"}

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.agent import AgentMemory


class SearchMemoryArgs(BaseModel):
    """The model's arguments of ``search_memory``: nothing names whose memory."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="What to look for, in a few words, e.g. 'where the user lives'")


class RememberFactArgs(BaseModel):
    """The model's arguments of ``remember_fact``: one fact, nothing that names whose."""

    model_config = ConfigDict(extra="forbid")

    attribute: str = Field(
        description="snake_case name of what the fact is about, e.g. city, employer, likes"
    )
    value: str = Field(description="The value, e.g. Berlin")
    statement: str = Field(
        default="", description="The fact as a sentence, e.g. 'The user lives in Berlin'"
    )
    multi: bool = Field(
        default=False,
        description="True when the attribute holds several values at once (languages, "
        "likes); a new value of a single-valued attribute replaces the old one",
    )
    importance: float = Field(
        default=0.5, ge=0.0, le=1.0, description="0 trivial .. 1 vital; important facts last"
    )
    since: str | None = Field(
        default=None,
        description="When it became true, as YYYY-MM-DD, if the user said (e.g. 'I moved "
        "here in March 2021': 2021-03-01); a known fact with another date is corrected",
    )


class ForgetFactArgs(BaseModel):
    """The model's arguments of ``forget_fact``: which fact, nothing that names whose."""

    model_config = ConfigDict(extra="forbid")

    attribute: str = Field(description="The attribute of the fact to forget, e.g. city")
    value: str | None = Field(
        default=None,
        description="For an attribute with several values: the one to forget (all when omitted)",
    )


SEARCH_DESCRIPTION = (
    "Search your long-term memory of the user: known facts (attribute = value, since when) "
    "and past conversations relevant to the query. Use it before answering anything that "
    "depends on the user's details, preferences or earlier conversations."
)
REMEMBER_DESCRIPTION = (
    "Remember one lasting fact about the user for later conversations: call it when the user "
    "states something about themselves (where they live, their work, preferences) or asks "
    "you to remember something. Restating a known fact confirms it; a new value of a "
    "single-valued attribute replaces the old one, which stays in history; set multi=true "
    "for attributes with several values at once."
)
FORGET_DESCRIPTION = (
    "Stop remembering a fact: when the user says it is no longer true or asks you to forget "
    "it. Name its attribute (and the value, for one of several values); the fact leaves "
    "current memory and stays in history."
)


def fact_line(fact: Fact) -> str:
    """A fact as the tools show it to the model: attribute, value, statement, since when."""
    times = f", confirmed {fact.confirmations}x" if fact.confirmations > 1 else ""
    several = " (one of several)" if fact.multi else ""
    plain = default_statement(fact.attribute, fact.value)  # what merge makes of no statement
    said = f": {fact.statement}" if fact.statement and fact.statement != plain else ""
    return (
        f"- {fact.attribute}{several} = {fact.value}{said} (since {R.day(fact.valid_from)}{times})"
    )


def _tool_scope(tools: MemoryTools, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Scope:
    return tools.scope(kwargs["config"] if "config" in kwargs else args[-1])


class MemoryTools:
    """The tools of one :class:`AgentMemory` (see the module docstring).

    Args:
        memory: Whose facts and episodes the tools use.
        budget_tokens: Size of ``search_memory``'s answer (default the memory's
            ``budget_tokens`` setting).

    Example:
        >>> search, remember, forget = MemoryTools(memory).tools()
        >>> config = {"configurable": {"user_id": "alice"}}
        >>> remember.invoke({"attribute": "city", "value": "Lyon"}, config)
        'Updated city: Lyon (was Berlin).'
    """

    def __init__(self, memory: AgentMemory[Any], *, budget_tokens: int | None = None) -> None:
        self.memory = memory
        if budget_tokens is not None:
            check_count(budget_tokens, "budget_tokens")
        self.budget_tokens = budget_tokens

    @property
    def context(self) -> MemoryContext:
        """The memory's context (read at each call: the memory may replace it)."""
        return self.memory.context

    def tools(self, include: Sequence[str] = tuple(TOOL_NAMES)) -> list[BaseTool]:
        """LangChain tools, sync and async, in the order of ``include``.

        Args:
            include: Which: ``"search"``, ``"remember"``, ``"forget"``.

        Raises:
            ConfigurationError: ``include`` names another tool, or is empty.
        """
        if not include or any(name not in TOOL_NAMES for name in include):
            raise ConfigurationError(
                f"include takes some of {', '.join(TOOL_NAMES)}, got {list(include)!r}"
            )
        built: dict[
            str, tuple[Callable[..., str], Callable[..., Awaitable[str]], type[BaseModel], str]
        ]
        built = {
            "search": (self.search, self.asearch, SearchMemoryArgs, SEARCH_DESCRIPTION),
            "remember": (self.remember, self.aremember, RememberFactArgs, REMEMBER_DESCRIPTION),
            "forget": (self.forget, self.aforget, ForgetFactArgs, FORGET_DESCRIPTION),
        }
        out: list[BaseTool] = []
        for name in include:
            func, coroutine, schema, description = built[name]
            out.append(
                StructuredTool.from_function(
                    func=func,
                    coroutine=coroutine,
                    name=TOOL_NAMES[name],
                    description=description,
                    args_schema=schema,
                    infer_schema=False,
                    handle_tool_error=True,  # a mistake of the model goes back to it, as text
                )
            )
        return out

    def scope(self, config: RunnableConfig | None) -> Scope:
        """The run's scope, from its config only (see :func:`~.nodes.scope_from`).

        Raises:
            ScopeError: The config names no scope: the application's mistake, not the
                model's, so it is raised rather than told to the model.

        Example:
            >>> MemoryTools(memory).scope({"configurable": {"user_id": "alice"}})
            Scope(user_id='alice', agent_id=None, workflow_id=None)
        """
        return scope_from(config, None, self.context.settings.scope_keys)

    @staticmethod
    def _thread(config: RunnableConfig | None) -> str | None:
        thread = ((config or {}).get("configurable") or {}).get("thread_id")
        return None if thread is None else str(thread)

    @traced("tool.search_memory", scope_of=_tool_scope)
    def search(self, query: str, config: RunnableConfig) -> str:
        """``search_memory``: what recall finds for ``query`` in the run's scope.

        Args:
            query: What to look for.
            config: The run's config (injected by the runtime).

        Example:
            >>> tools = MemoryTools(memory)
            >>> print(tools.search("my city", {"configurable": {"user_id": "alice"}}))
            Known facts:
            - ...Berlin...
        """
        recalled = self.memory.recall(self.scope(config), query, **self._recall(config))
        return self._found(recalled)

    @traced("tool.search_memory", scope_of=_tool_scope)
    async def asearch(self, query: str, config: RunnableConfig) -> str:
        """Async :meth:`search`."""
        recalled = await self.memory.arecall(self.scope(config), query, **self._recall(config))
        return self._found(recalled)

    def _recall(self, config: RunnableConfig) -> R.RecallOptions:
        return R.RecallOptions(
            budget_tokens=self.budget_tokens, exclude_thread=self._thread(config), reinforce=True
        )

    @staticmethod
    def _found(recalled: R.Recalled) -> str:
        lines: list[str] = []
        if recalled.facts:
            lines += ["Known facts:", *(fact_line(f) for f in recalled.facts)]
        if recalled.episodes:
            lines += ["Past conversations:", *(R.episode_line(e) for e in recalled.episodes)]
        return "\n".join(lines) or "Nothing remembered yet."

    @traced("tool.remember_fact", scope_of=_tool_scope)
    def remember(
        self,
        attribute: str,
        value: str,
        statement: str = "",
        multi: bool = False,
        importance: float = 0.5,
        since: str | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        """``remember_fact``: apply one fact to the run's scope as consolidation would.

        Args:
            attribute: What the fact is about.
            value: Its value.
            statement: The fact as a sentence.
            multi: Whether the attribute holds several values at once.
            importance: 0 trivial .. 1 vital.
            since: When it became true (an ISO date), if the user said; default now. A
                known fact given another date is corrected: the version believed before
                stays in history, retracted (see :meth:`AgentMemory.facts`'s ``known_at``).
            config: The run's config (injected by the runtime).

        Example:
            >>> tools = MemoryTools(memory)
            >>> tools.remember("city", "Lyon", config={"configurable": {"user_id": "alice"}})
            'Updated city: Lyon (was Berlin).'
        """
        candidate = _candidate(attribute, value, statement, multi, importance, since)
        return _remembered(self.context.run_steps(self._remember_steps(candidate, config)))

    @traced("tool.remember_fact", scope_of=_tool_scope)
    async def aremember(self, *fact: Any, config: RunnableConfig, **named: Any) -> str:
        """Async :meth:`remember` (the same arguments)."""
        candidate = _candidate(*fact, **named)
        return _remembered(await self.context.arun_steps(self._remember_steps(candidate, config)))

    def _remember_steps(
        self, candidate: FactCandidate, config: RunnableConfig | None
    ) -> Steps[F.FactChanges]:
        context = self.context
        scope = self.scope(config)
        thread = self._thread(config)
        source = f"tool:{thread}" if thread else "tool"
        vectors: dict[str, list[float]] = {}
        if context.embeds:
            text = candidate.search_text()  # what the fact is indexed, and found, by
            [vector] = yield Embed([text])
            vectors[text] = vector
        now = context.clock()
        if candidate.valid_from is not None and candidate.valid_from > now:
            raise ToolException(f"not remembered: since={candidate.since} is in the future")
        said = W.Said([candidate], vectors, episode_key=source, when=now)

        def decide(stored: W.StoredFacts) -> W.FactWrites:
            writes = jobsql.Writes()
            out = W.RowWriter(writes, scope.key, now)
            return W.FactWrites(writes, W.apply_facts(context, scope, out, stored, said))

        changes: F.FactChanges = yield RunPlan(
            lambda: self._change_plan(scope, now, context.embeds, decide)
        )
        return changes

    @traced("tool.forget_fact", scope_of=_tool_scope)
    def forget(self, attribute: str, value: str | None = None, *, config: RunnableConfig) -> str:
        """``forget_fact``: end the run's scope's current fact(s) of ``attribute``.

        Args:
            attribute: What the fact is about.
            value: Only the fact of this value (for a multi-valued attribute).
            config: The run's config (injected by the runtime).

        Example:
            >>> tools = MemoryTools(memory)
            >>> tools.forget("city", config={"configurable": {"user_id": "alice"}})
            'Forgot city = Berlin.'
        """
        name, scope = _attribute(attribute), self.scope(config)
        return self.context.run(lambda: self._forget_plan(scope, name, value))

    @traced("tool.forget_fact", scope_of=_tool_scope)
    async def aforget(
        self, attribute: str, value: str | None = None, *, config: RunnableConfig
    ) -> str:
        """Async :meth:`forget`."""
        name, scope = _attribute(attribute), self.scope(config)
        return await self.context.arun(lambda: self._forget_plan(scope, name, value))

    def _forget_plan(self, scope: Scope, attribute: str, value: str | None) -> Plan[str]:
        context = self.context
        now = context.clock()
        facts_prefix = context.prefix(scope, "facts")

        def decide(stored: W.StoredFacts) -> W.FactWrites:
            writes = jobsql.Writes()
            changes = F.retire(stored.current(), attribute, value, now=now)
            W.write_history(context, scope, W.RowWriter(writes, scope.key, now), changes, now)
            writes.removed = [{"prefix": facts_prefix, "key": key} for _, key in changes.retired]
            return W.FactWrites(writes, changes)

        changes = yield from self._change_plan(scope, now, False, decide)
        if not changes.retired:
            about = f"{attribute} = {value}" if value is not None else attribute
            return f"Nothing remembered about {about}."
        gone = [changes.history[key] for key, _ in changes.retired]
        return "Forgot " + ", ".join(f"{f.attribute} = {f.value}" for f in gone) + "."

    def _change_plan(
        self,
        scope: Scope,
        now: float,
        read_vectors: bool,
        decide: Callable[[W.StoredFacts], W.FactWrites],
    ) -> Plan[F.FactChanges]:
        decider = W.Decider(decide)
        yield from jobsql.change_facts_plan(
            self.context.sql,
            scope=scope.key,
            root=self.context.settings.namespace_root,
            facts_prefix=self.context.prefix(scope, "facts"),
            now=now,
            read_vectors=read_vectors,
            decide=decider,
        )
        assert decider.decided is not None  # the plan always decides
        return decider.decided.changes


def _candidate(*fact: Any, **named: Any) -> FactCandidate:
    """The fact ``remember_fact``'s arguments state (positional ones in the order of
    :class:`RememberFactArgs`)."""
    fields = dict(zip(RememberFactArgs.model_fields, fact, strict=False), **named)
    since = fields.get("since")
    if since is not None and str(since).strip():
        try:  # the model is told why, rather than its date dropped as an extractor's is
            since_timestamp(str(since))
        except ValueError as exc:
            raise ToolException(f"not remembered: {exc}") from None
    try:
        return FactCandidate(**RememberFactArgs(**fields).model_dump())
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ToolException(f"not remembered: {problems}") from None


def _attribute(attribute: str) -> str:
    try:
        return normalize_attribute(attribute)
    except ValueError as exc:
        raise ToolException(str(exc)) from None


def _remembered(changes: F.FactChanges) -> str:
    if changes.corrected:
        fact = changes.current[changes.corrected[0][1]]
        return f"Corrected: {fact.attribute} = {fact.value} since {R.day(fact.valid_from)}."
    if changes.confirmed:
        fact = changes.current[changes.confirmed[0]]
        return (
            f"Already remembered, now confirmed {fact.confirmations} times: "
            f"{fact.attribute} = {fact.value}."
        )
    if changes.superseded:
        old_key, new_key = changes.superseded[0]
        old, new = changes.history[old_key], changes.current[new_key]
        return f"Updated {new.attribute}: {new.value} (was {old.value})."
    fact = next(iter(changes.current.values()))
    return f"Remembered: {fact.attribute} = {fact.value}."
