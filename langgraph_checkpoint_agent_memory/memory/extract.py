"""Extractors turn pending episodes into a summary of each episode and facts.

Whatever the model says is validated against :class:`~.model.Extraction`; anything else
(no JSON, truncated JSON, wrong types, an exception, a timeout) raises
:class:`ExtractionError`, and the consolidation job fails while its episodes stay pending.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from langgraph_checkpoint_agent_memory.errors import AgentMemoryError
from langgraph_checkpoint_agent_memory.memory.model import (
    Episode,
    EpisodeEntry,
    EpisodeSummary,
    Extraction,
    Fact,
    Scope,
    iso,
)
from langgraph_checkpoint_agent_memory.text import storable


class ExtractionError(AgentMemoryError):
    """The extractor failed or answered something that is not a valid extraction."""


@dataclass
class ExtractionRequest:
    """What an extractor sees: the scope, its pending episodes, and its relevant facts."""

    scope: Scope
    episodes: list[Episode]
    facts: list[Fact] = field(default_factory=list)


PROMPT = """You maintain the long-term memory of an assistant about {who}.

Known facts (reuse these attribute names when a fact is restated or changes):
{facts}

New conversation episodes, numbered:
{episodes}

Answer with one JSON object and nothing else:
{{"episodes": [{{"episode": 1, "summary": "what happened in episode 1, one or two sentences",
                "outcome": "how it ended", "importance": 0.0-1.0}}],
 "facts": [{{"attribute": "snake_case name", "value": "the value",
            "statement": "a sentence stating the fact", "multi": false,
            "importance": 0.0-1.0, "episode": 1}}]}}
Give exactly one entry in "episodes" for each of the {count} episode(s) above, by its number,
each summarising that episode alone. For each fact, "episode" is the number of the episode
that states it. Only facts stated or clearly implied by the user that will matter later. Set
"multi" to true when the attribute holds several values at once (e.g. languages spoken); a new
value of a single-valued attribute (e.g. city) replaces the old one. Add "since": "YYYY-MM-DD"
to a fact only when the user says when it became true (e.g. "I moved here in March 2021":
"2021-03-01")."""


def build_prompt(request: ExtractionRequest) -> str:
    facts = "\n".join(f"- {f.attribute}: {f.value}" for f in request.facts) or "- (none)"
    episodes = "\n\n".join(
        f"Episode {n} [{iso(e.occurred_at)}]\n{e.transcript()}"
        for n, e in enumerate(request.episodes, 1)
    )
    who = ", ".join(f"{k} {v}" for k, v in request.scope.as_dict().items())
    return PROMPT.format(who=who, facts=facts, episodes=episodes, count=len(request.episodes))


def episode_summaries(extraction: Extraction, episodes: Sequence[Episode]) -> list[EpisodeSummary]:
    """One summary per episode, in the order of ``episodes``.

    Args:
        extraction: The extractor's answer.
        episodes: The episodes it was asked about, in the order it saw them (numbered from 1).

    Returns:
        The summary of each episode, in that order.

    Raises:
        ExtractionError: The answer does not cover every episode exactly once: an episode
            without an entry, an entry naming no episode of the request or one named twice,
            or the single-summary form (``episode``) for more than one episode. A fact naming
            an episode the request does not have is refused too.

    Example:
        ```python
        hello = Episode("k1", [{"role": "user", "content": "hi"}], occurred_at=1.0)
        moving = Episode("k2", [{"role": "user", "content": "I moved"}], occurred_at=2.0)
        answer = parse_extraction(
            '{"episodes": [{"episode": 2, "summary": "moved"}, {"key": "k1", "summary": "hi"}]}'
        )
        [first, second] = episode_summaries(answer, [hello, moving])
        assert (first.summary, second.summary) == ("hi", "moved")
        ```
    """
    count = len(episodes)
    for fact in extraction.facts:
        if fact.episode is not None and fact.episode > count:
            raise ExtractionError(
                f"the fact {fact.attribute!r} names episode {fact.episode}, but there {_are(count)}"
            )
    if extraction.episode is not None:
        if count == 1:
            return [extraction.episode]
        raise ExtractionError(
            f"the extractor gave one summary for {count} episodes; it must give one entry "
            "per episode in 'episodes'"
        )
    entries = extraction.episodes
    named = [e.episode is not None or e.key is not None for e in entries]
    if any(named) and not all(named):
        raise ExtractionError("some entries of 'episodes' name their episode and some do not")
    position = {e.key: i for i, e in enumerate(episodes)}
    found: dict[int, EpisodeSummary] = {}
    for j, entry in enumerate(entries):
        i = _entry_index(entry, position) if named[j] else j
        if not 0 <= i < count:
            raise ExtractionError(
                f"'episodes' has an entry for episode {i + 1}, but there {_are(count)}"
            )
        if i in found:
            raise ExtractionError(f"'episodes' has two entries for episode {i + 1}")
        found[i] = entry
    missing = [str(i + 1) for i in range(count) if i not in found]
    if missing:
        raise ExtractionError(
            f"'episodes' has no entry for episode {', '.join(missing)} of {count}: "
            "every episode needs its own summary"
        )
    return [found[i] for i in range(count)]


def _are(count: int) -> str:
    return f"{'is' if count == 1 else 'are'} {count}"


def _entry_index(entry: EpisodeEntry, position: dict[str, int]) -> int:
    """The index (from 0) of the episode an entry names, by its key or its number (out of
    range when it names none of the request's)."""
    if entry.key is None:
        return (entry.episode or 0) - 1
    i = position.get(entry.key, -1)
    if i < 0:
        raise ExtractionError(f"an entry of 'episodes' names no episode: {entry.key!r}")
    if entry.episode is not None and entry.episode != i + 1:
        raise ExtractionError(
            f"an entry of 'episodes' names episode {entry.episode} and the key of episode {i + 1}"
        )
    return i


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def parse_extraction(text: Any) -> Extraction:
    """The first JSON object in ``text`` that is a valid extraction.

    Tolerates code fences and chatter around the object; refuses truncated JSON, wrong types
    and empty output with a message that says which.
    """
    if isinstance(text, Extraction):
        return text
    if isinstance(text, dict):
        return _validate(text)
    if not isinstance(text, str):
        content = getattr(text, "content", None)
        if not isinstance(content, str):
            raise ExtractionError(f"the extractor returned {type(text).__name__}, not text")
        text = content
    if not text.strip():
        raise ExtractionError("the extractor returned empty output")
    outer_broken = False  # the object at a piece's first ``{`` could not be decoded
    error: str | None = None  # the first schema error of an object that was decoded
    for candidate in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        found, broken, failed = _first_valid(candidate)
        if found is not None:
            return found
        outer_broken = outer_broken or broken
        error = error if error is not None else failed
    if outer_broken:
        raise ExtractionError("the extractor's JSON is truncated or malformed")
    if error is not None:
        raise ExtractionError(error)
    raise ExtractionError(f"the extractor's output holds no JSON object: {text[:80]!r}")


def _first_valid(candidate: str) -> tuple[Extraction | None, bool, str | None]:
    """The first JSON object in ``candidate``, at any ``{``, that is a valid extraction;
    else whether the first could not be decoded, and the first schema error."""
    decoder = json.JSONDecoder()
    broken = False
    error: str | None = None
    for n, start in enumerate(i for i, ch in enumerate(candidate) if ch == "{"):
        try:
            obj, _ = decoder.raw_decode(candidate, start)
        except json.JSONDecodeError:
            broken = broken or n == 0
            continue
        if isinstance(obj, dict):
            try:
                return _validate(obj), broken, error
            except ExtractionError as exc:
                error = error if error is not None else str(exc)
    return None, broken, error


def _validate(obj: dict[str, Any]) -> Extraction:
    try:
        return Extraction.model_validate(obj)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ExtractionError(f"the extractor's JSON does not fit the schema: {problems}") from None


class Extractor:
    """Turns an :class:`ExtractionRequest` into an :class:`Extraction`.

    ``version`` is part of a consolidation job's identity: the same episodes processed by a
    new extractor version are a new job. Subclasses implement :meth:`extract` and, when they
    have native async I/O, :meth:`aextract` (the default runs :meth:`extract` in a thread, so
    the event loop is never blocked).
    """

    version: str = "1"

    def extract(self, request: ExtractionRequest) -> Extraction:  # pragma: no cover - abstract
        raise NotImplementedError

    async def aextract(self, request: ExtractionRequest) -> Extraction:
        return await asyncio.to_thread(self.extract, request)


class _Timed(Extractor):
    """Shared timeout handling: a call that outlives ``timeout`` seconds fails the job."""

    timeout: float | None = 120.0

    def _call(self, request: ExtractionRequest) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _acall(self, request: ExtractionRequest) -> Any:
        return await asyncio.to_thread(self._call, request)

    def extract(self, request: ExtractionRequest) -> Extraction:
        if self.timeout is None:
            return parse_extraction(self._guard(request))
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent-memory-extract")
        try:
            try:
                out = pool.submit(self._guard, request).result(timeout=self.timeout)
            except concurrent.futures.TimeoutError:
                raise ExtractionError(f"the extractor timed out after {self.timeout:g}s") from None
        finally:
            pool.shutdown(wait=False)
        return parse_extraction(out)

    async def aextract(self, request: ExtractionRequest) -> Extraction:
        try:
            out = await asyncio.wait_for(self._aguard(request), self.timeout)
        except asyncio.TimeoutError:
            raise ExtractionError(f"the extractor timed out after {self.timeout:g}s") from None
        return parse_extraction(out)

    def _guard(self, request: ExtractionRequest) -> Any:
        try:
            return self._call(request)
        except ExtractionError:
            raise
        except Exception as exc:
            raise ExtractionError(f"the extractor raised {type(exc).__name__}: {exc}") from exc

    async def _aguard(self, request: ExtractionRequest) -> Any:
        try:
            return await self._acall(request)
        except ExtractionError:
            raise
        except Exception as exc:
            raise ExtractionError(f"the extractor raised {type(exc).__name__}: {exc}") from exc


class ChatModelExtractor(_Timed):
    """Any LangChain chat model: ``ChatOpenAI``, SAP AI Core's, Ollama's, a fake one.

    Uses ``with_structured_output`` when the model supports it (``structured=None`` tries),
    else asks for JSON and parses it tolerantly.
    """

    def __init__(
        self,
        model: Any,
        *,
        structured: bool | None = None,
        timeout: float | None = 120.0,
        version: str | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self._runnable: Any = model
        self.structured = False
        if structured is not False:
            try:
                self._runnable = model.with_structured_output(Extraction)
                self.structured = True
            except (NotImplementedError, AttributeError, TypeError, ValueError):
                if structured:
                    raise
        name = getattr(model, "model_name", None) or getattr(model, "model", None)
        self.version = version or f"chat:{type(model).__name__}:{name or ''}:2"

    def _call(self, request: ExtractionRequest) -> Any:
        return self._runnable.invoke(build_prompt(request))

    async def _acall(self, request: ExtractionRequest) -> Any:
        return await self._runnable.ainvoke(build_prompt(request))


class CallableExtractor(_Timed):
    """A ``prompt -> text`` function (or coroutine function), e.g. around an HTTP client."""

    def __init__(
        self, fn: Callable[[str], Any], *, timeout: float | None = 120.0, version: str | None = None
    ) -> None:
        self.fn = fn
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(fn)
        self.version = version or f"callable:{getattr(fn, '__qualname__', 'fn')}:2"

    def _call(self, request: ExtractionRequest) -> Any:
        out = self.fn(build_prompt(request))
        return asyncio.run(_await(out)) if inspect.isawaitable(out) else out

    async def _acall(self, request: ExtractionRequest) -> Any:
        if self.is_async:
            return await self.fn(build_prompt(request))
        return await asyncio.to_thread(self._call, request)


async def _await(awaitable: Any) -> Any:
    return await awaitable


# -- rule-based ----------------------------------------------------------------------------

#: A value ends at punctuation, a conjunction or a time phrase ("Lyon last week": "Lyon").
_WHEN = (
    r"(?:last|this|next) (?:week|weekend|month|year|summer|winter|spring|autumn|fall)"
    r"|(?:a|an|one|two|three|four|five|six|few|several|\d+) (?:days?|weeks?|months?|years?) ago"
    r"|yesterday|recently|lately|now|since|in (?:19|20)\d\d"
)
_END = rf"(?=\s*(?:[.!?;,]|\b(?:and|but|{_WHEN})\b|$))"
_VALUE = r"(?P<value>[^.!?;,]+?)"
_WORD = r"[a-z][a-z0-9_]*"


def _rule(
    lead: str, attribute: str | None, importance: float, statement: str, *, multi: bool = False
) -> tuple[re.Pattern[str], str | None, bool, float, str]:
    """``<lead> <value>`` said by the user becomes a fact of ``attribute`` (``None``: the
    match's ``attr`` group); in ``statement``, ``{v}`` is the value and ``{a}`` the attribute."""
    return re.compile(rf"\b{lead} {_VALUE}{_END}", re.I), attribute, multi, importance, statement


_RULES = [
    _rule("my name is", "name", 0.8, "is called {v}"),
    _rule("call me", "name", 0.8, "is called {v}"),
    _rule("I(?:'ve| have)? (?:just )?moved to", "city", 0.7, "lives in {v}"),
    _rule("I(?: now| still)? live in", "city", 0.7, "lives in {v}"),
    _rule("I'?m based in", "city", 0.7, "lives in {v}"),
    _rule("I(?: now| still)? work (?:at|for)", "employer", 0.7, "works at {v}"),
    _rule("I work as an?", "role", 0.6, "works as {v}"),
    _rule("I (?:really )?(?:like|love|enjoy)", "likes", 0.5, "likes {v}", multi=True),
    _rule("I speak", "languages", 0.5, "speaks {v}", multi=True),
    _rule("I prefer", "preference", 0.6, "prefers {v}"),
    _rule("my favou?rite (?P<attr>[a-z ]+?) is", None, 0.5, "'s favorite {a} is {v}"),
    _rule(rf"my (?P<attr>{_WORD}(?: {_WORD})?) (?:is|are)", None, 0.6, "'s {a} is {v}"),
]
_SKIP_ATTRS = {"name", "favorite", "favourite", "question", "problem", "issue"}


class RuleBasedExtractor(Extractor):
    """Deterministic extraction with regular expressions over what the user said.

    Recognises names, cities, employers, roles, likes, languages, preferences, favourites and
    ``my <thing> is <value>``. For demos, tests and benchmarks: instant, offline, and the
    same answer every time.
    """

    version = "rules:3"

    def __init__(self, subject: str = "The user") -> None:
        self.subject = subject

    def extract(self, request: ExtractionRequest) -> Extraction:
        facts: list[dict[str, Any]] = []
        entries: list[dict[str, Any]] = []
        for number, episode in enumerate(request.episodes, 1):
            said = [
                str(m.get("content", ""))
                for m in episode.messages
                if m.get("role") in ("user", "human")
            ]
            found = [{**f, "episode": number} for text in said for f in self._facts(text)]
            facts += found
            first = said[0] if said else ""
            summary = f"{self.subject} said: {first[:160]}" if first else "No user message."
            importance = min(1.0, 0.3 + 0.1 * len(found))
            entries.append(
                dict(episode=number, summary=summary, outcome="answered", importance=importance)
            )
        return Extraction.model_validate({"episodes": entries, "facts": facts})

    def _facts(self, text: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        taken: list[tuple[int, int]] = []
        for pattern, attribute, multi, importance, template in _RULES:
            for m in pattern.finditer(text):
                if any(m.start() < end and start < m.end() for start, end in taken):
                    continue
                value = m.group("value").strip().strip("'\"")
                attr = attribute
                if attr is None:
                    raw = m.group("attr").strip().lower()
                    if raw in _SKIP_ATTRS:
                        continue
                    attr = ("favorite_" + raw) if "favo" in template else raw
                if not value:
                    continue
                if attr == "likes":
                    value = value[:1].lower() + value[1:]
                a = attr.replace("_", " ").removeprefix("favorite ")
                statement = f"{self.subject}{'' if template.startswith(chr(39)) else ' '}"
                statement += template.format(v=value, a=a)
                found.append(
                    {
                        "attribute": attr,
                        "value": value,
                        "statement": statement,
                        "multi": multi,
                        "importance": importance,
                    }
                )
                taken.append((m.start(), m.end()))
        return found


def chat_model(spec: str) -> Any:
    """A chat model from ``provider:name`` through LangChain's ``init_chat_model``."""
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        from langgraph_checkpoint_agent_memory.errors import ConfigurationError

        raise ConfigurationError(
            f"--model {spec} needs LangChain's init_chat_model and the provider's integration: "
            "pip install langchain langchain-<provider> (and the provider's API key)"
        ) from exc
    return init_chat_model(spec)


def as_extractor(extractor: Any) -> Extractor:
    """An :class:`Extractor` from an extractor, a LangChain chat model or a callable."""
    if extractor is None:
        return RuleBasedExtractor()
    if isinstance(extractor, Extractor):
        return extractor
    if hasattr(extractor, "invoke") and hasattr(extractor, "ainvoke"):
        return ChatModelExtractor(extractor)
    if callable(extractor):
        return CallableExtractor(extractor)
    raise TypeError(
        "extractor must be an Extractor, a LangChain chat model or a prompt -> text callable, "
        f"not {type(extractor).__name__}"
    )


def messages_as_dicts(messages: Sequence[Any]) -> list[dict[str, str]]:
    """LangChain messages or ``{"role", "content"}`` dicts as plain ``role``/``content``."""
    out: list[dict[str, str]] = []
    for m in messages:
        if isinstance(m, dict):
            role, content = m.get("role") or m.get("type") or "user", m.get("content", "")
        else:
            role, content = getattr(m, "type", "user"), getattr(m, "content", "")
        role = {"human": "user", "ai": "assistant"}.get(role, role)
        if not isinstance(content, str):
            content = " ".join(
                part.get("text", "") if isinstance(part, dict) else str(part) for part in content
            )
        out.append({"role": storable(str(role)), "content": storable(content)})
    return out
