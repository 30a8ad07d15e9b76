"""Spans and durations of agent memory's operations (see :mod:`..telemetry`): ``record``,
``recall``, ``build_context``, ``inject``, ``consolidate`` with a span per job and the
extractor call as its child, ``decay``, ``erase`` and each tool. A span names the scope it
is about (``agent_memory.scope``), except when the store encrypts: scopes name users."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from langgraph_checkpoint_agent_memory.memory.context import MemoryContext, scope_key
from langgraph_checkpoint_agent_memory.memory.model import ScopeLike
from langgraph_checkpoint_agent_memory.telemetry import live, safely
from langgraph_checkpoint_agent_memory.telemetry.tracing import (
    IDLE,
    AttributeValue,
    operation,
    target_of,
)

F = TypeVar("F", bound=Callable[..., Any])
#: What a traced method's call is about: ``(self, args, kwargs) -> scope`` (``None``: all).
ScopeOf = Callable[[Any, tuple[Any, ...], Mapping[str, Any]], ScopeLike | None]
#: What is learned from a traced method's result: attributes of its span.
CountsOf = Callable[[Any], Mapping[str, AttributeValue]]


def memory_span(
    context: MemoryContext, name: str, scope: ScopeLike | None = None, **attributes: Any
) -> Any:
    """The operation ``memory.<name>`` on ``context``'s database, about ``scope``.

    Example:
        >>> with memory_span(memory.context, "recall", "user=alice") as op:
        ...     op.set("agent_memory.fact_count", 2)
    """
    if not live():
        return IDLE
    sealed = context.sql.sealer is not None
    about = None if sealed or scope is None else scope_key(scope)
    return operation(
        f"memory.{name}",
        target_of(context.store.db),
        {"agent_memory.scope": about, **attributes},
        sealed=sealed,
    )


def first_argument(owner: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """The scope of a method that takes it first (``record(scope, ...)``)."""
    return args[0] if args else kwargs.get("scope")


def _opened(
    name: str, scope_of: ScopeOf, owner: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    try:
        scope = scope_of(owner, args, kwargs)
    except Exception:  # the method raises it, inside its span
        scope = None
    return memory_span(owner.context, name, scope)


def _told(counts: CountsOf | None, op: Any, result: Any) -> Any:
    if counts is not None and op.recording:
        safely(_count, counts, op, result)
    return result


def _count(counts: CountsOf, op: Any, result: Any) -> None:
    for key, value in counts(result).items():
        op.set(key, value)


def traced(
    name: str, scope_of: ScopeOf = first_argument, counts: CountsOf | None = None
) -> Callable[[F], F]:
    """Run a method of an object with a ``context`` (sync or async) in the span
    ``memory.<name>``, about the scope ``scope_of`` finds in its arguments, with the
    attributes ``counts`` reads from its result.

    Example:
        >>> class Reader:
        ...     context = memory.context
        ...     @traced("read")
        ...     def read(self, scope): return 1
        >>> Reader().read("user=alice")
        1
    """

    def wrap(method: F) -> F:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def arun(owner: Any, *args: Any, **kwargs: Any) -> Any:
                if not live():
                    return await method(owner, *args, **kwargs)
                with _opened(name, scope_of, owner, args, kwargs) as op:
                    return _told(counts, op, await method(owner, *args, **kwargs))

            return cast(F, arun)

        @functools.wraps(method)
        def run(owner: Any, *args: Any, **kwargs: Any) -> Any:
            if not live():
                return method(owner, *args, **kwargs)
            with _opened(name, scope_of, owner, args, kwargs) as op:
                return _told(counts, op, method(owner, *args, **kwargs))

        return cast(F, run)

    return wrap


def recalled_counts(recalled: Any) -> dict[str, AttributeValue]:
    """What a recall found: facts, episodes, tokens.

    Example:
        >>> recalled_counts(memory.recall("user=alice", "city"))["agent_memory.fact_count"]
        1
    """
    return {
        "agent_memory.fact_count": len(recalled.facts),
        "agent_memory.episode_count": len(recalled.episodes),
        "agent_memory.token_count": recalled.tokens,
    }


def report_counts(report: Any) -> dict[str, AttributeValue]:
    """What a consolidation did: jobs, completed and failed, episodes consolidated.

    Example:
        >>> report_counts(memory.consolidate())["agent_memory.job_count"]
        0
    """
    return {
        "agent_memory.job_count": len(report.jobs),
        "agent_memory.completed_count": report.completed,
        "agent_memory.failed_count": report.failed,
        "agent_memory.episode_count": report.episodes,
    }


def item_count(removed: int) -> dict[str, AttributeValue]:
    """How many items an operation removed."""
    return {"agent_memory.item_count": removed}


def erase_counts(removed: Mapping[str, int]) -> dict[str, AttributeValue]:
    """What an erase removed: rows, threads, scopes, data keys.

    Example:
        >>> counts = erase_counts({"am_store_items": 4, "scopes": 1, "threads": 2})
        >>> counts["agent_memory.item_count"], counts["agent_memory.thread_count"]
        (4, 2)
    """
    named = ("scopes", "threads", "keys")
    return {
        "agent_memory.item_count": sum(n for k, n in removed.items() if k not in named),
        **{f"agent_memory.{k[:-1]}_count": removed.get(k, 0) for k in named},
    }
